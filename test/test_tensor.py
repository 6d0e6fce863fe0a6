"""Tensor basics: realize, reading values, copies and views, devices, assign, properties, autograd entry points,
laziness, and errors for bad input."""
import pytest, torch
import numpy as np
from fusegrad import Tensor, dtypes, Device, GlobalCounters
from fusegrad.engine.runner import CopyRunner
from test.helpers import helper_test_op

OTHER = "PYTHON" if Device.DEFAULT != "PYTHON" else "CPU"

# *** realize and reading values ***
def test_realize_returns_self():
  a = Tensor([1.0, 2.0]) + 1
  assert a.realize() is a and a.tolist() == [2.0, 3.0]

def test_realize_others():
  a = Tensor([1.0, 2.0])
  b, c, d = a + 1, a * 2, (a - 1).sum()
  GlobalCounters.reset()
  b.realize(c, d)
  n = GlobalCounters.kernel_count
  assert n >= 1
  assert b.tolist() == [2.0, 3.0] and c.tolist() == [2.0, 4.0] and d.item() == 1.0
  assert GlobalCounters.kernel_count == n  # reading realized tensors runs nothing
  Tensor.realize(b, c)
  assert GlobalCounters.kernel_count == n

def test_building_graphs_runs_nothing():
  GlobalCounters.reset()
  x = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
  y = Tensor.rand(2, 2)
  z = ((x @ y).relu().sum(1) + x[0, ::-1]).softmax(0).reshape(1, 2).pad((1, 1)).flip(1).cumsum(1)
  loss = z.mean() + x.std() + y.max()
  loss.backward()
  assert GlobalCounters.kernel_count == 0
  loss.realize()
  assert GlobalCounters.kernel_count > 0

def test_numpy():
  for dt, npdt in [(dtypes.float32, np.float32), (dtypes.int32, np.int32), (dtypes.bool, np.bool_), (dtypes.float16, np.float16),
                   (dtypes.uint8, np.uint8), (dtypes.int64, np.int64), (dtypes.float64, np.float64)]:
    a = Tensor([[1, 0, 3]], dtype=dt).numpy()
    assert a.dtype == npdt and a.shape == (1, 3)
    np.testing.assert_equal(a, np.array([[1, 0, 3]], dtype=npdt))
  assert Tensor(2.5).numpy().shape == () and Tensor.zeros(2, 0).numpy().shape == (2, 0)
  assert Tensor([1.0, 2.0]).bfloat16().numpy().dtype == np.float32
  np.testing.assert_equal(np.asarray(Tensor([1, 2])), [1, 2])

def test_numpy_of_views():
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  np.testing.assert_equal(Tensor(a).T.numpy(), a.T)
  np.testing.assert_equal(Tensor(a)[1:, ::2].numpy(), a[1:, ::2])
  np.testing.assert_equal(Tensor(a).reshape(2, 6)[1].numpy(), a.reshape(2, 6)[1])

def test_item():
  assert Tensor(3.5).item() == 3.5 and Tensor([[7]]).item() == 7 and isinstance(Tensor([7]).item(), int)
  assert Tensor(True).item() is True and isinstance(Tensor([2.0]).item(), float)
  assert Tensor([1.0, 2.0, 3.0]).sum().item() == 6.0
  with pytest.raises(ValueError): Tensor([1, 2]).item()
  with pytest.raises(ValueError): Tensor.zeros(0).item()

def test_tolist():
  assert Tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
  assert Tensor(3).tolist() == 3 and Tensor([True, False]).tolist() == [True, False]
  assert Tensor.zeros(2, 0).tolist() == [[], []] and Tensor.zeros(0, 2).tolist() == []
  assert Tensor([[1.5]]).T.tolist() == [[1.5]]
  assert Tensor([1.5, -2.0], dtype=dtypes.float16).tolist() == [1.5, -2.0]

def test_data():
  d = Tensor([[1, 2], [3, 4]]).data()
  assert isinstance(d, memoryview) and d.shape == (2, 2) and d.tolist() == [[1, 2], [3, 4]]
  assert Tensor([1.5, 2.5]).data().tolist() == [1.5, 2.5] and Tensor([1.5, 2.5]).data().format == "f"
  assert Tensor([[1.0, 2.0], [3.0, 4.0]]).T.data().tolist() == [[1.0, 3.0], [2.0, 4.0]]

def test_bool_len_iter():
  assert bool(Tensor([1.0])) and not bool(Tensor(0))
  with pytest.raises(RuntimeError): bool(Tensor([1, 2]))
  assert len(Tensor.zeros(3, 2)) == 3
  with pytest.raises(TypeError): len(Tensor(1.0))
  assert [t.tolist() for t in Tensor([[1, 2], [3, 4]])] == [[1, 2], [3, 4]]

# *** properties ***
def test_properties():
  x = Tensor.zeros(2, 3, 4, dtype=dtypes.int16)
  assert x.shape == (2, 3, 4) and x.dtype == dtypes.int16 and x.device == Device.DEFAULT
  assert x.numel() == 24 and x.ndim == 3 and x.size() == (2, 3, 4) and x.size(1) == 3 and x.size(-1) == 4
  assert x.element_size() == 2 and x.nbytes() == 48 and not x.is_floating_point() and x.float().is_floating_point()
  s = Tensor(1.0)
  assert s.shape == () and s.ndim == 0 and s.numel() == 1
  with pytest.raises(IndexError): x.size(3)

# *** contiguous / clone / detach ***
def test_contiguous():
  helper_test_op([(3, 4)], lambda x: x.T.contiguous())
  helper_test_op([(3, 4)], lambda x: x[1:, ::2].contiguous() * 2)

