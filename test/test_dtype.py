"""Dtypes: the set and their sizes, promotion (PyTorch's rules with tinygrad's defaults: Python ints are int32, floats
float32), the result dtype of ops against torch, casts, bitcasts against numpy's .view, and the helpers (from_py,
least_upper_dtype, to_dtype).

Result dtypes are known when the graph is built, so most promotion tests run no kernel at all.
"""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
from fusegrad import Tensor, dtypes
from fusegrad.dtype import DType, least_upper_dtype, least_upper_float, to_dtype, to_numpy, from_numpy
from test.helpers import _torch_dtype
from test.test_ops_elementwise import FG_DTYPE, Result, check, check_all, pair

SIZES = {dtypes.bool: 1, dtypes.int8: 1, dtypes.uint8: 1, dtypes.int16: 2, dtypes.uint16: 2, dtypes.int32: 4,
         dtypes.uint32: 4, dtypes.int64: 8, dtypes.uint64: 8, dtypes.float16: 2, dtypes.bfloat16: 2, dtypes.float32: 4,
         dtypes.float64: 8}
# the dtypes torch promotes (it refuses uint16/32/64 with anything else)
TORCH_DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.float16,
                dtypes.bfloat16, dtypes.float32, dtypes.float64]

# *** the set ***
def test_all_dtypes_with_itemsize():
  assert set(dtypes.all) == set(SIZES)
  for dt, size in SIZES.items():
    assert dt.itemsize == size and dt.bitsize == 8 * size, dt
    assert to_numpy(dt).itemsize == size, dt  # bfloat16 is held as 16 raw bits
    assert Tensor.zeros(3, dtype=dt).nbytes() == 3 * size and Tensor.ones(1, dtype=dt).element_size() == size

def test_kinds_and_limits():
  assert set(dtypes.floats) == {dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64}
  assert set(dtypes.uints) == {dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64}
  assert set(dtypes.sints) == {dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64}
  for dt in dtypes.all:
    assert dtypes.is_float(dt) + dtypes.is_int(dt) + dtypes.is_bool(dt) == 1, dt
    assert dtypes.is_unsigned(dt) == (dt in dtypes.uints)
  for dt in dtypes.ints:
    info = np.iinfo(to_numpy(dt))
    assert (dtypes.min(dt), dtypes.max(dt)) == (info.min, info.max), dt
  assert (dtypes.min(dtypes.float32), dtypes.max(dtypes.float32)) == (-math.inf, math.inf)
  assert (dtypes.min(dtypes.bool), dtypes.max(dtypes.bool)) == (False, True)
  assert dtypes.finfo(dtypes.float16) == (5, 10) and dtypes.finfo(dtypes.bfloat16) == (8, 7)
  assert dtypes.finfo(dtypes.float32) == (8, 23) and dtypes.finfo(dtypes.float64) == (11, 52)
  with pytest.raises(TypeError): dtypes.finfo(dtypes.int32)

def test_aliases():
  assert (dtypes.half, dtypes.float, dtypes.double) == (dtypes.float16, dtypes.float32, dtypes.float64)
  assert (dtypes.char, dtypes.uchar, dtypes.short) == (dtypes.int8, dtypes.uint8, dtypes.int16)
  assert (dtypes.ushort, dtypes.int, dtypes.uint) == (dtypes.uint16, dtypes.int32, dtypes.uint32)
  assert (dtypes.long, dtypes.ulong) == (dtypes.int64, dtypes.uint64)
  assert dtypes.default_float == dtypes.float32 and dtypes.default_int == dtypes.int32
  fields = dtypes.fields()
  assert all(isinstance(v, DType) for v in fields.values()) and set(fields.values()) == set(dtypes.all)
  assert repr(dtypes.float32) == "dtypes.float" and eval(repr(dtypes.int8)) == dtypes.int8

@pytest.mark.parametrize("name,dt", [("float32", dtypes.float32), ("float", dtypes.float32), ("half", dtypes.float16),
                                     ("float16", dtypes.float16), ("bfloat16", dtypes.bfloat16),
                                     ("double", dtypes.float64), ("int", dtypes.int32), ("int32", dtypes.int32),
                                     ("long", dtypes.int64), ("int8", dtypes.int8), ("uint8", dtypes.uint8),
                                     ("uchar", dtypes.uint8), ("bool", dtypes.bool), ("uint64", dtypes.uint64),
                                     ("short", dtypes.int16)])
