"""Reductions (sum, mean, max, prod, std, var, argmax, any, softmax, logsumexp, cumsum ...) and matmul, forward and
backward against torch on the default device."""
import math
import pytest, torch
import torch.nn.functional as F
import numpy as np
from fusegrad import Tensor, dtypes
from test.helpers import helper_test_op

AXES = [None, 0, 1, -1, (0, 2), (-1, 0), (0, 1, 2), ()]

def _torch_axis(axis): return tuple(range(3)) if axis == () else axis

# *** sum / mean / prod ***
@pytest.mark.parametrize("axis", AXES[:-1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum(axis, keepdim):
  helper_test_op([(3, 4, 5)], lambda x: x.sum() if axis is None and not keepdim else x.sum(dim=tuple(range(3)) if axis is None else axis, keepdim=keepdim),
                 lambda x: x.sum(axis, keepdim=keepdim), atol=1e-5)
def test_sum_empty_axes_tuple():
  # tinygrad: axis=() reduces nothing
  x = Tensor([[1.0, 2.0], [3.0, 4.0]])
  assert x.sum(()).tolist() == [[1.0, 2.0], [3.0, 4.0]]
def test_sum_scalar(): helper_test_op([()], lambda x: x.sum())
def test_sum_zero_size(): helper_test_op([(3, 0)], lambda x: x.sum(1), forward_only=True)
def test_sum_zero_size_all(): helper_test_op([(3, 0)], lambda x: x.sum(), forward_only=True)
def test_sum_zero_size_keep(): helper_test_op([(0, 4)], lambda x: x.sum(0, keepdim=True), forward_only=True)
def test_sum_zero_size_grad():
  x = Tensor.zeros(2, 0, requires_grad=True)
  (x.sum(1) * 3 + x.prod(1)).sum().backward()  # a loss that depends on nothing still has a gradient: zeros
  assert x.grad.shape == (2, 0)
def test_sum_size_one_axis(): helper_test_op([(3, 1, 4)], lambda x: x.sum(1))
def test_sum_large(): helper_test_op([(3, 2000)], lambda x: x.sum(1), atol=1e-4)
def test_sum_int():
  helper_test_op([(3, 4)], lambda x: x.sum(1), dtype=dtypes.int32, low=-100, high=100)
  for dt in (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64):  # all in int64, as torch
    assert Tensor([1, 0], dtype=dt).sum().dtype == dtypes.int64 == Tensor([1, 0], dtype=dt).prod().dtype
    assert Tensor([1, 0], dtype=dt).cumsum().dtype == dtypes.int64 == Tensor([1, 0], dtype=dt).cumprod().dtype
def test_sum_int8_no_overflow(): assert Tensor([100, 100, 100], dtype=dtypes.int8).sum().item() == 300
def test_sum_bool():
  x = Tensor([[True, False, True], [True, True, True]])
  assert x.sum().item() == 5 and x.sum(1).tolist() == [2, 3] and x.sum().dtype == dtypes.int64
def test_int_sum_prod_past_int32():  # torch sums and multiplies int32 in int64
  helper_test_op(None, lambda x: x.sum(), vals=[[2 ** 30] * 4], dtype=dtypes.int32)
  helper_test_op(None, lambda x: x.prod(), vals=[[2 ** 20] * 3], dtype=dtypes.int32)
  helper_test_op(None, lambda x: x.cumsum(0), vals=[[2 ** 30] * 4], dtype=dtypes.int32)
  helper_test_op(None, lambda x: x.cumprod(0), vals=[[2 ** 20] * 3], dtype=dtypes.int32)
  assert Tensor([2 ** 30] * 4).sum().item() == 4294967296
def test_sum_dtype_arg():
  assert Tensor([1, 2, 3]).sum(dtype=dtypes.float32).dtype == dtypes.float32
  assert Tensor([1.5, 2.5]).sum(dtype=dtypes.int32).item() == 3  # torch casts first: int(1.5) + int(2.5)
def test_sum_half(): helper_test_op([(4, 30)], lambda x: x.sum(1), dtype=dtypes.float16, atol=1e-2, rtol=1e-2, forward_only=True)

@pytest.mark.parametrize("axis", [None, 1, (0, 2), -1])
def test_mean(axis):
  helper_test_op([(3, 4, 5)], lambda x: x.mean() if axis is None else x.mean(axis), lambda x: x.mean(axis), atol=1e-6)
def test_mean_keepdim(): helper_test_op([(3, 4, 5)], lambda x: x.mean((0, 2), keepdim=True))
def test_mean_int():
  x = Tensor([[1, 2], [4, 4]])
  assert x.mean().dtype == dtypes.float32 and x.mean().item() == 2.75 and x.mean(0).tolist() == [2.5, 3.0]
def test_mean_zero_size():
  assert np.isnan(Tensor.zeros(0, 3).mean().item())
  np.testing.assert_equal(Tensor.zeros(0, 3).mean(0).numpy(), torch.zeros(0, 3).mean(0).numpy())

@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)])
def test_prod(axis):
  helper_test_op([(3, 4)], lambda x: x.prod() if axis is None else (x.prod(axis) if isinstance(axis, int) else x.prod(0).prod(0)),
                 lambda x: x.prod(axis), low=0.5, high=1.5)