def test_clone():
  helper_test_op([(3, 4)], lambda x: x.clone() * 2)
  x = Tensor([1.0, 2.0, 3.0])
  c = x.clone()
  assert c.tolist() == [1.0, 2.0, 3.0] and c.shape == x.shape and c.dtype == x.dtype

def test_clone_to_device():
  x = Tensor([1.0, 2.0, 3.0])
  other = "PYTHON" if x.device != "PYTHON" else "CPU"
  c = x.clone(other)
  assert c.device == other and c.tolist() == [1.0, 2.0, 3.0]
  assert x.clone(x.device).device == x.device

def test_clone_carries_grad_as_tinygrad():  # tinygrad clones .grad along (torch's clone has none)
  a = Tensor.rand(4, 4, requires_grad=True)
  (a * 5).mean().backward()
  b = a.clone()
  assert b.grad is not None and b.grad is not a.grad
  np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy())
  assert Tensor([1.0]).clone().grad is None

def test_clone_has_its_own_buffer():  # UOp.buffer: tinygrad's name for the memory a realized node lives in
  a = Tensor.rand(4, 4).realize()
  b = a.clone().realize()
  assert a.uop.base.buffer is not b.uop.base.buffer and a[1:].uop.buffer is a.uop.buffer
  with pytest.raises(RuntimeError, match="realize"): (a + 1).uop.buffer
  assert b.uop.has_buffer_identity() and b.reshape(16).uop.has_buffer_identity()
  assert not (a + 1).uop.has_buffer_identity() and not a[1:].uop.has_buffer_identity()
  c = Tensor(2.0).clone()  # a constant's clone gets memory of its own once realized
  assert c.numpy() == 2.0 and c.uop.has_buffer_identity()

@pytest.mark.parametrize("write", ["assign", "setitem", "iadd"])
def test_clone_is_independent(write):
  x = Tensor([1.0, 2.0, 3.0]).realize()
  c = x.clone()  # not computed yet: it must still hold the values from before the write
  if write == "assign": x.assign(Tensor([5.0, 5.0, 5.0])).realize()
  elif write == "setitem": x[0] = 100.0
  else:
    x += 1
    x.realize()
  assert c.tolist() == [1.0, 2.0, 3.0]
  c2 = x.clone().realize()
  x.assign(x * 0).realize()
  assert c2.tolist() != [0.0, 0.0, 0.0]

def test_clone_of_view_is_independent():
  x = Tensor([[1.0, 2.0], [3.0, 4.0]]).realize()
  c = x.T.clone()
  x[0] = 0.0
  assert c.tolist() == [[1.0, 3.0], [2.0, 4.0]] and x.tolist() == [[0.0, 0.0], [3.0, 4.0]]

def test_clone_requires_grad():
  x = Tensor([1.0, 2.0], requires_grad=True)
  (x.clone() * 3).sum().backward()
  assert x.grad.tolist() == [3.0, 3.0]

def test_detach():
  x = Tensor([1.0, 2.0], requires_grad=True)
  d = x.detach()
  assert d.requires_grad is False and d.tolist() == [1.0, 2.0]
  (x * 2 + d * 5).sum().backward()
  assert x.grad.tolist() == [2.0, 2.0] and d.grad is None

# *** devices ***
def test_to_device():
  x = Tensor([[1.0, 2.0], [3.0, 4.0]])
  y = x.to(OTHER)
  assert y.device == OTHER and y.tolist() == x.tolist() and (y * 2).device == OTHER
  assert y.to(Device.DEFAULT).tolist() == x.tolist() and y.to(Device.DEFAULT).device == Device.DEFAULT
  assert x.to(Device.DEFAULT) is x
  assert x.T.to(OTHER).tolist() == [[1.0, 3.0], [2.0, 4.0]]
  assert Tensor([1, 2], dtype=dtypes.int8).to(OTHER).dtype == dtypes.int8

def test_to_device_is_lazy():
  x = Tensor([1.0, 2.0]) + 1
  GlobalCounters.reset()
  y = x.to(OTHER) * 3
  assert GlobalCounters.kernel_count == 0
  assert y.tolist() == [6.0, 9.0]

def test_to_device_gradient():
  x = Tensor([1.0, 2.0], requires_grad=True)
  (x.to(OTHER) * Tensor([3.0, 4.0], device=OTHER)).sum().backward()
  assert x.grad.device == x.device and x.grad.tolist() == [3.0, 4.0]

def test_to_inplace():
  x = Tensor([1.0, 2.0])
  x.to_(OTHER)
  assert x.device == OTHER and x.tolist() == [1.0, 2.0]

def test_mixing_devices_errors():
  a, b = Tensor([1.0, 2.0]), Tensor([1.0, 2.0], device=OTHER)
  for f in [lambda: a + b, lambda: a * b, lambda: a @ b, lambda: a.cat(b), lambda: Tensor.stack(a, b), lambda: (a > 0).where(b, 0),
            lambda: a.maximum(b), lambda: a.realize().assign(b)]:
    with pytest.raises(ValueError, match="device"): f()
  assert (a + b.to(a.device)).tolist() == [2.0, 4.0]

# *** assign ***
def test_assign():
  x = Tensor([1.0, 2.0, 3.0]).realize()
  x.assign(x + 1).realize()
  assert x.tolist() == [2.0, 3.0, 4.0]
  x.assign(x * x)
  assert x.tolist() == [4.0, 9.0, 16.0]

