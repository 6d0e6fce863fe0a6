"""What value semantics and TinyJit's result copies cost, printed as ratios.

1. TinyJit hands back each result in a buffer of its own, so results kept from earlier calls stay valid: a result
   computed into a new buffer gets a new buffer at each replay (an allocation, no copy) while the last call's result is
   still held, else that buffer again; one written into a buffer that existed before (a parameter) is copied out.
   Per-call time of a replay of `a * 2 + 1` on an N x N float32 input, its result dropped at once and kept, and what
   one copy of its result would add.
2. A version overwritten while something still refers to it is copied aside first (engine/state.py): the copies in a
   captured beautiful_mnist training step (the parameters, read by the lazy gradients while Adam overwrites them), their
   bytes against all the bytes the step's kernels touch. Settings: N (1024), BS (128), REPS (50).
"""
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np
from fusegrad import Tensor, TinyJit, nn
from fusegrad.helpers import getenv
from fusegrad.engine.runner import CopyRunner
from fusegrad.engine.realize import ExecItem

def per_call(f, reps: int) -> float:
  f()
  st = time.perf_counter()
  for _ in range(reps): f()
  return (time.perf_counter() - st) / reps

def result_copies(n: int, reps: int) -> None:
  x = Tensor(np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)).realize()
  jit = TinyJit(lambda a: a * 2 + 1)
  for _ in range(3): jit(x)
  call = per_call(lambda: jit(x).uop, reps)  # dropped at once: the next replay writes its buffer again
  kept: list = []
  new = per_call(lambda: kept.append(jit(x)), reps)  # kept: a new buffer at each replay
  kernel = jit.jit_cache[0]
  out = kernel.bufs[0]
  dest = type(out)(out.device, out.size, out.dtype).allocate()
  copy = per_call(lambda: ExecItem(CopyRunner(out.device, out.device, out.nbytes), [dest, out]).run(wait=True), reps)
  print(f"replay of a*2+1 on {n}x{n}: {call * 1e3:.3f} ms per call (result dropped: its buffer again), {new * 1e3:.3f} "
        f"ms (results kept: a new buffer each); a copy of the result would add {copy * 1e3:.3f} ms ({copy / call:.2f}x "
        "the call)")

def training_snapshots(bs: int) -> None:
  from examples.beautiful_mnist import Model
  model = Model()
  opt = nn.optim.Adam(nn.state.get_parameters(model), lr=0.001)
  X = Tensor(np.random.default_rng(0).integers(0, 255, (bs, 1, 28, 28), dtype=np.uint8))
  Y = Tensor(np.random.default_rng(1).integers(0, 10, (bs,), dtype=np.int32))
  @TinyJit
  def step() -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = model(X).sparse_categorical_crossentropy(Y).backward()
      opt.step()
      return loss
  for _ in range(3): step()
  copies = [ei for ei in step.jit_cache if isinstance(ei.runner, CopyRunner)]
  copied = sum(ei.bufs[0].nbytes for ei in copies)
  touched = sum(b.nbytes for ei in step.jit_cache for b in ei.bufs)
  params = sum(p.nbytes() for p in opt.params)
  print(f"beautiful_mnist step (BS={bs}): {len(step.jit_cache)} items, {len(copies)} copies of {copied} bytes "
        f"({copied / params:.2f}x the parameters, {copied / touched:.4f} of the bytes the step touches)")

if __name__ == "__main__":
  result_copies(getenv("N", 1024), getenv("REPS", 50))
  training_snapshots(getenv("BS", 128))
