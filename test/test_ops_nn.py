"""Network ops (mixin/conv.py, gather.py, loss.py, sort.py, nn.py), forward and backward, against torch on the default
device (DEV=...)."""
import math
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fusegrad import Tensor, GlobalCounters, Context, dtypes
from test.helpers import helper_test_op

def _realized(*shapes: tuple[int, ...], seed: int = 0) -> list[Tensor]:
  rng = np.random.default_rng(seed)
  return [Tensor(rng.standard_normal(s).astype(np.float32)).realize() for s in shapes]

def _kernels(fn) -> int:
  GlobalCounters.reset()
  fn().realize()
  return GlobalCounters.kernel_count

# *** conv2d ***
@pytest.mark.parametrize("bs,cin,cout,hw,k,kw", [
  (2, 4, 6, (6, 7), (3, 3), {}),
  (2, 4, 6, (6, 7), (3, 3), {"padding": 1}),
  (2, 4, 6, (6, 7), (3, 2), {"stride": 2, "padding": (1, 0)}),
  (2, 4, 6, (7, 6), (3, 3), {"groups": 2, "stride": 2, "padding": 1}),
  (1, 3, 3, (6, 7), (3, 3), {"groups": 3, "padding": 1}),  # depthwise
  (2, 4, 6, (6, 7), (2, 3), {"dilation": 2, "padding": (1, 2)}),
  (2, 4, 4, (7, 7), (3, 2), {"groups": 2, "stride": (2, 3), "dilation": (2, 1), "padding": 2}),
  (2, 3, 2, (6, 7), (2, 2), {"stride": 3}),  # windows that don't overlap (kernel < stride)
  (2, 3, 5, (5, 5), (1, 1), {}),
  (1, 2, 3, (4, 9), (4, 5), {"padding": 1}),
])
def test_conv2d(bs, cin, cout, hw, k, kw):
  groups = kw.get("groups", 1)
  helper_test_op([(bs, cin, *hw), (cout, cin // groups, *k), (cout,)],
                 lambda x, w, b: F.conv2d(x, w, b, **kw), lambda x, w, b: x.conv2d(w, b, **kw),
                 atol=1e-5, grad_atol=1e-4)

def test_conv2d_no_bias():
  helper_test_op([(2, 3, 5, 6), (4, 3, 3, 3)], lambda x, w: F.conv2d(x, w), lambda x, w: x.conv2d(w), atol=1e-5)

def test_conv2d_uint8_input_weight_grad():
  """Raw uint8 pixels into a float conv (MNIST's first layer): values and the weight's gradient as torch's on the
  pixels cast to float (the gradient goes through the conv's own rule, the pixels cast once)."""
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (16, 1, 12, 12)).astype(np.uint8)
  w, g = rng.standard_normal((8, 1, 5, 5)).astype(np.float32), rng.standard_normal((16, 8, 8, 8)).astype(np.float32)
  tw = torch.tensor(w, requires_grad=True)
  F.conv2d(torch.tensor(x).float(), tw).backward(torch.tensor(g))
  fw = Tensor(w, requires_grad=True)
  out = Tensor(x).conv2d(fw)
  assert out.dtype == dtypes.float32
  out.backward(Tensor(g))
  # one kernel reads the bytes (the cast); the conv and its weight gradient read its floats
  assert sum(any(b.dtype == dtypes.uint8 for b in si.bufs) for si in Tensor.schedule(out, fw.grad)) == 1
  want = F.conv2d(torch.tensor(x).float(), torch.tensor(w)).numpy()
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-3)
  np.testing.assert_allclose(fw.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-2)

def test_conv2d_asymmetric_padding():
  # flat (left, right, top, bottom), as torch.nn.functional.pad
  pad = (2, 0, 1, 3)
  helper_test_op([(2, 3, 5, 6), (4, 3, 3, 2)], lambda x, w: F.conv2d(F.pad(x, pad), w, stride=(2, 1)),
                 lambda x, w: x.conv2d(w, stride=(2, 1), padding=pad), atol=1e-5)

def test_conv2d_padding_pairs():
  helper_test_op([(1, 2, 5, 6), (3, 2, 3, 3)], lambda x, w: F.conv2d(F.pad(x, (0, 2, 1, 1)), w),
                 lambda x, w: x.conv2d(w, padding=((1, 1), (0, 2))), atol=1e-5)

@pytest.mark.parametrize("dilation", [1, 2])
def test_conv2d_padding_same_valid(dilation):
  helper_test_op([(1, 2, 6, 7), (3, 2, 3, 4)], lambda x, w: F.conv2d(x, w, padding="same", dilation=dilation),
                 lambda x, w: x.conv2d(w, padding="same", dilation=dilation), atol=1e-5)
  helper_test_op([(1, 2, 6, 7), (3, 2, 3, 4)], lambda x, w: F.conv2d(x, w, padding="valid"),
                 lambda x, w: x.conv2d(w, padding="valid"), atol=1e-5)

