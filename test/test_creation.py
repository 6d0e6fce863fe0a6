"""Creating tensors: from Python data, numpy and bytes, and the constructors (zeros, full, arange, linspace, eye ...)."""
import math
import pytest, torch
import numpy as np
from fusegrad import Tensor, dtypes, Device, GlobalCounters
from test.helpers import device_is

# *** from data ***
@pytest.mark.parametrize("data,dtype", [([1, 2, 3], dtypes.int32), ([1.0, 2, 3], dtypes.float32), ([True, False], dtypes.bool),
                                        ([True, 2], dtypes.int32), ([[1, 2], [3, 4]], dtypes.int32), ([[1.5], [2.5]], dtypes.float32),
                                        ((1, 2.5), dtypes.float32), (((1,), (2,)), dtypes.int32), ([], dtypes.float32)])
def test_from_list(data, dtype):
  t = Tensor(data)
  assert t.dtype == dtype and t.shape == np.array(data).shape
  np.testing.assert_equal(t.numpy(), np.array(data, dtype=np.float32 if dtype == dtypes.float32 else None))

def test_from_list_dtype():
  assert Tensor([1, 2], dtype=dtypes.float32).numpy().dtype == np.float32
  assert Tensor([1.7, -2.7], dtype=dtypes.int32).tolist() == [1, -2]
  assert Tensor([0, 3], dtype=dtypes.bool).tolist() == [False, True]
  assert Tensor([1, 2], dtype="float16").dtype == dtypes.float16
  assert Tensor([[1, 2]], dtype=dtypes.int8).numpy().dtype == np.int8
  assert Tensor([1.5, 2.5], dtype=dtypes.float64).numpy().dtype == np.float64

def test_from_nested_empty():
  assert Tensor([[], []]).shape == (2, 0)
  assert Tensor([[[]]]).shape == (1, 1, 0)

@pytest.mark.parametrize("data", [[[1, 2], [3]], [1, [2]], [[1], 2], [[[1, 2]], [[3]]], [[1, 2], []]])
def test_ragged_list(data):
  with pytest.raises(ValueError): Tensor(data)

def test_bad_data():
  with pytest.raises(TypeError): Tensor("abc")
  with pytest.raises(TypeError): Tensor([1, "a"])
  with pytest.raises(TypeError): Tensor({1: 2})
  with pytest.raises((TypeError, ValueError)): Tensor([1, 2], dtype="notadtype")

def test_from_scalar():
  for v, dt in [(3, dtypes.int32), (2.5, dtypes.float32), (True, dtypes.bool)]:
    t = Tensor(v)
    assert t.shape == () and t.dtype == dt and t.item() == v and t.ndim == 0 and t.numel() == 1
  assert Tensor(3, dtype=dtypes.float32).item() == 3.0 and Tensor(3, dtype=dtypes.float32).dtype == dtypes.float32
  assert Tensor(-1.5, dtype=dtypes.int64).item() == -1

@pytest.mark.parametrize("npdt", [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.int32, np.int64, np.bool_])
def test_from_numpy(npdt):
  a = (np.arange(12).reshape(3, 4) % 5).astype(npdt)
  t = Tensor(a)
  assert t.shape == (3, 4) and t.numpy().dtype == a.dtype
  np.testing.assert_equal(t.numpy(), a)

def test_from_numpy_views():
  a = np.arange(24, dtype=np.float32).reshape(4, 6)
  np.testing.assert_equal(Tensor(a.T).numpy(), a.T)  # non-contiguous
  np.testing.assert_equal(Tensor(a[::2, 1::3]).numpy(), a[::2, 1::3])
  np.testing.assert_equal(Tensor(np.float32(2.5)).numpy(), np.float32(2.5))
  np.testing.assert_equal(Tensor(a, dtype=dtypes.int32).numpy(), a.astype(np.int32))

def test_from_list_of_numpy_and_range():
  assert Tensor([np.float32(1.5), np.float32(2)]).tolist() == [1.5, 2.0] and Tensor([np.float32(1.5)]).dtype == dtypes.float32
  assert Tensor([np.ones(2), np.zeros(2)]).tolist() == [[1.0, 1.0], [0.0, 0.0]]
  assert Tensor(range(3)).tolist() == [0, 1, 2] and Tensor(range(3)).dtype == dtypes.int32

