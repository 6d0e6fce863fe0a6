"""MNIST training steps per second, data parallel: on 1 device, on SHARD=n CPU devices of one process, or on the ranks
of an MPI job (with the time each step spends averaging gradients).

  python bench/data_parallel.py                   # one device
  SHARD=2 python bench/data_parallel.py           # the batch split over CPU:1 and CPU:2 (CPU_THREADS=1 to compare
                                                  #   2 one-thread devices with 1 two-thread device)
  mpirun --allow-run-as-root --oversubscribe -n 2 python bench/data_parallel.py     # two processes
The model and step are examples/beautiful_mnist.py's (Adam, global batch BS=128), on random data; STEPS timed steps
after 3 warm-up ones, median printed.
"""
import os, statistics, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fusegrad import Tensor, TinyJit, nn, Context, distributed as dist
from fusegrad.helpers import getenv
from examples.beautiful_mnist import Model

BS, STEPS, SHARD = getenv("BS", 128), getenv("STEPS", 10), getenv("SHARD", 0)

def main() -> None:
  in_mpi = "OMPI_COMM_WORLD_SIZE" in os.environ
  rank, ranks = 0, 1
  if in_mpi:
    dist.init()
    rank, ranks = dist.rank(), dist.world_size()
  Tensor.manual_seed(0)
  model = Model()
  params = nn.state.get_parameters(model)
  forward = model
  devices = tuple(f"CPU:{i + 1}" for i in range(SHARD))
  if devices:
    for t in nn.state.get_state_dict(model).values(): t.to_(devices).realize()
    forward = lambda x: x.sequential(model.layers)  # noqa: E731
  opt = nn.optim.Adam(params, lr=0.002)
  trained = [p for p in params if p.requires_grad]
  X, Y = Tensor.rand(BS // ranks, 1, 28, 28).realize(), Tensor.randint(BS // ranks, high=10).realize()
  if devices: X, Y = X.shard(devices, axis=0).realize(), Y.shard(devices, axis=0).realize()

  @TinyJit
  @Context(TRAINING=1)
  def grad_step(x: Tensor, y: Tensor) -> list[Tensor]:
    opt.zero_grad()
    loss = forward(x).sparse_categorical_crossentropy(y).backward()
    return [loss.realize(), *[p.grad.realize() for p in trained if p.grad is not None]]

  @TinyJit
  @Context(TRAINING=1)
  def apply_step(*grads: Tensor) -> None:
    for p, g in zip(trained, grads): p.grad = g
    opt.step()

  times, comm = [], []
  for i in range(STEPS + 3):
    st = time.perf_counter()
    _, *grads = grad_step(X, Y)
    if ranks > 1:
      for p, g in zip(trained, grads): p.grad = g
      c = time.perf_counter()
      dist.average_gradients(trained)
      comm.append(time.perf_counter() - c)
      grads = [p.grad for p in trained]
    apply_step(*grads)
    trained[0].numpy()  # wait for the step
    if i >= 3: times.append(time.perf_counter() - st)
  if rank == 0:
    med = statistics.median(times)
    what = f"{ranks} MPI ranks" if ranks > 1 else f"{len(devices)} CPU devices" if devices else "1 device"
    extra = f", averaging gradients {statistics.median(comm[3:]) * 1e3:.1f} ms of it" if comm else ""
    print(f"{what}: {1 / med:.2f} steps/s (global batch {BS}; {med * 1e3:.0f} ms per step{extra})")

if __name__ == "__main__": main()
