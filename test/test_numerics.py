"""Numerics at the edges, against torch: extreme inputs to a hand-written sigmoid, index dtypes, sum/prod with a dtype,
randperm, zero-size tensors (clone with a gradient, reductions over zero-size axes and their identities), and the
no-op squeeze of a dim that isn't size 1."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fusegrad import Tensor, dtypes
from test.helpers import _torch_dtype

def _same(got, want) -> None:
  want_np = want.detach().numpy()
  got_np = got.numpy()
  assert got_np.shape == want_np.shape and got_np.dtype == want_np.dtype, (got_np.dtype, want_np.dtype)
  np.testing.assert_allclose(got_np, want_np, rtol=1e-6, atol=0, equal_nan=True)

@pytest.mark.parametrize("v", [300.0, -300.0, 80.0, -80.0, 0.0])
def test_alternative_sigmoid_at_extremes(v):
  # exp(x) / (1 + exp(x)), written out as tinygrad's test_sigmoid_alt_extreme does: at +300 exp is inf and torch's
  # value and gradient are nan (inf/inf); at -300 both are 0. fusegrad follows torch (IEEE), not a folded 0.
  def alt(x): return x.exp() / (1 + x.exp())
  tx = torch.tensor([v], requires_grad=True)
  ty = alt(tx)
  ty[0].backward()
  fx = Tensor([v])
  _same(alt(fx)[0].gradient(fx)[0], tx.grad)
  _same(alt(fx), ty.detach())

@pytest.mark.parametrize("v", [300.0, -300.0, 1e30, -1e30])
def test_sigmoid_at_extremes(v):
  tx = torch.tensor([v], requires_grad=True)
  torch.sigmoid(tx)[0].backward()
  fx = Tensor([v])
  _same(fx.sigmoid()[0].gradient(fx)[0], tx.grad)
  _same(fx.sigmoid(), torch.sigmoid(tx).detach())

@pytest.mark.parametrize("op", ["tanh", "erf", "gelu"])
def test_gradient_at_infinity_and_far_out(op):
  # a function built from branches (a series near 0, another formula far out) gave nan gradients at inf and 1000: the
  # branch not taken, evaluated there, was inf and the where's zero gradient times inf is nan. torch gives 0 (or 1)
  v = [-np.inf, -1000.0, -30.0, -0.01, 0.0, 0.3, 0.6, 5.0, 30.0, 1000.0, np.inf]
  tx = torch.tensor(v, requires_grad=True)
  tf = (lambda x: F.gelu(x, approximate="tanh")) if op == "gelu" else getattr(torch, op)
  tf(tx).sum().backward()
  fx = Tensor(v, requires_grad=True)
  getattr(fx, op)().sum().backward()
  np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)

@pytest.mark.parametrize("kw", [{}, {"padding": 1}, {"stride": 1, "dilation": 2}])
def test_max_pool2d_indices_dtype(kw):
  x = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
  tv, ti = F.max_pool2d(torch.tensor(x), 2, return_indices=True, **kw)
  fv, fi = Tensor(x).max_pool2d(2, return_indices=True, **kw)
  _same(fv, tv)
  _same(fi, ti.int())  # int32, as fusegrad's argmax and tinygrad (torch: int64)

SUM_DTYPES = [(dtypes.float32, dtypes.int32), (dtypes.uint8, dtypes.uint8), (dtypes.int32, None), (dtypes.bool, None),
              (dtypes.int8, dtypes.float16), (dtypes.float16, dtypes.float32), (dtypes.float16, None),
              (dtypes.uint8, None), (dtypes.float32, dtypes.float64)]
@pytest.mark.parametrize("src, dt", SUM_DTYPES)
@pytest.mark.parametrize("op", ["sum", "prod"])
def test_sum_prod_dtype(op, src, dt):
  # torch casts the input to dtype first, then reduces in it (a uint8 sum wraps); without dtype, ints and bools go to
  # int64, floats stay
  vals = np.array([[1.5, 2.25, 3.0], [100.0, 200.0, 7.0]] if op == "sum" else [[1.5, 2.0, 3.0], [5.0, 7.0, 9.0]])
  tt = torch.tensor(vals).to(_torch_dtype(src))
  ft = Tensor(vals).cast(src)
  kw_t = {} if dt is None else {"dtype": _torch_dtype(dt)}
  kw_f = {} if dt is None else {"dtype": dt}
  for axis in (None, 0, 1):
    want = getattr(tt, op)(**kw_t) if axis is None else getattr(tt, op)(axis, **kw_t)
    got = getattr(ft, op)(**kw_f) if axis is None else getattr(ft, op)(axis, **kw_f)
    _same(got, want)

@pytest.mark.parametrize("n", [0, 1, 2, 17, 300])
def test_randperm_is_a_permutation(n):
  Tensor.manual_seed(n)
  p = Tensor.randperm(n)
  assert p.shape == (n,) and dtypes.is_int(p.dtype) and sorted(p.tolist()) == list(range(n))
  assert Tensor.randperm(n, dtype=dtypes.int64).dtype == dtypes.int64
  if n > 10: assert p.tolist() != list(range(n)) and Tensor.randperm(n).tolist() != p.tolist()

def test_zero_size_clone_with_grad_after_shrink():
  tx = torch.arange(12.0).reshape(4, 3).requires_grad_()
  fx = Tensor(np.arange(12.0, dtype=np.float32).reshape(4, 3), requires_grad=True)
  ty, fy = tx[1:1].clone(), fx.shrink(((1, 1), None)).clone()
  assert fy.shape == tuple(ty.shape) == (0, 3) and fy.tolist() == ty.tolist() == []
  (ty.sum() + (tx * 2).sum()).backward()
  (fy.sum() + (fx * 2).sum()).backward()
  _same(fx.grad, tx.grad)

@pytest.mark.parametrize("op", ["sum", "prod", "mean", "logsumexp", "std", "var", "any", "all", "cumsum", "cumprod"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_reduce_over_zero_size_axis(op, axis):
  # the identity (0 for sum, 1 for prod, -inf for logsumexp, False for any, True for all), nan for mean/std/var
  t, f = torch.zeros(0, 3), Tensor.zeros(0, 3)
  if op in ("any", "all"): t, f = t.bool(), f.bool()
  want = getattr(t, op)(axis)
  _same(getattr(f, op)(axis), want)

@pytest.mark.parametrize("op", ["sum", "prod", "mean", "any", "all"])
def test_reduce_all_of_zero_size_tensor(op):
  t, f = torch.zeros(2, 0, 3), Tensor.zeros(2, 0, 3)
  _same(getattr(f, op)(), getattr(t, op)())

def test_squeeze_non_unit_dim_is_a_noop():
  t, f = torch.arange(6.0).reshape(2, 3), Tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3))
  _same(f.squeeze(0), t.squeeze(0))
  _same(f.squeeze((0, 1)), t.squeeze((0, 1)))

@pytest.mark.parametrize("dt", ["float32", "float64", "float16"])
def test_division_rounds_once_as_torch(dt):
  # a / b is one correctly rounded division, not a * (1 / b) (two roundings: x / x gave 0.99999994 for 23 of 1..199)
  rng = np.random.default_rng(0)
  a = np.concatenate([np.arange(1, 200), rng.uniform(-100, 100, 800)]).astype(dt)
  b = np.concatenate([np.arange(1, 200), rng.uniform(0.01, 100, 800)]).astype(dt)
  got = (Tensor(a) / Tensor(b)).numpy()
  np.testing.assert_array_equal(got, (torch.tensor(a) / torch.tensor(b)).numpy())
  np.testing.assert_array_equal(got[:199], 1)
  for d in (3.0, 0.1, 4.0, 0.25):  # by a number: a power of two multiplies (exact), others divide
    np.testing.assert_array_equal((Tensor(a) / d).numpy(), (torch.tensor(a) / d).numpy())
  with np.errstate(divide="ignore", invalid="ignore"):
    z = np.array([1, -1, 0, np.nan], dtype=dt)
    np.testing.assert_array_equal((Tensor(z) / Tensor(np.zeros(4, dt))).numpy(), z / np.zeros(4, dt))
    for d in (0.0, -0.0, np.inf, -np.inf, np.nan):  # by a number: x * (1/d), exact (WGSL's x / 0.0 may give 0)
      np.testing.assert_array_equal((Tensor(z) / d).numpy(), z / np.array(d, dt))

def test_division_gradient_as_torch():
  rng = np.random.default_rng(1)
  a, b = rng.uniform(-3, 3, 64).astype(np.float32), rng.uniform(0.5, 3, 64).astype(np.float32)
  ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
  (ta / tb).sum().backward()
  fa, fb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
  (fa / fb).sum().backward()
  _same(fa.grad, ta.grad)
  _same(fb.grad, tb.grad)

@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dt", ["float32", "int32", "int64"])
def test_cumulative_with_dtype(op, dt):
  x = np.array([[1.5, 2, -3], [4, 0.5, 2]], dtype=np.float32)
  want = getattr(torch.tensor(x), op)(1, dtype=getattr(torch, dt))
  _same(getattr(Tensor(x), op)(1, dtype=dt), want)
  _same(getattr(Tensor(x), op)(1, getattr(dtypes, dt)), want)
