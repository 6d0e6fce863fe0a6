"""A property-based fuzzer: random programs of elementwise, reduce, movement, indexing, assign and realize steps on
random shapes (sizes 0 and 1 included), run on CPU and PYTHON with the default heuristic and with random valid
optimizations, compared with NumPy.

A short run is part of the suite (FUZZ_EXAMPLES, default 25 programs per test; 4x that of integer programs:
wrap-around arithmetic, //, %, idiv, fmod, shifts, bit ops and casts across all eight integer widths, exact against
NumPy); the long run is `FUZZ_EXAMPLES=10000 python -m pytest -q test/test_fuzz.py`. A failure prints the program as a list of steps and
hypothesis shrinks it to a small one; each bug found this way becomes a regression test at the end of this file.
"""
from __future__ import annotations
import contextlib, os, random
from typing import Any, Callable
from unittest import mock
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from fusegrad import Tensor, Device, dtypes
from fusegrad.codegen import get_program, Kernel, KernelOptError
from fusegrad.codegen.fold import fold_reduces
from fusegrad.codegen.lower import merge_axes, simplify_gated_loads
from fusegrad.engine import realize
from fusegrad.engine.state import STATE
from fusegrad.engine.search import candidate_opts

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
# FUZZ_ASSIGN=0 leaves assign steps out
ASSIGN = os.environ.get("FUZZ_ASSIGN", "1") == "1"
DEVICES = [d for d in ("CPU", "PYTHON") if Device.get_available(d)[0]]
SIZES = st.sampled_from([0, 1, 1, 2, 3, 4, 5])

# *** the program: a list of steps, each applied to a pool of (fusegrad tensor, numpy array) pairs ***

Pair = tuple[Tensor, np.ndarray]

def _fresh(rng: np.random.Generator, shape: tuple[int, ...], device: str) -> Pair:
  a = rng.uniform(-2, 2, shape).astype(np.float32)
  return Tensor(a, device=device), a

UNARY: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray]]] = {
  "neg": (lambda t: -t, lambda a: -a),
  "relu": (lambda t: t.relu(), lambda a: np.maximum(a, 0)),
  "abs": (lambda t: t.abs(), np.abs),
  "sqrt_abs": (lambda t: t.abs().sqrt(), lambda a: np.sqrt(np.abs(a))),
  "half": (lambda t: t * 0.5 + 1, lambda a: a * np.float32(0.5) + np.float32(1)),
  "tanh": (lambda t: t.tanh(), np.tanh)}
BINARY: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
  "add": (lambda x, y: x + y, np.add), "sub": (lambda x, y: x - y, np.subtract),
  "mul": (lambda x, y: x * y, np.multiply),
  "maximum": (lambda x, y: x.maximum(y), np.maximum),
  "where": (lambda x, y: (x > 0).where(x, y), lambda a, b: np.where(a > 0, a, b))}

