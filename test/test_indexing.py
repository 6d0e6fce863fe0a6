"""Indexing (getitem) and setitem: basic indexing against numpy, advanced indexing against torch, forward and backward."""
import warnings
import pytest, torch
import torch.nn.functional as F
import numpy as np
from fusegrad import Tensor, Variable, dtypes
from fusegrad.engine.state import STATE
from test.helpers import helper_test_op

A = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)

def check_np(idx, arr=A):
  np.testing.assert_equal(Tensor(arr)[idx].numpy(), arr[idx])

# *** basic indexing against numpy ***
@pytest.mark.parametrize("idx", [0, -1, 2, (1, 2), (1, -1, 3), (-3, 0, -5), ()])
def test_int(idx): check_np(idx)

@pytest.mark.parametrize("idx", [slice(None), slice(1, None), slice(None, 2), slice(1, 2), slice(-2, None), slice(-5, 10),
                                 slice(5, 10), slice(2, 1), (slice(None), slice(1, 3)), (slice(None), slice(None), slice(-3, -1))])
def test_slice(idx): check_np(idx)

@pytest.mark.parametrize("idx", [slice(None, None, 2), slice(1, None, 2), slice(None, None, 3), (slice(None), slice(None, None, 3)),
                                 (slice(None), slice(None), slice(1, 5, 2)), (slice(None), slice(None), slice(4, 5, 3)),
                                 (slice(None), slice(None), slice(0, 5, 10))])
def test_slice_step(idx): check_np(idx)

@pytest.mark.parametrize("idx", [slice(None, None, -1), slice(None, None, -2), slice(2, 0, -1), slice(1, None, -1),
                                 (slice(None), slice(None, None, -3)), (slice(None), slice(3, 0, -2)),
                                 (slice(None), slice(None), slice(-1, -4, -1)), (slice(None), slice(None), slice(4, None, -3)),
                                 (slice(None), slice(None), slice(0, 4, -1)), (slice(None), slice(None), slice(10, -10, -4))])
def test_slice_negative_step(idx): check_np(idx)

@pytest.mark.parametrize("idx", [None, (None, 0), (0, None), (slice(None), None, 1), (None, None, Ellipsis, None), (1, None, slice(1, 3), None)])
def test_none(idx): check_np(idx)

@pytest.mark.parametrize("idx", [Ellipsis, (Ellipsis, 0), (0, Ellipsis), (1, Ellipsis, 2), (Ellipsis, slice(None, None, -1)),
                                 (None, Ellipsis, None), (0, 1, 2, Ellipsis), (Ellipsis, 0, 1, 2)])
def test_ellipsis(idx): check_np(idx)

def test_scalar_tensor_index_by_ellipsis():
  assert Tensor(3.0)[...].item() == 3.0 and Tensor(3.0)[None].shape == (1,)

def test_slice_grad(): helper_test_op([(5, 6)], lambda x: x[1:4].flip(1)[:, ::2], lambda x: x[1:4, ::-2])
def test_int_grad(): helper_test_op([(5, 6)], lambda x: x[2])
def test_int_grad_negative(): helper_test_op([(5, 6)], lambda x: x[-1, 1:])
def test_none_ellipsis_grad():
  helper_test_op([(3, 4, 5)], lambda x: x[None, ..., 1:3].flip(-1)[..., None], lambda x: x[None, ..., 2:0:-1, None])
def test_step_grad(): helper_test_op([(7, 9)], lambda x: x[1::3].flip(1)[:, 0:7:3], lambda x: x[1::3, 8:1:-3])

def test_index_errors():
  x = Tensor(A)
  with pytest.raises(IndexError): x[0, 0, 0, 0]
  with pytest.raises(IndexError): x[3]
  with pytest.raises(IndexError): x[-4]
  with pytest.raises(IndexError): x[0, 4]
  with pytest.raises(IndexError): x[..., 5]
  with pytest.raises(IndexError): x[..., ...]
  with pytest.raises(IndexError): x[1.5]
  with pytest.raises(IndexError): x["a"]
  with pytest.raises(IndexError): Tensor(3.0)[0]
  with pytest.raises((ValueError, IndexError)): x[::0]

def test_index_error_message():
  with pytest.raises(IndexError, match="too many indices"): Tensor(A)[0, 0, 0, 0]
  with pytest.raises(IndexError, match="out of bounds"): Tensor(A)[0, 7]

# *** advanced indexing against torch (where the new axes go, negative indices, broadcasting) ***
TA = torch.tensor(A)

def check_torch(idx_fn):
  want = TA[idx_fn(lambda v: torch.tensor(v))]
  got = Tensor(A)[idx_fn(lambda v: Tensor(v))]
  assert got.shape == tuple(want.shape), f"{got.shape} != {tuple(want.shape)}"
  np.testing.assert_equal(got.numpy(), want.numpy())

@pytest.mark.parametrize("case", [
  lambda t: t([0, 2]),
  lambda t: t([2, -1, 0, 0]),
  lambda t: t([[0, 1], [2, -3]]),
  lambda t: (slice(None), t([3, 0])),
  lambda t: (slice(None), slice(None), t([4, -5, 1])),
  lambda t: (t([0, 2]), t([1, 3])),
  lambda t: (t([0, 2]), slice(None), t([1, 3])),
  lambda t: (slice(None), t([[0], [3]]), t([1, 2, 4])),
  lambda t: (t([[0], [2]]), t([1, 3])),
  lambda t: (t(1), t([1, 2])),
  lambda t: (t(-1),),
  lambda t: (1, t([0, 3])),
  lambda t: (t([0, 2]), 1),
  lambda t: (t([0, 2]), 1, t([1, 3])),
  lambda t: (slice(None), 1, t([1, 3])),
  lambda t: (1, slice(None), t([1, 3])),
  lambda t: (t([0, 2]), slice(1, 3), slice(None, None, 2)),
  lambda t: (slice(1, None, 2), t([0, 2])),
  lambda t: (Ellipsis, t([0, 2])),
  lambda t: (t([0, 2]), Ellipsis, t([1, 3])),
  lambda t: (None, t([0, 2])),
  lambda t: (t([0, 2]), None, t([1, 3])),
  lambda t: (slice(None), None, t([1, 3])),
  lambda t: (t([[1, 1, 1]]),),
  lambda t: (t(1), slice(None), t([1, 3])),
  lambda t: (t([0, 2]), t(1), t([1, 3])),
  lambda t: (slice(None), t([[1], [2]]), t(0)),
  lambda t: (t(2), slice(None), t(-1)),
])
def test_advanced(case): check_torch(case)