@pytest.mark.parametrize("kw", [{}, {"stride": 2, "padding": 1}, {"dilation": 2, "padding": 2, "groups": 3}])
def test_conv1d_shapes(kw):
  g = kw.get("groups", 1)
  helper_test_op([(2, 3, 9), (6, 3 // g, 3), (6,)], lambda x, w, b: F.conv1d(x, w, b, **kw),
                 lambda x, w, b: x.conv2d(w, b, **kw), atol=1e-5)
  helper_test_op([(2, 3, 9), (6, 3 // g, 3)], lambda x, w: F.conv1d(x, w, **kw), lambda x, w: x.conv1d(w, **kw),
                 atol=1e-5)

@pytest.mark.parametrize("kw", [{}, {"stride": (1, 2, 1), "padding": 1},
                                {"dilation": (2, 1, 1), "groups": 2, "padding": (1, 0, 1)}])
def test_conv3d_shapes(kw):
  g = kw.get("groups", 1)
  helper_test_op([(2, 2, 5, 4, 3), (4, 2 // g, 2, 3, 2), (4,)], lambda x, w, b: F.conv3d(x, w, b, **kw),
                 lambda x, w, b: x.conv2d(w, b, **kw), atol=1e-5)

def test_conv_unbatched():
  helper_test_op([(3, 5, 6), (4, 3, 2, 3)], lambda x, w: F.conv2d(x, w, padding=1), lambda x, w: x.conv2d(w, padding=1), atol=1e-5)
  helper_test_op([(3, 5, 6), (3, 2, 2, 3)], lambda x, w: F.conv_transpose2d(x, w, stride=2),
                 lambda x, w: x.conv_transpose2d(w, stride=2), atol=1e-5)

def test_conv2d_is_one_kernel():
  x, w, b = _realized((2, 4, 6, 7), (6, 2, 3, 3), (6,))
  assert _kernels(lambda: x.conv2d(w, groups=2, stride=2, padding=1, dilation=(1, 2))) == 1
  assert _kernels(lambda: x.conv2d(w, b, groups=2, padding=1).exp()) == 1  # bias and an elementwise op fuse in

def test_conv_input_stored_channel_last_once():
  # conv2's input h is written channel-last by the kernel computing it (the weight gradient reads it so), not copied
  # again in the backward; conv2's output gradient is copied once, padded for its input gradient: 10 kernels, 12 with
  # the copy of h and a second copy of the gradient. (The gradient of square() is 2 * conv2's output: conv2's sum is a
  # kernel of its own, not fused into the padded copy: test_schedule, test_convolution_does_not_fuse_into_a_padded_copy)
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal((2, 1, 7, 7), dtype=np.float32)).realize()
  w1, b1, w2 = [Tensor(rng.standard_normal(s, dtype=np.float32), requires_grad=True).realize()
                for s in ((8, 1, 3, 3), (8,), (8, 8, 3, 3))]
  x.conv2d(w1, b1).relu().conv2d(w2).square().sum().backward()
  assert len(Tensor.schedule(w1.grad, w2.grad)) == 10

def test_conv2d_bad_shapes():
  x = Tensor.ones(2, 4, 6, 6)
  with pytest.raises(ValueError, match="conv2d"): x.conv2d(Tensor.ones(3, 3, 3, 3))  # cin mismatch
  with pytest.raises(ValueError, match="conv2d"): x.conv2d(Tensor.ones(3, 2, 3, 3), groups=2)  # cout % groups
  with pytest.raises(ValueError, match="conv2d"): x.conv2d(Tensor.ones(4, 4, 3))  # weight dims
  with pytest.raises(ValueError, match="bias"): x.conv2d(Tensor.ones(4, 4, 3, 3), Tensor.ones(3))
  with pytest.raises(ValueError, match="larger than the input"): x.conv2d(Tensor.ones(4, 4, 7, 3))
  with pytest.raises(ValueError, match="padding"): x.conv2d(Tensor.ones(4, 4, 3, 3), padding=(1, 2, 3))

# conv2d's own derivative rule (mixin/convgrad.py): both gradients as convolutions, for every argument conv2d takes
_TORCH_CONV = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}
@pytest.mark.parametrize("x_shape,w_shape,kw,flat_pad", [
  ((2, 4, 9, 8), (6, 2, 3, 2), {"groups": 2, "stride": (2, 3), "dilation": (2, 1)}, (2, 0, 1, 3)),
  ((1, 3, 8, 7), (3, 1, 3, 3), {"groups": 3, "stride": 2}, (0, 1, 2, 0)),  # depthwise, asymmetric
  ((2, 2, 8), (4, 2, 3), {"stride": 3, "dilation": 2}, (3, 1)),  # 1d; the input's tail is in no window
  ((1, 2, 5, 4, 6), (2, 1, 2, 2, 3), {"groups": 2, "stride": (2, 1, 2)}, (1, 1, 1, 1, 1, 1)),  # 3d
  ((2, 3, 6, 6), (2, 3, 2, 2), {"stride": 3}, (4, 4, 4, 4)),  # padding wider than the kernel
  ((2, 3, 7, 8), (4, 3, 3, 3), {"dilation": 2}, (-1, 1, 0, -2)),  # negative padding cuts
  ((3, 8, 12, 12), (8, 8, 5, 5), {}, (0, 0, 0, 0)),  # MNIST-like: stride 1, no padding
  ((2, 16, 8, 8), (16, 16, 3, 3), {}, (0, 0, 0, 0)),  # 6-wide rows: a vector along the output channels
  ((6, 4, 96, 100), (4, 2, 3, 3), {"groups": 2, "stride": 2}, (1, 0, 1, 1)),  # weight gradient summed in batch chunks
  # a batch and channels as long as the image: with 16 vector registers (CPU_ISA=avx2) the input gradient reads the
  # output gradient unpadded and tiles images (heuristic._window_gated), its window loops bounded by the padding
  ((16, 16, 8, 8), (8, 16, 3, 3), {}, (1, 1, 1, 1)),
  ((16, 16, 8, 8), (16, 8, 3, 3), {"groups": 2, "dilation": 2}, (2, 2, 1, 3)),
  ((12, 16, 10, 12), (8, 16, 5, 5), {}, (0, 0, 0, 0)),
])
def test_conv2d_gradients(x_shape, w_shape, kw, flat_pad):
  conv = _TORCH_CONV[len(x_shape)]
  helper_test_op([x_shape, w_shape], lambda x, w: conv(F.pad(x, flat_pad), w, **kw),
                 lambda x, w: x.conv2d(w, padding=flat_pad, **kw), atol=1e-5, grad_atol=1e-4)

@pytest.mark.parametrize("op", ["conv2d", "conv2d_relu", "conv3d", "max_pool2d"])
def test_realized_conv_and_pool_results_keep_their_gradients(op):
  """A conv or max pool result realized (printed, .numpy(), .realize()) before backward: its inputs still get their
  gradients, as torch's (the results required grad as None, so a realize dropped the graph that made them: no grads)."""
  rng = np.random.default_rng(3)
  nd = 3 if op == "conv3d" else 2
  xn, wn = rng.standard_normal((2, 3) + (6,) * nd).astype(np.float32), rng.standard_normal((4, 3) + (3,) * nd).astype(np.float32)
  x, w, tx, tw = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True), \
    torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
  if op == "max_pool2d": out, ref = x.max_pool2d(), F.max_pool2d(tx, 2)
  else: out, ref = x.conv2d(w, padding=1), _TORCH_CONV[nd + 2](tx, tw, padding=1)
  if op == "conv2d_relu": out, ref = out.relu(), ref.relu()
  out.numpy()
  (out * out).sum().backward()
  (ref * ref).sum().backward()
  assert out.requires_grad
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
  if op != "max_pool2d": np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-4)

def test_conv2d_second_order():
  """Gradients of the gradients: the rule's gradients are themselves differentiable (convolutions again)."""
  rng = np.random.default_rng(0)
  xn, wn = rng.standard_normal((2, 4, 7, 6)).astype(np.float32), rng.standard_normal((6, 2, 3, 2)).astype(np.float32)
  kw = {"groups": 2, "stride": (2, 1), "dilation": (1, 2), "padding": 1}
  x, w = Tensor(xn), Tensor(wn)
  out = x.conv2d(w, **kw)
  gx, gw = (out * out).sum().gradient(x, w)
  hx, hw = ((gx * gx).sum() + gw.sin().sum()).gradient(x, w)
  tx, tw = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
  to = F.conv2d(tx, tw, **kw)
  tgx, tgw = torch.autograd.grad((to * to).sum(), (tx, tw), create_graph=True)
  thx, thw = torch.autograd.grad((tgx * tgx).sum() + tgw.sin().sum(), (tx, tw))
  for mine, ref in [(gx, tgx), (gw, tgw), (hx, thx), (hw, thw)]:
    np.testing.assert_allclose(mine.numpy(), ref.detach().numpy(), atol=1e-3, rtol=1e-4)

def test_conv2d_gradient_of_inner_node():
  """A target inside the convolution (here its padded input, a node conv2d builds too) still gets its gradient."""
  xn, wn = _realized((1, 2, 5, 5), (3, 2, 3, 3), seed=3)
  xp = xn.pad(((0, 0), (0, 0), (1, 1), (1, 1)))
  gxp, = xn.conv2d(wn, padding=1).square().sum().gradient(xp)
  txp = torch.tensor(xp.numpy(), requires_grad=True)
  F.conv2d(txp, torch.tensor(wn.numpy())).square().sum().backward()
  np.testing.assert_allclose(gxp.numpy(), txp.grad.numpy(), atol=1e-4, rtol=1e-4)

# *** conv_transpose2d ***
@pytest.mark.parametrize("cin,cout_g,hw,k,kw", [
  (4, 3, (5, 6), (3, 3), {}),
  (4, 3, (5, 6), (3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
  (4, 2, (4, 5), (2, 3), {"groups": 2, "stride": (2, 3), "dilation": 2, "padding": (1, 2)}),
  (2, 3, (3, 4), (3, 2), {"stride": 3, "output_padding": (2, 1)}),
  (3, 2, (4, 4), (1, 1), {"stride": 2}),
])
def test_conv_transpose2d(cin, cout_g, hw, k, kw):
  g = kw.get("groups", 1)
  helper_test_op([(2, cin, *hw), (cin, cout_g, *k), (cout_g * g,)], lambda x, w, b: F.conv_transpose2d(x, w, b, **kw),
                 lambda x, w, b: x.conv_transpose2d(w, b, **kw), atol=1e-5, grad_atol=1e-4)

def test_conv_transpose1d_3d_shapes():
  helper_test_op([(2, 3, 7), (3, 2, 3)], lambda x, w: F.conv_transpose1d(x, w, stride=2, padding=1, output_padding=1),
                 lambda x, w: x.conv_transpose2d(w, stride=2, padding=1, output_padding=1), atol=1e-5)
  helper_test_op([(1, 2, 3, 4, 2), (2, 2, 2, 2, 3)],
                 lambda x, w: F.conv_transpose3d(x, w, stride=(2, 1, 2), padding=(0, 1, 1)),
                 lambda x, w: x.conv_transpose2d(w, stride=(2, 1, 2), padding=(0, 1, 1)), atol=1e-5)

def test_conv_transpose2d_bad_args():
  with pytest.raises(ValueError, match="conv_transpose2d"):
    Tensor.ones(1, 4, 3, 3).conv_transpose2d(Tensor.ones(3, 2, 2, 2))
  with pytest.raises(ValueError, match="output_padding"):
    Tensor.ones(1, 2, 3, 3).conv_transpose2d(Tensor.ones(2, 2, 2, 2), stride=2, output_padding=2)

# *** pooling ***
MAX_POOL_CASES = [
  {"kernel_size": 2},
  {"kernel_size": (2, 3)},
  {"kernel_size": 3, "stride": 2, "padding": 1},
  {"kernel_size": 3, "stride": 2, "ceil_mode": True},
  {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0), "ceil_mode": True},
  {"kernel_size": 2, "stride": 1, "dilation": 2},
  {"kernel_size": (2, 3), "stride": (1, 2), "dilation": (2, 1), "padding": 1, "ceil_mode": True},
]
@pytest.mark.parametrize("kw", MAX_POOL_CASES)
def test_max_pool2d(kw):
  helper_test_op([(2, 3, 7, 6)], lambda x: F.max_pool2d(x, **kw), lambda x: x.max_pool2d(**kw))

def test_max_pool2d_default_and_is_one_kernel():
  helper_test_op([(2, 3, 6, 8)], lambda x: F.max_pool2d(x, 2), lambda x: x.max_pool2d())
  x, = _realized((2, 3, 7, 6))
  assert _kernels(lambda: x.max_pool2d(3, 2, padding=1, ceil_mode=True)) == 1

def test_max_pool2d_gradient_is_one_buffer():
  """The input gradient is computed into a buffer of its own (a batch norm's backward sums read it several times), and
  gradients of it still flow (second order, as torch)."""
  from fusegrad.uop.ops import Ops
  xn = np.random.default_rng(4).standard_normal((2, 3, 6, 8)).astype(np.float32)
  x = Tensor(xn)
  dx, = x.max_pool2d(3, 2, padding=1).square().sum().gradient(x)
  assert dx.uop.op is Ops.CONTIGUOUS
  hx, = (dx * x).sum().gradient(x)
  tx = torch.tensor(xn, requires_grad=True)
  tdx, = torch.autograd.grad(F.max_pool2d(tx, 3, 2, padding=1).square().sum(), tx, create_graph=True)
  thx, = torch.autograd.grad((tdx * tx).sum(), tx)
  np.testing.assert_allclose(dx.numpy(), tdx.detach().numpy(), atol=1e-5)
  np.testing.assert_allclose(hx.numpy(), thx.numpy(), atol=1e-5)

def test_max_pool_1d_3d():
  helper_test_op([(2, 3, 9)], lambda x: F.max_pool1d(x, 3, 2, padding=1), lambda x: x.max_pool2d((3,), 2, padding=1))
  helper_test_op([(2, 3, 9)], lambda x: F.max_pool1d(x, 2, ceil_mode=True), lambda x: x.max_pool1d(2, ceil_mode=True))
  helper_test_op([(1, 2, 4, 5, 6)], lambda x: F.max_pool3d(x, (2, 2, 3), stride=(1, 2, 2), padding=(1, 0, 1)),
                 lambda x: x.max_pool2d((2, 2, 3), stride=(1, 2, 2), padding=(1, 0, 1)))

def test_max_pool2d_int():
  helper_test_op([(2, 2, 5, 5)], lambda x: F.max_pool2d(x.float(), 2, 1, padding=1).int(),
                 lambda x: x.max_pool2d(2, 1, padding=1),
                 dtype=dtypes.int32, low=-50, high=50, forward_only=True)

@pytest.mark.parametrize("kw", MAX_POOL_CASES[:5])
def test_max_pool2d_return_indices(kw):
  x = np.random.default_rng(3).standard_normal((2, 3, 7, 6)).astype(np.float32)
  want_v, want_i = F.max_pool2d(torch.tensor(x), **kw, return_indices=True)
  got_v, got_i = Tensor(x).max_pool2d(**kw, return_indices=True)
  np.testing.assert_equal(got_v.numpy(), want_v.numpy())
  np.testing.assert_equal(got_i.numpy(), want_i.numpy())

@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_pool_ties_nan_and_inf_go_where_torch_sends_them(nd):
  # torch's gradient goes to the first max of each window (not shared by ties: ReLU zeros, ints in float), to a nan
  # where a window has one (its max), and never to padding, which a real -inf ties with; the indices too
  rng, fn = np.random.default_rng(nd), {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nd]
  for case in (0, 1, 2, 3, 7):
    x = rng.integers(0, 3, (2, 2) + (5,) * nd).astype(np.float32)
    x.reshape(-1)[rng.integers(0, x.size, 3)] = [np.nan, -np.inf, -np.inf] if case % 2 else [-np.inf] * 3
    if case == 7: x[:] = -np.inf
    kw = {"kernel_size": 2 + case % 2, "stride": 1 + case % 3 // 2, "padding": case % 4 // 2, "dilation": 1 + case // 7}
    t = torch.tensor(x, requires_grad=True)
    want, want_i = fn(t, **kw, return_indices=True)
    g = rng.standard_normal(want.shape).astype(np.float32)
    want.backward(torch.tensor(g))
    f = Tensor(x, requires_grad=True)
    got, got_i = f.max_pool2d(**{k: (v,) * nd if k == "kernel_size" else v for k, v in kw.items()}, return_indices=True)
    (got * Tensor(g)).sum().backward()
    np.testing.assert_equal(got.numpy(), want.detach().numpy())
    np.testing.assert_equal(got_i.numpy(), want_i.numpy())
    np.testing.assert_allclose(f.grad.numpy(), t.grad.numpy(), atol=1e-6, err_msg=str(kw))

UNPOOL_CASES = [{"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1},
                {"kernel_size": (2, 3), "stride": (2, 1)}]
@pytest.mark.parametrize("kw", UNPOOL_CASES)
def test_max_unpool2d(kw):
  x = np.random.default_rng(13).standard_normal((2, 3, 6, 8)).astype(np.float32)
  _, idx = F.max_pool2d(torch.tensor(x), **kw, return_indices=True)
  pooled = F.max_pool2d(torch.tensor(x), **kw).numpy()
  helper_test_op(None, lambda v: F.max_unpool2d(v, idx, **kw, output_size=(6, 8)),
                 lambda v: v.max_unpool2d(Tensor(idx.numpy()), **kw, output_size=(6, 8)), vals=[pooled],
                 forward_only=kw["kernel_size"] != 2)  # overlapping windows: torch gives each copy the full gradient
  if kw["kernel_size"] == 2:  # the default output size
    want = F.max_unpool2d(torch.tensor(pooled), idx, 2).numpy()
    np.testing.assert_equal(Tensor(pooled).max_unpool2d(Tensor(idx.numpy())).numpy(), want)

AVG_POOL_CASES = [
  {"kernel_size": 2},
  {"kernel_size": (3, 2), "stride": 1},
  {"kernel_size": 3, "stride": 2, "padding": 1},
  {"kernel_size": 3, "stride": 2, "ceil_mode": True},
  {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 1), "ceil_mode": True},
  {"kernel_size": 2, "stride": 3, "padding": 1, "ceil_mode": True},
]
@pytest.mark.parametrize("kw", AVG_POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d(kw, count_include_pad):
  helper_test_op([(2, 3, 7, 6)], lambda x: F.avg_pool2d(x, **kw, count_include_pad=count_include_pad),
                 lambda x: x.avg_pool2d(**kw, count_include_pad=count_include_pad))

def test_avg_pool_1d_3d_and_one_kernel():
  helper_test_op([(2, 3, 9)], lambda x: F.avg_pool1d(x, 3, 2, padding=1, count_include_pad=False),
                 lambda x: x.avg_pool1d(3, 2, padding=1, count_include_pad=False))
  helper_test_op([(1, 2, 4, 5, 6)], lambda x: F.avg_pool3d(x, 2, ceil_mode=True),
                 lambda x: x.avg_pool2d((2, 2, 2), ceil_mode=True))
  x, = _realized((2, 3, 7, 6))
  assert _kernels(lambda: x.avg_pool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False)) == 1

def test_pool_bad_args():
  with pytest.raises(ValueError, match="max_pool2d.*padding"): Tensor.ones(1, 1, 5, 5).max_pool2d(2, padding=2)
  with pytest.raises(ValueError, match="avg_pool2d.*larger"): Tensor.ones(1, 1, 2, 2).avg_pool2d(3)
  with pytest.raises(ValueError, match="stride"): Tensor.ones(1, 1, 5, 5).max_pool2d(2, stride=(1, 1, 1))

@pytest.mark.parametrize("dim,size,step", [(0, 2, 1), (1, 3, 2), (-1, 2, 3), (1, 5, 1)])
def test_unfold(dim, size, step):
  helper_test_op([(4, 5, 6)], lambda x: x.unfold(dim, size, step))
def test_unfold_keywords():  # tinygrad's names (torch calls the first one dimension)
  helper_test_op([(4, 6)], lambda x: x.unfold(1, 3, 2), lambda x: x.unfold(dim=1, size=3, step=2))

# *** normalization and dropout ***
@pytest.mark.parametrize("affine", [True, False])
def test_batchnorm(affine):
  def fg(x, w, b, m, v): return x.batchnorm(w if affine else None, b if affine else None, m, (v + 1e-5).rsqrt())
  def tt(x, w, b, m, v):
    return F.batch_norm(x, m.detach(), v.detach(), w if affine else None, b if affine else None, eps=1e-5)
  helper_test_op([(2, 3, 4, 5), (3,), (3,), (3,), (3,)], tt, fg, low=0.1, high=2, atol=1e-5)

def test_batchnorm_statistics_gradient():
  # torch's batch_norm has no gradient for mean and var: check those against the formula written in torch
  def manual(x, w, b, m, v):
    return (x - m.reshape(3, 1, 1)) * (v.reshape(3, 1, 1) + 1e-5).rsqrt() * w.reshape(3, 1, 1) + b.reshape(3, 1, 1)
  helper_test_op([(2, 3, 4, 5), (3,), (3,), (3,), (3,)], manual,
                 lambda x, w, b, m, v: x.batchnorm(w, b, m, (v + 1e-5).rsqrt()),
                 low=0.1, high=2, atol=1e-5)

def test_batchnorm_other_axis():
  helper_test_op([(4, 6), (6,), (6,), (6,), (6,)], lambda x, w, b, m, v: F.batch_norm(x, m.detach(), v.detach(), w, b),
                 lambda x, w, b, m, v: x.batchnorm(w, b, m, (v + 1e-5).rsqrt(), axis=-1), low=0.1, high=2, atol=1e-5)

def test_layernorm():
  helper_test_op([(3, 4, 7)], lambda x: F.layer_norm(x, (7,)), lambda x: x.layernorm(), atol=1e-5, grad_atol=1e-4)
  helper_test_op([(3, 4, 7)], lambda x: F.layer_norm(x, (4, 7), eps=1e-3), lambda x: x.layernorm((-2, -1), eps=1e-3),
                 atol=1e-5)

def test_dropout_off_outside_training():
  x = Tensor.rand(50)
  assert not Tensor.training
  np.testing.assert_equal(x.dropout(0.5).numpy(), x.numpy())

@pytest.mark.parametrize("how", ["train", "context"])
def test_dropout_in_training(how):
  x = Tensor.ones(1000, requires_grad=True)
  if how == "train":
    with Tensor.train(): y = x.dropout(0.25)
  else:
    with Context(TRAINING=1): y = x.dropout(0.25)
  vals = y.numpy()
  assert set(np.unique(vals).tolist()) <= {0.0, float(np.float32(1 / 0.75))}
  assert 0.18 < (vals == 0).mean() < 0.32
  y.sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), vals, rtol=1e-6)  # the gradient goes through the same mask

def test_dropout_edges():
  with Tensor.train():
    x = Tensor.rand(10)
    np.testing.assert_equal(x.dropout(0.0).numpy(), x.numpy())
    np.testing.assert_equal(x.dropout(1.0).numpy(), np.zeros(10, np.float32))
    with pytest.raises(ValueError, match="dropout"): x.dropout(1.5)

# *** one_hot, gather, scatter ***
def test_one_hot():
  y = np.array([[0, 3, 1], [2, 2, 0]])
  np.testing.assert_equal(Tensor(y).one_hot().numpy(), F.one_hot(torch.tensor(y)).numpy())
  np.testing.assert_equal(Tensor(y).one_hot(6).numpy(), F.one_hot(torch.tensor(y), 6).numpy())
  with pytest.raises(TypeError, match="one_hot"): Tensor([1.0]).one_hot(3)

def _index(shape: tuple[int, ...], high: int, seed: int = 1) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, high, shape)

@pytest.mark.parametrize("dim,ishape", [(0, (3, 5)), (1, (4, 3)), (-1, (2, 7)), (0, (6, 2))])
def test_gather(dim, ishape):
  idx = _index(ishape, (4, 5)[dim])
  helper_test_op([(4, 5)], lambda x: torch.gather(x, dim, torch.tensor(idx)), lambda x: x.gather(dim, Tensor(idx)))

# *** masked_select / nonzero (data-dependent lengths) ***
def test_masked_select():
  m = np.random.default_rng(5).random((3, 4)) > 0.5
  helper_test_op([(3, 4)], lambda x: torch.masked_select(x, torch.tensor(m)), lambda x: x.masked_select(Tensor(m)))
  helper_test_op([(3, 4)], lambda x: torch.masked_select(x, torch.tensor(m[0])), lambda x: x.masked_select(Tensor(m[0])))
  v = np.arange(6, dtype=np.int32).reshape(2, 3)
  assert Tensor(v).masked_select(Tensor(v % 2 == 0)).tolist() == [0, 2, 4]
  assert Tensor([True, False, True]).masked_select(Tensor([True, True, False])).tolist() == [True, False]
  assert Tensor([1.0, 2.0]).masked_select(Tensor([False, False])).shape == (0,)

def test_masked_select_size():
  x = Tensor([5.0, 6.0, 7.0, 8.0])
  m = Tensor([False, True, True, True])
  assert x.masked_select(m, size=2).tolist() == [6.0, 7.0]
  assert x.masked_select(m, size=5, fill_value=-1).tolist() == [6.0, 7.0, 8.0, -1.0, -1.0]
  with pytest.raises(TypeError, match="masked_select.*bool"): x.masked_select(Tensor([1, 0, 1, 0]))
  with pytest.raises(ValueError, match="masked_select"): x.masked_select(Tensor([True, False]))

@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 2), (), (2, 0)])
def test_nonzero(shape):
  v = (np.random.default_rng(6).random(shape) > 0.6).astype(np.float32) * 3
  got = Tensor(v).nonzero()
  want = torch.tensor(v).nonzero().numpy()
  assert got.dtype == dtypes.int32 and got.shape == want.shape
  np.testing.assert_equal(got.numpy(), want)