def apply_step(step: tuple, pool: list[Pair], rng: np.random.Generator, device: str) -> Pair:
  """One step on the newest pair of the pool (and, for binary steps, another operand); returns the new pair."""
  kind, *args = step
  t, a = pool[-1]
  if kind == "unary":
    f, g = UNARY[args[0]]
    return f(t), g(a)
  if kind == "binary":
    f, g = BINARY[args[0]]
    other = next((p for p in reversed(pool[:-1]) if p[1].shape == a.shape), None) if args[1] else None
    if other is None:  # a fresh operand, broadcast along some axes
      shape = tuple(1 if args[2][i % len(args[2])] else s for i, s in enumerate(a.shape))
      other = _fresh(rng, shape, device)
    return f(t, other[0]), g(a, other[1])
  if kind == "reduce":
    op, axis, keepdim = args
    if a.ndim == 0: return t, a
    axis = axis % a.ndim
    if op == "max" and a.shape[axis] == 0: op = "sum"  # max of nothing is an error in NumPy and torch
    with np.errstate(invalid="ignore", divide="ignore"):
      return getattr(t, op)(axis=axis, keepdim=keepdim), getattr(a, op)(axis=axis, keepdims=keepdim)
  if kind == "permute":
    order = sorted(range(a.ndim), key=lambda i: args[0][i % len(args[0])])
    return t.permute(order), a.transpose(order)
  if kind == "reshape":
    if a.ndim == 0: return t.reshape(1), a.reshape(1)
    shape = (a.size,) if args[0] == 0 else (1, *a.shape) if args[0] == 1 else (a.shape[0] * a.shape[1], *a.shape[2:]) \
      if a.ndim >= 2 else (a.size, 1)
    return t.reshape(shape), a.reshape(shape)
  if kind == "expand":
    dim, n = args[0] % (a.ndim + 1), args[1]
    shape = a.shape[:dim] + (n,) + a.shape[dim:]
    return t.unsqueeze(dim).expand(shape), np.broadcast_to(np.expand_dims(a, dim), shape)
  if kind == "pad":
    if a.ndim == 0: return t, a
    pads = [(args[0][i % len(args[0])], args[1][i % len(args[1])]) for i in range(a.ndim)]
    return t.pad(pads), np.pad(a, pads)
  if kind == "shrink":
    rng_ = random.Random(args[0])
    spans = [tuple(sorted((rng_.randint(0, s), rng_.randint(0, s)))) for s in a.shape]
    return t.shrink(spans), a[tuple(slice(b, e) for b, e in spans)]
  if kind == "flip":
    if a.ndim == 0: return t, a
    axis = args[0] % a.ndim
    return t.flip(axis), np.flip(a, axis)
  if kind == "index":  # integer-tensor indexing along axis 0, and a strided slice
    if a.ndim == 0 or a.shape[0] == 0: return t[::2] if a.ndim else t, a[::2] if a.ndim else a
    idx = np.array([i % a.shape[0] for i in args[0]], dtype=np.int32)
    return t[Tensor(idx, device=device)], a[idx]
  if kind == "gather":
    if a.ndim == 0 or 0 in a.shape: return t, a
    axis = args[0] % a.ndim
    idx = rng.integers(0, a.shape[axis], a.shape).astype(np.int32)
    return t.gather(axis, Tensor(idx, device=device)), np.take_along_axis(a, idx, axis)
  if kind == "realize": return t.realize(), a
  if kind == "contiguous": return t.contiguous(), a
  if kind == "assign":  # write the value into a realized buffer of the same shape, and go on from that buffer
    buf = Tensor(np.full(a.shape, 7, np.float32), device=device).realize()
    buf.assign(t)
    if args[0]: buf.realize()
    return buf, a.copy()
  raise AssertionError(kind)

small_ints = st.integers(0, 3)
STEP = st.one_of(
  st.tuples(st.just("unary"), st.sampled_from(sorted(UNARY))),
  st.tuples(st.just("binary"), st.sampled_from(sorted(BINARY)), st.booleans(), st.lists(st.booleans(), min_size=5,
                                                                                         max_size=5)),
  st.tuples(st.just("reduce"), st.sampled_from(["sum", "max", "mean"]), st.integers(0, 4), st.booleans()),
  st.tuples(st.just("permute"), st.lists(st.integers(0, 9), min_size=4, max_size=4)),
  st.tuples(st.just("reshape"), st.integers(0, 2)),
  st.tuples(st.just("expand"), st.integers(0, 4), st.sampled_from([1, 2, 3])),
  st.tuples(st.just("pad"), st.lists(small_ints, min_size=1, max_size=3), st.lists(small_ints, min_size=1, max_size=3)),
  st.tuples(st.just("shrink"), st.integers(0, 2 ** 16)),
  st.tuples(st.just("flip"), st.integers(0, 4)),
  st.tuples(st.just("index"), st.lists(st.integers(0, 9), max_size=4)),
  st.tuples(st.just("gather"), st.integers(0, 4)),
  st.tuples(st.just("realize")), st.tuples(st.just("contiguous")),
  *([st.tuples(st.just("assign"), st.booleans())] if ASSIGN else []))