A4 = np.arange(2 * 3 * 4 * 5, dtype=np.int32).reshape(2, 3, 4, 5)
@pytest.mark.parametrize("case", [
  lambda t: (t([0, 1]), 1, slice(None), t([1, 3])),
  lambda t: (slice(None), t(1), slice(None), t([1, 3])),
  lambda t: (slice(None), t([1]), slice(None), t(1)),
  lambda t: (slice(None), t([1, 2]), 1, t([0, 1])),
  lambda t: (1, t([1, 2]), slice(None), t([0, 1])),
  lambda t: (t(1), slice(None), slice(None), t([0, 1])),
  lambda t: (slice(None), t([[0], [2]]), t([[1, 2, 3]]), slice(None)),
  lambda t: (Ellipsis, t([0, 2]), t([4, 1])),
])
def test_advanced_4d(case):
  want = torch.tensor(A4)[case(torch.tensor)]
  got = Tensor(A4)[case(Tensor)]
  assert got.shape == tuple(want.shape), f"{got.shape} != {tuple(want.shape)}"
  np.testing.assert_equal(got.numpy(), want.numpy())

def test_numpy_scalar_index():
  np.testing.assert_equal(Tensor(A)[np.int64(2), np.int32(-1)].numpy(), A[2, -1])
  np.testing.assert_equal(Tensor(A)[np.array([2, 0])].numpy(), A[[2, 0]])

def test_advanced_list_index():
  np.testing.assert_equal(Tensor(A)[[0, 2]].numpy(), A[[0, 2]])
  np.testing.assert_equal(Tensor(A)[:, [1, -1]].numpy(), A[:, [1, -1]])
  np.testing.assert_equal(Tensor(A)[[0, 1], [2, 3]].numpy(), A[[0, 1], [2, 3]])

def test_advanced_int_dtypes():
  for dt in [dtypes.int8, dtypes.uint8, dtypes.int64, dtypes.int16]:
    np.testing.assert_equal(Tensor(A)[Tensor([2, 0], dtype=dt)].numpy(), A[[2, 0]])

def test_advanced_small_int_index_on_long_axis():
  x = np.arange(300, dtype=np.float32)
  for dt in [dtypes.uint8, dtypes.int8, dtypes.int16]:
    np.testing.assert_equal(Tensor(x)[Tensor([5, 100, -1 if dt != dtypes.uint8 else 255], dtype=dt)].numpy(),
                            x[[5, 100, -1 if dt != dtypes.uint8 else 255]])

def test_advanced_on_int_and_bool_tensors():
  x = np.arange(12, dtype=np.int32).reshape(3, 4)
  np.testing.assert_equal(Tensor(x)[Tensor([2, 0]), 1:].numpy(), x[[2, 0], 1:])
  b = x % 3 == 0
  np.testing.assert_equal(Tensor(b)[:, Tensor([3, 1, 0])].numpy(), b[:, [3, 1, 0]])

def test_advanced_grad(): helper_test_op([(4, 5)], lambda x: x[torch.tensor([0, 2, 2, -1])], lambda x: x[Tensor([0, 2, 2, -1])])
def test_advanced_grad_2(): helper_test_op([(3, 4, 5)], lambda x: x[torch.tensor([0, 2]), :, torch.tensor([[1], [4]])],
                                           lambda x: x[Tensor([0, 2]), :, Tensor([[1], [4]])])
def test_advanced_grad_mixed(): helper_test_op([(3, 4, 5)], lambda x: x[1:, torch.tensor([3, 3, 0]), ::2],
                                               lambda x: x[1:, Tensor([3, 3, 0]), ::2])

def test_advanced_errors():
  with pytest.raises(IndexError): Tensor(A)[Tensor([0.5, 1.0])]
  with pytest.raises((IndexError, ValueError)): Tensor(A)[Tensor([0, 1]), Tensor([0, 1, 2])]

# *** setitem ***
def test_setitem_int():
  x, n = Tensor(A).contiguous().realize(), A.copy()
  x[1] = 7.0
  n[1] = 7.0
  np.testing.assert_equal(x.numpy(), n)

def test_setitem_slice_tensor():
  x, n = Tensor(A).contiguous().realize(), A.copy()
  v = np.arange(8, dtype=np.float32).reshape(2, 4) - 100
  x[1:, :, 2] = Tensor(v)
  n[1:, :, 2] = v
  np.testing.assert_equal(x.numpy(), n)

def test_setitem_broadcast_and_steps():
  x, n = Tensor(A).contiguous().realize(), A.copy()
  x[::2, 1::2, ::-2] = Tensor([1.0, 2.0, 3.0])
  n[::2, 1::2, ::-2] = np.array([1.0, 2.0, 3.0])
  np.testing.assert_equal(x.numpy(), n)
  x[-1, ..., 0] = -1
  n[-1, ..., 0] = -1
  np.testing.assert_equal(x.numpy(), n)

def test_setitem_int_tensor_dtype():
  x = Tensor([1, 2, 3, 4])
  x[1:3] = 9.7  # cast like torch: a float written into an int tensor is truncated
  assert x.tolist() == [1, 9, 9, 4] and x.dtype == dtypes.int32

def test_setitem_lazy_value():
  x = Tensor.zeros(4, 3).contiguous()
  y = Tensor.ones(3)
  x[2] = y * 5
  x[0, 1:] = x[2, :2] + 1
  assert x.tolist() == [[0, 6, 6], [0, 0, 0], [5, 5, 5], [0, 0, 0]]

def test_setitem_unrealized_target():
  x = Tensor.arange(6).reshape(2, 3) * 2  # lazy: setitem realizes it first
  x[1, 1] = 100
  assert x.tolist() == [[0, 2, 4], [6, 100, 10]]

def test_setitem_on_constants():
  # zeros/ones/eye are constants until written: setitem gives them a buffer
  x = Tensor.zeros(3)
  x[1] = 5
  assert x.tolist() == [0.0, 5.0, 0.0]
  y = Tensor.ones(2, 2)
  y[:, 0] = Tensor([7.0, 8.0])
  assert y.tolist() == [[7.0, 1.0], [8.0, 1.0]]
  e = Tensor.eye(2, dtype=dtypes.int32)
  e[0, 1] = 3
  assert e.tolist() == [[1, 3], [0, 1]]
  z = Tensor.arange(4)
  z[::2] = 0
  assert z.tolist() == [0, 1, 0, 3]

def test_setitem_through_view():
  a = Tensor([1.0, 2.0, 3.0]).realize()
  b = a.reshape(3, 1)
  b[0] = 9.0  # a view shares memory with what it views, as in torch
  assert a.tolist() == [9.0, 2.0, 3.0] and b.tolist() == [[9.0], [2.0], [3.0]]