def test_assign_returns_self_and_keeps_buffer():
  x = Tensor.zeros(3).contiguous().realize()
  assert x.assign(Tensor([1.0, 2.0, 3.0])) is x
  assert x.tolist() == [1.0, 2.0, 3.0]

def test_assign_flip_hazard():
  # every output reads an element another output overwrites: the old values must be read first
  x = Tensor([1.0, 2.0, 3.0, 4.0, 5.0]).realize()
  x.assign(x.flip(0)).realize()
  assert x.tolist() == [5.0, 4.0, 3.0, 2.0, 1.0]
  m = Tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]]).realize()
  m.assign(m.T).realize()
  assert m.tolist() == [[1, 4, 7], [2, 5, 8], [3, 6, 9]]
  r = Tensor([1, 2, 3, 4]).realize()
  r.assign(r.roll(1, 0)).realize()
  assert r.tolist() == [4, 1, 2, 3]

def test_assign_into_slice_view():
  x = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
  x[1:3].assign(Tensor([7.0, 8.0])).realize()
  assert x.tolist() == [1.0, 7.0, 8.0, 4.0]
  v = x[::2]
  v.assign(v * 10).realize()
  assert x.tolist() == [10.0, 7.0, 80.0, 4.0] and v.tolist() == [10.0, 80.0]
  m = Tensor.zeros(3, 4).contiguous().realize()
  m[:, 1].assign(Tensor([1.0, 2.0, 3.0])).realize()
  m[2, ::-1].assign(Tensor.arange(4).float()).realize()
  assert m.tolist() == [[0, 1, 0, 0], [0, 2, 0, 0], [3, 2, 1, 0]]

def test_assign_through_a_view_left_behind_writes_the_tensor_as_torch():  # no realize of the view: it is not kept
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  t, tt = Tensor(a).contiguous().realize(), torch.tensor(a)
  t.shrink(((1, 3), (1, 3))).assign(Tensor.ones(2, 2))
  tt[1:3, 1:3].copy_(torch.ones(2, 2))
  t.permute(1, 0)[3].assign(Tensor([7.0, 8.0, 9.0]))
  tt.t()[3].copy_(torch.tensor([7.0, 8.0, 9.0]))
  s = t.sum()  # built between two writes: the value of then
  t[::2, 0].assign(Tensor([-1.0, -2.0]))
  tt[::2, 0].copy_(torch.tensor([-1.0, -2.0]))
  np.testing.assert_equal(t.numpy(), tt.numpy())
  assert s.item() == tt.sum().item() + 1 + 2 + 8  # -1, -2 were 0, 8

@pytest.mark.parametrize("make", ["const", "realized const", "lazy", "lazy realized after the view", "buffer"])
def test_assign_through_a_view_of_a_value_without_buffer_as_numpy(make):  # a constant or lazy value has no buffer
  # numpy's views share memory as torch's do (and np.flip is one); writes through each view, a realize in between
  views = [lambda t: t[1:3, 1:3], lambda t: t.shrink(((0, 2), None)) if isinstance(t, Tensor) else t[0:2],
           lambda t: t.permute(1, 0)[3] if isinstance(t, Tensor) else t.T[3], lambda t: t.reshape(2, 6)[1],
           lambda t: t.flip(1)[0] if isinstance(t, Tensor) else np.flip(t, 1)[0], lambda t: t[::2, ::3],
           lambda t: t.reshape(12), lambda t: t.reshape(2, 2, 3).permute(2, 0, 1)[1:, 1]
           if isinstance(t, Tensor) else t.reshape(2, 2, 3).transpose(2, 0, 1)[1:, 1]]
  for view in views:
    ref = np.ones((3, 4), np.float32) if make.endswith("const") else np.arange(12, dtype=np.float32).reshape(3, 4) * 2
    t = Tensor.ones(3, 4) if make.endswith("const") else Tensor.arange(12).reshape(3, 4).float() * 2
    if make in ("realized const", "buffer"): t = (t.contiguous() if make == "buffer" else t).realize()
    v, old = view(t), ref.copy()
    if make.endswith("view"): t.realize()
    before = t + 0.5  # built before the write: the value of then
    val = np.random.default_rng(0).standard_normal(view(ref).shape).astype(np.float32)
    v.assign(Tensor(val))
    view(ref)[...] = val
    np.testing.assert_equal(t.numpy(), ref)
    np.testing.assert_equal(v.numpy(), view(ref))
    np.testing.assert_equal(before.numpy(), old + 0.5)

@pytest.mark.parametrize("make", ["const", "lazy", "buffer"])
def test_setitem_on_a_view_writes_its_tensor_as_numpy(make):  # a view of a constant or lazy value: it was lost
  t = {"const": Tensor.zeros(3, 4), "lazy": Tensor.arange(12).reshape(3, 4).float() + 1,
       "buffer": Tensor.zeros(3, 4).contiguous().realize()}[make]
  ref = np.zeros((3, 4), np.float32) if make != "lazy" else np.arange(12, dtype=np.float32).reshape(3, 4) + 1
  v, nv = t.permute(1, 0)[1:], ref.T[1:]
  before = t + 0.5
  v[0, 1:] = 5.0
  nv[0, 1:] = 5.0
  v[2] = Tensor([7.0, 8.0, 9.0])
  nv[2] = [7.0, 8.0, 9.0]
  np.testing.assert_equal(t.numpy(), ref)
  np.testing.assert_equal(v.numpy(), nv)
  assert before.numpy().sum() == (0.5 * 12 if make != "lazy" else 78 + 6)