def run_program(shape: tuple[int, ...], steps: list[tuple], seed: int, device: str) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  pool = [_fresh(rng, shape, device)]
  for step in steps:
    if np.prod(pool[-1][1].shape) > 4096: break  # keep programs small: expand and pad can grow them
    pool.append(apply_step(step, pool, rng, device))
  t, a = pool[-1]
  return t.numpy(), np.asarray(a)

# *** random valid optimizations, chosen while a kernel is compiled ***

def random_opts(ast: Any, ren: Any, rnd: random.Random, tries: int) -> list:
  """Up to `tries` random optimization actions that the kernel accepts, applied one after the other."""
  k = Kernel(merge_axes(simplify_gated_loads(fold_reduces(ast))), ren)
  for _ in range(tries):
    options = candidate_opts(k)
    if not options: break
    opt = rnd.choice(options)
    trial = k.copy()
    try: trial.apply_opt(opt)
    except KernelOptError: continue
    k = trial
  return list(k.applied_opts)

@contextlib.contextmanager
def random_optimizations(seed: int):
  """Every kernel compiled inside gets random valid opts (and compiled kernels aren't reused from before)."""
  rnd = random.Random(seed)
  def get_program_random(ast: Any, ren: Any, opts: Any = None) -> Any:
    return get_program(ast, ren, opts=random_opts(ast, ren, rnd, rnd.randint(1, 4)))
  saved = dict(STATE.programs)
  STATE.programs.clear()
  try:
    with mock.patch.object(realize, "get_program", get_program_random): yield
  finally:
    STATE.programs.clear()
    STATE.programs.update(saved)

def check(shape: tuple[int, ...], steps: list[tuple], seed: int, device: str, opt_seed: int | None) -> None:
  with random_optimizations(opt_seed) if opt_seed is not None else contextlib.nullcontext():
    got, want = run_program(shape, steps, seed, device)
  assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
  scale = max(1.0, float(np.nanmax(np.abs(want)))) if want.size and not np.isnan(want).all() else 1.0
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale, equal_nan=True)

PROGRAM = dict(shape=st.lists(SIZES, min_size=0, max_size=3).map(tuple), steps=st.lists(STEP, min_size=1, max_size=7),
               seed=st.integers(0, 2 ** 16))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                derandomize=EXAMPLES <= 25, database=None)

@pytest.mark.parametrize("device", DEVICES)
@FUZZ
@given(**PROGRAM)
def test_fuzz_heuristic(device, shape, steps, seed):
  check(shape, steps, seed, device, None)

@pytest.mark.parametrize("device", DEVICES)
@FUZZ
@given(**PROGRAM, opt_seed=st.integers(0, 2 ** 16))
def test_fuzz_random_opts(device, shape, steps, seed, opt_seed):
  check(shape, steps, seed, device, opt_seed)

# *** integer programs: wrap-around arithmetic, division, remainders, shifts, bit ops and casts across widths ***

INT_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
INT_BINARY: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
  "add": (lambda x, y: x + y, np.add), "sub": (lambda x, y: x - y, np.subtract), "mul": (lambda x, y: x * y, np.multiply),
  "and": (lambda x, y: x & y, np.bitwise_and), "or": (lambda x, y: x | y, np.bitwise_or),
  "xor": (lambda x, y: x ^ y, np.bitwise_xor), "maximum": (lambda x, y: x.maximum(y), np.maximum),
  "lt": (lambda x, y: (x < y).where(x, y), lambda a, b: np.where(a < b, a, b))}

def _np_trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  q = a // b  # floor; one less than the truncated quotient where inexact with opposite signs
  return np.where((a % b != 0) & ((a < 0) ^ (b < 0)), q + 1, q).astype(a.dtype)