def test_setitem_empty_selection():
  x = Tensor([[1.0, 2.0, 3.0]]).realize()
  x[-3:-3:5] = -1.0  # selects nothing: writes nothing
  x[:, 2:2] = Tensor.zeros(1, 0)
  assert x.tolist() == [[1.0, 2.0, 3.0]]
  y = Tensor.zeros(6, 0).contiguous().realize()
  y[::3] = 1.0
  assert y.shape == (6, 0)

def test_setitem_errors():
  e = Tensor([1.0, 2.0]).realize().expand(3, 2)
  with pytest.raises(RuntimeError): e[0, 0] = 1.0
  t = Tensor([1.0, 2.0])
  with pytest.raises(IndexError): t[Tensor([2])] = 1.0
  x = Tensor.zeros(3, 4).contiguous().realize()
  with pytest.raises(IndexError): x[3] = 1.0
  with pytest.raises(IndexError): x[0, 0, 0] = 1.0
  with pytest.raises(ValueError): x[0] = Tensor([1.0, 2.0])

@pytest.mark.parametrize("idx,vshape", [((slice(None), [0, 2], slice(1, 3)), (3, 2, 2)), (([0, 2], slice(None), [1, -1]), (2, 4)),
                                        ((1, [0, 3]), (2, 5)), (([[0], [2]], [1, 3]), (2, 2, 5)),
                                        ((Ellipsis, [4, 0]), ()), ((np.array([2, 0]),), (4, 5)),
                                        ((None, [1], 2, slice(None, None, -2)), (1, 3))])
def test_setitem_tensor_indices_as_numpy(idx, vshape):
  v = np.arange(np.prod(vshape), dtype=np.float32).reshape(vshape) - 50
  x, n = Tensor(A.copy()), A.copy()
  x[idx] = Tensor(v) if vshape else float(v)
  n[idx] = v
  np.testing.assert_equal(x.numpy(), n)

def test_setitem_tensor_indices_repeated_last_wins_and_checked():
  x = Tensor([1, 2, 3, 4])
  x[[1, 1]] = Tensor([5, 6])
  x[Tensor([[0], [0]])] = Tensor([[7], [8]])
  assert x.tolist() == [8, 6, 3, 4]
  with pytest.raises(IndexError): torch.zeros(3, 4)[torch.tensor([0, 1]), torch.tensor([4, 0])] = 1.0
  with pytest.raises(IndexError): Tensor.zeros(3, 4)[Tensor([0, 1]), Tensor([4, 0])] = 1.0  # flat index 4 is in range

def test_setitem_with_grad_raises_as_torch():
  for target, value in [(True, False), (False, True)]:
    z, x = torch.rand(8, 8, requires_grad=target), torch.rand(8, requires_grad=value)
    if target:
      with pytest.raises(RuntimeError): z[:3] = x  # torch: a leaf that requires grad is not written in place
    z, x = Tensor.rand(8, 8, requires_grad=target), Tensor.rand(8, requires_grad=value)
    with pytest.raises(NotImplementedError): z[:3] = x  # tinygrad's class (a RuntimeError): the graph would be lost

@pytest.mark.parametrize("idx", [3, -4, (0, 4), (Ellipsis, 5), (0, 0, 5), (slice(None), 4)])
def test_index_out_of_range_raises_index_error_like_torch(idx):
  with pytest.raises(IndexError): torch.tensor(A)[idx]
  with pytest.raises(IndexError): Tensor(A)[idx]
  x = Tensor(A.copy())
  with pytest.raises(IndexError): x[idx] = 1.0

# *** out-of-range tensor indices raise IndexError, as in torch (issue 8, section 5) ***
def _torch_raises(f):
  with pytest.raises((IndexError, RuntimeError)): f()  # torch's gather raises RuntimeError

def test_out_of_range_index_raises():
  _torch_raises(lambda: torch.tensor([1, 2, 3])[torch.tensor([5])])
  with pytest.raises(IndexError, match="getitem: index 5 is out of bounds for size 3"):
    Tensor([1, 2, 3])[Tensor([5])].numpy()
  with pytest.raises(IndexError, match="index -4 .* size 3"): Tensor([1, 2, 3])[Tensor([0, -4])].tolist()
  # negative indices wrap once, as torch
  np.testing.assert_equal(Tensor([1, 2, 3])[Tensor([-1, -3, 2])].numpy(), torch.tensor([1, 2, 3])[[-1, -3, 2]].numpy())

def test_out_of_range_index_2d_and_in_consumers():
  b = np.arange(12).reshape(3, 4)
  with pytest.raises(IndexError, match="index 4 .* size 4"): Tensor(b)[Tensor([0, 1]), Tensor([3, 4])].numpy()
  with pytest.raises(IndexError, match="index 3 .* size 3"): (Tensor(b)[:, 1][Tensor([3])] * 2 + 1).sum().item()
  y = Tensor(b)[Tensor([2, 0])]
  np.testing.assert_equal(y.numpy(), b[[2, 0]])

def test_embedding_out_of_range():
  from fusegrad import nn
  _torch_raises(lambda: torch.nn.Embedding(3, 2)(torch.tensor([[5]])))
  with pytest.raises(IndexError, match="Embedding: index 5 is out of bounds for size 3"):
    nn.Embedding(3, 2)(Tensor([[5]])).numpy()
  with pytest.raises(IndexError, match="Embedding"): nn.Embedding(3, 2)(Tensor([[-1]])).numpy()

def test_cross_entropy_label_out_of_range():
  logits, labels = np.zeros((2, 3), np.float32), np.array([7, 1])
  _torch_raises(lambda: torch.nn.functional.cross_entropy(torch.tensor(logits), torch.tensor(labels)))
  with pytest.raises(IndexError, match="cross_entropy: target 7 is out of bounds for size 3"):
    Tensor(logits).sparse_categorical_crossentropy(Tensor(labels)).item()
  # ignored labels are not checked
  want = torch.nn.functional.cross_entropy(torch.tensor(logits), torch.tensor([-1, 1]), ignore_index=-1).item()
  assert abs(Tensor(logits).sparse_categorical_crossentropy(Tensor([-1, 1])).item() - want) < 1e-6

def test_gather_scatter_out_of_range():
  x = Tensor([[1, 2], [3, 4]])
  _torch_raises(lambda: torch.tensor([[1, 2], [3, 4]]).gather(1, torch.tensor([[0, 2], [1, 0]])))
  with pytest.raises(IndexError, match="gather: index 2 .* size 2"): x.gather(1, Tensor([[0, 2], [1, 0]])).numpy()
  with pytest.raises(IndexError, match="gather: index -1"): x.gather(1, Tensor([[0, -1], [1, 0]])).numpy()
  with pytest.raises(IndexError, match="scatter"): x.scatter(0, Tensor([[0, 5]]), 9).numpy()