def test_writes_through_views_after_a_setitem_on_the_view_as_numpy():  # the buffer's version changed in between
  t, ref = Tensor.zeros(4).contiguous().realize(), np.zeros(4, np.float32)
  w, nw = t.reshape(2, 2), ref.reshape(2, 2)
  w[...] = Tensor([[1.0, 2.0], [3.0, 4.0]])
  nw[...] = [[1, 2], [3, 4]]
  w.flip(0)[...] = Tensor([[5.0, 6.0], [7.0, 8.0]])
  np.flip(nw, 0)[...] = [[5, 6], [7, 8]]
  w.realize()
  w.flip(0).assign(Tensor([[9.0, 10.0], [11.0, 12.0]]))
  np.flip(nw, 0)[...] = [[9, 10], [11, 12]]
  np.testing.assert_equal(t.numpy(), ref)
  np.testing.assert_equal(w.numpy(), nw)

def test_assign_into_a_padded_tensor_as_torch():  # pad (eye is built by one) makes a new tensor, not a view
  e, te = Tensor.eye(3), torch.eye(3)
  e[0].assign(Tensor([5.0, 6.0, 7.0]))
  te[0].copy_(torch.tensor([5.0, 6.0, 7.0]))
  e[1, 2] = 4.0
  te[1, 2] = 4.0
  np.testing.assert_equal(e.numpy(), te.numpy())

def test_assign_through_a_bitcast_view_as_torch():  # torch: x.view(dtype) shares memory, copy_ writes through it
  a = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
  bits = np.array([4.0, 3.0], np.float32).view(np.int32)
  t, tt = Tensor(a).realize(), torch.tensor(a)
  t[1:3].bitcast(dtypes.int32).bitcast(dtypes.uint32).assign(Tensor(bits.view(np.uint32)))
  tt[1:3].view(torch.int32).copy_(torch.tensor(bits))
  np.testing.assert_equal(t.numpy(), tt.numpy())

def test_assign_broadcast_and_cast():
  x = Tensor.zeros(2, 3).contiguous().realize()
  x.assign(5)
  assert x.tolist() == [[5.0] * 3] * 2
  x.assign(Tensor([1.0, 2.0, 3.0]))
  assert x.tolist() == [[1.0, 2.0, 3.0]] * 2
  i = Tensor([1, 2]).realize()
  i.assign(Tensor([1.9, -2.9]))
  assert i.dtype == dtypes.int32 and i.tolist() == [1, -2]

def test_assign_lazy_readers_before():
  x = Tensor([1.0, 2.0]).realize()
  y = x + 1  # built before the assign, computed in the same realize: sees the old values
  x.assign(x * 10)
  Tensor.realize(y, x)
  assert y.tolist() == [2.0, 3.0] and x.tolist() == [10.0, 20.0]

def test_value_built_before_an_assign_and_realized_after_it():
  x = Tensor([1.0, 2.0]).realize()
  y, v = x * 10, x.reshape(2, 1)  # y: a value from the old x; v: a view of x's storage
  x.assign(x + 1).realize()
  x.assign(x * 2).realize()
  assert y.tolist() == [10.0, 20.0] and v.tolist() == [[4.0], [6.0]] and x.tolist() == [4.0, 6.0]
  assert (v + 0).tolist() == [[4.0], [6.0]]  # built after the writes: the new contents

def test_chain_of_assigns_and_reads_between_them():
  x = Tensor([1.0, 2.0]).realize()
  x.assign(x + 1)
  a = x * 1  # reads the first write
  x.assign(x * 3)
  b = x * 1
  x[0] = 0.0  # a write through a view: realizes both pending assigns first
  assert a.tolist() == [2.0, 3.0] and b.tolist() == [6.0, 9.0] and x.tolist() == [0.0, 9.0]

def test_two_writes_read_each_other():
  # each new value reads the other tensor's old value: one of them is copied aside within the schedule
  a, b = Tensor([1.0, 2.0]).realize(), Tensor([10.0, 20.0]).realize()
  new_a, new_b = a + b.flip(0), b - a
  a.assign(new_a)
  b.assign(new_b)
  Tensor.realize(a, b)
  assert a.tolist() == [21.0, 12.0] and b.tolist() == [9.0, 18.0]
  assert new_a.tolist() == [21.0, 12.0] and new_b.tolist() == [9.0, 18.0]
  c, d = Tensor([3.0, 4.0]).realize(), Tensor([6.0, 8.0]).realize()
  c.assign(c + d.sum())
  d.assign(d + c.sum())  # reads c's new value
  Tensor.realize(c, d)
  assert c.tolist() == [17.0, 18.0] and d.tolist() == [41.0, 43.0]

def count_copies(monkeypatch) -> list:
  import fusegrad.engine.realize as realize
  copies, run = [], realize.run_exec_items
  def counting(items, var_vals=None):
    copies.extend(ei for ei in items if isinstance(ei.runner, CopyRunner))
    return run(items, var_vals)
  monkeypatch.setattr(realize, "run_exec_items", counting)
  return copies

def test_writes_copy_old_contents_only_when_something_reads_them(monkeypatch):
  copies = count_copies(monkeypatch)
  x = Tensor.zeros(4, 5).contiguous().realize()
  for i in range(4): x[i] = float(i)  # a KV-cache style update: no copy of the whole buffer per write
  x[0] = x[1] * 2
  x.assign(x + 1).realize()
  assert x.tolist()[:2] == [[3.0] * 5, [2.0] * 5] and len(copies) == 0
  y = x.sum()  # built before the next write and read after it: x's old contents are copied once, for y
  x.assign(x * 0).realize()
  assert len(copies) == 1 and y.item() == 60.0 and x.sum().item() == 0.0

