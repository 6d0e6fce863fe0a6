"""Big reduces into few outputs run as two kernels (partial results, then their combination: SPLIT_REDUCEOP in
engine/schedule.py): values against NumPy for every reduce op and dtype, sizes that don't divide, keepdim, axis=None."""
import pytest
import numpy as np
from fusegrad import Tensor
from fusegrad.helpers import Context
from fusegrad.engine import schedule
from fusegrad.uop.ops import Ops

def _kernels(t: Tensor) -> list: return [si for si in t.schedule() if si.ast.op is not Ops.COPY]

def _rand(shape, dtype=np.float32, seed=0):
  rng = np.random.default_rng(seed)
  if np.issubdtype(dtype, np.floating): return rng.standard_normal(shape).astype(dtype)
  info = np.iinfo(dtype)
  return rng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True).astype(dtype)

def test_split_kernels():
  x = Tensor(_rand((256, 256)))
  assert len(_kernels(x.sum())) == 2  # partial sums, then their sum
  with Context(SPLIT_REDUCEOP=0): assert len(_kernels(x.sum())) == 1
  assert len(_kernels(x.sum(1))) == 1  # many outputs: threads share the rows already
  assert len(_kernels(Tensor(_rand((100,))).sum())) == 1  # small
  # the first kernel writes partial results along an output axis: chunks of at least SPLIT_CHUNK, SPLIT_PARTIALS at most
  assert _kernels(x.sum())[0].bufs[0].size == 256 * 256 // schedule.SPLIT_CHUNK
  assert _kernels(Tensor.empty(4096, 4096).sum())[0].bufs[0].size == schedule.SPLIT_PARTIALS
  assert _kernels(Tensor.empty(4, 2 ** 20).sum(1))[0].bufs[0].size == schedule.SPLIT_PARTIALS
  assert len(_kernels(x.sum() + 1)) == 2  # the elementwise consumer joins the second kernel

def test_split_off():
  x = _rand((300, 1001))
  with Context(SPLIT_REDUCEOP=0): want = Tensor(x).sum().item()
  assert Tensor(x).sum().item() == pytest.approx(want, rel=1e-5, abs=1e-2)
  np.testing.assert_allclose(want, x.sum(dtype=np.float64), rtol=1e-5, atol=1e-2)