def test_nonzero_size():
  x = Tensor([[0, 4], [5, 0]])
  assert x.nonzero(size=1).tolist() == [[0, 1]]
  assert x.nonzero(size=3, fill_value=-1).tolist() == [[0, 1], [1, 0], [-1, -1]]
  assert Tensor([True, False, True]).nonzero().tolist() == [[0], [2]]

def test_gather_3d_and_one_kernel():
  idx = _index((2, 3, 2), 4)
  helper_test_op([(2, 3, 4)], lambda x: torch.gather(x, 2, torch.tensor(idx)), lambda x: x.gather(2, Tensor(idx)))
  x, = _realized((5, 6))
  i = Tensor(_index((5, 6), 5).astype(np.int32)).realize()
  with Context(CHECK_INDEX=0): assert _kernels(lambda: x.gather(0, i)) == 1
  i2 = Tensor(_index((5, 6), 5).astype(np.int32)[::-1].copy()).realize()
  assert _kernels(lambda: x.gather(0, i2)) == 2  # and a tiny one for the out-of-range check

def test_gather_bad_index():
  with pytest.raises(TypeError, match="gather"): Tensor.ones(3, 3).gather(0, Tensor.ones(3, 3))
  with pytest.raises(ValueError, match="gather"): Tensor.ones(3, 3).gather(0, Tensor([1, 2]))
  with pytest.raises(ValueError, match="gather"): Tensor.ones(3, 3).gather(0, Tensor([[1, 2, 0, 1]]))

