"""MNIST training steps per second, data parallel: one device against SHARD=n CPU devices of one process, or the ranks
of an MPI job (with the time each step spends in MPI collectives).

  python bench/data_parallel.py               # CPU with CPU_THREADS=n (default 2) against n one-thread devices CPU:1..n
  mpirun --allow-run-as-root --oversubscribe -n 2 python bench/data_parallel.py     # two processes
In one process the two setups take turns, one step each, so a busy machine slows both alike: CPU is opened with
CPU_THREADS threads per kernel, CPU:1..n with one each (each runs its kernels on a worker thread of its own). The model
and step are examples/beautiful_mnist.py's (Adam, global batch BS=128), on random data, in one TinyJit step (under MPI
with DataParallel's gradient averaging inside it); STEPS timed steps after 3 warm-up ones, medians printed. A step is
timed till every device is done; the setups' losses are checked equal: the first step's within 1e-5, the second's 1e-3.

Each setup's line also gives per step the process's CPU time (all its threads: on a busy machine a fairer comparison
of the two setups' work than their wall times), and for the main thread (which queues the devices' launches; on one
device it runs the kernels, with OpenMP's threads) and each device's worker thread: its CPU time, its time waiting for
a core (Linux schedstat), and the share of the step it was idle (neither: waiting for work, for the GIL or for the
other device).
On a busy machine wall times follow the CPU each setup gets, and a worker also idles while the thread it waits for
waits for a core.
"""
import os, statistics, sys, threading, time
import numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fusegrad import Tensor, TinyJit, Device, nn, Context, distributed as dist
from fusegrad.helpers import getenv
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

  losses: list[float] = []
  def run() -> float:
    st = time.perf_counter()
    losses.append(step(X, Y).item())  # waits for the step on the loss's device
    for d in devices: Device[d].synchronize()  # and on the others
    return time.perf_counter() - st
  run.losses = losses  # type: ignore[attr-defined]
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
  process_cpu: dict[str, list[float]] = {name: [] for name in setups}  # every thread's, OpenMP's included
  use: dict[str, dict[str, list[tuple[float, float]]]] = {name: {} for name in setups}  # thread -> (CPU, queued)
  for i in range(STEPS + 3):
    for name, run in setups.items():
      time.sleep(0.003)  # the other setup's threads (OpenMP's spin CPU_SPIN ms after a kernel) are idle again
      before, cpu_before = thread_times(), time.process_time()
      t = run()
      if i < 3: continue
      times[name].append(t)
      process_cpu[name].append(time.process_time() - cpu_before)
      for th, (cpu, queued) in thread_times().items():
        use[name].setdefault(th, []).append((cpu - before.get(th, (0, 0))[0], queued - before.get(th, (0, 0))[1]))
  meds = {name: statistics.median(ts) for name, ts in times.items()}
  for name, med in meds.items():
    mine = ["main"] + [d for d in devices if "1 thread" in name]
    cpu, queued = ({th: statistics.median(x[k] for x in use[name][th]) for th in mine} for k in (0, 1))
    threads = ", ".join(f"{th} {cpu[th] * 1e3:.1f} ms CPU + {queued[th] * 1e3:.1f} waiting for a core (idle "
                        f"{1 - (cpu[th] + queued[th]) / med:.0%})" for th in mine)
    print(f"{name:28s} {1 / med:5.2f} steps/s ({med * 1e3:.0f} ms per step, batch {BS}); per step: process "
          f"{statistics.median(process_cpu[name]) * 1e3:.1f} ms CPU; {threads}")
  (one, one_med), (_, many_med) = meds.items()
  print(f"{shard} devices / 1 device: {one_med / many_med:.2f}x (load average {os.getloadavg()[0]:.1f})")
  # the same training: the first steps' losses are equal but for the order of sums (Adam moves each weight by about lr
  # whatever the size of its gradient, so the setups' weights, and their losses, drift apart a little later on)
  one_losses, many_losses = (np.array(run.losses) for run in setups.values())  # type: ignore[attr-defined]
  np.testing.assert_allclose(many_losses[:2], one_losses[:2], rtol=1e-3)
  np.testing.assert_allclose(many_losses[0], one_losses[0], rtol=1e-5)  # the same weights
  rel = np.abs(many_losses / one_losses - 1)
  print(f"losses equal: step 1 within {rel[0]:.0e}, step 2 {rel[1]:.0e}, all {len(rel)} {np.max(rel):.0e} (relative)")

def thread_times() -> dict[str, tuple[float, float]]:
  """Seconds so far (on a CPU, waiting in the run queue for one) of this (main) thread and of each device's worker
  thread (by device), from Linux's /proc schedstat (elsewhere: CPU time alone). A thread neither running nor queued is
  idle: it waits for work or for another thread."""
  ret = {}
  for t in threading.enumerate():
    name = "main" if t is threading.current_thread() else t.name[9:] if t.name.startswith("fusegrad ") else None
    if name is None or t.native_id is None: continue
    try:
      with open(f"/proc/self/task/{t.native_id}/schedstat") as f: stat = f.read().split()
      cpu, queued = int(stat[0]) * 1e-9, int(stat[1]) * 1e-9
    except OSError: cpu, queued = (time.thread_time() if name == "main" else 0.0), 0.0
    ret[name] = (cpu, queued)
  return ret

if __name__ == "__main__": main()
