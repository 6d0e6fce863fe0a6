"""MNIST training steps per second, data parallel: one device against SHARD=n CPU devices of one process, or the ranks
of an MPI job (with the time each step spends in MPI collectives).

  python bench/data_parallel.py               # CPU with CPU_THREADS=n (default 2) against n one-thread devices CPU:1..n
  mpirun --allow-run-as-root --oversubscribe -n 2 python bench/data_parallel.py     # two processes
In one process the two setups take turns, one step each, so a busy machine slows both alike: CPU is opened with
CPU_THREADS threads per kernel, CPU:1..n with one each (each runs its kernels on a worker thread of its own). The model
and step are examples/beautiful_mnist.py's (Adam, global batch BS=128), on random data, in one TinyJit step (under MPI
with DataParallel's gradient averaging inside it); STEPS timed steps after 3 warm-up ones, medians printed.

On a busy machine the wall times follow the CPU time each setup costs, so the last line estimates the steps on idle
cores from CPU times alone: each launch's thread CPU time, replayed through the devices' queues and the copies'
waits as if each worker had a core of its own, against the 2-thread CPU's kernels (its OpenMP master thread's CPU
time per kernel, where the kernel's work is split between the threads).
"""
import os, statistics, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fusegrad import Tensor, TinyJit, Device, nn, Context, distributed as dist
from fusegrad.helpers import getenv
from fusegrad.runtime import ops_cpu
from examples.beautiful_mnist import Model

BS, STEPS, THREADS = getenv("BS", 128), getenv("STEPS", 10), getenv("CPU_THREADS", 2)