def test_scatter():
  idx = np.stack([np.random.default_rng(i).permutation(5)[:3] for i in range(4)], 1)  # (3, 4): no repeats along dim 0
  helper_test_op([(5, 4), (3, 4)], lambda x, s: x.scatter(0, torch.tensor(idx), s),
                 lambda x, s: x.scatter(0, Tensor(idx), s))
  helper_test_op([(4, 5)], lambda x: x.scatter(1, torch.tensor(idx.T), 2.5), lambda x: x.scatter(1, Tensor(idx.T), 2.5))

@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_reduce_arg(reduce):
  idx = _index((3, 4), 5)
  helper_test_op([(5, 4), (3, 4)], lambda x, s: x.scatter(0, torch.tensor(idx), s, reduce=reduce),
                 lambda x, s: x.scatter(0, Tensor(idx), s, reduce=reduce), forward_only=True)

def test_scatter_repeated_index_last_wins():
  got = Tensor.zeros(4).scatter(0, Tensor([1, 3, 1]), Tensor([5.0, 6.0, 7.0])).tolist()
  assert got == [0.0, 7.0, 0.0, 6.0]

@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
  idx = _index((4, 3), 5)
  helper_test_op([(5, 3), (4, 3)],
                 lambda x, s: x.scatter_reduce(0, torch.tensor(idx), s, reduce, include_self=include_self),
                 lambda x, s: x.scatter_reduce(0, Tensor(idx), s, reduce, include_self=include_self),
                 low=0.5, high=2, atol=1e-5)