def test_from_numpy_is_a_copy():
  a = np.ones(3, dtype=np.float32)
  t = Tensor(a)
  a[0] = 5
  assert t.tolist() == [1, 1, 1]

def test_from_bytes():
  t = Tensor(b"\x01\x02\xff")
  assert t.dtype == dtypes.uint8 and t.tolist() == [1, 2, 255]
  assert Tensor(bytearray(b"\x00\x00\x80\x3f")).bitcast(dtypes.float32).tolist() == [1.0]

def test_from_tensor():
  a = Tensor([1, 2])
  assert Tensor(a).tolist() == [1, 2] and Tensor(a, dtype=dtypes.float32).dtype == dtypes.float32

def test_device_argument():
  for dev in ["CPU", "PYTHON"]:
    for t in [Tensor([1, 2], device=dev), Tensor(np.ones(2), device=dev), Tensor.zeros(2, device=dev), Tensor.arange(3, device=dev),
              Tensor.eye(2, device=dev), Tensor.rand(2, device=dev), Tensor.full((2,), 3, device=dev), Tensor(2.0, device=dev)]:
      assert t.device == dev
  assert Tensor([1, 2]).device == Device.DEFAULT
  assert Tensor([1, 2], device="cpu").device == "CPU"

def test_requires_grad_argument():
  assert Tensor([1.0]).requires_grad is None
  assert Tensor([1.0], requires_grad=True).requires_grad is True
  assert Tensor([1.0], requires_grad=False).requires_grad is False
  for f in [Tensor.zeros, Tensor.ones, Tensor.rand, Tensor.randn, Tensor.empty]:
    assert f(2, 3, requires_grad=True).requires_grad is True, f
  assert Tensor.full((2,), 1.0, requires_grad=True).requires_grad
  assert Tensor.eye(2, requires_grad=True).requires_grad and Tensor.arange(3.0, requires_grad=True).requires_grad

# *** constructors ***
def test_empty():
  t = Tensor.empty(2, 3)
  assert t.shape == (2, 3) and t.dtype == dtypes.float32 and t.numpy().shape == (2, 3)
  assert Tensor.empty((4,), dtype=dtypes.int8).dtype == dtypes.int8
  assert Tensor.empty(0, 3).numpy().shape == (0, 3)
  assert Tensor.ones(2, 3, dtype=dtypes.int16).empty_like().dtype == dtypes.int16

@pytest.mark.parametrize("fn", ["zeros", "ones"])
def test_zeros_ones(fn):
  for shape in [(2, 3), ((2, 3),), ([4],), (), (0, 2)]:
    t = getattr(Tensor, fn)(*shape)
    want = getattr(np, fn)(shape[0] if len(shape) == 1 else shape, dtype=np.float32)
    assert t.dtype == dtypes.float32
    np.testing.assert_equal(t.numpy(), want)
  assert getattr(Tensor, fn)(2, dtype=dtypes.int32).tolist() == [int(fn == "ones")] * 2
  assert getattr(Tensor, fn)(2, dtype=dtypes.bool).tolist() == [fn == "ones"] * 2

def test_full():
  assert Tensor.full((2, 3), 7).dtype == dtypes.int32 and Tensor.full((2, 3), 7).tolist() == [[7] * 3] * 2
  assert Tensor.full((2,), 2.5).dtype == dtypes.float32 and Tensor.full(3, True).tolist() == [True] * 3
  assert Tensor.full((2,), 2.5, dtype=dtypes.int32).tolist() == [2, 2]
  assert Tensor.full((), -1.0).shape == ()
  np.testing.assert_equal(Tensor.full((2, 2), float("inf")).numpy(), np.full((2, 2), np.inf, np.float32))