def test_to_dtype_from_strings(name, dt):
  assert to_dtype(name) == dt
  assert Tensor([1, 2], dtype=name).dtype == dt
  assert Tensor([1, 0]).cast(name).dtype == dt

def test_to_dtype_others():
  assert to_dtype(dtypes.int16) is dtypes.int16
  for npdt, dt in [(np.float32, dtypes.float32), (np.dtype("int64"), dtypes.int64), (np.uint8, dtypes.uint8),
                   (np.bool_, dtypes.bool), (np.float16, dtypes.float16)]:
    assert to_dtype(npdt) == dt and from_numpy(npdt) == dt
  with pytest.raises(TypeError, match="float33"): to_dtype("float33")
  with pytest.raises(TypeError): Tensor([1], dtype="nope")

# *** what Python values and numpy arrays become ***
@pytest.mark.parametrize("value,dt", [(1, dtypes.int32), (1.0, dtypes.float32), (True, dtypes.bool),
                                      ([1, 2], dtypes.int32), ([1, 2.0], dtypes.float32), ([True, 1], dtypes.int32),
                                      ([True, False], dtypes.bool),
                                      ([[1], [2.5]], dtypes.float32), ([], dtypes.float32), ((1, 2), dtypes.int32),
                                      ([True, 1.5], dtypes.float32)])
def test_from_py(value, dt):
  assert dtypes.from_py(value) == dt
  assert Tensor(value).dtype == dt
  with pytest.raises(TypeError): dtypes.from_py("a")

def test_creation_defaults():
  assert Tensor(3).dtype == dtypes.int32 and Tensor(3.0).dtype == dtypes.float32 and Tensor(True).dtype == dtypes.bool
  assert Tensor.zeros(2).dtype == dtypes.float32 and Tensor.ones(2, 2).dtype == dtypes.float32
  assert Tensor.full((2,), 3).dtype == dtypes.int32 and Tensor.full((2,), 3.0).dtype == dtypes.float32
  assert Tensor.arange(3).dtype == dtypes.int32 and Tensor.arange(3.0).dtype == dtypes.float32
  assert Tensor.rand(2).dtype == dtypes.float32 and Tensor.eye(2).dtype == dtypes.float32
  for npdt in ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "uint16", "uint32"]:
    arr = np.array([1, 0, 2, 1], dtype=npdt)
    t = Tensor(arr)
    assert t.dtype == from_numpy(arr.dtype) and t.numpy().dtype == arr.dtype
    np.testing.assert_equal(t.numpy(), arr)

# *** promotion ***
@pytest.mark.parametrize("a", TORCH_DTYPES, ids=str)
def test_promotion_matches_torch(a):
  """least_upper_dtype and the result of + and * between two tensors are torch.promote_types, for every pair."""
  for b in TORCH_DTYPES:
    want = FG_DTYPE[torch.promote_types(_torch_dtype(a), _torch_dtype(b))]
    assert least_upper_dtype(a, b) == want, (a, b)
    x, y = Tensor.ones(2, dtype=a), Tensor.ones(2, dtype=b)
    assert (x + y).dtype == want and (x * y).dtype == want and x.maximum(y).dtype == want, (a, b)
    assert (x < y).dtype == dtypes.bool and (x == y).dtype == dtypes.bool

def test_promotion_unsigned():
  """uint16/32/64, which torch won't promote: the next signed type up; int64 with uint64 gives float16 (tinygrad)."""
  cases = [((dtypes.uint16, dtypes.int8), dtypes.int32), ((dtypes.uint16, dtypes.uint8), dtypes.uint16),
           ((dtypes.uint32, dtypes.int32), dtypes.int64), ((dtypes.uint32, dtypes.int16), dtypes.int64),
           ((dtypes.uint32, dtypes.uint16), dtypes.uint32), ((dtypes.uint64, dtypes.uint8), dtypes.uint64),
           ((dtypes.uint64, dtypes.int64), dtypes.float16), ((dtypes.uint64, dtypes.int8), dtypes.float16),
           ((dtypes.uint32, dtypes.float32), dtypes.float32), ((dtypes.uint16, dtypes.bfloat16), dtypes.bfloat16),
           ((dtypes.bool, dtypes.uint64), dtypes.uint64), ((dtypes.int8, dtypes.uint8, dtypes.uint16), dtypes.int32)]
  for ds, want in cases:
    assert least_upper_dtype(*ds) == want, ds
    assert least_upper_dtype(*reversed(ds)) == want, ds

