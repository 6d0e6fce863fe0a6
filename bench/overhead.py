"""Per-call overhead, printed with ratios: the issue's round trip `(Tensor([1.,2,3,4])+1).numpy()` against PyTorch's,
an un-jitted beautiful_mnist training step with and without the schedule cache (engine/cache.py), what TinyJit's
replay costs per kernel (a chain of tiny kernels, so the kernels themselves take next to nothing), a jitted one-kernel
function per call, and for a jitted 512x512 matmul the wall time of the Python before its first kernel starts and
after its last one returns (on the CPU device: its kernels evict Python's working set from the caches).
Times are medians of process CPU time (less disturbed by other processes than wall time on a shared machine).
Settings: BS (16), STEPS (5), KERNELS (200), REPS (2000).
"""
import os, sys, time
from typing import Any
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

def jit_calls(reps: int) -> None:
  x = Tensor([1., 2, 3, 4]).realize()
  one = TinyJit(lambda x: (x + 1).realize())
  print(f"TinyJit call of a one-kernel function (x + 1): {median_cpu(lambda: one(x), reps) * 1e6:.1f} us")
  from fusegrad import Device
  if Device.DEFAULT != "CPU": return
  from fusegrad.runtime.ops_cpu import CPUProgram
  rng = np.random.default_rng(0)
  a, b = [Tensor(rng.random((512, 512), dtype=np.float32)).realize() for _ in range(2)]
  mm = TinyJit(lambda a, b: (a @ b).realize())
  for _ in range(5): mm(a, b)
  marks: list[float] = []
  run = CPUProgram.__call__
  def timed(self: CPUProgram, *args: Any, **kwargs: Any) -> Any:
    marks.append(time.perf_counter())
    ret = run(self, *args, **kwargs)
    marks.append(time.perf_counter())
    return ret
  CPUProgram.__call__ = timed  # type: ignore[method-assign]
  before, after = [], []
  try:
    for _ in range(max(reps // 10, 50)):
      marks.clear()
      st = time.perf_counter()
      out = mm(a, b)
      en = time.perf_counter()
      del out
      before.append(marks[0] - st)
      after.append(en - marks[-1])
  finally: CPUProgram.__call__ = run  # type: ignore[method-assign]
  def med(ts: list[float]) -> float: return sorted(ts)[len(ts) // 2] * 1e6
  print(f"TinyJit call of a 512x512 matmul ({len(mm.jit_cache)} kernels): Python before the kernels "
        f"{med(before):.1f} us, after them {med(after):.1f} us (wall)")

if __name__ == "__main__":
  round_trip(getenv("REPS", 2000))
  jit_replay(getenv("KERNELS", 200), getenv("REPS", 2000))
  jit_calls(getenv("REPS", 2000))
  training_step(getenv("BS", 16), getenv("STEPS", 5))
