"""The scheduler's fusion decisions: exact kernel counts, laziness, realizing together, contiguous, assign order."""
import numpy as np
import pytest
from fusegrad import Tensor, GlobalCounters, Device
from fusegrad.engine.realize import run_schedule
from fusegrad.uop.ops import Ops

N = 16

def schedule_count(*ts: Tensor) -> int:
  """How many kernels realizing ts together takes (the schedule is run too, so nothing is left half done)."""
  sched = ts[0].schedule(*ts[1:])
  run_schedule(sched)
  return sum(1 for si in sched if si.ast.op is Ops.SINK)

def kernels_run(*ts: Tensor) -> int:
  """How many kernels Tensor.realize ran for ts."""
  GlobalCounters.reset()
  Tensor.realize(*ts)
  return GlobalCounters.kernel_count

def rand(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)

class TestKernelCounts:
  def test_readme_matmul_is_one_kernel(self):
    a, b = Tensor.empty(N, N), Tensor.empty(N, N)
    assert schedule_count((a.reshape(N, 1, N) * b.T.reshape(1, N, N)).sum(axis=2)) == 1

  def test_readme_matmul_values(self):
    an, bn = rand(N, N), rand(N, N, seed=1)
    a, b = Tensor(an), Tensor(bn)
    out = (a.reshape(N, 1, N) * b.T.reshape(1, N, N)).sum(axis=2)
    assert kernels_run(out) == 1
    np.testing.assert_allclose(out.numpy(), an @ bn, atol=1e-5, rtol=1e-5)

  def test_matmul_operator_is_one_kernel(self):
    a, b = Tensor.empty(5, 7), Tensor.empty(7, 3)
    assert schedule_count(a @ b) == 1

  def test_elementwise_chain_is_one_kernel(self):
    xn, yn = rand(4, 6), rand(4, 6, seed=1)
    x, y = Tensor(xn), Tensor(yn)
    out = ((x + y) * 2).exp().sqrt() - x / (y.abs() + 1)
    assert kernels_run(out) == 1
    want = np.sqrt(np.exp((xn + yn) * 2)) - xn / (np.abs(yn) + 1)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)

  def test_elementwise_with_broadcast_and_views_is_one_kernel(self):
    x, y = Tensor.empty(4, 6), Tensor.empty(6)
    left = (x.T + 1).pad(((1, 0), (0, 2))).flip(0)
    right = y.reshape(6, 1).pad(((1, 0), (0, 0))).expand(7, 6)
    assert schedule_count(left * right) == 1

  def test_elementwise_producers_and_a_reduce_are_one_kernel(self):
    xn, yn = rand(4, 6), rand(4, 6, seed=1)
    out = ((Tensor(xn) + Tensor(yn)) * 2).exp().sum(axis=1)
    assert kernels_run(out) == 1
    np.testing.assert_allclose(out.numpy(), np.exp((xn + yn) * 2).sum(axis=1), rtol=1e-5)

  def test_reduce_followed_by_elementwise_is_one_kernel(self):
    xn = rand(4, 6)
    out = Tensor(xn).sum(axis=1).exp() * 2 + 1
    assert kernels_run(out) == 1
    np.testing.assert_allclose(out.numpy(), np.exp(xn.sum(axis=1)) * 2 + 1, rtol=1e-5)

  def test_producers_reduce_and_consumers_are_one_kernel(self):
    x, y = Tensor.empty(4, 6), Tensor.empty(4, 6)
    assert schedule_count((x * y).max(axis=0).sqrt() + 3) == 1

  @pytest.mark.parametrize("axis", [0, 1, -1])
  def test_softmax_is_at_most_three_kernels(self, axis):
    xn = rand(5, 7)
    out = Tensor(xn).softmax(axis)
    n = kernels_run(out)
    assert 1 <= n <= 3
    e = np.exp(xn - xn.max(axis=axis, keepdims=True))
    np.testing.assert_allclose(out.numpy(), e / e.sum(axis=axis, keepdims=True), rtol=1e-5, atol=1e-7)

  def test_expanded_reduce_is_its_own_kernel(self):
    # a reduce that is broadcast back would be recomputed for every copy if fused: it gets a buffer
    x = Tensor.empty(4, 6)
    assert schedule_count(x - x.sum(axis=1, keepdim=True)) == 2

  def test_arange_is_one_kernel(self): assert kernels_run(Tensor.arange(9) * 2) == 1