def test_prod_keepdim(): helper_test_op([(3, 4)], lambda x: x.prod(1, keepdim=True), low=0.5, high=1.5)
def test_prod_with_zero():
  # the gradient at a zero is the product of the others (and 0 everywhere in a group with two zeros)
  helper_test_op(None, lambda x: x.prod(1), vals=[[[1.0, 0.0, 3.0], [2.0, 4.0, -1.0], [0.0, 5.0, 0.0]]])
  helper_test_op(None, lambda x: x.prod(), vals=[[[1.0, 0.0, 3.0], [2.0, 4.0, -1.0]]])
def test_cumprod_with_zero(): helper_test_op(None, lambda x: x.cumprod(1), vals=[[[1.0, 0.0, 3.0, 2.0], [2.0, 4.0, -1.0, 0.5]]])
def test_prod_int():
  helper_test_op([(3, 4)], lambda x: x.prod(1).int(), lambda x: x.prod(1), dtype=dtypes.int32, low=-3, high=3)
def test_prod_zero_size(): assert Tensor.ones(0, 3).prod(0).tolist() == [1, 1, 1]

# *** max / min ***
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_max(axis): helper_test_op([(4, 5)], lambda x: x.max() if axis is None else x.max(axis)[0], lambda x: x.max(axis))
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_min(axis): helper_test_op([(4, 5)], lambda x: x.min() if axis is None else x.min(axis)[0], lambda x: x.min(axis))
def test_max_tuple_axis(): helper_test_op([(3, 4, 5)], lambda x: x.amax((0, 2)), lambda x: x.max((0, 2)))
def test_max_keepdim(): helper_test_op([(3, 4, 5)], lambda x: x.amax(1, keepdim=True), lambda x: x.max(1, keepdim=True))
def test_min_keepdim(): helper_test_op([(3, 4, 5)], lambda x: x.amin((0, -1), keepdim=True), lambda x: x.min((0, -1), keepdim=True))
def test_amax(): helper_test_op([(3, 4, 5)], lambda x: x.amax((1, 2)), lambda x: x.amax((1, 2)))
def test_max_ties():
  # torch.amax shares the gradient evenly between ties
  helper_test_op(None, lambda x: x.amax(1), lambda x: x.max(1), vals=[[[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]])
def test_min_ties(): helper_test_op(None, lambda x: x.amin(), lambda x: x.min(), vals=[[[1.0, 3.0, 1.0], [2.0, 1.0, 2.0]]])
def test_max_inf(): helper_test_op(None, lambda x: x.amax(1), lambda x: x.max(1), vals=[[[-np.inf, -np.inf], [np.inf, 1.0]]], forward_only=True)
def test_max_int():
  helper_test_op([(4, 5)], lambda x: x.amax(1), lambda x: x.max(1), dtype=dtypes.int32, low=-100, high=100)
  helper_test_op([(4, 5)], lambda x: x.amin(0), lambda x: x.min(0), dtype=dtypes.int32, low=-100, high=100)
  helper_test_op([(4, 5)], lambda x: x.amin(0), lambda x: x.min(0), dtype=dtypes.uint8, low=0, high=255)
  helper_test_op([(4, 5)], lambda x: x.amax(), lambda x: x.max(), dtype=dtypes.int8, low=-128, high=-100)
def test_max_bool():
  helper_test_op([(4, 5)], lambda x: x.amax(1), lambda x: x.max(1), dtype=dtypes.bool)
  helper_test_op([(4, 5)], lambda x: x.amin(1), lambda x: x.min(1), dtype=dtypes.bool)
def test_max_zero_size_identity(): np.testing.assert_equal(Tensor.ones(0, 3).max(0).numpy(), [-math.inf] * 3)
def test_max_zero_size_other_axis(): helper_test_op([(0, 3)], lambda x: x.amax(1), lambda x: x.max(1), forward_only=True)

# *** std / var ***
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2)])
@pytest.mark.parametrize("correction", [0, 1, 2])
def test_var(axis, correction):
  helper_test_op([(3, 4, 5)], lambda x: x.var(axis, correction=correction), lambda x: x.var(axis, correction=correction), atol=1e-5)