def make_step(devices: tuple[str, ...], ranks: int = 1):
  """A jitted training step of a fresh model on devices (one: the model there; several: replicated, the batch split)."""
  Tensor.manual_seed(0)
  model = Model()
  for t in nn.state.get_state_dict(model).values(): t.to_(devices if len(devices) > 1 else devices[0]).realize()
  params = nn.state.get_parameters(model)
  opt = nn.optim.Adam(params, lr=0.002)
  if ranks > 1: opt = dist.DataParallel(opt)
  X, Y = Tensor.rand(BS // ranks, 1, 28, 28), Tensor.randint(BS // ranks, high=10)
  if len(devices) > 1: X, Y = X.shard(devices, axis=0).realize(), Y.shard(devices, axis=0).realize()
  else: X, Y = X.to(devices[0]).realize(), Y.to(devices[0]).realize()

  @TinyJit
  @Context(TRAINING=1)
  def step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    loss = x.sequential(model.layers).sparse_categorical_crossentropy(y).backward().realize()
    opt.step()
    return loss

  def run() -> float:
    st = time.perf_counter()
    step(X, Y).item()  # waits for the step
    return time.perf_counter() - st
  return run

def kernels_at_once(devices: tuple[str, ...], n: int = 768) -> None:
  """The concurrency alone: one n x n matmul per one-thread device, launched together (each device's worker runs its
  own) against the same matmuls one after the other, and against the 2-thread CPU running them in turn."""
  xs = {d: Tensor.rand(n, n, device=d).realize() for d in ("CPU", *devices)}
  def together() -> None: Tensor.realize_all([xs[d] @ xs[d] for d in devices])
  def in_turn() -> None:
    for d in devices:
      (xs[d] @ xs[d]).realize()
      Device[d].synchronize()  # done before the next device starts
  def one_device() -> None: Tensor.realize_all([xs["CPU"] @ xs["CPU"] for _ in devices])
  ways = {"together": together, "one after the other": in_turn, f"CPU, {THREADS} threads": one_device}
  times: dict[str, list[float]] = {name: [] for name in ways}
  for i in range(STEPS + 2):
    for name, way in ways.items():
      st = time.perf_counter()
      way()
      for d in ("CPU", *devices): Device[d].synchronize()
      if i >= 2: times[name].append(time.perf_counter() - st)
  print(f"{len(devices)} matmuls {n}x{n}, one per device: " +
        ", ".join(f"{name} {statistics.median(ts) * 1e3:.0f} ms" for name, ts in times.items()))

def idle_estimate(devices: tuple[str, ...]) -> None:
  """Step times on idle cores estimated from CPU time (see the module's docstring)."""
  launches: list[tuple[str, str, int | None, float]] = []  # (device, function, its copy's event, thread CPU time)
  kernels: list[float] = []  # the 2-thread CPU's kernels: the calling (master) thread's CPU time
  launch, call = ops_cpu.Worker.launch, ops_cpu.CPUProgram.__call__
  def timed_launch(self, fxn, args, keep):
    name = getattr(fxn, "__name__", "")
    key = id(args[0]) if name in ("_snapshot", "_copy_when_ready") else None
    def run(*a):
      st = time.thread_time()
      fxn(*a)
      launches.append((self.device, name, key, time.thread_time() - st))
    launch(self, run, args, keep)
  def timed_call(self, *bufs, wait=False, **kwargs):
    if self.worker is not None or wait: return call(self, *bufs, wait=wait, **kwargs)
    st = time.thread_time()
    call(self, *bufs, **kwargs)
    kernels.append(time.thread_time() - st)
  ops_cpu.Worker.launch, ops_cpu.CPUProgram.__call__ = timed_launch, timed_call
  try:
    one, many = make_step(("CPU",)), make_step(devices)
    one_times, many_times = [], []
    for i in range(STEPS + 3):
      kernels.clear()
      one()
      launches.clear()
      many()
      for d in devices: Device[d].synchronize()
      if i >= 3: one_times.append(sum(kernels)), many_times.append(_replay(list(launches), devices))
  finally: ops_cpu.Worker.launch, ops_cpu.CPUProgram.__call__ = launch, call
  one_med, many_med = statistics.median(one_times), statistics.median(many_times)
  print(f"estimated on idle cores: 1 device {one_med * 1e3:.0f} ms, {len(devices)} devices {many_med * 1e3:.0f} ms per "
        f"step ({one_med / many_med:.2f}x)")

def _replay(launches: list[tuple[str, str, int | None, float]], devices: tuple[str, ...]) -> float:
  """When the last worker would finish with a core each: launches run in their queue's order, each taking its CPU
  time, and a copy starts once the source's snapshot of it is done."""
  queues = {d: [e for e in launches if e[0] == d] for d in devices}
  clock, pos, snapshots = dict.fromkeys(devices, 0.0), dict.fromkeys(devices, 0), {}
  while any(pos[d] < len(queues[d]) for d in devices):
    moved = False
    for d in devices:
      while pos[d] < len(queues[d]):
        _, name, key, cost = queues[d][pos[d]]
        if name == "_copy_when_ready":
          if key not in snapshots: break  # waits for the other worker
          clock[d] = max(clock[d], snapshots[key])
        clock[d] += cost
        pos[d], moved = pos[d] + 1, True
        if name == "_snapshot": snapshots[key] = clock[d]
    assert moved, "the queues wait for each other"
  return max(clock.values())

def main() -> None:
  if "OMPI_COMM_WORLD_SIZE" in os.environ:
    dist.init()
    comm: list[float] = []
    call = dist._Collective.__call__
    def timed(self, *args, **kwargs):
      st = time.perf_counter()
      try: return call(self, *args, **kwargs)
      finally: comm.append(time.perf_counter() - st)
    dist._Collective.__call__ = timed
    run = make_step((Device.DEFAULT,), dist.world_size())
    times = []
    for i in range(STEPS + 3):
      comm.clear()
      times.append(run())
    med = statistics.median(times[3:])
    if dist.rank() == 0:
      print(f"{dist.world_size()} MPI ranks: {1 / med:.2f} steps/s (global batch {BS}; {med * 1e3:.0f} ms per step, "
            f"{sum(comm) * 1e3:.1f} ms of it in MPI collectives)")
    return
  shard = getenv("SHARD", 2)
  with Context(CPU_THREADS=THREADS): Device["CPU"]
  with Context(CPU_THREADS=1): devices = tuple(Device[f"CPU:{i + 1}"].device for i in range(shard))
  kernels_at_once(devices)
  setups = {f"1 device, {THREADS} threads": make_step(("CPU",)), f"{shard} devices, 1 thread each": make_step(devices)}
  times: dict[str, list[float]] = {name: [] for name in setups}
  for i in range(STEPS + 3):
    for name, run in setups.items():
      if (t := run()) and i >= 3: times[name].append(t)
  meds = {name: statistics.median(ts) for name, ts in times.items()}
  for name, med in meds.items(): print(f"{name:28s} {1 / med:5.2f} steps/s ({med * 1e3:.0f} ms per step, batch {BS})")
  (one, one_med), (_, many_med) = meds.items()
  print(f"{shard} devices / 1 device: {one_med / many_med:.2f}x")
  idle_estimate(devices)

if __name__ == "__main__": main()
