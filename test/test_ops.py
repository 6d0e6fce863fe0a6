"""Every Tensor op, forward and backward, against torch on the default device (DEV=...)."""
import pytest, torch
import numpy as np
from fusegrad import Tensor
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