def test_scatter_reduce_dim1_and_add():
  idx = _index((2, 6), 4)
  helper_test_op([(3, 4), (2, 6)], lambda x, s: x.scatter_reduce(1, torch.tensor(idx), s, "sum"),
                 lambda x, s: x.scatter_reduce(1, Tensor(idx), s, "sum"))
  helper_test_op([(3, 4), (2, 6)], lambda x, s: x.scatter_add(1, torch.tensor(idx), s),
                 lambda x, s: x.scatter_add(1, Tensor(idx), s))
  with pytest.raises(ValueError, match="scatter_reduce"):
    Tensor.ones(3, 4).scatter_reduce(1, Tensor(idx), Tensor.ones(2, 6), "max")

def test_masked_fill():
  m = np.random.default_rng(2).integers(0, 2, (3, 4)).astype(bool)
  helper_test_op([(3, 4)], lambda x: x.masked_fill(torch.tensor(m), -1.5), lambda x: x.masked_fill(Tensor(m), -1.5))

def test_channel_last_sum_and_relu_as_numpy():
  # read NCHW, written NHWC: big enough for the tile transposed in registers by shuffles (CStyleLanguage.render)
  rng = np.random.default_rng(6)
  a, b = rng.standard_normal((16, 32, 400), dtype=np.float32), rng.standard_normal((16, 400, 32), dtype=np.float32)
  np.testing.assert_array_equal((Tensor(a).permute(0, 2, 1) + Tensor(b)).relu().numpy(), np.maximum(a.transpose(0, 2, 1) + b, 0))

# *** losses ***
def test_cross_entropy_indices():
  y = np.array([0, 4, 2, 2, 1, 3])
  for kw in [{}, {"reduction": "sum"}, {"reduction": "none"}, {"label_smoothing": 0.2}]:
    helper_test_op([(6, 5)], lambda x: F.cross_entropy(x, torch.tensor(y), **kw),
                   lambda x: x.cross_entropy(Tensor(y), **kw), atol=1e-5)

def test_class_losses_take_targets_as_numpy_or_list():
  # as x + ndarray does: the targets become a tensor (tinygrad's lora_mnist passes numpy uint8 labels; it raised an
  # AttributeError from deep inside)
  y = np.array([0, 4, 2, 2, 1, 3], np.uint8)
  for targets in (y, y.tolist()):
    helper_test_op([(6, 5)], lambda x: F.cross_entropy(x, torch.tensor(y).long()),
                   lambda x: x.sparse_categorical_crossentropy(targets), atol=1e-5)
    helper_test_op([(6, 5)], lambda x: F.cross_entropy(x, torch.tensor(y).long()),
                   lambda x: x.cross_entropy(targets), atol=1e-5)
    helper_test_op([(6, 5)], lambda x: F.nll_loss(x, torch.tensor(y).long()), lambda x: x.nll_loss(targets), atol=1e-5)

def test_cross_entropy_weight_ignore_smoothing():
  y = np.array([0, -100, 2, 2, 1, 3])
  w = np.random.default_rng(4).uniform(0.5, 2, 5).astype(np.float32)
  for red in ["mean", "sum", "none"]:
    helper_test_op([(6, 5)],
                   lambda x: F.cross_entropy(x, torch.tensor(y), torch.tensor(w), reduction=red, label_smoothing=0.1),
                   lambda x: x.cross_entropy(Tensor(y), red, 0.1, weight=Tensor(w)), atol=1e-5)

