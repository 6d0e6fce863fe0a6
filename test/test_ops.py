"""Every Tensor op, forward and backward, against torch on the default device (DEV=...)."""
import pytest, torch
import numpy as np
from fusegrad import Tensor, dtypes
from test.helpers import helper_test_op

# *** elementwise ***
def test_add(): helper_test_op([(45, 65), (45, 65)], lambda x, y: x + y)
def test_add_broadcast(): helper_test_op([(45, 65), (65,)], lambda x, y: x + y)
def test_add_scalar(): helper_test_op([(45, 65)], lambda x: x + 2.5)
def test_radd_scalar(): helper_test_op([(45, 65)], lambda x: 2.5 + x)
def test_sub(): helper_test_op([(45, 65), (45, 65)], lambda x, y: x - y)
def test_mul(): helper_test_op([(45, 65), (45, 1)], lambda x, y: x * y)
def test_div(): helper_test_op([(45, 65), (45, 65)], lambda x, y: x / y, low=0.5, high=2)
def test_exp(): helper_test_op([(45, 65)], lambda x: x.exp())
def test_log(): helper_test_op([(45, 65)], lambda x: x.log(), low=0.1, high=3)

# *** reductions ***
def test_sum(): helper_test_op([(45, 65)], lambda x: x.sum())
def test_sum_axis(): helper_test_op([(3, 4, 5)], lambda x: x.sum(axis=(0, 2)))
def test_max_axis(): helper_test_op([(45, 65)], lambda x: x.max(1)[0], lambda x: x.max(1))
def test_softmax(): helper_test_op([(45, 65)], lambda x: x.softmax(-1), atol=1e-6)

# *** matmul ***
def test_matmul(): helper_test_op([(33, 17), (17, 9)], lambda x, y: x @ y, atol=1e-5)
def test_bmm_broadcast(): helper_test_op([(2, 3, 33, 17), (17, 9)], lambda x, y: x @ y, atol=1e-5)

# *** movement ***
def test_permute(): helper_test_op([(3, 4, 5)], lambda x: x.permute(2, 0, 1))
def test_pad(): helper_test_op([(3, 4)], lambda x: torch.nn.functional.pad(x, (1, 2, 3, 0)), lambda x: x.pad((1, 2, 3, 0)))
def test_slice_step(): helper_test_op([(7, 9)], lambda x: x[1:6:2, ::3])

def test_readme_example():
  x = Tensor.eye(3).clone()
  x.requires_grad = True
  y = Tensor([[2.0, 0, -2.0]], requires_grad=True)
  z = y.matmul(x).sum()
  z.backward()
  assert x.grad.tolist() == [[2, 2, 2], [0, 0, 0], [-2, -2, -2]]
  assert y.grad.tolist() == [[1, 1, 1]]

# *** casts ***
def test_cast_float_to_int(): helper_test_op(None, lambda x: x.int(), vals=[[1.7, -1.7, 0.5, -0.5, 3.0]], forward_only=True)
def test_cast_to_bool(): helper_test_op(None, lambda x: x.bool(), vals=[[1.7, 0.0, -0.0, -2.0]], forward_only=True)
def test_cast_int_to_float():
  helper_test_op([(3, 4)], lambda x: x.float() / 3, dtype=dtypes.int32, low=-100, high=100)
def test_cast_half_grad(): helper_test_op([(3, 4)], lambda x: x.half().float() * 2, atol=1e-2, rtol=1e-2)
def test_cast_double(): helper_test_op([(3, 4)], lambda x: x.double() * 2)
def test_cast_by_name():
  assert Tensor([1.5]).cast("int32").tolist() == [1] and Tensor([1]).cast(dtypes.float16).dtype == dtypes.float16
  x = Tensor([1.0])
  assert x.cast(dtypes.float32) is x
def test_cast_methods():
  x = Tensor([1.5, -2.5])
  for name, dt in [("float", dtypes.float32), ("half", dtypes.float16), ("double", dtypes.float64), ("int", dtypes.int32),
                   ("long", dtypes.int64), ("bool", dtypes.bool), ("short", dtypes.int16), ("char", dtypes.int8), ("byte", dtypes.uint8)]:
    assert getattr(x, name)().dtype == dt, name
def test_cast_bfloat16():
  np.testing.assert_allclose(Tensor([1.0, 2.5, -3.25]).bfloat16().float().numpy(), [1.0, 2.5, -3.25])

def test_bitcast():
  a = np.array([1.0, -2.0, 0.5], dtype=np.float32)
  np.testing.assert_equal(Tensor(a).bitcast(dtypes.int32).numpy(), a.view(np.int32))
  np.testing.assert_equal(Tensor(a).bitcast(dtypes.uint32).bitcast(dtypes.float32).numpy(), a)
  np.testing.assert_equal(Tensor(a).bitcast(dtypes.uint8).numpy(), a.view(np.uint8))  # sizes differ: the last axis grows
  np.testing.assert_equal(Tensor(a.reshape(3, 1)).bitcast(dtypes.int16).numpy(), a.reshape(3, 1).view(np.int16))
  np.testing.assert_equal((Tensor(a) * 2).bitcast(dtypes.uint16).numpy(), (a * 2).view(np.uint16))
  with pytest.raises(ValueError): Tensor([1, 2, 3], dtype=dtypes.int8).bitcast(dtypes.int16)

# *** triangles, linear ***
@pytest.mark.parametrize("diagonal", [0, 1, -1, 3, -4])
def test_triu(diagonal): helper_test_op([(4, 5)], lambda x: x.triu(diagonal))
@pytest.mark.parametrize("diagonal", [0, 2, -1])
def test_tril(diagonal): helper_test_op([(2, 4, 3)], lambda x: x.tril(diagonal))
def test_tril_int(): helper_test_op([(3, 3)], lambda x: x.tril(), dtype=dtypes.int32, low=-5, high=5)

def test_linear():
  helper_test_op([(3, 4), (4, 5), (5,)], lambda x, w, b: torch.nn.functional.linear(x, w.T, b), lambda x, w, b: x.linear(w, b), atol=1e-5)
  helper_test_op([(3, 4), (4, 5)], lambda x, w: x @ w, lambda x, w: x.linear(w), atol=1e-5)
  helper_test_op([(3, 4), (4, 5)], lambda x, w: x @ w, lambda x, w: x.linear(w, dtype=dtypes.float32), atol=1e-5)

def test_sequential():
  x = Tensor([1.0, -2.0])
  assert x.sequential([lambda t: t * 2, lambda t: t + 1]).tolist() == [3.0, -3.0]

def test_replace():
  x, y = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
  assert x.replace(y) is x and x.tolist() == [3.0, 4.0]
  with pytest.raises(ValueError): x.replace(Tensor([1.0]))
