"""All-reduce bandwidth: fusegrad.distributed.all_reduce against mpi4py's own Allreduce on NumPy arrays (the floor).

Run under MPI: `mpirun --allow-run-as-root --oversubscribe -n 2 python bench/allreduce.py`. For sizes from 1 KB to
64 MB (MAX_MB) prints, on rank 0, the best of REPEATS times of each and the bus bandwidth (2(n-1)/n * bytes / time).
Also, with SHARD_DEVICES=n (no MPI needed: `python bench/allreduce.py`), the same sizes all-reduced across n CPU
devices of one process (a sum over the sharded axis, the ring of copies in fusegrad/engine/multi.py).
"""
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np
from fusegrad import Tensor, TinyJit, Device
from fusegrad.helpers import getenv

REPEATS, MAX_MB = getenv("REPEATS", 5), getenv("MAX_MB", 64)
SIZES = [1 << k for k in range(10, 20 + MAX_MB.bit_length())]  # bytes, 1 KB up to MAX_MB

def best(fn) -> float:
  times = []
  for _ in range(REPEATS):
    st = time.perf_counter()
    fn()
    times.append(time.perf_counter() - st)
  return min(times)

def mpi() -> None:
  from mpi4py import MPI
  from fusegrad import distributed as dist
  dist.init()
  comm, n = MPI.COMM_WORLD, dist.world_size()
  if dist.rank() == 0: print(f"{'bytes':>10s} {'mpi4py':>10s} {'fusegrad':>10s} {'ratio':>6s} {'GB/s (fusegrad)':>16s}")
  for size in SIZES:
    arr = np.ones(size // 4, np.float32)
    t = Tensor(arr).realize()
    comm.Barrier()
    floor = best(lambda: comm.Allreduce(MPI.IN_PLACE, arr, op=MPI.SUM))
    comm.Barrier()
    ours = best(lambda: dist.all_reduce(t))
    if dist.rank() == 0:
      print(f"{size:10d} {floor * 1e6:8.0f}us {ours * 1e6:8.0f}us {ours / floor:6.2f} "
            f"{2 * (n - 1) / n * size / ours / 1e9:16.3f}")

def devices(n: int) -> None:
  devs = tuple(f"CPU:{i + 1}" for i in range(n))
  print(f"{'bytes':>10s} {'time':>10s} {'GB/s':>8s}   (sum over the sharded axis across {n} CPU devices)")
  for size in SIZES:
    x = Tensor.ones(n, size // 4).contiguous().shard(devs, axis=0).realize()
    step = TinyJit(lambda x: x.sum(0).realize())  # replays the kernels and copies (a realized sum isn't computed again)
    def run() -> None:
      step(x)
      for d in devs: Device[d].synchronize()  # each device's worker is done (step() only queues the launches)
    for _ in range(3): run()
    t = best(run)
    print(f"{size:10d} {t * 1e6:8.0f}us {2 * (n - 1) / n * size / t / 1e9:8.3f}")

if __name__ == "__main__":
  if getenv("SHARD_DEVICES", 0): devices(getenv("SHARD_DEVICES", 2))
  else: mpi()