def test_cross_entropy_probabilities_and_nd():
  p = np.random.default_rng(5).uniform(0, 1, (4, 5)).astype(np.float32)
  p /= p.sum(1, keepdims=True)
  helper_test_op([(4, 5)], lambda x: F.cross_entropy(x, torch.tensor(p), label_smoothing=0.1),
                 lambda x: x.cross_entropy(Tensor(p), label_smoothing=0.1), atol=1e-5)
  y = _index((2, 3, 4), 5)
  helper_test_op([(2, 5, 3, 4)], lambda x: F.cross_entropy(x, torch.tensor(y)), lambda x: x.cross_entropy(Tensor(y)),
                 atol=1e-5)
  helper_test_op([(5,)], lambda x: F.cross_entropy(x, torch.tensor(3)), lambda x: x.cross_entropy(Tensor(3)), atol=1e-5)

def test_sparse_categorical_crossentropy():
  y = np.array([[0, 4, -1], [2, 1, 3]])
  def tt(x): return F.cross_entropy(x.reshape(-1, 5), torch.tensor(y).reshape(-1), ignore_index=-1, label_smoothing=0.1)
  helper_test_op([(2, 3, 5)], tt,
                 lambda x: x.sparse_categorical_crossentropy(Tensor(y), label_smoothing=0.1), atol=1e-5)
  y2 = np.array([0, 4, 2, 1])
  helper_test_op([(4, 5)], lambda x: F.cross_entropy(x, torch.tensor(y2), reduction="none"),
                 lambda x: x.sparse_categorical_crossentropy(Tensor(y2), reduction="none"), atol=1e-5)
  with pytest.raises(ValueError, match="sparse_categorical_crossentropy"):
    Tensor.ones(4, 5).sparse_categorical_crossentropy(Tensor([1, 2]))

def test_nll_loss():
  y = np.array([1, 0, 3, 3, 2])
  w = np.random.default_rng(6).uniform(0.5, 2, 4).astype(np.float32)
  helper_test_op([(5, 4)], lambda x: F.nll_loss(x, torch.tensor(y)), lambda x: x.nll_loss(Tensor(y)))
  helper_test_op([(5, 4)], lambda x: F.nll_loss(x, torch.tensor(y), torch.tensor(w), ignore_index=3),
                 lambda x: x.nll_loss(Tensor(y), Tensor(w), ignore_index=3), atol=1e-6)
  helper_test_op([(5, 4)], lambda x: F.nll_loss(x, torch.tensor(y), reduction="none"),
                 lambda x: x.nll_loss(Tensor(y), reduction="none"))
  y3 = _index((2, 3), 4)
  helper_test_op([(2, 4, 3)], lambda x: F.nll_loss(x, torch.tensor(y3), reduction="sum"),
                 lambda x: x.nll_loss(Tensor(y3), reduction="sum"))
  with pytest.raises(ValueError, match="reduction"): Tensor.ones(5, 4).nll_loss(Tensor(y), reduction="avg")

def test_binary_crossentropy():
  t = np.random.default_rng(7).uniform(0, 1, (3, 4)).astype(np.float32)
  for red in ["mean", "sum", "none"]:
    helper_test_op([(3, 4)], lambda x: F.binary_cross_entropy(x, torch.tensor(t), reduction=red),
                   lambda x: x.binary_crossentropy(Tensor(t), red), low=0.05, high=0.95, atol=1e-5)

def test_binary_crossentropy_logits():
  t = np.random.default_rng(8).uniform(0, 1, (3, 4)).astype(np.float32)
  pw = np.random.default_rng(9).uniform(0.5, 2, (4,)).astype(np.float32)
  helper_test_op([(3, 4)], lambda x: F.binary_cross_entropy_with_logits(x, torch.tensor(t)),
                 lambda x: x.binary_crossentropy_logits(Tensor(t)), low=-8, high=8, atol=1e-5)
  pos = torch.tensor(pw)
  def tt(x): return F.binary_cross_entropy_with_logits(x, torch.tensor(t), pos_weight=pos, reduction="none")
  helper_test_op([(3, 4)], tt,
                 lambda x: x.binary_crossentropy_logits(Tensor(t), "none", Tensor(pw)), low=-8, high=8, atol=1e-5)
  # stable for large logits: no inf or nan
  big = Tensor([-200.0, 200.0]).binary_crossentropy_logits(Tensor([1.0, 0.0]), "none").numpy()
  np.testing.assert_allclose(big, [200.0, 200.0], rtol=1e-6)

# *** attention ***
@pytest.mark.parametrize("mask", [None, "bool", "float", "causal"])
def test_scaled_dot_product_attention(mask):
  rng = np.random.default_rng(10)
  bm, fm = rng.uniform(0, 1, (5, 6)) > 0.3, rng.standard_normal((5, 6)).astype(np.float32)
  bm[:, 0] = True  # every row keeps something
  tmask = {None: None, "bool": torch.tensor(bm), "float": torch.tensor(fm), "causal": None}[mask]
  fmask = {None: None, "bool": Tensor(bm), "float": Tensor(fm), "causal": None}[mask]
  causal = mask == "causal"
  shapes = [(2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 7)] if not causal else [(2, 3, 6, 4), (2, 3, 6, 4), (2, 3, 6, 7)]
  helper_test_op(shapes, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, tmask, is_causal=causal),
                 lambda q, k, v: q.scaled_dot_product_attention(k, v, fmask, is_causal=causal), atol=1e-5)

@pytest.mark.parametrize("kind", ["bool", "float"])
def test_scaled_dot_product_attention_row_masked_out(kind):
  keep = np.ones((3, 5), dtype=bool)
  keep[1] = False
  mask = keep if kind == "bool" else np.where(keep, 0.0, -np.inf).astype(np.float32)
  helper_test_op([(1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)],
                 lambda q, k, v: F.scaled_dot_product_attention(q, k, v, torch.tensor(mask)),
                 lambda q, k, v: q.scaled_dot_product_attention(k, v, Tensor(mask)), atol=1e-5)

def test_scaled_dot_product_attention_scale_gqa():
  helper_test_op([(1, 4, 3, 4), (1, 2, 5, 4), (1, 2, 5, 3)],
                 lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3, enable_gqa=True),
                 lambda q, k, v: q.scaled_dot_product_attention(k, v, scale=0.3, enable_gqa=True), atol=1e-5)

# *** interpolate ***
@pytest.mark.parametrize("mode", ["linear", "nearest", "nearest-exact"])
@pytest.mark.parametrize("size", [(3,), (11,)])
def test_interpolate_1d(mode, size):
  helper_test_op([(2, 3, 6)], lambda x: F.interpolate(x, size, mode=mode), lambda x: x.interpolate(size, mode),
                 atol=1e-5)

@pytest.mark.parametrize("mode,align_corners",
                         [("bilinear", False), ("bilinear", True), ("nearest", False), ("nearest-exact", False)])
@pytest.mark.parametrize("size", [(7, 3), (2, 9)])
def test_interpolate_2d(mode, align_corners, size):
  ac = align_corners if mode == "bilinear" else None
  helper_test_op([(2, 2, 4, 5)], lambda x: F.interpolate(x, size, mode=mode, align_corners=ac),
                 lambda x: x.interpolate(size, mode, align_corners), atol=1e-5)