def test_like():
  x = Tensor([[1, 2, 3]], dtype=dtypes.int16)
  for t, v in [(x.zeros_like(), 0), (x.ones_like(), 1), (x.full_like(5), 5), (x.full_like(2.7), 2)]:
    assert t.shape == (1, 3) and t.dtype == dtypes.int16 and t.tolist() == [[v] * 3]
  assert x.ones_like(dtype=dtypes.float32).dtype == dtypes.float32
  assert x.rand_like(dtype=dtypes.float32).shape == (1, 3) and Tensor.rand_like(x.float()).dtype == dtypes.float32
  assert x.float().randn_like().shape == (1, 3) and Tensor.randn_like(x.float()).shape == (1, 3)
  y = Tensor([1.0], device="PYTHON")
  assert y.zeros_like().device == "PYTHON" and y.rand_like().device == "PYTHON" and y.full_like(2).device == "PYTHON"

def test_zeros_requires_grad_are_distinct():
  # hash-consed nodes: two equal constants must still be two tensors for autograd
  a, b = Tensor.zeros(3, requires_grad=True), Tensor.zeros(3, requires_grad=True)
  c = Tensor.zeros(3)
  (a * 2 + b + c * 5).sum().backward()
  assert a.grad.tolist() == [2, 2, 2] and b.grad.tolist() == [1, 1, 1] and c.grad is None

@pytest.mark.parametrize("args", [(5,), (0,), (1, 5), (5, 1), (-3, 4), (10, 2, -3), (5, 0, -1), (0, 10, 3), (2, 2), (-5,), (3, 10, 7)])
def test_arange_int(args):
  t = Tensor.arange(*args)
  assert t.dtype == dtypes.int32
  np.testing.assert_equal(t.numpy(), np.arange(*args))

@pytest.mark.parametrize("args", [(5.0,), (0, 1, 0.25), (0, 1, 0.1), (-1.5, 1.2, 0.5), (1.0, -1.0, -0.3), (0, 2.5), (3, 1.0, -0.5), (0, 0.0)])
def test_arange_float(args):
  t = Tensor.arange(*args)
  assert t.dtype == dtypes.float32
  np.testing.assert_allclose(t.numpy(), torch.arange(*args).numpy(), atol=1e-6)

def test_arange_dtype():
  assert Tensor.arange(5, dtype=dtypes.float32).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
  assert Tensor.arange(0, 3, dtype=dtypes.int64).numpy().dtype == np.int64
  assert Tensor.arange(4, dtype=dtypes.uint8).tolist() == [0, 1, 2, 3]
  np.testing.assert_allclose(Tensor.arange(0, 2, 0.5, dtype=dtypes.float16).numpy(), [0, 0.5, 1, 1.5])

def test_arange_errors():
  with pytest.raises(ValueError): Tensor.arange(0, 5, 0)

def test_arange_large():
  # counts are 32-bit index math: a long range must not overflow on the way
  n = 40000
  np.testing.assert_equal(Tensor.arange(n).numpy(), np.arange(n))
  np.testing.assert_equal(Tensor.arange(n, 0, -2).numpy(), np.arange(n, 0, -2))

def test_arange_one_kernel_no_loop():
  GlobalCounters.reset()
  Tensor.arange(1000).realize()
  assert GlobalCounters.kernel_count == 1

@pytest.mark.parametrize("args", [(0, 1, 5), (5, -5, 3), (2, 3, 1), (0, 1, 0), (-1, 1, 2), (0, 10, 11), (1.5, 2.5, 4)])
def test_linspace(args):
  t = Tensor.linspace(*args)
  assert t.dtype == dtypes.float32
  np.testing.assert_allclose(t.numpy(), torch.linspace(*args).numpy(), atol=1e-6)

def test_linspace_dtype():
  np.testing.assert_equal(Tensor.linspace(0, 10, 4, dtype=dtypes.int32).numpy(), torch.linspace(0, 10, 4, dtype=torch.int32).numpy())
  assert Tensor.linspace(0, 1, 3, device="PYTHON").device == "PYTHON"
  with pytest.raises(ValueError): Tensor.linspace(0, 1, -1)