def test_equal_graphs_are_separate_tensors():
  # equal graphs are one node: realizing two of them must still give two tensors, each with its own storage
  a, b = Tensor.zeros(3).contiguous(), Tensor.zeros(3).contiguous()
  Tensor.realize(a, b)
  a.assign(a + 1).realize()
  assert a.tolist() == [1.0, 1.0, 1.0] and b.tolist() == [0.0, 0.0, 0.0]
  x = Tensor([1.0, 2.0])
  p, q = (x * 2).realize(), (x * 2).realize()
  p.assign(Tensor([0.0, 0.0])).realize()
  assert q.tolist() == [2.0, 4.0] and (x * 2).tolist() == [2.0, 4.0]

def test_overwritten_values_are_not_reused():
  z = Tensor.arange(4)
  z[::2] = 0
  assert z.tolist() == [0, 1, 0, 3] and Tensor.arange(4).tolist() == [0, 1, 2, 3]

def test_views_share_storage():
  y = (Tensor([1.0, 2.0]) * 3).realize()
  v = y.reshape(2, 1).realize()
  y[0] = 7.0
  assert v.tolist() == [[7.0], [6.0]]
  GlobalCounters.reset()
  y.numpy(), y.numpy()
  assert GlobalCounters.kernel_count == 0  # reading a realized tensor copies nothing on the device

def test_assign_unrealized_target():
  x = Tensor([1.0, 2.0]) * 2
  x.assign(Tensor([0.0, 1.0]))
  assert x.tolist() == [0.0, 1.0]

def test_assign_errors():
  x = Tensor.zeros(4).contiguous().realize()
  with pytest.raises(ValueError, match=r"\(2,\).*\(4,\)"): x.assign(Tensor([1.0, 2.0]))
  with pytest.raises(ValueError): x.assign(Tensor([1.0, 2.0, 3.0, 4.0], device=OTHER))

def test_inplace_operators():
  x = Tensor([1.0, 2.0]).realize()
  x += 1
  x *= 3
  x -= Tensor([1.0, 1.0])
  x /= 2
  assert x.tolist() == [2.5, 4.0]

# *** requires_grad and autograd entry points ***
def test_requires_grad_values():
  assert Tensor([1.0]).requires_grad is None
  a, b, c = Tensor([1.0], requires_grad=True), Tensor([2.0], requires_grad=False), Tensor([3.0])
  assert (a * b).requires_grad is True and (b * c).requires_grad is not True and (a + 1).requires_grad is True
  c.requires_grad = True
  assert c.requires_grad is True and c.requires_grad_(False) is c and c.requires_grad is False

def test_requires_grad_false_gets_no_grad():
  a, b, c = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0], requires_grad=False), Tensor([5.0, 6.0])
  (a * b * c).sum().backward()
  assert a.grad.tolist() == [15.0, 24.0] and b.grad is None and c.grad.tolist() == [3.0, 8.0]

def test_readme_autograd_example():
  # the seed's example, verbatim: requires_grad None (the default) means "if something needs it"
  x = Tensor.eye(3).clone()
  y = Tensor([[2.0, 0, -2.0]])
  z = y.matmul(x).sum(); z.backward()
  assert x.grad.tolist() == [[2.0, 2.0, 2.0], [0.0, 0.0, 0.0], [-2.0, -2.0, -2.0]]
  assert y.grad.tolist() == [[1.0, 1.0, 1.0]]

def test_requires_grad_none_gets_grads_as_tinygrad():
  # every floating, non-constant tensor in the graph whose requires_grad is not False; held intermediates too
  x, w = Tensor([[1.0, 2.0]]), Tensor([[3.0], [4.0]])
  idx, const, off = Tensor([1, 0]), Tensor.ones(1, 1), Tensor([[5.0]], requires_grad=False)
  h = x @ w
  loss = ((h + const) * off + x[0][idx].sum()).sum()
  loss.backward()
  tx, tw = torch.tensor([[1.0, 2.0]], requires_grad=True), torch.tensor([[3.0], [4.0]], requires_grad=True)
  th = tx @ tw
  th.retain_grad()
  ((th + 1) * 5 + tx[0][torch.tensor([1, 0])].sum()).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
  np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy())
  np.testing.assert_allclose(h.grad.numpy(), th.grad.numpy())
  assert idx.grad is None and off.grad is None  # integers, opted out
  assert const.grad is None  # a constant: equal ones are one node, their gradients would mix
  with pytest.raises(RuntimeError, match="nothing in the graph"): Tensor([1, 2]).sum().backward()

def test_requires_grad_none_with_layers_and_optimizers():
  from fusegrad import nn
  lin, norm = nn.Linear(3, 2), nn.LayerNorm(2)
  x = Tensor([[1.0, -2.0, 0.5]])
  norm(lin(x)).square().sum().backward()
  assert all(p.grad is not None for p in (lin.weight, lin.bias, norm.weight, norm.bias, x))
  w = Tensor([1.0, 2.0])  # requires_grad None: an optimizer makes it True
  opt = nn.optim.SGD([w], lr=0.5)
  (w * w).sum().backward()
  with Tensor.train(): opt.step()
  assert w.requires_grad is True and w.tolist() == [0.0, 0.0]