@pytest.fixture
def small_split(monkeypatch):
  """The tests below split reduces 32 times smaller than the defaults do (the PYTHON device interprets them)."""
  monkeypatch.setattr(schedule, "SPLIT_MIN", schedule.SPLIT_MIN // 32)
  monkeypatch.setattr(schedule, "SPLIT_CHUNK", schedule.SPLIT_CHUNK // 32)

# (shape, axis): divisible, a prime length, a length with a left-over tail, leading axis, several axes, 3 outputs
SHAPES = [((64, 64), None), ((4099,), None), ((30, 101), None), ((3, 4001), 1), ((4001, 3), 0),
          ((2, 3, 512), (0, 2)), ((5, 4999), -1), ((4096,), 0)]

@pytest.mark.usefixtures("small_split")
@pytest.mark.parametrize("shape,axis", SHAPES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_split_sum_max_min(shape, axis, keepdim):
  x = _rand(shape)
  assert len(_kernels(Tensor(x).sum(axis))) == 2
  t = Tensor(x)
  np.testing.assert_allclose(t.sum(axis, keepdim=keepdim).numpy(), x.astype(np.float64).sum(axis, keepdims=keepdim),
                             rtol=1e-4, atol=2e-3)
  np.testing.assert_equal(t.max(axis, keepdim=keepdim).numpy(), x.max(axis, keepdims=keepdim))
  np.testing.assert_equal(t.min(axis, keepdim=keepdim).numpy(), x.min(axis, keepdims=keepdim))
  np.testing.assert_allclose(t.mean(axis, keepdim=keepdim).numpy(), x.astype(np.float64).mean(axis, keepdims=keepdim),
                             rtol=1e-4, atol=1e-6)

@pytest.mark.usefixtures("small_split")
@pytest.mark.parametrize("shape,axis", [((30, 101), None), ((4099,), 0), ((3, 4001), 1), ((4001, 3), 0)])
def test_split_argmax_argmin(shape, axis):
  x = _rand(shape)
  x.flat[len(x.flat) * 3 // 4] = 100.0  # one clear maximum late in the last chunk, and a tie with an earlier one
  x.flat[len(x.flat) // 5] = 100.0
  np.testing.assert_equal(Tensor(x).argmax(axis).numpy(), x.argmax(axis))
  np.testing.assert_equal(Tensor(x).argmin(axis).numpy(), x.argmin(axis))

@pytest.mark.usefixtures("small_split")
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64])
def test_split_int(dtype):
  x = _rand((33, 211), dtype)
  np.testing.assert_equal(Tensor(x).sum().numpy(), x.sum(dtype=np.int64))
  np.testing.assert_equal(Tensor(x).sum(0).numpy(), x.sum(0, dtype=np.int64))
  np.testing.assert_equal(Tensor(x).max().numpy(), x.max())
  np.testing.assert_equal(Tensor(x).min().numpy(), x.min())

@pytest.mark.usefixtures("small_split")
def test_split_bool_and_half():
  x = _rand((25, 263)) > 1.5
  np.testing.assert_equal(Tensor(x).sum().numpy(), x.sum())
  assert Tensor(x).any().item() and not Tensor(x).all().item()
  h = _rand((30, 101)).astype(np.float16)
  np.testing.assert_allclose(Tensor(h).sum().numpy().astype(np.float64), h.astype(np.float64).sum(), rtol=2e-3, atol=1)
  np.testing.assert_equal(Tensor(h).max().numpy(), h.max())

@pytest.mark.usefixtures("small_split")
def test_split_prod():
  x = np.random.default_rng(1).uniform(0.99, 1.01, (41, 100)).astype(np.float32)
  np.testing.assert_allclose(Tensor(x).prod().numpy(), x.astype(np.float64).prod(), rtol=1e-4)
  i = np.ones((5000,), np.int32)
  i[[5, 4000, 4999]] = [2, -3, 5]
  assert Tensor(i).prod().item() == -30

@pytest.mark.usefixtures("small_split")
def test_split_nan_inf():
  x = _rand((30, 101))
  x[29, 100] = np.nan  # in the left-over tail
  assert np.isnan(Tensor(x).max().item()) and np.isnan(Tensor(x).sum().item())
  x[29, 100], x[0, 0] = 0.0, np.inf  # in the first chunk
  assert Tensor(x).max().item() == np.inf and Tensor(x).sum().item() == np.inf

@pytest.mark.usefixtures("small_split")
def test_split_fused_input_and_consumer():
  a, b = _rand((51, 300)), _rand((51, 300), seed=1)
  got = ((Tensor(a) * Tensor(b)).sum() / 2 + 1).numpy()  # a dot product, then elementwise
  np.testing.assert_allclose(got, (a.astype(np.float64) * b).sum() / 2 + 1, rtol=1e-4, atol=1e-3)
  # a reduce that is itself the input of an expand (variance): the mean is split, then used per element
  np.testing.assert_allclose(Tensor(a).var().numpy(), a.astype(np.float64).var(ddof=1), rtol=1e-4)

@pytest.mark.usefixtures("small_split")
def test_split_backward():
  x = _rand((30, 101))
  t = Tensor(x, requires_grad=True)
  (t.max() + t.sum() * 2).backward()
  want = np.full_like(x, 2.0)
  want.flat[x.argmax()] += 1
  np.testing.assert_allclose(t.grad.numpy(), want)

@pytest.mark.usefixtures("small_split")
def test_split_in_assign_and_jit():
  from fusegrad import TinyJit
  x = _rand((30, 101))
  w = Tensor(np.ones((4,), np.float32)).realize()
  w.assign(w - Tensor(x).sum() * Tensor([1.0, 2.0, 3.0, 4.0])).realize()  # an update that reads a split reduce
  np.testing.assert_allclose(w.numpy(), 1 - x.astype(np.float64).sum() * np.arange(1, 5), rtol=1e-4)
  step = TinyJit(lambda t: (t.max() - t.min()).realize())
  for i in range(3):
    y = _rand((30, 101), seed=i)
    assert step(Tensor(y)).item() == y.max() - y.min()

def test_split_size_one_axes():
  from fusegrad.uop.ops import UOp
  x = Tensor(_rand((1, 8, 8, 8, 8, 8)))  # no axis of 16: the first of 2 or more is split
  r = UOp(Ops.REDUCE_AXIS, x.dtype, (x.uop,), (Ops.ADD, tuple(range(6))))  # a size-1 axis named among the reduced
  got = Tensor(r).numpy()
  np.testing.assert_allclose(got, x.numpy().astype(np.float64).sum(keepdims=True), rtol=1e-4, atol=1e-3)