@pytest.mark.parametrize("n,m", [(3, None), (1, None), (0, None), (2, 4), (4, 2), (5, 1), (1, 5), (3, 0)])
def test_eye(n, m):
  t = Tensor.eye(n) if m is None else Tensor.eye(n, m)
  assert t.dtype == dtypes.float32
  np.testing.assert_equal(t.numpy(), np.eye(n, m, dtype=np.float32))

def test_eye_dtype():
  assert Tensor.eye(3, dtype=dtypes.int32).tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
  assert Tensor.eye(2, dtype=dtypes.bool).tolist() == [[True, False], [False, True]]
  with pytest.raises(ValueError): Tensor.eye(-1)

def test_creation_is_lazy():
  GlobalCounters.reset()
  ts = [Tensor.zeros(3, 3), Tensor.ones(2) * 2, Tensor.arange(10), Tensor.eye(4), Tensor.linspace(0, 1, 5), Tensor.full((2,), 3),
        Tensor.rand(5), Tensor.randn(5), Tensor.randint(5), Tensor.uniform(3), Tensor([1, 2, 3]) + 1, Tensor.kaiming_uniform(3, 3)]
  assert GlobalCounters.kernel_count == 0
  Tensor.realize(*ts)
  assert GlobalCounters.kernel_count > 0

def test_const_like():
  x = Tensor([[1, 2, 3]], dtype=dtypes.int16)
  c = x.const_like(7)
  assert c.shape == (1, 3) and c.dtype == dtypes.int16 and c.tolist() == [[7] * 3] and c.device == x.device
  assert x.const_like(2.7).tolist() == [[2] * 3]  # in x's dtype, converted like a cast
  f = x.const_like(2.5, dtype=dtypes.float32)
  assert f.dtype == dtypes.float32 and f.tolist() == [[2.5] * 3]
  assert Tensor([1.0], device="PYTHON").const_like(3).device == "PYTHON"
  assert Tensor.ones(2, 0).const_like(1).shape == (2, 0) and Tensor(1.5).const_like(True).tolist() == 1.0
  y = Tensor([1.0, 2.0], requires_grad=True)
  (y * 2 + y.const_like(3)).sum().backward()  # a constant: the gradient is only the product's
  assert y.grad is not None and y.grad.tolist() == [2.0, 2.0]

# *** conformance: unknown arguments raise, big Python ints make int64 (as torch), never a silent wrap ***
@pytest.mark.parametrize("make", [lambda: Tensor.zeros(3, foo=1), lambda: Tensor.ones(3, foo=1), lambda: Tensor.full(3, 1, foo=1),
                                  lambda: Tensor.empty(3, foo=1), lambda: Tensor.rand(3, foo=1), lambda: Tensor.randn(3, foo=1),
                                  lambda: Tensor.arange(3, foo=1), lambda: Tensor.eye(3, foo=1), lambda: Tensor.linspace(0, 1, 3, foo=1),
                                  lambda: Tensor.uniform(3, foo=1), lambda: Tensor.normal(3, foo=1), lambda: Tensor.randint(3, foo=1),
                                  lambda: Tensor([1], foo=1), lambda: Tensor.kaiming_uniform(3, 3, foo=1)])
def test_unknown_keyword_raises(make):
  with pytest.raises(TypeError, match="foo"): make()

def test_creation_keywords_still_work():
  for t in [Tensor.arange(3, dtype="float32", device=None, requires_grad=True), Tensor.eye(2, dtype=dtypes.float32, requires_grad=True),
            Tensor.linspace(0, 1, 3, dtype=dtypes.float64, requires_grad=True), Tensor.rand(2, requires_grad=True), Tensor.rand(0, requires_grad=True)]:
    assert t.requires_grad and dtypes.is_float(t.dtype)
  assert Tensor.linspace(0, 1, 3, dtype=dtypes.float64).dtype == dtypes.float64

def test_bad_arguments_raise_like_torch():
  for make in [lambda m: m.linspace(0, 1, -2), lambda m: bool(m.tensor([1, 2]) if m is torch else m([1, 2]))]:
    with pytest.raises(RuntimeError): make(torch)
    with pytest.raises(RuntimeError): make(Tensor)
  with pytest.raises(TypeError): torch.zeros(2, dtype="")  # type: ignore[call-overload]
  with pytest.raises(TypeError, match="unknown dtype"): Tensor([1], dtype="")
  with pytest.raises(TypeError, match="unknown dtype"): Tensor.zeros(2, dtype="")
  with pytest.raises(TypeError, match="unknown dtype"): Tensor([1]).cast("")