def test_indices_on_the_host_are_checked_at_the_call_as_torch():
  """Indices made from data (not yet on the device) are checked when the op is called, as torch does, by no kernel;
  a view of them checks only what it reads, and computed indices still raise when realized."""
  from fusegrad import nn, Context, GlobalCounters, TinyJit
  w = np.arange(40, dtype=np.float32).reshape(10, 4)
  for ids in ([[1, 2], [3, 10]], [-1], [[0, 11]]):
    _torch_raises(lambda: torch.nn.functional.embedding(torch.tensor(ids), torch.tensor(w)))
    with pytest.raises(IndexError, match="Embedding: index"): nn.Embedding(10, 4)(Tensor(ids))  # no realize
  with pytest.raises(IndexError, match="getitem: index 5"): Tensor([1, 2, 3])[Tensor([5])]
  with pytest.raises(IndexError, match="scatter: index 7"): Tensor([[1, 2], [3, 4]]).scatter(0, Tensor([[0, 7]]), 9)
  np.testing.assert_equal(Tensor(w)[Tensor([9, 99])[:1]].numpy(), w[[9]])  # 99 isn't read
  big = Tensor(w)[Tensor([0] * 5000 + [10])]  # more than 4096: checked by the device, when realized
  with pytest.raises(IndexError, match="getitem: index 10"): big.numpy()
  lazy = Tensor([[1, 5]]) * 3
  y = Tensor(w)[lazy]
  with pytest.raises(IndexError, match="getitem: index 15"): y.numpy()
  emb = nn.Embedding(20, 30)
  emb.weight = Tensor.zeros_like(emb.weight).contiguous().realize()
  with Context(NOOPT=1):
    GlobalCounters.reset()
    out = emb(Tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])).realize()
  assert GlobalCounters.kernel_count == 1 and GlobalCounters.global_ops == 0  # tinygrad's count: the gather only loads
  np.testing.assert_equal(out.numpy(), np.zeros((3, 3, 30)))
  f = TinyJit(lambda t: Tensor(w)[t].realize())  # while TinyJit captures, each call's indices are checked on replay
  for ids in ([1, 2], [3, 4], [5, 6]): np.testing.assert_equal(f(Tensor(ids)).numpy(), w[ids])
  with pytest.raises(IndexError, match="index 12"): f(Tensor([0, 12])).numpy()

def test_index_check_off_reads_zero():
  from fusegrad import Context
  with Context(CHECK_INDEX=0): assert Tensor([1, 2, 3])[Tensor([5, 1])].tolist() == [0, 2]

def test_index_check_runs_in_the_same_schedule_once():
  from fusegrad import GlobalCounters
  x, i = Tensor([1.0, 2, 3]).realize(), Tensor([2, 0]).realize()
  GlobalCounters.reset()
  y = x[i].realize()
  assert GlobalCounters.kernel_count == 2  # the gather and the flag: one schedule, no extra kernels for the read
  GlobalCounters.reset()
  assert (y + 1).tolist() == [4.0, 2.0] and GlobalCounters.kernel_count == 1  # a check that passed is not redone

# a gather (folded into one load at a loaded index) under a pad: the index load must keep the pad's gate, else it
# reads past its buffer where the pad is (the PYTHON device raises; C reads garbage)
GATHER_UNDER_PAD = [
  ((3,), 0, [[1, 2]], lambda g: g.cat(Tensor([7], dtype=g.dtype, device=g.device)),
   lambda g: torch.cat([g, torch.tensor([7])])),
  ((5,), 0, [[4, 0, 2]], lambda g: g.pad((2, 1)), lambda g: F.pad(g, (2, 1))),
  ((4, 3), 1, [[2, 0], [1, 1], [0, 2]], lambda g: g.pad(((1, 1), (0, 2))), lambda g: F.pad(g, (0, 2, 1, 1))),
  ((6, 2), 0, [[5, 1], [0, 0], [3, 1]], lambda g: Tensor.zeros(2, 2, dtype=g.dtype, device=g.device).cat(g)[1:4],
   lambda g: torch.cat([torch.zeros(2, 2, dtype=g.dtype), g])[1:4]),
  ((3, 4), 0, [[2, 0, 1, 2]], lambda g: g.pad(((0, 3), (1, 0)))[1:, :3], lambda g: F.pad(g, (1, 0, 0, 3))[1:, :3]),
]

@pytest.mark.parametrize("device", [None, "PYTHON"])
@pytest.mark.parametrize("shape,dim,index,fg,ft", GATHER_UNDER_PAD)
def test_gather_under_pad_stays_in_bounds(device, shape, dim, index, fg, ft):
  x = np.arange(1, np.prod(shape) + 1).reshape(shape) * 10
  idx = index if len(index) > 1 or len(shape) > 1 else index[0]
  want = ft(torch.tensor(x).gather(dim, torch.tensor(idx, dtype=torch.int64)))
  for idt in [dtypes.int32, dtypes.int64]:
    got = fg(Tensor(x, dtype=dtypes.int64, device=device).gather(dim, Tensor(idx, dtype=idt, device=device)))
    assert got.tolist() == want.tolist(), idt

# *** bound Variables: X[i], X[i:i+BS], shrink; one kernel set for every value ***
@pytest.fixture
def count_compiles(monkeypatch):
  """A list that gets one entry per kernel compiled (the in-memory program cache starts empty)."""
  from fusegrad.engine import realize
  made: list = []
  real = realize._program
  monkeypatch.setattr(STATE, "programs", type(STATE.programs)())
  monkeypatch.setattr(realize, "_program", lambda *a: made.append(a) or real(*a))
  return made

def test_variable_index_and_slice_lazy(count_compiles):
  from fusegrad import Variable
  X = Tensor(A).realize()
  v = Variable("i", 0, 2)
  for k in range(3):
    i = v.bind(k)
    np.testing.assert_equal(X[i].numpy(), A[k])
    np.testing.assert_equal(X[i:i + 1].numpy(), A[k:k + 1])
    np.testing.assert_equal(X[:, i + 1, i:i + 3].numpy(), A[:, k + 1, k:k + 3])
    np.testing.assert_equal(X[i, [0, 2]].numpy(), A[k, [0, 2]])
    np.testing.assert_equal(X.shrink((None, (i, i + 2), (1, 4))).numpy(), A[:, k:k + 2, 1:4])
    if k == 0: first = len(count_compiles)
  assert first > 0 and len(count_compiles) == first  # the later values compiled nothing

def test_variable_slice_backward():
  from fusegrad import Variable
  w, tw = Tensor(A, requires_grad=True), torch.tensor(A, requires_grad=True)
  i = Variable("i", 0, 1).bind(1)
  (w[:, i:i + 3] * 2).sum().backward()
  (tw[:, 1:4] * 2).sum().backward()
  np.testing.assert_equal(w.grad.numpy(), tw.grad.numpy())