def test_least_upper_float():
  assert least_upper_float(dtypes.int32) == dtypes.float32 and least_upper_float(dtypes.bool) == dtypes.float32
  assert least_upper_float(dtypes.float16) == dtypes.float16 and least_upper_float(dtypes.int64) == dtypes.float32
  assert least_upper_float(dtypes.bfloat16) == dtypes.bfloat16 and least_upper_float(dtypes.float64) == dtypes.float64

SCALAR_OPS = {  # name: (fusegrad fn, torch fn or None for the same)
  "add": (lambda a, s: a + s, None), "rsub": (lambda a, s: s - a, None), "mul": (lambda a, s: a * s, None),
  "div": (lambda a, s: a / s, None), "rdiv": (lambda a, s: s / a, None), "floordiv": (lambda a, s: a // s, None),
  "mod": (lambda a, s: a % s, None), "pow": (lambda a, s: a ** s, None), "rpow": (lambda a, s: s ** a, None),
  "lt": (lambda a, s: a < s, None), "eq": (lambda a, s: a == s, None),
  "maximum": (lambda a, s: a.maximum(s), lambda a, s: torch.maximum(a, torch.tensor(s))),  # a 0-d tensor: like a scalar
  "where": (lambda a, s: (a > 0).where(a, s), lambda a, s: torch.where(a > 0, a, s)),
}

@pytest.mark.parametrize("dt", TORCH_DTYPES, ids=str)
def test_scalar_promotion_matches_torch(dt):
  """A Python scalar keeps the tensor's dtype when of the same kind (int with int, float with float); an int tensor
  with a float scalar is float32, a bool tensor with an int scalar int32 (torch: int64)."""
  for name, (fn, tfn) in SCALAR_OPS.items():
    for s in [3, -2, 2.5, True]:
      try: want = (tfn or fn)(torch.ones(2, dtype=_torch_dtype(dt)), s)
      except RuntimeError: continue  # torch refuses (bool subtraction, int to a negative power ...)
      want_dt = FG_DTYPE[want.dtype]
      if want.dtype == torch.int64 and dt != dtypes.int64: want_dt = dtypes.int32  # tinygrad's default int
      assert fn(Tensor.ones(2, dtype=dt), s).dtype == want_dt, (name, dt, s)

def test_promotion_examples():
  i, f, b = Tensor([1, 2]), Tensor([1.0]), Tensor([True, False])
  assert (i / 2).dtype == dtypes.float32 and (i / i).dtype == dtypes.float32 and (i // 2).dtype == dtypes.int32
  assert (Tensor([1], dtype=dtypes.int8) + Tensor([1], dtype=dtypes.uint8)).dtype == dtypes.int16
  assert (i + f).dtype == dtypes.float32 and (i * 1.5).dtype == dtypes.float32 and (1.5 - i).dtype == dtypes.float32
  assert (b + b).dtype == dtypes.bool and (b * 2).dtype == dtypes.int32 and (b * 2.0).dtype == dtypes.float32
  assert (b + i).dtype == dtypes.int32 and (b / b).dtype == dtypes.float32
  # an int past int32 with a bool tensor is int64 (torch's), not int32 wrapped (-2147483647)
  assert (b + 2 ** 31).tolist() == [2 ** 31 + 1, 2 ** 31] and (b * -2 ** 40).dtype == dtypes.int64
  h, bf = Tensor([1.0], dtype=dtypes.float16), Tensor([1.0], dtype=dtypes.bfloat16)
  assert (h * 2.5).dtype == dtypes.float16 and (h + i).dtype == dtypes.float16 and (h + bf).dtype == dtypes.float32
  assert (Tensor([1], dtype=dtypes.int8) * 1000).dtype == dtypes.int8  # the scalar wraps into int8, as in torch
  assert (Tensor([1], dtype=dtypes.int64) + 1).dtype == dtypes.int64
  assert (Tensor([1], dtype=dtypes.float64) * 2.5).dtype == dtypes.float64 and (f.double() + h).dtype == dtypes.float64

# *** the result dtype of unary ops, against torch ***
UNARY_FLOAT_RESULT = ["exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tan", "sigmoid", "tanh",
                      "reciprocal", "atan", "erf", "asin", "log1p", "expm1", "sinh"]
UNARY_SAME = ["abs", "neg", "sign", "floor", "ceil", "round", "trunc", "relu", "square"]

@pytest.mark.parametrize("dt", TORCH_DTYPES, ids=str)
def test_unary_result_dtypes_match_torch(dt):
  t, x = torch.ones(2, dtype=_torch_dtype(dt)), Tensor.ones(2, dtype=dt)
  for name in UNARY_FLOAT_RESULT + UNARY_SAME:
    try: want = getattr(t, name)()
    except (RuntimeError, TypeError): continue  # not defined for this dtype in torch (bool abs, relu ...)
    if dt == dtypes.bool and name == "square": continue  # torch squares bools to int64, we keep bool * bool = bool
    assert getattr(x, name)().dtype == FG_DTYPE[want.dtype], (name, dt)
  assert x.float().dtype == dtypes.float32 and x.half().dtype == dtypes.float16 and x.int().dtype == dtypes.int32
  assert x.bool().dtype == dtypes.bool and x.long().dtype == dtypes.int64 and x.double().dtype == dtypes.float64
  assert x.bfloat16().dtype == dtypes.bfloat16 and x.byte().dtype == dtypes.uint8 and x.char().dtype == dtypes.int8
  assert x.short().dtype == dtypes.int16 and x.is_floating_point() == dtypes.is_float(dt)

# *** casts ***
# values every target holds (negative floats stay away from unsigned targets: C leaves those undefined)
CAST_SOURCES = {
  dtypes.bool: [True, False, True, False, True, False], dtypes.int8: [0, 1, -1, 100, -100, 7],
  dtypes.uint8: [0, 1, 255, 100, 200, 7], dtypes.int16: [0, 1, -1, 300, -300, 7],
  dtypes.int32: [0, 1, -1, 70000, -70000, 7],
  dtypes.int64: [0, 1, -1, 2 ** 40 + 3, -(2 ** 33), 7], dtypes.float16: [0.0, 1.5, -1.5, 2.75, 100.25, -0.0],
  dtypes.bfloat16: [0.0, 1.5, -1.5, 2.75, 100.5, -0.0], dtypes.float32: [0.0, 1.7, -1.7, 2.5, 100.99, -0.5],
  dtypes.float64: [0.0, 1.7, -1.7, 2.5, 100.99, -0.5],
}

@pytest.mark.parametrize("target", TORCH_DTYPES, ids=str)
def test_casts_match_torch(target):
  """Float to int truncates toward zero, ints wrap, anything to bool is `!= 0`, floats round to nearest even."""
  results = []
  for src, vals in CAST_SOURCES.items():
    if dtypes.is_unsigned(target) and dtypes.is_float(src): vals = [abs(v) for v in vals]
    x, t = pair(vals, src)
    results.append(Result(f"{src} -> {target}", x.cast(target), t.to(_torch_dtype(target)), atol=0, rtol=0))
  check_all(results)

@pytest.mark.parametrize("target", [dtypes.uint16, dtypes.uint32, dtypes.uint64], ids=str)
def test_casts_to_wide_unsigned(target):
  for src in [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.float32, dtypes.bool]:
    vals = [abs(v) for v in CAST_SOURCES[src]] if dtypes.is_float(src) else CAST_SOURCES[src]
    arr = np.array(vals, dtype=to_numpy(src))
    np.testing.assert_equal(Tensor(arr).cast(target).numpy(), arr.astype(to_numpy(target)),
                            err_msg=f"{src} -> {target}")
  big = np.array([dtypes.max(target), 0, 12345], dtype=to_numpy(target))
  np.testing.assert_equal(Tensor(big).numpy(), big)
  np.testing.assert_equal(Tensor(big).cast(dtypes.int8).numpy(), big.astype(np.int8))

def test_cast_edges():
  """float -> bool: nan is true, -0.0 false; float32 -> float16 rounds to nearest even and overflows to inf;
  float64 -> float32 too; bfloat16 as torch rounds it."""
  (x, t) = pair([math.nan, -0.0, 0.0, 0.1, -math.inf])
  (h, th) = pair([65504.0, 65520.0, 1e5, -1e5, 6e-8, 1e-8, 2049.0, 2051.0, 0.1, math.inf, math.nan, -0.0])
  (b, tb) = pair([60000.0, 70000.0, 80000.0, 10000, -1, -1000, -10000, 20, 3.4e38, 1e-40, 257.0, 259.0])
  (d, td) = pair([3.4e40, 3.4e38, 1.0, 0.0, 1e-50, 0.1], dtypes.float64)
  (i, ti) = pair([2 ** 24 + 1, -(2 ** 31), 2 ** 31 - 1, 16777217, 3], dtypes.int32)
  check_all([Result("float -> bool", x.cast(dtypes.bool), t.bool()), Result("float -> half", h.half(), th.half()),
             Result("float -> bfloat16", b.bfloat16(), tb.bfloat16()), Result("double -> float", d.float(), td.float()),
             Result("int -> float", i.float(), ti.float(), rtol=0), Result("int -> half", i.half(), ti.half()),
             Result("int -> double", i.double(), ti.double(), rtol=0)])

def test_half_and_bfloat16_round_trips():
  """Every float16 (and bfloat16) bit pattern survives a trip through float32 and back."""
  bits = np.arange(0, 2 ** 16, 7, dtype=np.uint16)
  halves = bits.view(np.float16)
  h = Tensor(halves)
  np.testing.assert_equal(h.float().numpy(), halves.astype(np.float32))
  np.testing.assert_equal(h.float().half().bitcast(dtypes.uint16).numpy()[~np.isnan(halves)], bits[~np.isnan(halves)])
  bf = Tensor(bits).bitcast(dtypes.bfloat16)
  as_float = (bits.astype(np.uint32) << 16).view(np.float32)
  np.testing.assert_equal(bf.float().numpy(), as_float)
  finite = np.isfinite(as_float)
  np.testing.assert_equal(bf.float().bfloat16().bitcast(dtypes.uint16).numpy()[finite], bits[finite])
  (e, te) = pair([0.0, -0.0, math.inf, -math.inf, math.nan, 65504.0, 6.1035e-5], dtypes.float16)
  check(e.cast(dtypes.bfloat16).float(), te.to(torch.bfloat16).float())

def test_cast_keeps_gradient_for_floats():
  x = Tensor([1.5, -2.0], requires_grad=True)
  (x.half().float() * 3).sum().backward()
  assert x.grad.dtype == dtypes.float32 and x.grad.tolist() == [3.0, 3.0]

# *** bitcast: numpy's .view ***
BITCASTS = [(dtypes.float32, dtypes.int32), (dtypes.float32, dtypes.uint32), (dtypes.int32, dtypes.float32),
            (dtypes.float16, dtypes.int16), (dtypes.int16, dtypes.float16), (dtypes.uint16, dtypes.float16),
            (dtypes.float64, dtypes.int64), (dtypes.int8, dtypes.uint8), (dtypes.uint8, dtypes.float32),
            (dtypes.float32, dtypes.uint8), (dtypes.int8, dtypes.int16), (dtypes.float64, dtypes.float16),
            (dtypes.uint16, dtypes.uint32), (dtypes.int32, dtypes.int64), (dtypes.float16, dtypes.float32)]

@pytest.mark.parametrize("src,dst", BITCASTS, ids=str)
def test_bitcast_like_numpy_view(src, dst):
  """The same bits read as another dtype; where the sizes differ, the last axis rescales (as numpy's .view)."""
  raw = np.random.default_rng(0).integers(0, 256, (2, 3, 16), dtype=np.uint8)
  for dt in (src, dst):  # no nans on either side: a nan's payload bits may change (PYTHON goes through Python floats)
    if dtypes.is_float(dt):
      as_dt = raw.view(to_numpy(dt))
      as_dt[np.isnan(as_dt)] = 1
  arr = raw.view(to_numpy(src))
  got = Tensor(arr).bitcast(dst)
  want = arr.view(to_numpy(dst))
  assert got.dtype == dst and got.shape == want.shape
  np.testing.assert_equal(got.numpy().view(np.uint8), want.view(np.uint8))

def test_bitcast_values():
  assert Tensor([1.0, 2, 3]).bitcast(dtypes.int32).tolist()[0] == 0x3F800000
  assert Tensor([1.0, -2.0]).bitcast(dtypes.uint32).tolist() == [0x3F800000, 0xC0000000]
  assert Tensor([0x3C00, 0xC000], dtype=dtypes.uint16).bitcast(dtypes.float16).tolist() == [1.0, -2.0]
  a = Tensor.zeros(10, 4, dtype=dtypes.int32).contiguous() + 0x3F800000
  assert a.bitcast(dtypes.float32).numpy()[0, 0] == 1.0
  assert Tensor([72, -90, 27, 40, -53, 70, 96, 51], dtype=dtypes.int8).bitcast(dtypes.int16).tolist() == \
    [-22968, 10267, 18123, 13152]
  x = Tensor([1.5, 2.5]) * 2  # lazy input
  np.testing.assert_equal(x.bitcast(dtypes.int32).numpy(), np.array([3.0, 5.0], np.float32).view(np.int32))

def test_bitcast_bad_sizes_raise():
  with pytest.raises(ValueError, match="bitcast"): Tensor.empty(3, dtype=dtypes.int8).bitcast(dtypes.float16)
  with pytest.raises(ValueError, match="bitcast"): Tensor.empty(2, 3, dtype=dtypes.int16).bitcast(dtypes.float32)
  with pytest.raises(ValueError, match="bitcast"): Tensor(1.0).bitcast(dtypes.float16)

# *** ints wrap like C, in every width ***
@pytest.mark.parametrize("dt", [dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64, dtypes.int8, dtypes.int32,
                                dtypes.int64], ids=str)
def test_int_overflow_wraps(dt):
  v = np.array([dtypes.max(dt), dtypes.min(dt), 1], dtype=to_numpy(dt))
  x = Tensor(v)
  with np.errstate(over="ignore"):
    np.testing.assert_equal((x + 2).numpy(), v + np.array(2, dtype=v.dtype))
    np.testing.assert_equal((x * 2).numpy(), v * np.array(2, dtype=v.dtype))

# *** DType.min / DType.max and the DEFAULT_FLOAT setting (tinygrad's names) ***
@pytest.mark.parametrize("dt", [d for d in dtypes.all if d != dtypes.bool])
def test_dtype_min_max(dt):
  tdt = {dtypes.uint16: torch.uint16, dtypes.uint32: torch.uint32, dtypes.uint64: torch.uint64}.get(dt) or _torch_dtype(dt)
  if dtypes.is_float(dt): assert (dt.min, dt.max) == (-math.inf, math.inf)
  else: assert (dt.min, dt.max) == (torch.iinfo(tdt).min, torch.iinfo(tdt).max) == (dtypes.min(dt), dtypes.max(dt))
  assert (dtypes.bool.min, dtypes.bool.max) == (False, True)

@pytest.mark.parametrize("name,want", [("HALF", "half"), ("float16", "half"), ("BFLOAT16", "bfloat16"), ("FLOAT64", "double"),
                                       ("", "float")])
def test_default_float_setting(name, want):
  import subprocess, sys, os
  code = "from fusegrad import Tensor, dtypes; print(dtypes.default_float.name, Tensor([1.5]).dtype.name, Tensor.rand(2).dtype.name)"
  out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "DEFAULT_FLOAT": name}, capture_output=True, text=True)
  assert out.stdout.split() == [want] * 3, out.stderr