@pytest.mark.parametrize("axis", [None, 1])
def test_std(axis):
  helper_test_op([(3, 4, 5)], lambda x: x.std(axis), lambda x: x.std(axis), atol=1e-5)
def test_std_keepdim(): helper_test_op([(3, 4, 5)], lambda x: x.std((0, 1), keepdim=True, correction=0), lambda x: x.std((0, 1), keepdim=True, correction=0))
def test_std_zero_grad():
  # all equal: std is 0 and torch's gradient there is 0
  helper_test_op(None, lambda x: x.std(1, correction=0), lambda x: x.std(1, correction=0), vals=[[[1.0, 1.0, 1.0], [2.0, 0.0, 1.0]]])
  helper_test_op(None, lambda x: x.std(), lambda x: x.std(), vals=[[[float("nan"), 1.0]]], forward_only=True)
def test_var_std_of_half_in_float32_as_torch():
  # (x - mean)**2 of 300 is 90000, past half's 65504: the variance and std came out inf
  for x in ([300.0, -300.0], [1000.0, -200.0, 50.0, 7.0]):
    t = torch.tensor(x, dtype=torch.float16)
    for ours, theirs in ((Tensor(x, dtype=dtypes.float16).var(), t.var()), (Tensor(x, dtype=dtypes.float16).std(), t.std())):
      assert ours.dtype == dtypes.float16
      np.testing.assert_allclose(ours.numpy().astype(np.float32), theirs.numpy().astype(np.float32), rtol=1e-3)

def test_var_unbiased_false(): helper_test_op([(3, 4)], lambda x: x.var(1, unbiased=False), lambda x: x.var(1, unbiased=False))
@pytest.mark.filterwarnings("ignore:var")
def test_var_correction_too_large():
  helper_test_op([(4, 2)], lambda x: x.var(1, correction=2), lambda x: x.var(1, correction=2), forward_only=True)
  helper_test_op([(4, 2)], lambda x: x.var(1, correction=3), lambda x: x.var(1, correction=3), forward_only=True)
def test_var_int(): np.testing.assert_allclose(Tensor([[1, 2, 4], [3, 3, 3]]).var(1).numpy(), [7 / 3, 0], rtol=1e-6)
@pytest.mark.filterwarnings("ignore:var")
def test_var_single_element(): helper_test_op([(3, 1)], lambda x: x.var(1), forward_only=True)
def test_var_mean():
  x = np.random.default_rng(0).uniform(-1, 1, (3, 5)).astype(np.float32)
  v, m = Tensor(x).var_mean(1)
  tv, tm = torch.var_mean(torch.tensor(x), 1)
  np.testing.assert_allclose(v.numpy(), tv.numpy(), rtol=1e-5)
  np.testing.assert_allclose(m.numpy(), tm.numpy(), rtol=1e-5)
  s, m2 = Tensor(x).std_mean(0, correction=0)
  ts, tm2 = torch.std_mean(torch.tensor(x), 0, correction=0)
  np.testing.assert_allclose(s.numpy(), ts.numpy(), rtol=1e-5)
  np.testing.assert_allclose(m2.numpy(), tm2.numpy(), rtol=1e-5)

# *** argmax / argmin ***
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax(axis, keepdim):
  helper_test_op([(4, 5)], lambda x: x.argmax(axis, keepdim=keepdim).int(), lambda x: x.argmax(axis, keepdim=keepdim), forward_only=True)
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_argmin(axis):
  helper_test_op([(4, 5)], lambda x: x.argmin(axis).int(), lambda x: x.argmin(axis), forward_only=True)
