"""Per-call overhead, printed with ratios: the issue's round trip `(Tensor([1.,2,3,4])+1).numpy()` against PyTorch's,
an un-jitted beautiful_mnist training step with and without the schedule cache (engine/cache.py), and what TinyJit's
replay costs per kernel (a chain of tiny kernels, so the kernels themselves take next to nothing).
Times are medians of process CPU time (less disturbed by other processes than wall time on a shared machine).
Settings: BS (16), STEPS (5), KERNELS (200), REPS (2000).
"""
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np
from fusegrad import Tensor, TinyJit, nn
from fusegrad.helpers import getenv, Context
from fusegrad.engine.cache import CacheStats

def median_cpu(f, reps: int) -> float:
  for _ in range(min(reps, 20)): f()
  ts = []
  for _ in range(reps):
    st = time.process_time()
    f()
    ts.append(time.process_time() - st)
  return sorted(ts)[len(ts) // 2]

def round_trip(reps: int) -> None:
  ours = median_cpu(lambda: (Tensor([1., 2, 3, 4]) + 1).numpy(), reps)
  line = f"round trip (Tensor([1.,2,3,4])+1).numpy(): {ours * 1e6:7.1f} us"
  try:
    import torch
    theirs = median_cpu(lambda: (torch.tensor([1., 2, 3, 4]) + 1).numpy(), reps)
    line += f"   PyTorch {theirs * 1e6:6.1f} us   ratio {ours / theirs:5.1f}x"
  except ImportError: line += "   (PyTorch not installed)"
  print(line)

def training_step(bs: int, steps: int) -> None:
  from examples.beautiful_mnist import Model
  model = Model()
  opt = nn.optim.Adam(nn.state.get_parameters(model), lr=0.001)
  X = Tensor(np.random.default_rng(0).integers(0, 255, (bs, 1, 28, 28), dtype=np.uint8)).float()
  Y = Tensor(np.random.default_rng(1).integers(0, 10, (bs,), dtype=np.int32))
  def step() -> None:
    with Tensor.train():
      opt.zero_grad()
      model(X).sparse_categorical_crossentropy(Y).backward()
      opt.step()
  times = {}
  for name, size in (("cache off", 0), ("cache on", 512)):
    with Context(SCHEDULE_CACHE=size):
      CacheStats.reset()
      times[name] = median_cpu(step, steps)
      print(f"un-jitted beautiful_mnist step, BS={bs}, {name}: {times[name] * 1e3:8.1f} ms  (schedules reused "
            f"{CacheStats.hits}, made {CacheStats.misses + CacheStats.uncacheable})")
  print(f"  cache on / off: {times['cache on'] / times['cache off']:.2f}x")

def jit_replay(kernels: int, reps: int) -> None:
  x = Tensor([1., 2, 3, 4]).realize()
  def chain(x: Tensor) -> Tensor:
    for i in range(kernels): x = (x * 0.5 + i).contiguous()
    return x
  jit = TinyJit(chain)
  for _ in range(3): jit(x)
  n = len(jit.jit_cache)
  per_call = median_cpu(lambda: jit(x), max(reps // kernels, 20))
  print(f"TinyJit replay of {n} tiny kernels: {per_call * 1e3:.3f} ms per call, {per_call / n * 1e6:.2f} us per kernel")

if __name__ == "__main__":
  round_trip(getenv("REPS", 2000))
  jit_replay(getenv("KERNELS", 200), getenv("REPS", 2000))
  training_step(getenv("BS", 16), getenv("STEPS", 5))