@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_interpolate_int_size_and_scale_factor(mode):
  helper_test_op([(1, 2, 4, 5)], lambda x: F.interpolate(x, 3, mode=mode), lambda x: x.interpolate(3, mode), atol=1e-5)
  for sf in [2, 0.7, (1.5, 0.5)]:
    helper_test_op([(1, 2, 4, 5)], lambda x: F.interpolate(x, scale_factor=sf, mode=mode),
                   lambda x: x.interpolate(mode=mode, scale_factor=sf), atol=1e-5)
  with pytest.raises(ValueError, match="interpolate"): Tensor.ones(1, 1, 4).interpolate((3,), scale_factor=2)

def test_interpolate_3d():
  helper_test_op([(1, 2, 3, 4, 2)], lambda x: F.interpolate(x, (5, 2, 3), mode="trilinear"),
                 lambda x: x.interpolate((5, 2, 3), "trilinear"), atol=1e-5)
  helper_test_op([(1, 2, 3, 4, 2)], lambda x: F.interpolate(x, (5, 2, 3), mode="nearest"),
                 lambda x: x.interpolate((5, 2, 3), "nearest"), atol=1e-5)
  with pytest.raises(ValueError, match="interpolate"): Tensor.ones(1, 1, 4).interpolate((3,), mode="cubic")

@pytest.mark.parametrize("shape,size,align_corners", [((2, 3, 64, 64), (10, 10), False), ((1, 2, 7, 9), (13, 4), False),
                                                       ((1, 3, 5, 5), (17, 3), True), ((1, 1, 3, 8), (3, 20), False)])
def test_interpolate_bilinear_uint8_exactly_as_torch(shape, size, align_corners):
  # torch's uint8 resize rounds in fixed point after each axis: rounding the float result differs by 1 in places
  x = (np.random.default_rng(1).random(shape) * 255).astype(np.uint8)
  want = F.interpolate(torch.tensor(x), size, mode="bilinear", align_corners=align_corners).numpy()
  got = Tensor(x).interpolate(size, "bilinear", align_corners)
  assert got.dtype == dtypes.uint8
  np.testing.assert_array_equal(got.numpy(), want)

# *** einsum ***
@pytest.mark.parametrize("formula,shapes", [
  ("ij,jk->ik", [(3, 4), (4, 5)]),
  ("ij,jk", [(3, 4), (4, 5)]),
  ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
  ("ij->ji", [(3, 4)]),
  ("ii->i", [(4, 4)]),
  ("ii", [(4, 4)]),
  ("iij->j", [(3, 3, 2)]),
  ("i,j->ij", [(3,), (4,)]),
  ("ij,ij->", [(3, 4), (3, 4)]),
  ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
  ("...j,jk->...k", [(2, 3, 4), (4, 5)]),
  ("...ij,...jk", [(2, 3, 4), (4, 5)]),
  ("b...,b...->b", [(2, 3, 4), (2, 1, 4)]),
  ("i j , j k -> i k", [(3, 4), (4, 2)]),
  ("ijk,jl,lk->i", [(2, 3, 4), (3, 5), (5, 4)]),
])
def test_einsum(formula, shapes):
  helper_test_op(shapes, lambda *xs: torch.einsum(formula, *xs), lambda *xs: Tensor.einsum(formula, *xs), atol=1e-5)

def test_einsum_list_and_errors():
  helper_test_op([(3, 4), (4, 5)], lambda a, b: torch.einsum("ij,jk", [a, b]),
                 lambda a, b: Tensor.einsum("ij,jk", [a, b]), atol=1e-5)
  with pytest.raises(ValueError, match="einsum"): Tensor.einsum("ij,jk->ik", Tensor.ones(3, 4), Tensor.ones(5, 2))
  with pytest.raises(ValueError, match="einsum"): Tensor.einsum("ij,jk->ik", Tensor.ones(3, 4))
  with pytest.raises(ValueError, match="einsum"): Tensor.einsum("ijk->i", Tensor.ones(3, 4))
  with pytest.raises(ValueError, match="einsum"): Tensor.einsum("ij->iz", Tensor.ones(3, 4))

def test_einsum_of_ints_keeps_their_dtype():  # as torch.einsum and matmul (a sum alone widens int8 to int64)
  for x, y in [([100, 100], [2, 2]), ([[1, 2], [3, 4]], [[5, 6], [7, 8]])]:
    for dt, tdt in [(dtypes.int8, torch.int8), (dtypes.int32, torch.int32)]:
      f = "i,i->" if np.ndim(x) == 1 else "ij,jk->ik"
      got = Tensor.einsum(f, Tensor(x, dtype=dt), Tensor(y, dtype=dt))
      want = torch.einsum(f, torch.tensor(x, dtype=tdt), torch.tensor(y, dtype=tdt))
      assert got.dtype == dt and got.tolist() == want.tolist()  # (int8: 400 wraps to -112 in both)

def test_einsum_matmul_is_one_kernel():
  a, b = _realized((8, 6), (6, 5))
  assert _kernels(lambda: Tensor.einsum("ij,jk->ik", a, b)) == 1

# *** sorting ***
def _distinct(shape: tuple[int, ...], seed: int = 11) -> np.ndarray:
  return np.random.default_rng(seed).permutation(int(np.prod(shape))).reshape(shape).astype(np.float32) / 7 - 3

@pytest.mark.parametrize("dim", [-1, 0, 1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort(dim, descending):
  x = _distinct((3, 5, 4))
  helper_test_op(None, lambda t: torch.sort(t, dim=dim, descending=descending)[0], lambda t: t.sort(dim, descending)[0],
                 vals=[x])
  got = Tensor(x).sort(dim, descending)[1].numpy()
  np.testing.assert_equal(got, torch.sort(torch.tensor(x), dim=dim, descending=descending)[1].numpy())
  np.testing.assert_equal(Tensor(x).argsort(dim, descending).numpy(), got)

def test_sort_stable_ties_and_nan():
  x = np.array([2.0, 1.0, 2.0, np.nan, 1.0, -np.inf, 0.5], dtype=np.float32)
  for desc in [False, True]:
    want_v, want_i = torch.sort(torch.tensor(x), descending=desc, stable=True)
    got_v, got_i = Tensor(x).sort(descending=desc)
    np.testing.assert_equal(got_v.numpy(), want_v.numpy())
    np.testing.assert_equal(got_i.numpy(), want_i.numpy())
  xi = np.array([[3, 1, 2, 1], [0, -5, 7, 7]], dtype=np.int32)
  np.testing.assert_equal(Tensor(xi).sort()[0].numpy(), np.sort(xi, 1))
  np.testing.assert_equal(Tensor(xi).sort()[1].numpy(), np.argsort(xi, 1, kind="stable"))

@pytest.mark.parametrize("k,dim,largest", [(1, -1, True), (3, -1, True), (2, 0, False), (4, 1, False), (5, -1, True)])
def test_topk(k, dim, largest):
  x = _distinct((3, 4, 5), seed=12)
  helper_test_op(None, lambda t: torch.topk(t, k, dim, largest)[0], lambda t: t.topk(k, dim, largest)[0], vals=[x])
  want = torch.topk(torch.tensor(x), k, dim, largest)[1].numpy()
  np.testing.assert_equal(Tensor(x).topk(k, dim, largest)[1].numpy(), want)

def test_topk_sorted_keywords():
  x = _distinct((2, 6), seed=3)
  want = torch.topk(torch.tensor(x), 3, sorted=True)
  for kw in ({"sorted_": True}, {"sorted": True}):
    values, indices = Tensor(x).topk(3, **kw)
    np.testing.assert_allclose(values.numpy(), want.values.numpy())
    np.testing.assert_equal(indices.numpy(), want.indices.numpy())

def test_topk_bad_k():
  with pytest.raises(ValueError, match="topk"): Tensor.ones(3, 4).topk(5)

def test_log_softmax_cross_entropy_matches_manual():
  # a quick end-to-end check: the loss of uniform logits is log(C)
  assert math.isclose(Tensor.zeros(4, 6).cross_entropy(Tensor([0, 1, 2, 5])).item(), math.log(6), rel_tol=1e-6)

# *** normalize ***
@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, 0), (3.0, -1), (float("inf"), 1), (float("-inf"), 0), (0.5, (0, 2))])
def test_normalize(p, dim):
  helper_test_op([(3, 4, 5)], lambda x: F.normalize(x, p, dim), lambda x: x.normalize(p, dim), atol=1e-5)