def test_argmax_ties():
  vals = [[[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [-1.0, -5.0, -1.0, -5.0]]]
  helper_test_op(None, lambda x: x.argmax(1).int(), lambda x: x.argmax(1), vals=vals, forward_only=True)
  helper_test_op(None, lambda x: x.argmin(1).int(), lambda x: x.argmin(1), vals=vals, forward_only=True)
  helper_test_op(None, lambda x: x.argmax(0).int(), lambda x: x.argmax(0), vals=vals, forward_only=True)
def test_argmax_nan():
  vals = [[[1.0, np.nan, 3.0, np.nan], [np.nan, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 0.0]]]
  helper_test_op(None, lambda x: x.argmax(1).int(), lambda x: x.argmax(1), vals=vals, forward_only=True)
  helper_test_op(None, lambda x: x.argmin(1).int(), lambda x: x.argmin(1), vals=vals, forward_only=True)
def test_argmax_int_bool():
  helper_test_op([(4, 5)], lambda x: x.argmax(1).int(), lambda x: x.argmax(1), dtype=dtypes.int32, low=-3, high=3, forward_only=True)
  helper_test_op([(4, 5)], lambda x: x.argmin(1).int(), lambda x: x.argmin(1), dtype=dtypes.uint8, low=0, high=3, forward_only=True)
  b = np.array([[False, True, True], [False, False, False], [True, False, True]])
  np.testing.assert_equal(Tensor(b).argmax(1).numpy(), b.argmax(1))
  np.testing.assert_equal(Tensor(b).argmin(0).numpy(), b.argmin(0))
def test_argmax_3d(): helper_test_op([(3, 4, 5)], lambda x: x.argmax(1).int(), lambda x: x.argmax(1), forward_only=True)
def test_argmax_scalar(): assert Tensor(3.0).argmax().item() == 0
def test_argmax_dtype(): assert Tensor([1.0, 2.0]).argmax().dtype == dtypes.int32

# *** any / all ***
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
def test_any_all(axis):
  vals = [[[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]]
  t_axis = axis if axis is not None else (0, 1)
  helper_test_op(None, lambda x: x.any(t_axis) if isinstance(t_axis, int) else x.any(dim=t_axis), lambda x: x.any(axis), vals=vals)
  helper_test_op(None, lambda x: x.all(t_axis) if isinstance(t_axis, int) else x.all(dim=t_axis), lambda x: x.all(axis), vals=vals)
def test_any_all_keepdim():
  helper_test_op([(3, 4)], lambda x: x.any(1, keepdim=True), lambda x: x.any(1, keepdim=True), dtype=dtypes.bool)
  helper_test_op([(3, 4)], lambda x: x.all(0, keepdim=True), lambda x: x.all(0, keepdim=True), dtype=dtypes.bool)
def test_any_all_int(): helper_test_op([(3, 4)], lambda x: x.all(1), lambda x: x.all(1), dtype=dtypes.int32, low=0, high=2)
def test_any_all_nan():
  x = Tensor([float("nan"), 0.0])
  assert x.any().item() is True and x.all().item() is False
def test_any_all_empty():
  assert Tensor.zeros(0).any().item() is False and Tensor.zeros(0).all().item() is True

# *** softmax family ***
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax(axis): helper_test_op([(4, 5)], lambda x: x.softmax(axis), atol=1e-6)
def test_softmax_default_axis(): helper_test_op([(2, 3, 4)], lambda x: x.softmax(-1), lambda x: x.softmax())
def test_softmax_large(): helper_test_op([(4, 5)], lambda x: (x * 1000).softmax(1), atol=1e-6)
def test_softmax_neg_inf():
  helper_test_op(None, lambda x: x.softmax(1), vals=[[[-np.inf, 0.0, 1.0], [2.0, -np.inf, 2.0]]])
@pytest.mark.parametrize("axis", [0, -1])
def test_log_softmax(axis): helper_test_op([(4, 5)], lambda x: x.log_softmax(axis), atol=1e-6)
def test_log_softmax_large(): helper_test_op([(4, 5)], lambda x: (x * 1000).log_softmax(1), atol=1e-4)
def test_softmax_empty():
  assert Tensor.zeros(3, 0).softmax(1).shape == (3, 0) and Tensor.zeros(0, 3).log_softmax(1).shape == (0, 3)
  with pytest.raises(IndexError): Tensor.zeros(3, 0).softmax(2)
def test_softmax_int(): np.testing.assert_allclose(Tensor([1, 2, 3]).softmax().numpy(), torch.tensor([1.0, 2, 3]).softmax(0).numpy(), rtol=1e-6)
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
def test_logsumexp(axis):
  helper_test_op([(4, 5)], lambda x: x.logsumexp((0, 1) if axis is None else axis), lambda x: x.logsumexp(axis), atol=1e-5)
def test_logsumexp_keepdim(): helper_test_op([(4, 5)], lambda x: x.logsumexp(1, keepdim=True), lambda x: x.logsumexp(1, keepdim=True))
def test_logsumexp_large(): helper_test_op([(4, 5)], lambda x: (x * 1000).logsumexp(1), atol=1e-3)
def test_logsumexp_inf():
  helper_test_op(None, lambda x: x.logsumexp(1), vals=[[[-np.inf, -np.inf], [np.inf, 0.0], [1.0, -np.inf]]], forward_only=True)

def test_logsumexp_empty():
  np.testing.assert_equal(Tensor.zeros(2, 0).logsumexp(1).numpy(), torch.zeros(2, 0).logsumexp(1).numpy())
  np.testing.assert_equal(Tensor.zeros(0, 3).logsumexp(0).numpy(), torch.zeros(0, 3).logsumexp(0).numpy())

# *** cumulative ***
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum(axis): helper_test_op([(4, 6)], lambda x: x.cumsum(axis), atol=1e-5)
def test_cumsum_3d(): helper_test_op([(3, 4, 5)], lambda x: x.cumsum(1), atol=1e-5)
def test_cumsum_1d_default(): helper_test_op([(9,)], lambda x: x.cumsum(0), lambda x: x.cumsum())
def test_cumsum_long(): helper_test_op([(300,)], lambda x: x.cumsum(0), atol=1e-4)
@pytest.fixture
def small_blocks(monkeypatch):
  import fusegrad.mixin.reduce
  monkeypatch.setattr(fusegrad.mixin.reduce, "CUM_BLOCK", 4)  # long axes work in blocks: test that with short axes
def test_cumsum_blocks(small_blocks): helper_test_op([(2, 37)], lambda x: x.cumsum(1), atol=1e-5)
def test_cumsum_blocks_axis0(small_blocks): helper_test_op([(11, 3)], lambda x: x.cumsum(0), atol=1e-5)
def test_cumsum_blocks_int(small_blocks):
  v = np.random.default_rng(0).integers(-50, 50, 45).astype(np.int8)
  np.testing.assert_equal(Tensor(v).cumsum().numpy(), np.cumsum(v.astype(np.int32)))
def test_cumprod_blocks(small_blocks): helper_test_op([(2, 21)], lambda x: x.cumprod(1), low=0.5, high=1.5, atol=1e-5)
def test_cummax(small_blocks):
  v = np.random.default_rng(0).normal(size=(3, 30)).astype(np.float32)
  np.testing.assert_equal(Tensor(v).cummax(1)[0].numpy(), np.maximum.accumulate(v, axis=1))
  np.testing.assert_equal(Tensor(v[:, :9]).cummax(0)[0].numpy(), np.maximum.accumulate(v[:, :9], axis=0))
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cummax_values_indices(axis):
  helper_test_op([(4, 6)], lambda x: x.cummax(axis)[0], lambda x: x.cummax(axis)[0])
  helper_test_op([(4, 6)], lambda x: x.cummax(axis)[1].int(), lambda x: x.cummax(axis)[1], forward_only=True)
def test_cummax_ties_nan():
  vals = [[1.0, 3.0, 2.0, 3.0, 0.0, 5.0, 5.0], [1.0, np.nan, 0.0, np.nan, 9.0, 2.0, -3.0]]
  helper_test_op(None, lambda x: x.cummax(1)[0], lambda x: x.cummax(1)[0], vals=[vals], forward_only=True)
  helper_test_op(None, lambda x: x.cummax(1)[1].int(), lambda x: x.cummax(1)[1], vals=[vals], forward_only=True)
def test_cumsum_real_blocks(): helper_test_op([(530,)], lambda x: x.cumsum(0), atol=1e-4, forward_only=True)
def test_cumsum_scalar(): helper_test_op([()], lambda x: x.cumsum(0))
def test_cumsum_zero_size(): helper_test_op([(0, 3)], lambda x: x.cumsum(0), forward_only=True)
def test_cumsum_int():
  helper_test_op([(3, 5)], lambda x: x.cumsum(1).int(), lambda x: x.cumsum(1), dtype=dtypes.int32, low=-10, high=10)
  assert Tensor([True, True, False]).cumsum().tolist() == [1, 2, 2]
@pytest.mark.parametrize("axis", [0, -1])
def test_cumprod(axis): helper_test_op([(4, 5)], lambda x: x.cumprod(axis), low=0.5, high=1.5)
def test_cumprod_int(): helper_test_op([(3, 5)], lambda x: x.cumprod(1).int(), lambda x: x.cumprod(1), dtype=dtypes.int32, low=-3, high=3)

# *** errors ***
def test_reduce_axis_errors():
  x = Tensor.ones(3, 4)
  with pytest.raises(IndexError): x.sum(2)
  with pytest.raises(IndexError): x.max(-3)
  with pytest.raises(IndexError): x.cumsum(5)
  with pytest.raises(IndexError): x.argmax(2)

# *** matmul / dot ***
def test_matmul(): helper_test_op([(5, 7), (7, 3)], lambda x, y: x @ y, atol=1e-5)
def test_matmul_vec_mat(): helper_test_op([(7,), (7, 3)], lambda x, y: x @ y, atol=1e-5)
def test_matmul_mat_vec(): helper_test_op([(5, 7), (7,)], lambda x, y: x @ y, atol=1e-5)
def test_matmul_vec_vec(): helper_test_op([(7,), (7,)], lambda x, y: x @ y, atol=1e-5)
def test_matmul_batched(): helper_test_op([(2, 5, 7), (2, 7, 3)], lambda x, y: x @ y, atol=1e-5)
def test_matmul_broadcast_batch(): helper_test_op([(2, 1, 5, 7), (3, 7, 3)], lambda x, y: x @ y, atol=1e-5)
def test_matmul_batched_vec(): helper_test_op([(2, 5, 7), (7,)], lambda x, y: x @ y, atol=1e-5)
def test_matmul_vec_batched(): helper_test_op([(7,), (2, 7, 3)], lambda x, y: x @ y, atol=1e-5)
def test_matmul_one_sized(): helper_test_op([(1, 7), (7, 1)], lambda x, y: x @ y, atol=1e-5)
def test_matmul_zero_k(): helper_test_op([(3, 0), (0, 2)], lambda x, y: x @ y, forward_only=True)
def test_dot(): helper_test_op([(5, 7), (7, 3)], lambda x, y: x.matmul(y), lambda x, y: x.dot(y), atol=1e-5)
def test_matmul_method(): helper_test_op([(2, 5, 7), (7, 3)], lambda x, y: x.matmul(y), atol=1e-5)
def test_rmatmul():
  x = Tensor([[1.0, 2.0], [3.0, 4.0]])
  assert (x.__rmatmul__(Tensor([1.0, 1.0]))).tolist() == [4.0, 6.0]
def test_matmul_int():
  helper_test_op([(3, 4), (4, 2)], lambda x, y: x @ y, dtype=dtypes.int32, low=-5, high=5)
def test_matmul_mixed_dtype():
  a, b = np.arange(6, dtype=np.int32).reshape(2, 3), np.ones((3, 2), np.float32) * 0.5
  ret = Tensor(a) @ Tensor(b)
  assert ret.dtype == dtypes.float32
  np.testing.assert_allclose(ret.numpy(), a @ b)

def test_matmul_errors():
  with pytest.raises(ValueError, match=r"\(3, 4\).*\(5, 2\)"): Tensor.ones(3, 4) @ Tensor.ones(5, 2)
  with pytest.raises(ValueError, match=r"\(4,\).*\(3,\)"): Tensor.ones(4) @ Tensor.ones(3)
  with pytest.raises(ValueError, match=r"\(2, 3, 4\).*\(3, 4, 2\)"): Tensor.ones(2, 3, 4) @ Tensor.ones(3, 4, 2)
  with pytest.raises(ValueError): Tensor.ones(()) @ Tensor.ones(3)

def test_triangles_keep_dtype():
  assert Tensor.ones(3, 3, dtype=dtypes.bool).tril().dtype == dtypes.bool
  assert Tensor.ones(3, 3, dtype=dtypes.int8).triu(1).dtype == dtypes.int8
  np.testing.assert_equal(Tensor.ones(3, 4, dtype=dtypes.bool).tril().numpy(), np.tril(np.ones((3, 4), bool)))

# *** softmin, cummin, logcumsumexp ***
@pytest.mark.parametrize("axis", [0, -1])
def test_softmin(axis): helper_test_op([(4, 5)], lambda x: F.softmin(x, axis), lambda x: x.softmin(axis), atol=1e-6)
def test_softmin_default_axis_dtype():
  helper_test_op([(2, 3, 4)], lambda x: F.softmin(x, -1, dtype=torch.float64),
                 lambda x: x.softmin(dtype=dtypes.float64))
def test_softmin_large(): helper_test_op([(3, 4)], lambda x: F.softmin(x * 1000, 1), lambda x: (x * 1000).softmin(1))

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cummin(axis):
  helper_test_op([(4, 6)], lambda x: x.cummin(axis)[0], lambda x: x.cummin(axis)[0])
  helper_test_op([(4, 6)], lambda x: x.cummin(axis)[1].int(), lambda x: x.cummin(axis)[1], forward_only=True)
def test_cummin_ties_nan():
  # torch: the index of the last position holding the running minimum; a nan stays the minimum once seen
  vals = [[3.0, 1.0, 2.0, 1.0, 0.0, 0.0, 5.0], [1.0, np.nan, 0.0, np.nan, -1.0, 2.0, -3.0]]
  helper_test_op(None, lambda x: x.cummin(1)[0], lambda x: x.cummin(1)[0], vals=[vals], forward_only=True)
  helper_test_op(None, lambda x: x.cummin(1)[1].int(), lambda x: x.cummin(1)[1], vals=[vals], forward_only=True)
@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cum_extreme_int_bool_scalar(small_blocks, op):
  v = np.random.default_rng(1).integers(-5, 5, (2, 19)).astype(np.int32)
  values, indices = getattr(Tensor(v), op)(1)
  want = getattr(torch.tensor(v), op)(1)
  assert values.dtype == dtypes.int32 and indices.dtype == dtypes.int32
  np.testing.assert_equal(values.numpy(), want.values.numpy())
  np.testing.assert_equal(indices.numpy(), want.indices.numpy())
  b = [True, True, False, True, False]
  assert [t.tolist() for t in getattr(Tensor(b), op)()] == [t.tolist() for t in getattr(torch.tensor(b), op)(0)]
  assert [t.item() for t in getattr(Tensor(2.5), op)()] == [2.5, 0]

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_logcumsumexp(axis): helper_test_op([(4, 6)], lambda x: x.logcumsumexp(axis), atol=1e-5)
def test_logcumsumexp_default_axis():
  helper_test_op([(7,)], lambda x: torch.logcumsumexp(x, 0), lambda x: x.logcumsumexp())
def test_logcumsumexp_wide_range():
  # a small early value must survive a much larger later one (a single max subtracted would turn it into -inf)
  vals = [[[-1000.0, 0.0, 1.0, 500.0], [2.0, -300.0, 90.0, 0.5]]]
  helper_test_op(None, lambda x: x.logcumsumexp(1), vals=vals, atol=1e-4)
def test_logcumsumexp_inf():
  vals = [[[-np.inf, -np.inf, 0.0, np.inf, 1.0], [1.0, -np.inf, np.inf, np.inf, -np.inf], [-np.inf] * 5]]
  helper_test_op(None, lambda x: x.logcumsumexp(1), vals=vals, forward_only=True)
  # gradients through -inf entries (nan where a leading -inf has no weight yet, as torch)
  vals = [[[-np.inf, 0.0, 1.0, -np.inf, 2.0], [1.0, -np.inf, 3.0, -2.0, -np.inf]]]
  helper_test_op(None, lambda x: x.logcumsumexp(1), vals=vals)
def test_logcumsumexp_blocks(small_blocks):
  helper_test_op([(2, 23)], lambda x: x.logcumsumexp(1), low=-20, high=20, atol=1e-4)
def test_logcumsumexp_int_scalar_empty():
  want = torch.tensor([1.0, 2, 3]).logcumsumexp(0).numpy()
  np.testing.assert_allclose(Tensor([1, 2, 3]).logcumsumexp().numpy(), want, rtol=1e-6)
  assert Tensor(1.5).logcumsumexp().item() == 1.5
  assert Tensor.zeros(0, 3).logcumsumexp(0).shape == (0, 3)
  with pytest.raises(IndexError): Tensor.ones(3).logcumsumexp(1)

# *** conformance: 0-d tensors, empty inputs, shape errors, half-precision matmul gradients ***
@pytest.mark.parametrize("op", ["sum", "mean", "prod", "amax", "amin", "logsumexp", "softmax", "log_softmax", "argmax",
                                "argmin", "cumsum", "cumprod", "logcumsumexp", "any", "all"])
@pytest.mark.parametrize("axis", [0, -1])
def test_reduce_0d_with_axis(op, axis):  # torch accepts dim 0 and -1 on a 0-d tensor
  helper_test_op(None, lambda x: getattr(x, op)(axis), vals=[3.0], forward_only=op in ("argmax", "argmin", "any", "all"))
  with pytest.raises(IndexError): getattr(Tensor(3.0), op)(1)
  with pytest.raises(IndexError): torch.tensor(3.0).sum(1)

def test_max_empty_is_identity_as_tinygrad():  # torch raises; tinygrad (test_tensor's test_reduce_default) gives the
  # identity, the dtype's least value for max and greatest for min; argmax has none and raises as in both
  assert Tensor([]).max().item() == -math.inf and Tensor([]).min().item() == math.inf
  np.testing.assert_equal(Tensor.zeros(2, 0).max(1).numpy(), [-math.inf, -math.inf])
  np.testing.assert_equal(Tensor.zeros(2, 0, dtype=dtypes.int8).amin(1).numpy(), [127, 127])
  np.testing.assert_equal(Tensor.zeros(0, 3, dtype=dtypes.uint8).max(0, keepdim=True).numpy(), [[0, 0, 0]])
  x = Tensor.zeros(2, 0, requires_grad=True)
  x.max(1).sum().backward()
  assert x.grad.shape == (2, 0)
  with pytest.raises(RuntimeError, match="zero-size"): Tensor.zeros(0, 3).argmax(0)

@pytest.mark.parametrize("a,b", [((2, 3), (2, 3)), ((3,), (2,)), ((2, 3), (4,)), ((2, 2, 3), (3, 3, 4)), ((), (3,))])
def test_matmul_shape_error_types(a, b):  # torch raises RuntimeError; ours is a RuntimeError and a ValueError
  with pytest.raises(RuntimeError): torch.ones(a) @ torch.ones(b)
  with pytest.raises(RuntimeError): Tensor.ones(a) @ Tensor.ones(b)
  with pytest.raises(ValueError): Tensor.ones(a).dot(Tensor.ones(b))

@pytest.mark.parametrize("a,b", [((2, 0), (0, 3)), ((0, 4), (4, 3)), ((3, 4), (4, 0)), ((2, 0, 4), (4, 5)), ((0,), (0,))])
def test_matmul_zero_size(a, b): helper_test_op([a, b], lambda x, y: x @ y)

def test_matmul_zero_size_large():  # big enough for the heuristic to upcast and split the reduce
  helper_test_op([(64, 0), (0, 64)], lambda x, y: x @ y)
  helper_test_op([(0, 64), (64, 64)], lambda x, y: x @ y)
  helper_test_op([(64, 64), (64, 0)], lambda x, y: x @ y)

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16])
def test_half_matmul_grad_accumulates_in_float(dt):
  rng = np.random.default_rng(0)
  a, b = rng.uniform(-1, 1, (2, 8)).astype(np.float32), rng.uniform(-1, 1, (8, 4096)).astype(np.float32)
  g = rng.uniform(0.5, 1.5, (2, 4096)).astype(np.float32)
  x, w = Tensor(a, dtype=dt, requires_grad=True), Tensor(b, dtype=dt, requires_grad=True)
  out = x @ w
  (out * Tensor(g, dtype=dt)).sum().backward()
  assert out.dtype == x.grad.dtype == w.grad.dtype == dt
  tdt = torch.float16 if dt == dtypes.float16 else torch.bfloat16
  tx, tw = torch.tensor(a).to(tdt).requires_grad_(), torch.tensor(b).to(tdt).requires_grad_()
  ((tx @ tw) * torch.tensor(g).to(tdt)).sum().backward()
  # 4096 products summed: a float16 accumulator would be off by ~0.5 here, torch's float32 one by a rounding of the result
  ref = tx.grad.double().numpy()
  ulp = 0.05 if dt == dtypes.float16 else 0.5
  np.testing.assert_allclose(x.grad.float().numpy(), ref, atol=ulp, rtol=1e-2)
  np.testing.assert_allclose(out.float().numpy(), (tx @ tw).double().detach().numpy(), atol=0.02, rtol=1e-2)