def test_variable_slice_under_jit(count_compiles):
  """tinygrad's pattern for stepping through a dataset: batches X[i:i+BS] in a jitted step, one compile for all i."""
  from fusegrad import Variable, TinyJit
  X = Tensor(A.reshape(12, 5)).realize()
  BS, v = 4, Variable("i", 0, 12 - 4)
  @TinyJit
  def step(i): return (X[i:i + BS] * 2).sum(0)
  @TinyJit
  def step_batch(xb): return (xb + 1).max(0)
  for k in range(7):
    np.testing.assert_allclose(step(v.bind(k)).numpy(), (A.reshape(12, 5)[k:k + BS] * 2).sum(0))
    i = v.bind(k)
    np.testing.assert_equal(step_batch(X[i:i + BS]).numpy(), (A.reshape(12, 5)[k:k + BS] + 1).max(0))
    if k == 0: first = len(count_compiles)
  assert len(count_compiles) == first

def test_variable_index_out_of_range_refused():
  """A Variable whose range passes the axis (tinygrad's Variable("start_pos", 0, MAX) into a cache of MAX) is taken
  while its value is inside: a value outside raises at the call, and at the realize of a replay that brings one."""
  from fusegrad import Variable, TinyJit
  X = Tensor(A)
  with pytest.raises(IndexError, match="outside"): X[Variable("i", 0, 3).bind(3)]
  with pytest.raises(IndexError, match="outside"): X[:, Variable("j", 0, 3).bind(3):Variable("j", 0, 3).bind(3) + 2]
  with pytest.raises(IndexError, match="unbound"): X[:Variable("k", 0, 3)]  # (not bound: no length to take)
  np.testing.assert_equal(X[Variable("i", 0, 3).bind(2)].numpy(), A[2])
  j = Variable("j", 0, 4)
  step = TinyJit(lambda p: (X[:, p:p + 2] + 0).realize())
  for k in range(3): np.testing.assert_equal(step(j.bind(k)).numpy(), A[:, k:k + 2])
  with pytest.raises(IndexError, match="out of bounds"): step(j.bind(3))  # a replay: 3:5 leaves the 4 rows

def test_variable_length_slices_replay_under_tinyjit_as_tinygrad_kv_caches():
  """x[:v], shrink to (0, v + 1): a view whose length is a Variable's (a SymInt: the bound value, and the expression
  the kernels loop to), so TinyJit captures once and replays at every value. x[i:2*i+1] (a gather of a length known
  only as a value) makes kernels that differ per value: the check at a second value finds it, and every call runs."""
  from fusegrad import Variable, TinyJit, function
  X, v = Tensor(A), Variable("v", 1, 3)
  np.testing.assert_equal(X[:v.bind(2)].numpy(), A[:2])
  i = Variable("i", 0, 1)
  np.testing.assert_equal(X[i.bind(1):2 * i.bind(1) + 1].numpy(), A[1:3])
  np.testing.assert_equal(X.shrink((None, (0, v.bind(2) + 1), None)).numpy(), A[:, :3])
  step, traced = TinyJit(lambda t, n: (t[:, :n] * 2).sum(1).realize()), function(lambda t, n: (t[:n] + 1).max(0))
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    for k in (1, 3, 2, 3, 1):
      got = step(X, v.bind(k))
      assert got.shape == (3, 5)
      np.testing.assert_equal(got.numpy(), (A[:, :k] * 2).sum(1))
      np.testing.assert_equal(traced(X, v.bind(k)).numpy(), (A[:k] + 1).max(0))
  assert not step.by_value and step.unchecked is None and len(step.jit_cache) == 1 and len(traced.traces) == 3
  gather = TinyJit(lambda t, n: (t[n:2 * n + 1] + 1).realize())
  with pytest.warns(UserWarning, match="differ with a Variable's value"):
    for k in (0, 1, 0, 1): np.testing.assert_equal(gather(X, i.bind(k)).numpy(), A[k:2 * k + 1] + 1)
  assert gather.by_value

def test_jit_inputs_cut_to_a_variable_length_replay_as_tinygrad_symbolic_jit():
  """tinygrad's test_symbolic_jit pattern: jf(a[:, :vi]) with a new vi each call. The input's length is the Variable's:
  one capture replays at every value (the result has this call's length); a shape changed for any other reason, or
  another input's shape against the capture's, still raises."""
  from fusegrad import Variable, TinyJit
  from fusegrad.engine.state import JitError
  def f(t): return (t + 1).realize()
  jf, X = TinyJit(f), Tensor(A.reshape(12, 5)).realize()
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    for k in (1, 2, 5, 12, 3):
      out = jf(X[:Variable("i", 1, 12).bind(k)])
      assert out.shape == (k, 5)
      np.testing.assert_equal(out.numpy(), A.reshape(12, 5)[:k] + 1)
  assert len(jf.jit_cache) == 1 and not jf.by_value
  with pytest.raises(JitError, match="inputs changed"): jf(Tensor(A.reshape(4, 15)).realize()[:Variable("i", 1, 12).bind(2)])
  g = TinyJit(f)
  for _ in range(3): g(X)
  with pytest.raises(JitError, match="inputs changed"): g(Tensor(A[0]).realize())

def test_sizes_from_bound_variables_as_tinygrad_symbolic_ops():
  """tinygrad's test_symbolic_ops patterns: Tensor.ones(v, 3), expand, pad and reshape to a Variable's value, cat, mean
  and sums of value-length slices, sym_infer (tinygrad.uop.ops'); against numpy at the bound values."""
  from fusegrad import Variable
  from fusegrad.uop.ops import sym_infer
  v, B = Variable("v", 1, 10), A.reshape(12, 5)
  for k in (2, 3):
    vk, X = v.bind(k), Tensor(B)
    assert Tensor.ones(vk, 3).shape == (k, 3) and Tensor([[1.0], [2.0]]).expand(2, vk).shape == (2, k)
    np.testing.assert_equal(Tensor([1.0, 2.0]).pad(((0, vk - 1),)).numpy(), np.pad([1.0, 2.0], (0, k - 1)))
    np.testing.assert_equal(X[:vk].reshape(vk, 5).cat(X[:2]).numpy(), np.concatenate([B[:k], B[:2]]))
    np.testing.assert_allclose(X[:vk].mean(0).numpy(), B[:k].mean(0), rtol=1e-6)
    # sums that fold to no loop: of a constant (v * 2 * 4), of a one-hot (a Variable's end in the bounds check)
    assert (Tensor.ones(10, 4)[:vk] * 2).sum().item() == 8 * k and Tensor.arange(10)[:vk].sum().item() == k * (k - 1) // 2
    np.testing.assert_equal((Tensor([[1], [5]]) == Tensor.arange(10)[:vk]).float().sum(1).numpy(), [1, k > 5])
  assert sym_infer(v * 2 + 1, {"v": 3}) == sym_infer(v * 2 + 1, {v: 3}) == 7 and sym_infer(4, {}) == 4
  with pytest.raises(ValueError, match="unbound"): sym_infer(v + 1, {})