@pytest.mark.parametrize("data", [[2 ** 40], [1, 2 ** 31], [-2 ** 31 - 1, 0], 2 ** 40, [[1], [2 ** 62]], [2 ** 63 - 1, -2 ** 63]])
def test_big_python_ints_make_int64(data):
  t, tt = Tensor(data), torch.tensor(data)
  assert t.dtype == dtypes.int64 and t.tolist() == tt.tolist()

def test_int32_range_stays_int32():
  assert Tensor([2 ** 31 - 1, -2 ** 31]).dtype == dtypes.int32 and Tensor([2 ** 31 - 1, -2 ** 31]).tolist() == [2 ** 31 - 1, -2 ** 31]
  assert Tensor([1, 2 ** 40, 1.5]).dtype == dtypes.float32 and Tensor([True, 2 ** 40]).dtype == dtypes.int64
  with pytest.raises(OverflowError): Tensor([2 ** 64])

@pytest.mark.parametrize("args", [(2 ** 31, 2 ** 31 + 3), (2 ** 31 - 2, 2 ** 31 + 2), (0, 2 ** 34, 2 ** 32), (-2 ** 31 - 2, -2 ** 31 + 1)])
def test_arange_past_int32_is_int64(args):
  t = Tensor.arange(*args)
  assert t.dtype == dtypes.int64 and t.tolist() == torch.arange(*args).tolist()
  assert Tensor.arange(5).dtype == dtypes.int32

def test_linspace_in_its_dtype_and_exact_at_both_ends_as_torch():
  np.testing.assert_equal(Tensor.linspace(0, 1, 7, dtype=dtypes.float64).numpy(), torch.linspace(0, 1, 7, dtype=torch.float64).numpy())
  for a, b, n in [(0.5, 3.7, 7), (-1, 1, 5), (0, 1, 10), (3, -2.5, 8)]:
    np.testing.assert_allclose(Tensor.linspace(a, b, n).numpy(), torch.linspace(a, b, n).numpy(), rtol=0, atol=1e-6)
    assert Tensor.linspace(a, b, n)[-1].item() == np.float32(b)

def test_bytes_are_read_as_values_of_the_dtype_as_tinygrad():
  import struct
  assert Tensor(struct.pack("<ff", 1.5, -2.0), dtype=dtypes.float32).tolist() == [1.5, -2.0]
  assert Tensor(b"\x01\x02").tolist() == [1, 2] and Tensor(b"\x01\x02").dtype == dtypes.uint8
  with pytest.raises(ValueError, match="whole number"): Tensor(b"\x01\x02\x03", dtype=dtypes.int16)

def test_bfloat16_constants_beyond_its_range_are_inf():
  assert Tensor([3.45e38], dtype=dtypes.bfloat16).tolist() == [math.inf]
  assert (Tensor([1.0], dtype=dtypes.bfloat16) + 3.45e38).tolist() == [math.inf]

def test_full_with_tinygrad_s_buffer_keyword():
  # tinygrad's full/ones/zeros take buffer= (its default True: values in a buffer); here a constant by default
  w, x = Tensor.ones(3, buffer=True), Tensor([1.0, 2.0, 3.0])
  (w * x * 2).sum().backward()
  assert w.grad is not None and w.grad.tolist() == [2.0, 4.0, 6.0]  # (without buffer=True: a constant, no gradient)
  assert Tensor.ones(2, buffer=False).tolist() == [1.0, 1.0] and Tensor([1.0, 2.0]).full_like(3, buffer=True).tolist() == [3.0, 3.0]
  z = Tensor.zeros(2, 2, buffer=True).realize()
  z.assign(Tensor([[1.0, 2.0], [3.0, 4.0]]))
  assert z.tolist() == [[1.0, 2.0], [3.0, 4.0]]
