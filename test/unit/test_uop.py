"""UOp: hash-consing (equal parts are one object), graph walking, and the lazy-graph shape rules."""
import gc, math, pickle
import pytest
from fusegrad.dtype import dtypes
from fusegrad.device import Buffer
from fusegrad.uop.ops import UOp, Ops

def var(name: str) -> UOp: return UOp(Ops.DEFINE_VAR, dtypes.int32, (), (name, 0, 10))

class TestHashConsing:
  def test_same_parts_same_object(self):
    a = UOp(Ops.ADD, dtypes.int32, (var("a"), UOp.const(dtypes.int32, 1)))
    b = UOp(Ops.ADD, dtypes.int32, (var("a"), UOp.const(dtypes.int32, 1)))
    assert a is b
    assert var("a") + 1 is a
  def test_any_part_differs(self):
    a, b = var("a"), var("b")
    base = UOp(Ops.ADD, dtypes.int32, (a, b))
    assert UOp(Ops.MUL, dtypes.int32, (a, b)) is not base
    assert UOp(Ops.ADD, dtypes.int64, (a, b)) is not base
    assert UOp(Ops.ADD, dtypes.int32, (b, a)) is not base
    assert UOp(Ops.ADD, dtypes.int32, (a, b), "x") is not base
  def test_hash_is_identity(self):
    a = var("a") * 3
    assert {a: 1}[var("a") * 3] == 1
    assert len({var("a") * 3, var("a") * 3, var("b") * 3}) == 2
  def test_float_constants_by_bits(self):
    assert UOp.const(dtypes.float32, 0.0) is not UOp.const(dtypes.float32, -0.0)
    assert UOp.const(dtypes.float32, 1.5) is UOp.const(dtypes.float32, 1.5)
    assert UOp.const(dtypes.float32, math.nan) is UOp.const(dtypes.float32, math.nan)
  def test_int_and_float_constants_differ(self):
    assert UOp(Ops.CONST, dtypes.float32, (), 1) is not UOp(Ops.CONST, dtypes.float32, (), 1.0)
  def test_const_converts_to_dtype(self):
    assert UOp.const(dtypes.int32, 2.9).arg == 2
    assert UOp.const(dtypes.uint8, 300).arg == 44
    assert UOp.const(dtypes.bool, 3).arg is True
    assert UOp.const(dtypes.float32, 3).arg == 3.0 and isinstance(UOp.const(dtypes.float32, 3).arg, float)
  def test_replace(self):
    a = var("a") + var("b")
    assert a.replace() is a
    assert a.replace(op=Ops.MUL) is var("a") * var("b")
    assert a.replace(src=(var("b"), var("a"))) is var("b") + var("a")
  def test_pickle_gives_the_same_node(self):
    a = (var("a") * 4 + 1) // 3
    assert pickle.loads(pickle.dumps(a)) is a
  def test_nodes_are_not_kept_alive(self):
    key_arg = ("unique-node-for-gc-test", 0, 1)
    u = UOp(Ops.DEFINE_VAR, dtypes.int32, (), key_arg)
    assert any(k[3] == key_arg for k in list(UOp._interned.keys()))
    del u
    gc.collect()
    assert not any(k[3] == key_arg for k in list(UOp._interned.keys()))
  def test_immutable(self):
    a = var("a")
    with pytest.raises(AttributeError): a.new_attribute = 1  # noqa: B010

class TestGraph:
  def test_toposort_sources_first(self):
    a, b = var("a"), var("b")
    s = a + b
    e = s * s + a
    order = e.toposort()
    pos = {n: i for i, n in enumerate(order)}
    assert len(order) == len(set(order))
    for n in order:
      assert all(pos[src] < pos[n] for src in n.src)
    assert order[-1] is e
  def test_toposort_deep(self):
    e = var("a")
    for _ in range(20000): e = e + 1
    assert len(e.toposort()) == 20002
  def test_toposort_gate(self):
    a, b = var("a"), var("b")
    inner = a + b
    e = inner * 2
    assert a not in e.toposort(gate=lambda n: n is not inner)
    assert inner in e.toposort(gate=lambda n: n is not inner)
  def test_substitute(self):
    a, b, c = var("a"), var("b"), var("c")
    assert ((a + b) * a).substitute({a: c}) is (c + b) * c
    assert ((a + b) * a).substitute({}) is (a + b) * a

class TestLazyShapes:
  def test_movement_shapes(self):
    buf = UOp(Ops.BUFFER, dtypes.float32, (), Buffer("PYTHON", 24, dtypes.float32))
    x = buf.reshape((2, 3, 4))
    assert x.shape == (2, 3, 4)
    assert x.permute((2, 0, 1)).shape == (4, 2, 3)
    assert x.shrink(((0, 1), (1, 3), (0, 4))).shape == (1, 2, 4)
    assert x.pad(((1, 0), (0, 2), (0, 0))).shape == (3, 5, 4)
    assert x.reshape((2, 1, 12)).expand((2, 5, 12)).shape == (2, 5, 12)
    assert x.flip((True, False, True)).shape == (2, 3, 4)
    assert x.r(Ops.ADD, (1,)).shape == (2, 1, 4)
  def test_noop_movements_return_self(self):
    buf = UOp(Ops.BUFFER, dtypes.float32, (), Buffer("PYTHON", 6, dtypes.float32))
    x = buf.reshape((2, 3))
    assert x.reshape((2, 3)) is x
    assert x.permute((0, 1)) is x
    assert x.expand((2, 3)) is x
    assert x.pad(((0, 0), (0, 0))) is x
    assert x.shrink(((0, 2), (0, 3))) is x
    assert x.flip((False, False)) is x
  def test_bad_movements(self):
    x = UOp(Ops.BUFFER, dtypes.float32, (), Buffer("PYTHON", 6, dtypes.float32)).reshape((2, 3))
    with pytest.raises(ValueError, match="reshape"): x.reshape((4, 2))
    with pytest.raises(ValueError, match="permute"): x.permute((0, 0))
    with pytest.raises(ValueError, match="expand"): x.expand((4, 3))
    with pytest.raises(ValueError, match="pad"): x.pad(((-1, 0), (0, 0)))
    with pytest.raises(ValueError, match="shrink"): x.shrink(((0, 3), (0, 3)))

def test_shaped_constants_are_reused_and_keep_their_values():
  """UOp.const with a shape keeps the broadcast node for reuse: equal constants give one node; -0.0, another dtype,
  shape or device give their own (the value a constant holds is its dtype's)."""
  a = UOp.const(dtypes.float32, 1, (3, 2), "CPU")
  assert a is UOp.const(dtypes.float32, 1.0, (3, 2), "CPU") and a.shape == (3, 2) and a.base.arg == 1.0
  z, nz = UOp.const(dtypes.float32, 0.0, (3,), "CPU"), UOp.const(dtypes.float32, -0.0, (3,), "CPU")
  assert z is not nz and math.copysign(1, nz.base.arg) == -1 and math.copysign(1, z.base.arg) == 1
  assert UOp.const(dtypes.int32, 2.7, (3,), "CPU").base.arg == 2 and UOp.const(dtypes.bool, 2, (3,), "CPU").base.arg is True
  others = [UOp.const(dtypes.int32, 1, (3, 2), "CPU"), UOp.const(dtypes.float32, 1, (2, 3), "CPU"),
            UOp.const(dtypes.float32, 1, (3, 2), "PYTHON"), UOp.const(dtypes.float32, 1)]
  assert all(o is not a for o in others) and others[2].device == "PYTHON" and others[3].shape == ()