def _cut(k: int, j: int | None = None):
  """Bound Variables i (and j) for tinygrad's symbolic-JIT patterns."""
  from fusegrad import Variable
  return Variable("i", 1, 10).bind(k), None if j is None else Variable("j", 1, 10).bind(j)

SYMBOLIC_JIT = {  # name: (function, inputs as numpy, how they are cut at (i, j), kernels captured or None)
  "plus1": (lambda a: (a + 1).realize(), [(3, 10)], lambda i, j: ((slice(None), slice(None, i)),), 1),
  "pad_back": (lambda a: (a + 1).pad((None, (0, 10 - a.shape[1]))).contiguous().realize(), [(3, 10)],
               lambda i, j: ((slice(None), slice(None, i)),), 1),
  "add": (lambda a, b: (a + b).realize(), [(3, 10), (3, 10)], lambda i, j: ((slice(None), slice(None, i)),) * 2, 1),
  "matmul": (lambda a, b: (a @ b).realize(), [(3, 10), (10, 5)],
             lambda i, j: ((slice(None), slice(None, i)), (slice(None, i), slice(None))), 1),
  "matmul_two_vars": (lambda a, b: (a @ b + 1).realize(), [(10, 3), (3, 10)],
                      lambda i, j: ((slice(None, i), slice(None)), (slice(None), slice(None, j))), 1),
  "cat_two_vars": (lambda a, b: a.cat(b, dim=1).realize(), [(3, 10), (3, 10)],
                   lambda i, j: ((slice(None), slice(None, i)), (slice(None), slice(None, j))), 1),
  "attention": (lambda q, k, v: q.scaled_dot_product_attention(k, v).realize(), [(2, 4, 1, 8), (2, 4, 10, 8),
                (2, 4, 10, 8)], lambda i, j: ((), (slice(None), slice(None), slice(None, i)),
                                               (slice(None), slice(None), slice(None, i))), None),
  "mean_var": (lambda a: (a.mean(0) + a.var(1).sum() + a.std()).realize(), [(10, 10)],
               lambda i, j: ((slice(None, i), slice(None, j)),), None),
  "softmax_max": (lambda a: (a.softmax(1) * a.max(1, keepdim=True)).realize(), [(10, 10)],
                  lambda i, j: ((slice(None, i), slice(None, j)),), None),
}

@pytest.mark.parametrize("name", list(SYMBOLIC_JIT))
def test_variable_lengths_replay_one_capture_as_tinygrad_symbolic_jit(name):
  """tinygrad's test_symbolic_jit patterns: inputs cut to Variable lengths (a[:, :i], b[:i, :]), a new value at each
  call, against numpy at the same values. After the capture and one check at other values, every call replays the
  same kernels (none is compiled again, the function isn't called), and each result has its call's lengths."""
  from fusegrad import TinyJit
  fxn, shapes, cut, kernels = SYMBOLIC_JIT[name]
  rng = np.random.default_rng(0)
  data = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  xs = [Tensor(d).realize() for d in data]
  calls = []
  jf = TinyJit(lambda *a: calls.append(1) or fxn(*a))
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # (no fallback to running every call)
    for n, (k, m) in enumerate([(2, 3), (4, 2), (3, 5), (5, 4), (2, 2), (7, 9)]):
      i, j = _cut(k, m)
      got = jf(*[x[c] for x, c in zip(xs, cut(i, j))])
      want = fxn(*[Tensor(d[c]) for d, c in zip(data, cut(k, m))]).numpy()
      assert got.shape == want.shape
      np.testing.assert_allclose(got.numpy(), want, atol=1e-5, rtol=1e-5)
  assert len(calls) == 3 and not jf.by_value and (kernels is None or len(jf.jit_cache) == kernels)

# name: (function, input shapes at (k, m), the same with the Variables (i, j), calls of the function, the values)
ONE_AT_A_TIME = [(1, 2), (1, 3), (1, 4), (2, 4), (3, 1), (1, 1), (4, 3)]
RESHAPED_JIT = {
  "plus1": (lambda a: (a + 1).realize(), lambda k, m: [(3, k)], lambda i, j: [(3, i)], 3, ONE_AT_A_TIME),
  "matmul": (lambda a, b: (a @ b).realize(), lambda k, m: [(3, k), (k, 5)], lambda i, j: [(3, i), (i, 5)], 3,
             ONE_AT_A_TIME),
  "two_vars_plus1": (lambda a, b: (a @ b + 1).realize(), lambda k, m: [(k, 3), (3, m)], lambda i, j: [(i, 3), (3, j)], 4,
                     ONE_AT_A_TIME),
  "cat_dim1_two_vars": (lambda a, b: a.cat(b, dim=1).realize(), lambda k, m: [(3, k), (3, m)],
                        lambda i, j: [(3, i), (3, j)], 4, ONE_AT_A_TIME),
  # (captured at a length of 1: the softmax's reduces are expanded to it, so they get buffers as at any other length)
  "attention": (lambda q, k, v: q.transpose(1, 2).scaled_dot_product_attention(k.transpose(1, 2), v.transpose(1, 2))
                .realize(), lambda k, m: [(2, 1, 4, 8), (2, k, 4, 8), (2, k, 4, 8)],
                lambda i, j: [(2, 1, 4, 8), (2, i, 4, 8), (2, i, 4, 8)], 3, ONE_AT_A_TIME),
}

@pytest.mark.parametrize("name", list(RESHAPED_JIT))
def test_inputs_reshaped_to_variables_replay_as_tinygrad_symbolic_jit(name):
  """tinygrad's test_symbolic_jit as written: new tensors at every call, `a.reshape(3, vi)` to a Variable bound to
  their length (a reshape to the same sizes was dropped, so nothing was symbolic: every call ran the function). One
  Variable changes at a time, and some are 1 (a length of 1 isn't a broadcast, a reduce over it stays a loop): each
  Variable is checked at a second value before the capture replays, against numpy."""
  from fusegrad import TinyJit
  fxn, shapes, sym_shapes, want_calls, values = RESHAPED_JIT[name]
  rng, calls = np.random.default_rng(0), []
  jf = TinyJit(lambda *a: calls.append(1) or fxn(*a))
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # (no fallback to running every call)
    for k, m in values:
      data = [rng.standard_normal(s).astype(np.float32) for s in shapes(k, m)]
      got = jf(*[Tensor(d).reshape(s) for d, s in zip(data, sym_shapes(*_cut(k, m)))])
      want = fxn(*[Tensor(d) for d in data]).numpy()
      np.testing.assert_allclose(got.numpy().reshape(want.shape), want, atol=1e-5, rtol=1e-5)
  assert len(calls) == want_calls and not jf.by_value

