"""Deep lazy graphs: every walk from Tensor to kernel is iterative, so chains far deeper than Python's recursion limit
realize, forward and backward, at the default recursion limit."""
import os, subprocess, sys
import numpy as np
import torch
from fusegrad import Tensor, dtypes, GlobalCounters
from fusegrad.engine.schedule import MAX_FUSED_DEPTH

def test_recursion_limit_not_raised():
  """fusegrad leaves Python's recursion limit as it is (checked in a fresh process: other libraries the test session
  imports, torch's among them, may raise it)."""
  code = "import sys; import fusegrad, fusegrad.engine.realize, fusegrad.tensor; print(sys.getrecursionlimit())"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))})
  assert out.returncode == 0, out.stderr
  assert int(out.stdout) <= 1000

def test_chain_100k_forward():
  x = Tensor([1.0, 2.0])
  for _ in range(100_000): x = x + 1
  GlobalCounters.reset()
  np.testing.assert_equal(x.numpy(), [100_001.0, 100_002.0])
  assert GlobalCounters.kernel_count == 100_000 // MAX_FUSED_DEPTH  # cut into kernels of at most MAX_FUSED_DEPTH ops

def test_chain_int_and_float_together():
  x, y = Tensor([1, 2], dtype=dtypes.int32), Tensor([1.0, 2.0])
  tx, ty = torch.tensor([1, 2], dtype=torch.int32), torch.tensor([1.0, 2.0])
  for _ in range(5_000):  # 15,000 ops deep for y
    x, y = x + 1, (y * 0.5 + 1).relu()
    tx, ty = tx + 1, (ty * 0.5 + 1).relu()
  np.testing.assert_equal(x.numpy(), tx.numpy())
  np.testing.assert_allclose((x.float() + y).sum().item(), (tx.float() + ty).sum().item(), rtol=1e-6)

def test_chain_20k_backward():
  w, tw = Tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
  x, tx = w, tw
  for i in range(20_000):
    x, tx = (x * 1.0001, tx * 1.0001) if i % 2 else (x + 1, tx + 1)
  x.sum().backward()
  tx.sum().backward()
  np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4)

def test_scheduling_work_grows_linearly_with_depth(monkeypatch):
  """A chain of n small kernels (each normalizes by its row sums): the nodes the scheduler walks grow with n, not n**2
  (a walk to the leaves per reduce, asking whether it reads memory, made 40 forwards of a small transformer schedule
  in 94 s instead of 26)."""
  from fusegrad.uop import ops
  from fusegrad.engine import schedule
  walked, postorder = [0], ops.postorder
  def counting(*args, **kwargs):
    for n in postorder(*args, **kwargs):
      walked[0] += 1
      yield n
  monkeypatch.setattr(ops, "postorder", counting)
  def work(n: int) -> int:
    x = Tensor.ones(8, 8).contiguous().realize()
    for _ in range(n): x = (x / x.sum(1, keepdim=True)).contiguous() + 1
    walked[0] = 0
    schedule.create_schedule([x.uop])
    return walked[0]
  small, big = work(50), work(200)
  assert big < 6 * small, (small, big)  # 4x the depth: about 4x the walking (16x when quadratic)