def test_is_param_separates_parameters_from_buffers():
  """tinygrad 0.14: every tensor is a parameter until is_param_(False); optimizers update the parameters and only
  realize the buffers (nn.BatchNorm's running stats). Checked against tinygrad itself, which builds the same lists."""
  import tinygrad
  from fusegrad import nn
  for lib in (tinygrad, __import__("fusegrad")):
    x = lib.Tensor([1.0, 2.0])
    assert x.is_param is True and x.is_param_(False) is x and x.is_param is False and x.is_param_().is_param is True
    bn = lib.nn.BatchNorm(3)
    opt = lib.nn.optim.SGD(lib.nn.state.get_parameters(bn), lr=0.1)
    assert [t is bn.weight or t is bn.bias for t in opt.params] == [True, True]
    assert {id(t) for t in opt.buffers} == {id(bn.running_mean), id(bn.running_var), id(bn.num_batches_tracked)}
  cache = Tensor.zeros(2, 3).contiguous().is_param_(False)  # a buffer: realized by a step, never updated
  w = Tensor([1.0, 2.0])
  opt = nn.optim.SGD([w, cache], lr=0.5)
  assert opt.params == [w] and opt.buffers == [cache] and cache.requires_grad is False
  cache.assign(cache + 1)
  (w * w).sum().backward()
  with Tensor.train(): Tensor.realize_all(opt.schedule_step())
  assert w.tolist() == [0.0, 0.0] and cache.tolist() == [[1.0] * 3] * 2

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_from_blob_shares_memory_like_torch_frombuffer(device):
  arr = np.arange(6, dtype=np.float32)
  t = Tensor.from_blob(arr.ctypes.data, (2, 3), dtype=dtypes.float32, device=device)
  tt = torch.frombuffer(arr, dtype=torch.float32).reshape(2, 3)
  assert t.device == device and t.shape == (2, 3)
  arr[0] = 100  # no copy: both see the change
  np.testing.assert_equal((t + 1).numpy(), (tt + 1).numpy())
  t.assign(t * 2).realize()  # writes go into the caller's memory (torch's tensor on it sees them too)
  assert arr.tolist() == [200, 2, 4, 6, 8, 10] and tt.tolist() == t.tolist() == [[200, 2, 4], [6, 8, 10]]

def test_linear_with_vars():
  """The kernels realize() runs and the Variable values they read, by name (tinygrad's linear_with_vars gives the same
  var_vals for the same graph)."""
  import tinygrad
  from fusegrad import Variable
  for lib, var in ((tinygrad, tinygrad.Variable), (__import__("fusegrad"), Variable)):
    i = var("i", 0, 5).bind(2)
    y = lib.Tensor.empty(10, 4).shrink(((i, i + 3), None)) * 2
    assert y.linear_with_vars()[1] == {"i": 2}
    assert (lib.Tensor.empty(4) + 1).linear_with_vars()[1] == {}
  x = Tensor(np.arange(40, dtype=np.float32).reshape(10, 4))
  items, var_vals = (x[i:i + 3] * 2).linear_with_vars()
  assert len(items) == 1 and var_vals == {"i": 2}

def test_backward_accumulates():
  x = Tensor([1.0, 2.0], requires_grad=True)
  (x * x).sum().backward()
  assert x.grad.tolist() == [2.0, 4.0]
  (x * 3).sum().backward()
  assert x.grad.tolist() == [5.0, 7.0]
  x.grad = None
  (x * 3).sum().backward()
  assert x.grad.tolist() == [3.0, 3.0]

def test_backward_shared_subgraph():
  x = Tensor([1.0, 2.0], requires_grad=True)
  y = x * x
  (y + y * 2 + x).sum().backward()
  assert x.grad.tolist() == [7.0, 13.0]

def test_backward_with_gradient():
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  (x * 2).backward(Tensor([1.0, 0.5, 0.0]))
  assert x.grad.tolist() == [2.0, 1.0, 0.0]
  with pytest.raises(RuntimeError): (x * 2).backward()

def test_backward_after_realize():
  x = Tensor([1.0, 2.0], requires_grad=True)
  y = (x * 3).realize()  # graphs built before a realize still reach x
  (y * x).sum().backward()
  assert x.grad.tolist() == [6.0, 12.0]

def test_backward_through_realized_chain():
  x = Tensor([1.0, 2.0], requires_grad=True)
  y = (x * 2).realize()
  z = y.contiguous().realize()  # a contiguous of a whole buffer is that buffer
  w = z.reshape(2, 1).realize()
  loss = (w.reshape(2) * x).sum().realize()
  loss.backward()
  assert loss.item() == 10.0 and x.grad.tolist() == [4.0, 8.0]

def test_backward_nothing_requires_grad():
  with pytest.raises(RuntimeError): Tensor([1.0], requires_grad=False).sum().backward()
  with pytest.raises(RuntimeError): Tensor([1, 2]).sum().backward()  # integers have no gradient

def test_gradient():
  x, y = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
  z = (x * y + x * x).sum()
  dx, dy = z.gradient(x, y)
  assert dx.tolist() == [5.0, 8.0] and dy.tolist() == [1.0, 2.0]
  assert x.grad is None and y.grad is None  # gradient() doesn't touch .grad
  (g,) = (x * y).gradient(x, gradient=Tensor([1.0, -1.0]))
  assert g.tolist() == [3.0, -4.0]

def test_gradient_second_order():
  x = Tensor([1.0, 2.0, 3.0])
  (dx,) = (x * x * x).sum().gradient(x)
  (ddx,) = dx.sum().gradient(x)
  assert dx.tolist() == [3.0, 12.0, 27.0] and ddx.tolist() == [6.0, 12.0, 18.0]

def test_gradient_errors():
  x = Tensor([1.0, 2.0])
  with pytest.raises(RuntimeError): (x * 2).gradient(x)  # not a scalar
  with pytest.raises(RuntimeError, match="only float"): (x * 2).sum().gradient(Tensor([1, 2]))  # an int target
  with pytest.raises(RuntimeError, match="only float"): x.argmax().gradient(x)  # an int output