def test_normalize_default(): helper_test_op([(3, 4)], lambda x: F.normalize(x), lambda x: x.normalize(), atol=1e-6)
def test_normalize_zero_row_and_eps():
  vals = [[[0.0, 0.0, 0.0], [3.0, 4.0, 0.0], [1e-14, 0.0, 0.0]]]
  helper_test_op(None, lambda x: F.normalize(x, eps=1e-12), lambda x: x.normalize(eps=1e-12), vals=vals)
  helper_test_op(None, lambda x: F.normalize(x, eps=0.5), lambda x: x.normalize(eps=0.5), vals=vals)
def test_normalize_p0_int_errors():
  helper_test_op(None, lambda x: F.normalize(x, 0, 1), lambda x: x.normalize(0, 1), vals=[[[0.0, 2.0, -1.0]]],
                 forward_only=True)
  np.testing.assert_allclose(Tensor([[3, 4]]).normalize().numpy(), [[0.6, 0.8]], rtol=1e-6)
  with pytest.raises(IndexError): Tensor.ones(3).normalize()

# *** conformance: one_hot and unfold arguments as torch ***
def test_one_hot_bad_num_classes_raises_like_torch():
  for ids, n in [([1, 5], 3), ([-1, 1], 3), ([1], 0), ([1], -2)]:
    with pytest.raises(RuntimeError): F.one_hot(torch.tensor(ids), n)
    with pytest.raises(RuntimeError): Tensor(ids).one_hot(n).numpy()  # ids are checked at realize
    with pytest.raises(ValueError): Tensor(ids).one_hot(n).numpy()
  with pytest.raises(ValueError): Tensor([1]).one_hot(2.5)  # type: ignore[arg-type]
  for ids, n in [([0, 2], 3), ([0, 2], -1), ([[1], [0]], 2)]:
    np.testing.assert_equal(Tensor(ids).one_hot(n).numpy(), F.one_hot(torch.tensor(ids), n).numpy())

def test_one_hot_stays_lazy():
  ids = Tensor([[0, 3], [2, 1]]).realize()
  GlobalCounters.reset()
  hot = ids.one_hot(4)
  assert GlobalCounters.kernel_count == 0  # the class ids are checked by a flag computed at realize, not read now
  np.testing.assert_equal(hot.numpy(), F.one_hot(torch.tensor([[0, 3], [2, 1]]), 4).numpy())
  assert GlobalCounters.kernel_count > 0
  bad = Tensor([0, 4, -1]).realize()
  GlobalCounters.reset()
  hot = bad.one_hot(4) + 1
  assert GlobalCounters.kernel_count == 0
  with pytest.raises(IndexError, match="one_hot: class id 4 is out of bounds for size 4"): hot.realize()
  with pytest.raises(IndexError, match="class id -1"): Tensor([-1, 2]).one_hot(3).numpy()
  with pytest.raises(RuntimeError, match="one_hot"): Tensor([-1, 2]).one_hot()  # -1 reads the data (max is a shape)

@pytest.mark.parametrize("shape,dim,size,step", [((5,), 0, 0, 1), ((5, 2), 0, 0, 2), ((3, 4), 1, 0, 3), ((4,), 0, 4, 1),
                                                 ((), 0, 1, 1), ((), -1, 0, 2)])  # (0-d: the window's axis alone)
def test_unfold_size_zero(shape, dim, size, step):
  helper_test_op([shape], lambda x: x.unfold(dim, size, step))

@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_interpolate_uint8_keeps_dtype(mode):
  # torch's uint8 bilinear kernel rounds in fixed point: the values agree within 1, the dtype exactly
  x = np.random.default_rng(0).integers(0, 256, (1, 2, 9, 7)).astype(np.uint8)
  ref = F.interpolate(torch.tensor(x), (4, 5), mode=mode).numpy()
  out = Tensor(x).interpolate((4, 5), "linear" if mode == "bilinear" else mode).numpy()
  assert out.dtype == ref.dtype == np.uint8
  np.testing.assert_allclose(out.astype(np.int32), ref.astype(np.int32), atol=1 if mode == "bilinear" else 0)

def test_binary_crossentropy_gradient_at_saturated_probabilities_as_torch():
  # a saturated sigmoid gives exactly 0.0 or 1.0: the gradient was nan (the clipped log's 0 times 1/0), torch's finite
  p, y = np.array([0.0, 1.0, 1.0, 0.0, 0.3], np.float32), np.array([1.0, 1.0, 0.0, 0.0, 1.0], np.float32)
  pf, yf = Tensor(p, requires_grad=True), Tensor(y, requires_grad=True)
  pt, yt = torch.tensor(p, requires_grad=True), torch.tensor(y, requires_grad=True)
  pf.binary_crossentropy(yf, reduction="sum").backward()
  F.binary_cross_entropy(pt, yt, reduction="sum").backward()
  np.testing.assert_allclose(pf.grad.numpy(), pt.grad.numpy(), rtol=1e-5)
  np.testing.assert_allclose(yf.grad.numpy(), yt.grad.numpy(), rtol=1e-5)

@pytest.mark.parametrize("op", ["cross_entropy", "nll_loss"])
def test_a_mean_over_only_ignored_targets_is_nan_with_a_zero_gradient_as_torch(op):
  x, y = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, 0.0]], np.float32), np.array([0, 0])
  xf, xt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  lf, lt = getattr(xf, op)(Tensor(y), ignore_index=0), getattr(F, op)(xt, torch.tensor(y), ignore_index=0)
  lf.backward()
  lt.backward()
  assert math.isnan(lf.item()) and math.isnan(lt.item())
  np.testing.assert_array_equal(xf.grad.numpy(), xt.grad.numpy())

@pytest.mark.parametrize("formula,shapes", [("i->", [(0,)]), ("ij,jk->ik", [(2, 0), (0, 3)]), ("ij->j", [(0, 2)])])
def test_einsum_over_a_zero_size_axis_is_an_empty_sum_as_torch(formula, shapes):
  arrs = [np.ones(s, np.float32) for s in shapes]
  ref = torch.einsum(formula, *[torch.tensor(a) for a in arrs]).numpy()
  np.testing.assert_array_equal(Tensor.einsum(formula, *[Tensor(a) for a in arrs]).numpy(), ref)

def test_float64_linear_interpolate_is_exact_to_float64():
  x = np.random.default_rng(0).standard_normal((1, 2, 5, 7))
  for align in (False, True):
    ref = F.interpolate(torch.tensor(x), (4, 9), mode="bilinear", align_corners=align).numpy()
    np.testing.assert_allclose(Tensor(x).interpolate((4, 9), "linear", align).numpy(), ref, rtol=1e-12, atol=1e-14)