def test_default_float_setting_rejects_non_floats():
  import subprocess, sys, os
  out = subprocess.run([sys.executable, "-c", "import fusegrad"], env={**os.environ, "DEFAULT_FLOAT": "INT32"}, capture_output=True,
                       text=True)
  assert out.returncode != 0 and "DEFAULT_FLOAT" in out.stderr

def test_default_float_attribute():  # tinygrad code sets dtypes.default_float directly
  old = dtypes.default_float
  try:
    dtypes.default_float = dtypes.float16
    assert Tensor([1.5]).dtype == Tensor.zeros(2).dtype == (Tensor([1]) / 2).dtype == dtypes.float16
  finally: dtypes.default_float = old

class TestIntegerEdgesVsTorch:
  """Integer // and % by zero, and values an integer dtype can't hold at creation: errors where torch raises them."""
  OPS = {"floordiv": (lambda a, b: a // b, lambda a, b: a // b), "mod": (lambda a, b: a % b, lambda a, b: a % b),
         "idiv": (lambda a, b: a.idiv(b), lambda a, b: torch.div(a, b, rounding_mode="trunc")),
         "fmod": (lambda a, b: a.fmod(b), lambda a, b: torch.fmod(a, b))}

  @pytest.mark.parametrize("op", OPS)
  @pytest.mark.parametrize("divisor", [[3, 0, -2], 0])
  def test_division_by_zero_raises(self, op, divisor):
    ours, theirs = self.OPS[op]
    a = [7, -7, 5]
    with pytest.raises(RuntimeError): theirs(torch.tensor(a), torch.tensor(divisor) if isinstance(divisor, list) else 0)
    with pytest.raises(ZeroDivisionError) as e:
      ours(Tensor(a), Tensor(divisor) if isinstance(divisor, list) else 0).numpy()
    assert isinstance(e.value, RuntimeError) and op in str(e.value)
    good = [3, 1, -2]
    np.testing.assert_equal(ours(Tensor(a), Tensor(good)).numpy(), theirs(torch.tensor(a), torch.tensor(good)).numpy())

  @pytest.mark.parametrize("op", OPS)
  def test_empty_divided_by_zero(self, op):
    """No element: nothing is divided, so no error (torch: an empty result)."""
    ours, theirs = self.OPS[op]
    assert theirs(torch.zeros(0, dtype=torch.long), 0).shape == (0,)
    assert ours(Tensor.zeros(0, dtype=dtypes.int64), 0).numpy().shape == (0,)

  def test_division_check_follows_the_result(self):
    """The flag is read by whatever is computed from the quotient, once; later work is unaffected."""
    a, b = Tensor([4, 9], dtype=dtypes.int64), Tensor([0, 3], dtype=dtypes.int64)
    with pytest.raises(ZeroDivisionError): ((a // b) * 2 + 1).sum().item()
    assert (a // Tensor([2, 3], dtype=dtypes.int64)).tolist() == [2, 3]

  @pytest.mark.parametrize("data,dtype", [([300, -1], "uint8"), ([2**31], "int32"), ([-2**31 - 1], "int32"),
                                          ([128], "int8"), ([-1], "uint64"), ([1e10], "int32"),
                                          ([float("nan")], "int32"), ([[1, 300]], "uint8"), (300, "uint8"),
                                          ([255.5], "uint8"), ([-0.5], "uint8"), ([float("inf")], "int64"),
                                          ([-256], "uint8"), ([-1.0], "uint8"), ([-2**32], "uint32")])
  def test_creation_overflow(self, data, dtype):
    with pytest.raises((RuntimeError, OverflowError)): torch.tensor(data, dtype=getattr(torch, dtype))
    with pytest.raises(OverflowError) as e: Tensor(data, dtype=getattr(dtypes, dtype))
    assert isinstance(e.value, RuntimeError) and "without overflow" in str(e.value)

  def test_full_overflow(self):
    with pytest.raises(RuntimeError): torch.full((2,), 300, dtype=torch.int8)
    with pytest.raises(OverflowError): Tensor.full((2,), 300, dtype=dtypes.int8)

  @pytest.mark.parametrize("data,dtype", [([255, 0], "uint8"), ([2**31 - 1, -2**31], "int32"),
                                          ([255.0, 0.5], "uint8"), ([-0.9, 127.0], "int8"), ([True, 1], "uint8"), ([2**64 - 1], "uint64"),
                                          ([-128, 127], "int8"),
                                          # torch wraps a negative int down to -max into uint8/16/32 (-1 -> 255)
                                          ([-1, -255, 3], "uint8"), ([-1, -65535], "uint16"), ([-1], "uint32"),
                                          (-1, "uint8")])
  def test_creation_in_range_matches_torch(self, data, dtype):
    want = torch.tensor(data, dtype=getattr(torch, dtype)).tolist() if dtype != "uint64" else [2**64 - 1]
    assert Tensor(data, dtype=getattr(dtypes, dtype)).tolist() == want

def test_an_unpickled_dtype_is_the_same_dtype():
  import pickle
  from fusegrad.uop.ops import UOp
  for dt in (dtypes.index, dtypes.int32, dtypes.float16, dtypes.bool, dtypes.bfloat16, dtypes.void, dtypes.uint64):
    u = pickle.loads(pickle.dumps(dt))
    assert u is dt and dtypes.is_int(u) == dtypes.is_int(dt) and UOp.const(u, 5).arg == UOp.const(dt, 5).arg
  for dt in (dtypes.float32.vec(8), dtypes.float32.ptr(), dtypes.int8.ptr(local=True)):  # vectors, pointers: equal
    assert pickle.loads(pickle.dumps(dt)) == dt