def test_gradient_through_everything():
  def f(x, y):
    a = x.reshape(2, 6).permute(1, 0).pad(((1, 0), (0, 1)))[1:, :2]
    b = a.flip(0).expand(2, 6, 2).sum(0) * y[:, None]
    c = b.cat(b * 2, dim=1).softmax(1) + b.max(1, keepdim=True) + x.reshape(2, 6)[:, ::2].mean()
    return (c.cumsum(0) * c.std()).logsumexp(0) + a[torch_or_fg_index(x)].sum()
  def torch_or_fg_index(x): return (torch.tensor([0, 5, 5]) if isinstance(x, torch.Tensor) else Tensor([0, 5, 5]), 1)
  def tf(x, y):
    a = torch.nn.functional.pad(x.reshape(2, 6).permute(1, 0), (0, 1, 1, 0))[1:, :2]
    b = a.flip(0).expand(2, 6, 2).sum(0) * y[:, None]
    c = torch.cat((b, b * 2), 1).softmax(1) + b.amax(1, keepdim=True) + x.reshape(2, 6)[:, ::2].mean()
    return (c.cumsum(0) * c.std()).logsumexp(0) + a[torch_or_fg_index(x)].sum()
  helper_test_op([(3, 4), (6,)], tf, f, atol=1e-5, grad_atol=1e-4)

# *** bad input ***
def test_reshape_error_names_shapes():
  with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 2\)"): Tensor.ones(2, 3).reshape(4, 2)

def test_errors_are_clear():
  x = Tensor.ones(2, 3)
  with pytest.raises(ValueError, match=r"\(2, 3\).*\(4,\)"): x + Tensor.ones(4)
  with pytest.raises(ValueError, match=r"matmul"): x @ Tensor.ones(2, 3)
  with pytest.raises(TypeError): x + "a"
  with pytest.raises(IndexError): x.sum(axis=5)
  with pytest.raises(ValueError): x.permute(0, 0)

def test_numpy_scalars_and_arrays_as_operands():
  a = Tensor([1.0, 2.0])
  assert (a * np.float32(2)).tolist() == [2.0, 4.0] and (a * np.float32(2)).dtype == dtypes.float32
  assert (a + np.arange(2)).tolist() == [1.0, 3.0]
  assert (a > np.float64(1.5)).tolist() == [False, True]

def test_gradient_of_a_target_nothing_flows_to_is_zero():
  x = Tensor([1.0, -2.0], requires_grad=True)
  assert x.sign().sum().gradient(x)[0].tolist() == [0.0, 0.0]  # as torch: used, derivative 0
  assert x.sum().gradient(Tensor([3.0]))[0].tolist() == [0.0]  # not in the graph: zeros, as tinygrad's gradient()

def test_a_second_backward_accumulates_into_the_same_grad_object_as_torch():
  x = Tensor([3.0], requires_grad=True)
  (x * 2)[0].backward()
  old = x.grad
  (x * 3)[0].backward()
  assert x.grad is old and old.tolist() == [5.0]  # torch: x.grad is the same tensor, now 5

def test_max_gradient_over_many_ties_in_half_shares_one():
  # the count of ties was a float16 sum, exact only to 2048: 70000 ties summed to 2.1 (torch: each gets 1/70000)
  t = Tensor.ones(70000, dtype=dtypes.half).contiguous()
  g = t.max().gradient(t)[0]
  np.testing.assert_allclose(g.numpy().astype(np.float64).sum(), 1.0, atol=2e-3)

def test_a_clone_of_a_detached_tensor_gets_a_gradient_as_tinygrad():
  base = Tensor([1.0, 2.0, 3.0, 4.0])
  x = base.detach().clone()
  (x * 2.0).sum().backward()
  assert x.grad.tolist() == [2.0] * 4 and base.grad.tolist() == [0.0] * 4  # detach still blocks it from base

def test_numpy_scalars_act_as_python_numbers_as_torch():
  """A numpy scalar (np.prod of a shape, a value read from an array) is taken where a Python number is, as torch
  takes it: sizes (np.int64) in creation and movement ops, fill values in full/where; a sequence as a fill value is a
  TypeError, as torch's."""
  n, v = np.int64(2), np.float32(1.5)
  assert Tensor.zeros(n, 3).shape == tuple(torch.zeros(n, 3).shape) == (2, 3)
  k = np.prod((3, 4))
  assert Tensor.ones(2, 3, 4).reshape(n, k).shape == tuple(torch.ones(2, 3, 4).reshape(n, k).shape) == (2, 12)
  assert Tensor.ones(1, 3).expand(n, 3).shape == (2, 3) and Tensor.ones(1, 3).permute(np.int32(1), 0).shape == (3, 1)
  np.testing.assert_equal(Tensor.full((2,), v).numpy(), torch.full((2,), v).numpy())
  np.testing.assert_equal(Tensor.full((2,), np.array(2.5)).numpy(), torch.full((2,), 2.5).numpy())
  cond = [True, False]
  np.testing.assert_equal(Tensor(cond).where(v, np.float32(2)).numpy(),
                          torch.where(torch.tensor(cond), v, np.float32(2)).numpy())
  for bad in [(2, 3), [1]]:
    with pytest.raises(TypeError, match="fill_value"): Tensor.full((2,), bad)
    with pytest.raises(TypeError): torch.full((2,), bad)