def test_variable_length_kernels_serve_every_value():
  """x[:v] loops to v in its kernels (a SymInt size: the bound value, and the expression): the kernels of two values
  are the same, and only the Variable's value differs; the wrong input shape under a capture still raises."""
  from fusegrad import TinyJit, Device, GlobalCounters
  from fusegrad.engine.state import JitError, STATE
  X = Tensor(A).realize()
  (a, va), (b, vb) = [(X[:, :i].sum(1) * 2).linear_with_vars() for i in (_cut(2)[0], _cut(3)[0])]
  assert [si.ast for si in a] == [si.ast for si in b] and va == {"i": 2} and vb == {"i": 3}
  add, Y = TinyJit(lambda p, q: (p + q).realize()), Tensor(A + 1).realize()
  for k in (1, 2, 3): add(X[0, :_cut(k)[0]], Y[1, :_cut(k)[0]])
  with pytest.raises(JitError, match="inputs changed"): add(X[0, :_cut(2)[0]], Y[:2, :_cut(2)[0]])
  f, n = TinyJit(lambda n: (X[:, :n] + 1).sum().realize()), Variable("n", 1, 9)  # (a range past the axis of 4)
  for k in (1, 2, 3): assert f(n.bind(k)).item() == (A[:, :k] + 1).sum()
  with pytest.raises(IndexError, match=r"\[0, 6\) outside an axis of size 4"): f(n.bind(6))  # (checked before it runs)
  assert f(n.bind(4)).item() == (A + 1).sum()
  row = X[1, 2, :n.bind(3)]  # with a tensor of the same plain length: broadcasts (where, sort), the length stays its
  np.testing.assert_equal(((row + Tensor([3.0, 1.0, 2.0])) * -1).sort()[0].numpy(), np.sort(-(A[1, 2, :3] + [3, 1, 2])))
  assert type(((row + Tensor([3.0, 1.0, 2.0]))).shape[0]) is type(row.shape[0]) is not int
  other = "CPU" if Device.DEFAULT != "CPU" else "PYTHON"  # a copy to another device is the bound value's length
  np.testing.assert_equal((X[:, :n.bind(3)] + 1).to(other).numpy(), A[:, :3] + 1)
  steps = TinyJit(lambda n: (Tensor.arange(n) * 2).realize())  # arange to a Variable (tinygrad's positions)
  for k in (2, 3, 5, 1): assert steps(n.bind(k)).tolist() == list(range(0, 2 * k, 2))
  assert len(steps.jit_cache) == 1 and not steps.by_value
  with pytest.raises(JitError, match="n is bound to 2 and to 3 in one call"): add(X[0, :n.bind(2)], Y[1, :n.bind(3)])
  # the process's counters stay plain ints (a copy's size as a SymInt made global_mem an expression that grew with
  # every kernel run after it: 90 MB over a 10,000-step training loop)
  assert Tensor.rand(X[0, 0, :n.bind(3)].shape[0]).shape == (3,)  # (so does the count of random numbers drawn)
  assert [type(getattr(GlobalCounters, k)) for k in ("global_ops", "global_mem", "mem_used")] == [int] * 3
  assert type(STATE.rng_counter) is int

def test_kv_cache_attention_as_tinygrad_writes_it():
  """tinygrad's transformer decode step: the new key/value written into the cache at Variable start_pos, attention over
  cache[:start_pos + 1]; against numpy, plain and under TinyJit."""
  from fusegrad import Variable, TinyJit
  MAX, H, D = 8, 2, 4
  xs = np.random.default_rng(0).standard_normal((1, 6, H * D)).astype(np.float32)
  def attend(self, x, start_pos):
    bsz, seqlen, _ = x.shape
    xk = x.reshape(bsz, seqlen, H, D)
    if not hasattr(self, "cache_kv"): self.cache_kv = Tensor.zeros(2, bsz, MAX, H, D).contiguous().realize()
    self.cache_kv.shrink((None, None, (start_pos, start_pos + seqlen), None, None)).assign(Tensor.stack(xk, xk)).realize()
    keys = self.cache_kv[0].shrink((None, (0, start_pos + seqlen), None, None)) if start_pos > 0 else xk
    out = xk.transpose(1, 2).scaled_dot_product_attention(keys.transpose(1, 2), keys.transpose(1, 2))
    return out.transpose(1, 2).reshape(bsz, seqlen, -1).realize()
  def want(t):
    q, k = xs[0, t].reshape(H, D), xs[0, :t + 1].reshape(t + 1, H, D)
    s = np.einsum("hd,thd->ht", q, k) / np.sqrt(D)
    p = np.exp(s - s.max(1, keepdims=True))
    return np.einsum("ht,thd->hd", p / p.sum(1, keepdims=True), k).reshape(-1)
  for jit in (False, True):
    layer = type("Attention", (), {"__call__": attend})()
    call = TinyJit(layer.__call__) if jit else layer
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")  # (TinyJit's: it runs every call)
      for t in range(6):
        got = call(Tensor(xs[:, t:t + 1]), Variable("start_pos", 1 if t else 0, MAX).bind(t))
        np.testing.assert_allclose(got.numpy()[0, 0], want(t), atol=1e-5, rtol=1e-5)

@pytest.mark.parametrize("index", ["v:v+1, :", "v:v+1", "1:3, v:v+1", "v:v+2, 0:1"])
def test_assign_through_variable_slice(index):
  """cache[v:v+1, :].assign(x), a window cut by indexing at a Variable, writes into cache as the same shrink does (the
  write was lost); numpy with v's value is the reference."""
  from fusegrad import Variable
  cache, ref = Tensor.arange(12).reshape(4, 3).float().contiguous().realize(), np.arange(12.0).reshape(4, 3)
  v = Variable("v", 0, 2).bind(1)
  ref_index = index.replace("v", "1")
  eval(f"cache[{index}]", {"cache": cache, "v": v}).assign(Tensor(np.full(eval(f"ref[{ref_index}]").shape, -1.0)))
  exec(f"ref[{ref_index}] = -1")
  np.testing.assert_equal(cache.numpy(), ref)