class TestLaziness:
  def test_nothing_runs_before_realize(self):
    GlobalCounters.reset()
    x = Tensor(rand(3, 4), requires_grad=True)
    w = Tensor(rand(4, 2, seed=1), requires_grad=True)
    loss = (x @ w).relu().softmax(-1).sum() + Tensor.arange(5).float().mean()
    loss.backward()
    assert x.grad is not None and w.grad is not None
    assert GlobalCounters.kernel_count == 0
    assert loss.uop.base.op is not Ops.BUFFER  # still a lazy graph

  def test_schedule_runs_nothing(self):
    GlobalCounters.reset()
    x = Tensor.empty(4, 4)
    assert len((x + 1).exp().schedule()) == 1
    assert GlobalCounters.kernel_count == 0

  def test_realize_runs_and_then_runs_nothing(self):
    x = Tensor(rand(3, 3))
    out = x * 3
    assert kernels_run(out) == 1
    assert out.uop.base.op is Ops.BUFFER
    assert kernels_run(out) == 0
    GlobalCounters.reset()
    out.numpy()
    assert GlobalCounters.kernel_count == 0  # realized and contiguous: reading it runs nothing

class TestRealizeTogether:
  def test_two_outputs(self):
    xn = rand(4, 5)
    x = Tensor(xn)
    a, b = x + 1, x * 2
    assert kernels_run(a, b) == 2
    np.testing.assert_allclose(a.numpy(), xn + 1)
    np.testing.assert_allclose(b.numpy(), xn * 2)
    assert kernels_run(a, b) == 0

  def test_shared_work_is_done_once(self):
    xn = rand(4, 5)
    s = (Tensor(xn) * 3).sum(axis=1)
    a, b = s + 1, s * 2
    # s has two users: it is computed once, into its own buffer, and both outputs read it
    assert kernels_run(a, b) == 3
    np.testing.assert_allclose(a.numpy(), (xn * 3).sum(axis=1) + 1, rtol=1e-5)
    np.testing.assert_allclose(b.numpy(), (xn * 3).sum(axis=1) * 2, rtol=1e-5)

  def test_one_output_is_a_view_of_another(self):
    xn = rand(4, 5)
    a = Tensor(xn) + 1
    b = a.T
    assert kernels_run(a, b) == 1
    np.testing.assert_allclose(b.numpy(), (xn + 1).T)

  def test_same_computation_twice(self):
    x = Tensor(rand(3, 3))
    assert kernels_run(x + 1, x + 1) == 1

class TestContiguous:
  def test_contiguous_of_a_buffer_runs_nothing(self):
    x = Tensor(rand(4, 6))
    assert kernels_run(x.contiguous()) == 0
  def test_contiguous_of_a_reshaped_buffer_runs_nothing(self):
    x = Tensor(rand(4, 6))
    y = x.reshape(24).contiguous()
    assert kernels_run(y) == 0
    np.testing.assert_equal(y.numpy(), x.numpy().reshape(24))
  def test_contiguous_of_a_realized_result_runs_nothing(self):
    x = (Tensor(rand(4, 6)) + 1).realize()
    assert kernels_run(x.contiguous()) == 0
  def test_contiguous_of_a_permuted_buffer_copies(self):
    xn = rand(4, 6)
    y = Tensor(xn).T.contiguous()
    assert kernels_run(y) == 1
    np.testing.assert_equal(y.numpy(), xn.T)
  def test_contiguous_of_unrealized_is_one_kernel(self):
    x = Tensor.empty(4, 6)
    assert schedule_count((x + 1).contiguous()) == 1
  def test_contiguous_splits_a_chain(self):
    x = Tensor.empty(4, 6)
    assert schedule_count(((x + 1).contiguous() * 2).exp()) == 2