INT_DIV: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
  "floordiv": (lambda x, y: x // y, np.floor_divide), "mod": (lambda x, y: x % y, np.remainder),
  "idiv": (lambda x, y: x.idiv(y), _np_trunc_div), "fmod": (lambda x, y: x.fmod(y), np.fmod)}

def _ints(rng: np.random.Generator, shape: tuple[int, ...], dt: np.dtype, nonzero: bool = False) -> np.ndarray:
  info = np.iinfo(dt)
  a = rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True) if rng.random() < 0.5 else \
    rng.integers(max(info.min, -9), 10, shape).astype(dt)  # small values too: exact quotients, zero remainders
  return np.where(a == 0, dt.type(1), a).astype(dt) if nonzero else a

def apply_int_step(step: tuple, t: Tensor, a: np.ndarray, rng: np.random.Generator, device: str) -> tuple[Tensor, Any]:
  kind, *args = step
  if kind in ("binary", "div"):
    f, g = (INT_BINARY if kind == "binary" else INT_DIV)[args[0]]
    b = _ints(rng, a.shape if args[1] else a.shape[-1:] if a.ndim else (), a.dtype, nonzero=kind == "div")
    return f(t, Tensor(b, device=device)), g(a, b)
  bits = 8 * a.dtype.itemsize
  if kind == "shift":  # by a constant, or by a tensor of amounts, each in [0, bits)
    if args[1] is None:
      k = rng.integers(0, bits, a.shape).astype(a.dtype)
      amount: Any = Tensor(k, device=device)
    else: k = a.dtype.type(amount := args[1] % bits)
    return (t << amount, np.left_shift(a, k)) if args[0] else (t >> amount, np.right_shift(a, k))
  if kind == "cast": return t.cast(getattr(dtypes, args[0])), a.astype(args[0])
  if kind == "unary":
    if args[0] == "neg": return -t, (-a if a.dtype.kind == "i" else (0 - a.astype(np.uint64)).astype(a.dtype))
    return ~t, ~a
  if kind == "reduce":  # compared as Python ints modulo 2**64: the sum's dtype may differ (torch's rules)
    if a.ndim == 0 or 0 in a.shape: return t, a
    axis = args[1] % a.ndim
    return (t.max(axis) if args[0] == "max" else t.sum(axis).cast(dtypes.uint64)), \
      (a.max(axis) if args[0] == "max" else a.sum(axis, dtype=np.uint64))
  return apply_step(step, [(t, a)], rng, device)  # movement, realize, contiguous

INT_STEP = st.one_of(
  st.tuples(st.just("binary"), st.sampled_from(sorted(INT_BINARY)), st.booleans()),
  st.tuples(st.just("div"), st.sampled_from(sorted(INT_DIV)), st.booleans()),
  st.tuples(st.just("shift"), st.booleans(), st.one_of(st.none(), st.integers(0, 63))),
  st.tuples(st.just("cast"), st.sampled_from(INT_DTYPES)),
  st.tuples(st.just("unary"), st.sampled_from(["neg", "invert"])),
  st.tuples(st.just("reduce"), st.sampled_from(["sum", "max"]), st.integers(0, 3)),
  st.tuples(st.just("permute"), st.lists(st.integers(0, 9), min_size=4, max_size=4)),
  st.tuples(st.just("reshape"), st.integers(0, 2)), st.tuples(st.just("flip"), st.integers(0, 4)),
  st.tuples(st.just("pad"), st.lists(small_ints, min_size=1, max_size=3), st.lists(small_ints, min_size=1, max_size=3)),
  st.tuples(st.just("expand"), st.integers(0, 4), st.sampled_from([1, 2])),
  st.tuples(st.just("realize")), st.tuples(st.just("contiguous")))