def test_assign_through_variable_shrink(count_compiles):
  """A KV cache written at a Variable position (`cache.shrink((None, (p, p + 2), None)).assign(x)`), under TinyJit and
  lazily: the writes land in the cache's buffer, one compiled kernel set for every position."""
  from fusegrad import Variable, TinyJit
  cache, ref = Tensor.zeros(2, 6, 3).contiguous().realize(), np.zeros((2, 6, 3), np.float32)
  p = Variable("p", 0, 4)
  @TinyJit
  def step(x, pos):
    cache.shrink((None, (pos, pos + 2), None)).assign(x).realize()
    return cache.sum(1).realize()
  rng = np.random.default_rng(0)
  for k in [0, 3, 1, 4, 2]:
    x = rng.random((2, 2, 3), dtype=np.float32)
    out = step(Tensor(x), p.bind(k))
    ref[:, k:k + 2] = x
    np.testing.assert_allclose(cache.numpy(), ref, rtol=1e-6)
    np.testing.assert_allclose(out.numpy(), ref.sum(1), rtol=1e-5)
    if k == 0: first = len(count_compiles)
  assert len(count_compiles) == first  # the later positions compiled nothing
  q = Variable("q", 0, 3).bind(1)
  window = cache.shrink(((0, 1), (q, q + 3), None))
  window.assign(Tensor.ones(1, 3, 3))
  ref[0:1, 1:4] = 1
  np.testing.assert_allclose(window.numpy(), ref[0:1, 1:4])
  np.testing.assert_allclose(cache.numpy(), ref)
  cache.shrink(((1, 2), (q, q + 2), None)).assign(Tensor.full((1, 2, 3), 7.0))  # the window left behind: written now
  ref[1:2, 1:3] = 7
  assert cache.sum().item() == pytest.approx(ref.sum(), rel=1e-6)  # tinygrad's test_assign_slice_then_read

def test_computed_index_out_of_range_fails_backward_too():
  # the bounds check rides on what backward reads as well: the gradient of y[bad] is an IndexError, as torch's y[bad]
  y = Tensor(np.ones(3, np.float32), requires_grad=True)
  y[Tensor([1, 2]) * 2].sum().backward()
  with pytest.raises(IndexError, match="out of bounds"): y.grad.numpy()

def test_setitem_with_an_empty_other_axis_writes_nothing_as_torch():
  for shape, idx in [((2, 2), (Tensor([0]), slice(2, None))), ((2, 2), (slice(2, None), Tensor([0]))),
                     ((2, 0), (Tensor([0]),))]:
    x, tx = Tensor.zeros(*shape).contiguous().realize(), torch.zeros(*shape)
    x[idx] = 1.0
    tx[tuple(torch.tensor(i.numpy()) if isinstance(i, Tensor) else i for i in idx)] = 1.0
    np.testing.assert_equal(x.numpy(), tx.numpy())

def test_empty_list_index_and_unbroadcastable_indices_as_torch():
  assert Tensor.zeros(3, 4)[[]].shape == tuple(torch.zeros(3, 4)[[]].shape) == (0, 4)
  x = Tensor.ones(3, 4).contiguous().realize()
  x[[]] = 5.0
  np.testing.assert_equal(x.numpy(), np.ones((3, 4)))
  with pytest.raises(IndexError): torch.zeros(3, 4)[torch.tensor([0, 1]), torch.tensor([0, 1, 2])]
  with pytest.raises(IndexError, match=r"\(2,\) and \(3,\)"): Tensor.zeros(3, 4)[Tensor([0, 1]), Tensor([0, 1, 2])]

def test_writes_that_cannot_reach_the_buffer_at_a_variable_are_refused():
  # x[v] at a Variable is a copy (a gather) and a reshape of a window is not the window: the assign left x unchanged
  i = Variable("i", 0, 3)
  a = Tensor.zeros(4).contiguous().realize()
  with pytest.raises(IndexError, match="window"): a[i.bind(2)].assign(Tensor(5.0)).realize()
  with pytest.raises(IndexError, match="window"): a[i.bind(2):i.bind(2) + 1].reshape(()).assign(Tensor(5.0))
  a[i.bind(2):i.bind(2) + 1].assign(Tensor([5.0])).realize()
  np.testing.assert_equal(a.numpy(), [0, 0, 5, 0])

def test_one_variable_bound_to_two_values_in_one_kernel_is_refused():
  i, x = Variable("i", 0, 3), Tensor([10.0, 20.0, 30.0, 40.0]).realize()
  with pytest.raises(RuntimeError, match="bind mismatch on i: bound to 1 and to 2"):  # (tinygrad's error)
    (x[i.bind(1)] - 2 * x[i.bind(2)]).item()
  assert (x[i.bind(1)] - 1).item() == 19 and (x[i.bind(2)] - 1).item() == 29

@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence")
def test_a_list_holding_sequences_slices_or_tensors_is_a_tuple_index_as_torch():
  # torch (and tinygrad) read x[[rows, cols]] as x[rows, cols], numpy >= 1.23 as one array index
  x_np = np.arange(20).reshape(4, 5)
  x, xt = Tensor(x_np), torch.tensor(x_np)
  for idx in ([[0, 0], [0, 1]], [(0, 3), (1, 2)], [[-1], [0]], [slice(None), [1, 3]], [None, 1]):
    assert x[idx].tolist() == xt[idx].tolist(), idx
  assert x[[Tensor([0, 0]), Tensor([0, 1])]].tolist() == [0, 1]
  assert x[[2, 0]].tolist() == x_np[[2, 0]].tolist()  # a flat list of ints stays one index
  y = Tensor.zeros(3, 3, dtype=dtypes.int32).contiguous()
  y[[[0, 2], [1, 0]]] = 7
  assert y.tolist() == [[0, 7, 0], [0, 0, 0], [7, 0, 0]]

def test_variables_and_their_expressions_act_as_python_ints_with_tensors():
  v = Variable("v", 0, 10).bind(2)
  assert Tensor(v).dtype == dtypes.int32 and (Tensor(v) + 3).item() == 5 and Tensor(v * 4).item() == 8
  assert (Tensor(3) * (v * 4)).item() == 24 and (Tensor([1, 2]) + (v + 1)).tolist() == [4, 5]
  assert Tensor.full((3,), v).tolist() == [2, 2, 2]
  assert (Tensor.ones(3, dtype=dtypes.int8) * v).dtype == dtypes.int8  # as a Python int: the tensor's dtype
  with pytest.raises(ValueError, match="int32"): Variable("b", 0, 2 ** 40)  # a kernel argument would cut it

def test_uop_variable_is_tinygrads_spelling_of_variable():
  from fusegrad.uop.ops import UOp
  v = UOp.variable("start_pos", 0, 3)
  assert Tensor([10, 20, 30, 40])[v.bind(2)].item() == 30 and v.arg == ("start_pos", 0, 3)