class TestAssign:
  def _kernel_writes(self, sched, buf) -> list[int]: return [i for i, si in enumerate(sched) if si.bufs[0] is buf]

  @pytest.mark.parametrize("assign_first", [True, False])
  def test_reader_of_old_value_runs_before_the_assign(self, assign_first):
    x = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    xbuf = x.uop.base.arg
    y = x * 2  # reads x's old value
    x.assign(x + 10)
    outs = (x, y) if assign_first else (y, x)
    sched = outs[0].schedule(*outs[1:])
    writes = self._kernel_writes(sched, xbuf)
    y_kernel = next(i for i, si in enumerate(sched) if si.bufs[0] is not xbuf and any(b is xbuf for b in si.bufs[1:]))
    assert len(writes) >= 1 and y_kernel < min(writes), f"y's kernel ran at {y_kernel}, x was written at {writes}"
    run_schedule(sched)

  @pytest.mark.parametrize("assign_first", [True, False])
  def test_values(self, assign_first):
    x = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    y = x * 2
    s = x.sum()
    x.assign(x + 10)
    if assign_first: Tensor.realize(x, y, s)
    else: Tensor.realize(y, s, x)
    np.testing.assert_equal(x.numpy(), [11, 12, 13, 14])
    np.testing.assert_equal(y.numpy(), [2, 4, 6, 8])
    assert s.item() == 10

  def test_assign_reading_other_positions(self):
    # the new value reads the target at other positions than it writes: it must not see half-written data
    x = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    x.assign(x.flip(0) + x)
    x.realize()
    np.testing.assert_equal(x.numpy(), [5, 5, 5, 5])
    x.assign(x.flip(0) * Tensor([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_equal(x.numpy(), [5, 10, 15, 20])

  def test_assign_is_one_kernel(self):
    x = Tensor([1.0, 2.0, 3.0]).realize()
    x.assign(x * 2 + 1)
    assert kernels_run(x) == 1
    np.testing.assert_equal(x.numpy(), [3, 5, 7])

  def test_assign_keeps_the_buffer(self):
    x = Tensor([1.0, 2.0, 3.0]).realize()
    buf = x.uop.base.arg
    x.assign(x + 1).realize()
    assert x.uop.base.arg is buf

# *** results remembered across realizes stay correct after writes ***

def test_recomputed_expression_sees_assign():
  x = Tensor([1.0, 2.0, 3.0]).realize()
  keep = x * 2  # an identical lazy node stays alive
  (x * 2).realize()
  x.assign(x + 10).realize()
  np.testing.assert_equal((x * 2).numpy(), [22, 24, 26])  # built after the write: a new node
  np.testing.assert_equal(keep.numpy(), [2, 4, 6])  # the value computed before the write (as torch would have it)

def test_repeated_identical_assign_applies_each_time():
  w = Tensor([1.0, 2.0]).realize()
  for expect in ([2, 4], [4, 8], [8, 16]):
    w.assign(w * 2).realize()
    np.testing.assert_equal(w.numpy(), expect)

def test_clones_are_independent():
  w = Tensor([1.0, 2.0]).realize()
  c1, c2 = w.clone(), w.clone()
  c1.assign(Tensor([0.0, 0.0])).realize()
  np.testing.assert_equal(c2.numpy(), [1, 2])
  np.testing.assert_equal(w.numpy(), [1, 2])

def test_reduce_used_several_times_by_one_consumer_is_one_kernel():
  x = Tensor.rand(8, 16).realize()
  GlobalCounters.reset()
  out = x.sum(1).relu().realize()  # relu reads its input three times
  assert GlobalCounters.kernel_count == 1
  np.testing.assert_allclose(out.numpy(), np.maximum(x.numpy().sum(1), 0), rtol=1e-6)

def test_loss_realized_with_the_step_is_the_pre_step_value():
  w = Tensor([1.0, 2.0], requires_grad=True).realize()
  loss = (w * w).sum()
  loss.backward()
  Tensor.realize(loss, w.assign(w - 0.5 * w.grad))  # one schedule: the loss reads w before the step writes it
  assert loss.item() == 5.0 and w.tolist() == [0.0, 0.0]

def test_contiguous_computed_along_is_not_computed_again():
  # a contiguous tensor realized as part of another's schedule keeps its buffer (tinygrad's embedding tests count on it)
  w = Tensor.zeros(20, 30).contiguous()
  out = (w + 1).sum(0)
  assert len(out.schedule()) == 2
  out.realize()
  assert len((w * 2).schedule()) == 1 and (w * 2).sum().item() == 0

@pytest.mark.parametrize("device", ["CPU", "PYTHON", "CL"])
def test_matmul_packing_is_asked_for_by_the_device_model(device):
  """A big matmul's right operand is copied into column panels (a kernel before the product) only where the device's
  machine model asks for it (the CPU's panel_bytes: a cache line); PYTHON and CL read it in place, in one kernel."""
  if not Device.get_available(device)[0]: pytest.skip(f"no {device} device")
  panels = Device[device].renderer.machine.panel_bytes
  assert bool(panels) == (device == "CPU")
  # a.T @ b: a copied to rows first too, when it holds 2**16 elements or more
  for sa, sb, rows in [((256, 128), (128, 512), 0), ((256, 320), (320, 250), 1), ((2, 256, 64), (64, 1024), 0)]:
    a, b = Tensor.empty(*sa, device=device), Tensor.empty(*sb, device=device)
    assert len([si for si in (a @ b).schedule() if si.ast.op is Ops.SINK]) == (2 if panels else 1)
    at = Tensor.empty(*sa[:-2], sa[-1], sa[-2], device=device).transpose(-1, -2)
    assert len([si for si in (at @ b).schedule() if si.ast.op is Ops.SINK]) == (2 + rows if panels else 1)
  # a small sum (attention's q @ k.T over 16 head features): packed where k's rows run along the sum, not b's rows
  q, k = Tensor.empty(4, 256, 16, device=device), Tensor.empty(4, 256, 16, device=device)
  assert len([si for si in (q @ k.transpose(-1, -2)).schedule() if si.ast.op is Ops.SINK]) == (2 if panels else 1)
  assert len([si for si in (q @ Tensor.empty(4, 16, 256, device=device)).schedule() if si.ast.op is Ops.SINK]) == 1
  qs, ks = np.random.default_rng(0).standard_normal((2, 4, 300, 24), dtype=np.float32)  # (m padded to whole panels)
  got = (Tensor(qs, device=device) @ Tensor(ks, device=device).transpose(-1, -2)).numpy()
  np.testing.assert_allclose(got, qs @ ks.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)

def test_convolution_does_not_fuse_into_a_padded_copy():
  """A convolution's sum (over channels and kernel rows and columns) gets a kernel of its own before a pad: computed
  inside the padded copy, its index math went through the pad's gate and the im2col reshapes unsimplified (about 30
  div/mod per load, 0.8 GFLOPS: x.conv2d(w).relu().sum().backward() padded the output gradient so)."""
  import torch
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((2, 4, 8, 8), dtype=np.float32), rng.standard_normal((4, 4, 3, 3), dtype=np.float32)
  out = Tensor(x).conv2d(Tensor(w)).relu().permute(0, 2, 3, 1).pad(((0, 0), (0, 0), (2, 2), (0, 0))).contiguous()
  last = out.schedule()[-1].ast
  assert not any(u.op is Ops.REDUCE for u in last.toposort()), "the conv's sum was fused into the padded copy"
  ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w)).relu().permute(0, 2, 3, 1)
  np.testing.assert_allclose(out.numpy(), torch.nn.functional.pad(ref, (0, 0, 2, 2)).numpy(), rtol=1e-5, atol=1e-5)

def test_dropout_mask_is_computed_once_and_read_by_the_backward():
  """dropout's mask gets a buffer of its own (as tinygrad's): the forward and backward kernels read it instead of each
  computing the random bits again (tinygrad's transformer example: 1.02 G ops a step -> 0.44 G, 48.7k lines of C in
  its first step -> 28.4k). Same values: the result and gradients are torch's for the same mask."""
  import torch
  from fusegrad import Context
  x, w = Tensor(rand(64, 128), requires_grad=True), Tensor(rand(128, 32, seed=1), requires_grad=True)
  with Context(TRAINING=1):
    h = x.dropout(0.25)
    loss = ((h @ w).relu() * (h @ w)).sum()
    loss.backward()
  sched = loss.schedule(h, x.grad, w.grad)
  assert sum(any(u.op is Ops.THREEFRY for u in si.ast.toposort()) for si in sched if si.ast.op is Ops.SINK) == 1
  run_schedule(sched)
  keep = h.numpy() != 0  # (x has no zeros)
  assert 0.7 < keep.mean() < 0.8
  tx, tw = torch.tensor(x.numpy(), requires_grad=True), torch.tensor(w.numpy(), requires_grad=True)
  th = tx * torch.tensor(keep) / 0.75
  tloss = ((th @ tw).relu() * (th @ tw)).sum()
  tloss.backward()
  for got, want in [(h, th), (loss, tloss), (x.grad, tx.grad), (w.grad, tw.grad)]:
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-4)