def check_int(dtype: str, shape: tuple[int, ...], steps: list[tuple], seed: int, device: str) -> None:
  rng = np.random.default_rng(seed)
  a = _ints(rng, shape, np.dtype(dtype))
  t = Tensor(a, device=device)
  with np.errstate(all="ignore"):
    for step in steps:
      if a.size > 4096: break
      t, a = apply_int_step(step, t, np.asarray(a), rng, device)
  got, want = t.numpy(), np.asarray(a)
  assert got.shape == want.shape and got.dtype == want.dtype, f"{got.shape} {got.dtype} != {want.shape} {want.dtype}"
  np.testing.assert_array_equal(got, want)

@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=EXAMPLES * 4, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=EXAMPLES <= 25, database=None)
@given(dtype=st.sampled_from(INT_DTYPES), shape=st.lists(SIZES, min_size=0, max_size=3).map(tuple),
       steps=st.lists(INT_STEP, min_size=1, max_size=6), seed=st.integers(0, 2 ** 16))
def test_fuzz_integers(device, dtype, shape, steps, seed):
  check_int(dtype, shape, steps, seed, device)

# *** bugs the fuzzer found (each a minimal program) ***

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(), (3,)])
def test_assign_then_contiguous_reads_the_new_value(device, shape):
  buf = Tensor(np.full(shape, 7, np.float32), device=device).realize()
  buf.assign(Tensor(np.full(shape, 0.5, np.float32), device=device))
  np.testing.assert_equal((buf.contiguous() + 1).numpy(), np.full(shape, 1.5, np.float32))

def test_pad_after_reshape_of_an_empty_tensor():  # x % 0 in the index of an empty axis crashed the simplifier
  np.testing.assert_equal(Tensor(np.zeros((0, 2), np.float32)).reshape(0).pad([(1, 1)]).numpy(), np.zeros(2))

@pytest.mark.parametrize("device", DEVICES)
def test_pad_of_an_empty_tensor(device):  # PYTHON couldn't view the 1-byte allocation of an empty float buffer
  np.testing.assert_equal(Tensor(np.zeros((0,), np.float32), device=device).pad([(1, 1)]).numpy(), np.zeros(2))

def test_thread_only_on_the_outermost_axis_once():  # two THREAD opts (or one on an inner axis) rendered broken C
  from fusegrad.codegen import Opt, OptOps
  ren = Device[DEVICES[0]].renderer
  if not ren.threads: pytest.skip("the device has no threads")
  si = Tensor(np.arange(4, dtype=np.float32).reshape(2, 2)).realize().flip(0).contiguous().schedule()[-1]
  k = Kernel(merge_axes(simplify_gated_loads(fold_reduces(si.ast))), ren)
  with pytest.raises(KernelOptError, match="outermost"): k.copy().apply_opt(Opt(OptOps.THREAD, 1, 0))
  with pytest.raises(KernelOptError, match="outermost"): k.apply_opt(Opt(OptOps.THREAD, 0, 0)).apply_opt(
    Opt(OptOps.THREAD, 0, 0))
  check((2, 2), [("flip", 0)], 0, DEVICES[0], 1926)

@pytest.mark.parametrize("device", DEVICES)
def test_gather_then_pad(device):  # simplify_given_valid dropped the gate of the gather's index load: it was read
  # past the end of the index buffer (PYTHON raised IndexError, CPU read out of bounds)
  x, idx = Tensor(np.array([1.0, 2.0], np.float32), device=device), Tensor(np.array([1, 0], np.int32), device=device)
  from fusegrad.codegen import get_program
  si = x.gather(0, idx).pad([(0, 1)]).contiguous().schedule()[-1]
  uops = get_program(si.ast, Device[device].renderer).uops
  assert all(len(u.src) > 2 for u in uops if u.op.name == "LOAD" and u.src[0].arg == 1), "ungated index load"
  np.testing.assert_equal(x.gather(0, idx).pad([(0, 1)]).numpy(), [2.0, 1.0, 0.0])