def test_python_protocols_as_torch():
  # t == None is False (so `t in [None]` works), `x in t` looks at every element, a numpy scalar on the left makes a
  # Tensor, in-place ops refuse a result their dtype can't hold
  assert (Tensor(1.0) == None) is False and (Tensor(1.0) != None) is True  # noqa: E711
  assert Tensor(1.0) not in [None] and (torch.tensor(1.0) in [None]) is False
  assert 4 in Tensor([[1, 2], [3, 4]]) and 5 not in Tensor([[1, 2], [3, 4]]) and 4 in torch.tensor([[1, 2], [3, 4]])
  x = Tensor([1.0, 2.0], requires_grad=True)
  y = np.float64(2.0) * x
  assert isinstance(y, Tensor) and isinstance(np.float64(2.0) * torch.tensor([1.0]), torch.Tensor)
  y.sum().backward()
  assert x.grad.tolist() == [2.0, 2.0]
  for f in (lambda t: t.__itruediv__(2), lambda t: t.__iadd__(2.5)):
    with pytest.raises(RuntimeError): f(torch.tensor([1, 4]))
    with pytest.raises(RuntimeError, match="in-place"): f(Tensor([1, 4]))
  t = Tensor([1, 4, -7])
  t += 2
  t //= 2
  assert t.tolist() == [1, 3, -3] and t.dtype == dtypes.int32

def test_computed_tensors_get_grads_as_tinygrad():
  a = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  c = a * 2
  b = (a * 5).realize()
  (c * 3 + b * 4).sum().backward()
  assert c.grad.tolist() == [3.0] * 3 and b.grad.tolist() == [4.0] * 3 and a.grad.tolist() == [26.0] * 3

def test_to_a_list_of_devices_replicates_as_a_tuple():
  t = Tensor.ones(4, 2)
  assert t.to(["CPU:0", "CPU:1"]).device == ("CPU", "CPU:1") and t.to_(["CPU", "CPU:1"]).device == ("CPU", "CPU:1")

def test_making_an_optimizer_runs_no_kernel_as_tinygrad():
  from fusegrad import nn
  GlobalCounters.reset()
  lin = nn.Linear(4, 3)
  opt = nn.optim.Adam(nn.state.get_parameters(lin))
  assert GlobalCounters.kernel_count == 0  # (tinygrad's stunning_mnist asserts it: one realize for the whole run)
  with Tensor.train():
    lin(Tensor.ones(2, 4)).sum().backward()
    opt.step()
  assert lin.weight.numpy().shape == (3, 4) and GlobalCounters.kernel_count > 0

def test_pickle_and_deepcopy_copy_the_values_as_torch():
  import copy, pickle
  from fusegrad import nn
  lin = nn.Linear(3, 2)
  lin.weight.realize()
  twin = copy.deepcopy(lin)  # a target network, an EMA copy: writes to one must not reach the other
  twin.weight.assign(twin.weight * 0).realize()
  assert lin.weight.abs().sum().item() > 0 and twin.weight.abs().sum().item() == 0
  for t in (Tensor([1.0, 2.0]).realize(), Tensor.rand(3), Tensor([1, 2], dtype=dtypes.bfloat16),
            Tensor([1.0, 2.0, 3.0, 4.0]).shard(("CPU:1", "CPU:2"), 0), Tensor([1.0], requires_grad=True)):
    u = pickle.loads(pickle.dumps(t))
    assert (u.tolist(), u.dtype, u.device, u.uop.axis, u.requires_grad) == (t.tolist(), t.dtype, t.device, t.uop.axis,
                                                                           t.requires_grad)

def test_reading_values_before_backward_keeps_the_gradient_path_as_tinygrad():
  # tinygrad's gradcheck reads out.numpy() and then backpropagates through out: the read must not cut the graph
  W = Tensor(np.full((3, 2), 0.5, dtype=np.float32))
  for read in ("numpy", "tolist", "item"):
    x = Tensor(np.ones((1, 3), dtype=np.float32))
    h = x.dot(W).relu()
    (h.sum() if read == "item" else h).__getattribute__(read)()
    h.sum().backward()
    assert x.grad.tolist() == [[1.0, 1.0, 1.0]], read

def test_backward_through_a_value_whose_inputs_were_overwritten_raises_as_torch():
  # torch: "one of the variables needed for gradient computation has been modified by an inplace operation" (for
  # w * w, which saves w; fusegrad refuses whatever the op saved: it keeps no old version for autograd, see
  # state.drop_stale_defs)
  tw = torch.tensor([[1.0, 2.0]], requires_grad=True)
  tleaf = tw.clone()
  th = tleaf * tleaf
  with torch.no_grad(): tleaf.sub_(1)
  with pytest.raises(RuntimeError, match="inplace"): th.sum().backward()
  w = Tensor([[1.0, 2.0]], requires_grad=True)
  h = (w * w).realize()
  w.assign(w - 1).realize()  # an optimizer step between the forward and the backward
  with pytest.raises(RuntimeError, match="written since"): h.sum().backward()
  # a value read while its input requires_grad None is a leaf again once the input is overwritten (as after realize)
  x = Tensor([1.0, 2.0]).contiguous().realize()
  y = x * 2
  y.numpy()
  x.assign(x + 1).realize()
  z = Tensor([1.0, 1.0], requires_grad=True)
  (y * z).sum().backward()
  assert z.grad.tolist() == [2.0, 4.0] and x.grad is None

def test_an_unbound_variable_s_value_names_it_unbound():  # (tinygrad's test_unbound_variable_tensor matches "unbound")
  from fusegrad import Variable
  with pytest.raises(RuntimeError, match="u is unbound"): Tensor(Variable("u", 1, 10)).item()
  with pytest.raises(RuntimeError, match="unbound"): (Tensor(Variable("u", 1, 10)) + 1).item()