def test_int_logsumexp_and_softmax_compute_in_float_as_torch_does_for_floats():
  # x - max in uint8/int8 wrapped: logsumexp gave inf and 156
  for vals, dt in [([0, 3, 1], dtypes.uint8), ([-100, 100], dtypes.int8), ([7, -2, 5], dtypes.int32)]:
    want = torch.tensor(vals, dtype=torch.float32)
    np.testing.assert_allclose(Tensor(vals, dtype=dt).logsumexp(0).item(), want.logsumexp(0).item(), rtol=1e-6)
    np.testing.assert_allclose(Tensor(vals, dtype=dt).log_softmax(0).numpy(), want.log_softmax(0).numpy(), rtol=1e-6)

def test_half_mean_sums_in_float32_as_torch():
  x = Tensor([60000.0, 60000.0], dtype=dtypes.float16)
  assert x.mean().dtype == dtypes.float16 and x.mean().item() == torch.tensor([6e4, 6e4]).half().mean().item() == 60000

@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cummax_gradient_goes_to_the_index_with_ties_as_torch(op):
  # a windowed max split the gradient among ties: [2.33, 1.33, 0, 0.33] for torch's [1, 2, 0, 1]
  for vals in ([1.0, 1.0, 0.0, 1.0], np.random.default_rng(0).integers(0, 3, 600).astype(np.float32).tolist()):
    x, tx = Tensor(vals, requires_grad=True), torch.tensor(vals, requires_grad=True)
    w = np.random.default_rng(1).standard_normal(len(vals)).astype(np.float32)
    (getattr(x, op)(0)[0] * Tensor(w)).sum().backward()
    (getattr(tx, op)(0)[0] * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-5)

def test_mean_dtype_as_torch():
  # torch's mean(dtype=) casts first (an int tensor's mean in float64, a half's in float32); it raised TypeError
  x = [[1, 2], [3, 5]]
  for dt, tdt in ((dtypes.float64, torch.float64), (dtypes.float16, torch.float16)):
    got, want = Tensor(x).mean(axis=1, dtype=dt), torch.tensor(x).mean(dim=1, dtype=tdt)
    assert got.dtype == dt and got.tolist() == want.tolist()
  assert Tensor([60000.0, 60000.0], dtype=dtypes.float16).mean(dtype=dtypes.float32).item() == 60000.0
