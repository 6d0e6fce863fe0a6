"""Elementwise ops against torch, values and gradients, on Device.DEFAULT (DEV=CPU, DEV=PYTHON ...).

Arithmetic with broadcasting and Python scalars, pow, transcendental and rounding functions, comparisons, logic and
bitwise ops, where and clip, activations, edge values (nan, inf, -0.0, huge) and the gradients there, float16 and
bfloat16, and the errors bad input raises.

Every new kernel costs a C compile on the CPU backend, so most tests check a batch of ops at once: `check_cases` runs
each op on its own inputs, stacks the results (and the gradients) of one shape and dtype into one kernel, and reports
every op that differs from torch by name.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from typing import Any, Callable
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fusegrad import Tensor, dtypes, Device
from fusegrad.dtype import DType, to_numpy
from test.helpers import helper_test_op, compare, _torch_dtype

S = (3, 5)
N = 24  # the length of a unary op's input: random values in the op's range, then the op's special points
FG_DTYPE = {torch.bool: dtypes.bool, torch.int8: dtypes.int8, torch.uint8: dtypes.uint8, torch.int16: dtypes.int16,
            torch.int32: dtypes.int32, torch.int64: dtypes.int64, torch.float16: dtypes.float16,
            torch.bfloat16: dtypes.bfloat16, torch.float32: dtypes.float32, torch.float64: dtypes.float64}

def _fg_dtype(want: torch.Tensor, int64_is_default: bool) -> DType:
  return dtypes.int32 if int64_is_default and want.dtype == torch.int64 else FG_DTYPE[want.dtype]

def check(got: Tensor, want: torch.Tensor, atol: float = 1e-6, rtol: float = 1e-5,
          int64_is_default: bool = False) -> None:
  """got has torch's dtype, shape and values.
  int64_is_default: torch's int64 came from its default int, where ours is int32."""
  assert got.dtype == _fg_dtype(want, int64_is_default), f"dtype {got.dtype} != torch's {want.dtype}"
  compare("value", got, want, atol, rtol)

def pair(vals: Any, dtype: DType = dtypes.float32, requires_grad: bool = False) -> tuple[Tensor, torch.Tensor]:
  """The same values as a fusegrad and a torch tensor of dtype."""
  arr = np.array(vals, dtype=np.float32 if dtype == dtypes.bfloat16 else to_numpy(dtype))
  tt = torch.tensor(arr).to(_torch_dtype(dtype)).requires_grad_(requires_grad)
  return Tensor(arr, dtype=dtype, requires_grad=requires_grad), tt

@dataclass
class Result:
  name: str
  got: Tensor
  want: torch.Tensor
  atol: float = 1e-6
  rtol: float = 1e-5
  int64_is_default: bool = False

def check_all(results: list[Result]) -> None:
  """Check many results: dtypes first, then values, one stacked kernel per (shape, dtype); all failures reported."""
  failures: list[str] = []
  groups: dict[tuple, list[Result]] = {}
  for r in results:
    want_dt = _fg_dtype(r.want, r.int64_is_default)
    if r.got.dtype != want_dt: failures.append(f"{r.name}: dtype {r.got.dtype} != torch's {r.want.dtype}")
    elif r.got.shape != tuple(r.want.shape):
      failures.append(f"{r.name}: shape {r.got.shape} != torch's {tuple(r.want.shape)}")
    else: groups.setdefault((r.got.shape, r.got.dtype), []).append(r)
  # a few dozen at most in one kernel: the C compiler's time grows faster than the kernel
  chunks = [group[i:i + 24] for group in groups.values() for i in range(0, len(group), 24)]
  for chunk in chunks:
    rows = Tensor.stack(*[r.got for r in chunk]).numpy() if len(chunk) > 1 else chunk[0].got.numpy()[None]
    for r, row in zip(chunk, rows):
      try: compare(r.name, row, r.want, r.atol, r.rtol)
      except AssertionError as e: failures.append(str(e).strip())
  assert not failures, f"{len(failures)} of {len(results)} differ from torch:\n" + "\n".join(failures)

@dataclass
class Case:
  """One op on its own inputs: fn in fusegrad, tfn (or fn) in torch."""
  name: str
  fn: Callable
  inputs: list[Any]
  tfn: Callable | None = None
  dtype: DType = dtypes.float32
  atol: float = 1e-6
  rtol: float = 1e-5
  grad_atol: float = 1e-5
  grad_rtol: float = 1e-4

def check_cases(cases: list[Case], backward: bool = True) -> None:
  """Values and (for float inputs) the gradients of a weighted sum of the output, for every case, against torch."""
  rng = np.random.default_rng(1)
  results: list[Result] = []
  for c in cases:
    grad = backward and dtypes.is_float(c.dtype)
    made = [pair(a, c.dtype, grad) for a in c.inputs]
    ft, tt = [m[0] for m in made], [m[1] for m in made]
    fo, to = c.fn(*ft), (c.tfn or c.fn)(*tt)
    results.append(Result(c.name, fo, to, c.atol, c.rtol))
    if not grad or not to.requires_grad: continue
    w = rng.uniform(0.5, 1.5, tuple(to.shape)).astype(np.float32)
    tgrads = torch.autograd.grad((to * torch.tensor(w).to(to.dtype)).sum(), tt, allow_unused=True)
    fgrads = (fo * Tensor(w).cast(fo.dtype)).sum().gradient(*ft, materialize_grads=True)
    for i, (fg, tg) in enumerate(zip(fgrads, tgrads)):
      results.append(Result(f"{c.name}: grad of input {i}", fg, tg if tg is not None else torch.zeros_like(tt[i]),
                            c.grad_atol, c.grad_rtol))
  check_all(results)

def unary_input(low: float, high: float, special: list[float] = (), seed: int = 0) -> list[float]:
  """N values: uniform in [low, high), the special points at the end."""
  vals = np.random.default_rng(seed).uniform(low, high, N - len(special)).astype(np.float32).tolist()
  return vals + list(special)

# *** unary math, forward and backward ***
UNARY = [  # (name, fn, torch fn or None for the same, low, high, special points: kinks and edges of the domain)
  ("neg", lambda x: -x, None, -2, 2, [0.0]), ("abs", lambda x: x.abs(), None, -2, 2, [0.0, -0.0]),
  ("sign", lambda x: x.sign(), None, -2, 2, [0.0]), ("square", lambda x: x.square(), None, -2, 2, [0.0]),
  ("reciprocal", lambda x: x.reciprocal(), None, 0.5, 2, [-0.5, -2.0, 0.0]),
  ("sqrt", lambda x: x.sqrt(), None, 0.05, 4, [0.0]),
  ("rsqrt", lambda x: x.rsqrt(), None, 0.05, 4, [0.0]), ("exp", lambda x: x.exp(), None, -4, 4, [-100.0, 80.0]),
  ("exp2", lambda x: x.exp2(), None, -4, 4, [-150.0, 100.0]), ("expm1", lambda x: x.expm1(), None, -2, 2, [0.0]),
  ("log", lambda x: x.log(), None, 0.05, 4, [0.0, 1.0]), ("log2", lambda x: x.log2(), None, 0.05, 4, [0.0, 1.0]),
  ("log10", lambda x: x.log10(), None, 0.05, 4, [0.0]), ("log1p", lambda x: x.log1p(), None, -0.9, 3, [-1.0, 0.0]),
  ("sin", lambda x: x.sin(), None, -7, 7, [0.0]), ("cos", lambda x: x.cos(), None, -7, 7, [0.0, math.pi]),
  ("tan", lambda x: x.tan(), None, -1.4, 1.4, [0.0]), ("sinh", lambda x: x.sinh(), None, -3, 3, [0.0]),
  ("cosh", lambda x: x.cosh(), None, -3, 3, [0.0]), ("tanh", lambda x: x.tanh(), None, -4, 4, [0.0, -100.0, 100.0]),
  ("asinh", lambda x: x.asinh(), None, -5, 5, [0.0, -300.0, 300.0]),
  ("acosh", lambda x: x.acosh(), None, 1.05, 5, [300.0]),
  ("atanh", lambda x: x.atanh(), None, -0.95, 0.95, [0.0]),
  ("atan", lambda x: x.atan(), None, -5, 5, [0.0, -300.0, 300.0]),
  ("asin", lambda x: x.asin(), None, -0.95, 0.95, [0.0, 300.0]),
  ("acos", lambda x: x.acos(), None, -0.95, 0.95, [-300.0]),
  ("erf", lambda x: x.erf(), None, -3, 3, [0.0, -300.0, 300.0]),
  ("trunc", lambda x: x.trunc(), None, -5, 5, [-1.0, 2.0]),
  ("floor", lambda x: x.floor(), None, -5, 5, [-2.0, -1.5, -0.0, 0.0, 2.0]),
  ("ceil", lambda x: x.ceil(), None, -5, 5, [-1.5, 2.0]),
  ("round", lambda x: x.round(), None, -5, 5, [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 3.5]),
  ("frac", lambda x: x.frac(), None, -5, 5, [-1.5, 2.0]), ("sigmoid", lambda x: x.sigmoid(), None, -6, 6, [0.0, -0.0]),
  ("relu", lambda x: x.relu(), None, -2, 2, [0.0]),
  ("maximum0", lambda x: x.maximum(0), lambda x: torch.maximum(x, torch.zeros_like(x)), -2, 2, [0.0]),
  ("minimum0", lambda x: x.minimum(0), lambda x: torch.minimum(x, torch.zeros_like(x)), -2, 2, [0.0]),
  ("clip", lambda x: x.clip(-1, 1), None, -2, 2, [-1.0, 1.0]),
]

def test_unary():
  """Special points: the gradient at kinks is torch's (relu, abs, sign: 0; clip at its bounds: 1; maximum(x, 0) at
  0: 1/2), odd functions have f'(0) at 0, and log, sqrt, rsqrt, reciprocal give infinite gradients at 0."""
  check_cases([Case(name, fn, [unary_input(low, high, special)], tfn) for name, fn, tfn, low, high, special in UNARY])

def test_unary_0d(): helper_test_op([()], lambda x: x.exp() + x.sin() * x.sigmoid() - x.abs().sqrt())

def test_trig_large_arguments():
  """x/2 is exact, so cos (and sin's derivative) stay right where pi/2 - x would round away the answer."""
  vals = [1e1, 1e2, 1e3, 1e4, 1e5, 1e6, -1e1, -1e2, -1e3, -1e4, -1e5, -1e6, 12345.678, 3e7]
  check_cases([Case(name, lambda x, n=name: getattr(x, n)(), [vals], atol=1e-5, rtol=1e-4, grad_atol=1e-5,
                    grad_rtol=1e-4)
               for name in ["sin", "cos", "tan"]])

# *** activations: a random range, far out on both sides (nothing overflows), and the kinks ***
ACTIVATIONS = [  # (name, fn, torch fn, low, high, kinks)
  ("relu", lambda x: x.relu(), F.relu, -2, 2, [0.0]), ("relu6", lambda x: x.relu6(), F.relu6, -3, 9, [0.0, 6.0]),
  ("leaky_relu", lambda x: x.leaky_relu(), F.leaky_relu, -2, 2, [0.0]),
  ("leaky_relu_0.2", lambda x: x.leaky_relu(0.2), lambda x: F.leaky_relu(x, 0.2), -2, 2, [0.0]),
  ("sigmoid", lambda x: x.sigmoid(), torch.sigmoid, -8, 8, [0.0]),
  ("tanh", lambda x: x.tanh(), torch.tanh, -4, 4, [0.0]),
  ("gelu", lambda x: x.gelu(), lambda x: F.gelu(x, approximate="tanh"), -4, 4, [0.0]),
  ("gelu_exact", lambda x: x.gelu(approximate="none"), F.gelu, -4, 4, [0.0]),
  ("quick_gelu", lambda x: x.quick_gelu(), lambda x: x * torch.sigmoid(1.702 * x), -4, 4, [0.0]),
  ("silu", lambda x: x.silu(), F.silu, -6, 6, [0.0]), ("swish", lambda x: x.swish(), F.silu, -6, 6, [0.0]),
  ("elu", lambda x: x.elu(), F.elu, -3, 3, [0.0]),
  ("elu_0.5", lambda x: x.elu(0.5), lambda x: F.elu(x, 0.5), -3, 3, [0.0]),
  ("celu", lambda x: x.celu(), F.celu, -3, 3, [0.0]),
  ("celu_2", lambda x: x.celu(2.0), lambda x: F.celu(x, 2.0), -3, 3, [0.0]),
  ("selu", lambda x: x.selu(), F.selu, -3, 3, [0.0]),
  ("softplus", lambda x: x.softplus(), F.softplus, -4, 4, [0.0, 20.0, 21.0]),
  ("softplus_beta3", lambda x: x.softplus(beta=3), lambda x: F.softplus(x, beta=3), -4, 4, [0.0]),
  ("softplus_beta_half_thr1", lambda x: x.softplus(0.5, 1.0), lambda x: F.softplus(x, 0.5, 1.0), -4, 4, [0.0, 2.0]),
  ("mish", lambda x: x.mish(), F.mish, -4, 4, [0.0]),
  ("hardtanh", lambda x: x.hardtanh(), F.hardtanh, -2, 2, [-1.0, 1.0]),
  ("hardtanh_0_3", lambda x: x.hardtanh(0, 3), lambda x: F.hardtanh(x, 0, 3), -2, 4, [0.0, 3.0]),
  ("hardswish", lambda x: x.hardswish(), F.hardswish, -5, 5, [-3.0, 0.0, 3.0]),
  ("hardsigmoid", lambda x: x.hardsigmoid(), F.hardsigmoid, -5, 5, [-3.0, 0.0, 3.0]),
  ("logsigmoid", lambda x: x.logsigmoid(), F.logsigmoid, -6, 6, [0.0]),
  ("softsign", lambda x: x.softsign(), F.softsign, -3, 3, [0.0]),
]

def test_activations():
  """At +-100 and +-400 values and gradients stay finite and match torch; at kinks the gradient is torch's."""
  cases = [Case(name, fn, [unary_input(low, high, [-400.0, -100.0, 100.0, 400.0] + kinks)], tfn)
           for name, fn, tfn, low, high, kinks in ACTIVATIONS]
  check_cases(cases)

def test_activations_0d():
  helper_test_op([()], lambda x: F.gelu(x, approximate="tanh") + F.mish(x), lambda x: x.gelu() + x.mish())
  with pytest.raises(ValueError, match="gelu.*approximate"): Tensor([1.0]).gelu(approximate="erf")

def test_log_at_zero():
  x = Tensor([0.0, -1.0], requires_grad=True)
  y = x.log()
  y[0].backward()
  assert y.tolist()[0] == -math.inf and math.isnan(y.tolist()[1])
  assert x.grad.tolist()[0] == math.inf

# *** edge values through unary ops, forward ***
SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e30, -1e30, 1e-30, 3.0, -3.0, 0.5, -0.5, 2.5, 1e-45]
EDGE_OPS = ["neg", "abs", "sign", "square", "reciprocal", "sqrt", "rsqrt", "exp", "exp2", "log", "log2", "sin", "cos",
            "tanh", "atan", "erf", "trunc", "floor", "ceil", "round", "relu", "sigmoid", "isnan", "isinf", "isfinite",
            "logical_not", "expm1", "log1p", "frac", "sinh", "cosh"]
EDGE_ACTIVATIONS = [("softplus", F.softplus), ("elu", F.elu), ("logsigmoid", F.logsigmoid), ("hardswish", F.hardswish),
                    ("relu6", F.relu6), ("hardtanh", F.hardtanh), ("softsign", F.softsign), ("selu", F.selu),
                    ("hardsigmoid", F.hardsigmoid), ("leaky_relu", F.leaky_relu), ("celu", F.celu)]

def test_edge_values():
  """nan, +-inf, +-0, huge and tiny values: torch's answers, forward."""
  results = []
  for name in EDGE_OPS:
    x, t = pair(SPECIALS)
    results.append(Result(name, getattr(x, name)(), getattr(t, name)()))
  for name, tfn in EDGE_ACTIVATIONS:
    x, t = pair(SPECIALS)
    results.append(Result(name, getattr(x, name)(), tfn(t)))
  x, t = pair(SPECIALS)
  results.append(Result("clip", x.clip(-1, 1), t.clip(-1, 1)))
  check_all(results)

def test_abs_signed_zero_and_special_gradients():
  """abs(+-0) is +0 (so 1/abs(0) is +inf), and the gradient at 0, nan and +-inf is torch's."""
  x, t = pair(SPECIALS)
  x.requires_grad, t.requires_grad = True, True
  got, want = x.abs(), t.abs()
  np.testing.assert_equal(np.signbit(got.numpy()), np.signbit(want.detach().numpy()))
  got.sum().backward()
  want.sum().backward()
  np.testing.assert_equal(x.grad.numpy(), t.grad.numpy())
  assert (1 / Tensor([0.0, -0.0]).abs()).tolist() == [math.inf, math.inf]

def test_mod_floordiv_special_values():
  """% and // over every pair of nan, +-inf, +-0 and finite values: torch's answers (Python's for an infinite
  divisor: 3 % -inf is -inf, 3 // -inf is -1; inf // 3 is nan)."""
  vals = [math.nan, math.inf, -math.inf, 0.0, -0.0, 3.0, -3.0, 0.5, -2.5]
  a, b = [x for x in vals for _ in vals], [y for _ in vals for y in vals]
  (x, t), (y, u) = pair(a), pair(b)
  check_all([Result("a % b", x % y, t % u), Result("a // b", x // y, t // u)])

# *** binary arithmetic: broadcasting, gradients for both inputs ***
BROADCASTS = [(S, S), ((3, 1), (1, 5)), ((5,), S), (S, ()), ((2, 1, 5), (3, 1))]
BINARY = [
  ("add", lambda x, y: x + y), ("sub", lambda x, y: x - y), ("mul", lambda x, y: x * y),
  ("div", lambda x, y: x / (y + 3)),
  ("div_shifted", lambda x, y: (x - 3) / (y + 3)), ("maximum", lambda x, y: x.maximum(y)),
  ("minimum", lambda x, y: x.minimum(y)), ("pow", lambda x, y: (x + 2.5) ** y), ("mod", lambda x, y: x % (y + 3)),
  ("lerp", lambda x, y: x.lerp(y, 0.3)), ("lerp_tensor", lambda x, y: x.lerp(y.flip(-1) if y.ndim else y, y + 2)),
  ("where", lambda x, y: (x > y).where(x, y * 2)), ("copysign", lambda x, y: x.copysign(y)),
  ("logaddexp", lambda x, y: x.logaddexp(y)),
]

@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_binary_broadcast(shapes):
  rng = np.random.default_rng(0)
  inputs = [rng.uniform(-2, 2, s).astype(np.float32) for s in shapes]
  tfn = {"copysign": torch.copysign, "logaddexp": torch.logaddexp, "where": lambda x, y: torch.where(x > y, x, y * 2)}
  check_cases([Case(name, fn, inputs, tfn.get(name)) for name, fn in BINARY])

def test_maximum_minimum():
  """Ties split the gradient in half (torch); nan wins; ints, bools and mixed dtypes promote like torch."""
  check_cases([Case(n, lambda x, y, n=n: getattr(x, n)(y), [[1.0, 2.0, 3.0, -1.0, math.nan, -2.0, math.inf],
                                                            [1.0, 0.0, 3.0, -1.0, 0.0, math.nan, 1.0]],
                    lambda x, y, n=n: getattr(torch, n)(x, y)) for n in ("maximum", "minimum")])
  results = []
  imax, imin = dtypes.max(dtypes.int32), dtypes.min(dtypes.int32)
  for name in ("maximum", "minimum"):
    for other in (imax, imin):
      x, t = pair([-1234, 0, 1234, imax, imin], dtypes.int32)
      want = getattr(torch, name)(t, torch.tensor(other, dtype=torch.int32))
      results.append(Result(f"{name} int32 {other}", getattr(x, name)(other), want))
    x, t = pair([True, False, False], dtypes.bool)
    y, u = pair([True, True, False], dtypes.bool)
    results.append(Result(f"{name} bool", getattr(x, name)(y), getattr(torch, name)(t, u)))
    results.append(Result(f"{name} bool, 1.2", getattr(x, name)(1.2), getattr(torch, name)(t, torch.tensor(1.2))))
    x, t = pair([1, 2, 3], dtypes.int32)
    results.append(Result(f"{name} int, 1.2", getattr(x, name)(1.2), getattr(torch, name)(t, torch.tensor(1.2))))
    want = getattr(torch, name)(t, torch.tensor(2, dtype=torch.int32))
    results.append(Result(f"{name} int, 2", getattr(x, name)(2), want))
  check_all(results)

# *** Python scalars on either side, every dtype: the result's dtype and values are torch's ***
SCALAR_OPS = {
  "add": lambda a, s: a + s, "radd": lambda a, s: s + a, "sub": lambda a, s: a - s, "rsub": lambda a, s: s - a,
  "mul": lambda a, s: a * s, "rmul": lambda a, s: s * a, "div": lambda a, s: a / s, "rdiv": lambda a, s: s / a,
  "floordiv": lambda a, s: a // s, "rfloordiv": lambda a, s: s // a, "mod": lambda a, s: a % s,
  "rmod": lambda a, s: s % a, "pow": lambda a, s: a ** s, "rpow": lambda a, s: s ** a,
}

def _scalar_case_ok(op: str, dt: DType, s: Any) -> bool:
  """The combinations torch computes (it raises for bool subtraction, int ** negative int) and defines the same way."""
  if dt == dtypes.bool and op in ("floordiv", "rfloordiv", "mod", "rmod", "pow", "rpow", "rdiv", "sub", "rsub"):
    return False
  if isinstance(s, bool) and op in ("sub", "rsub"): return False
  if op == "pow" and type(s) is int and s < 0 and not dtypes.is_float(dt): return False
  if dtypes.is_unsigned(dt) and type(s) is int and s < 0 and op in ("floordiv", "mod", "rfloordiv", "rmod", "rpow"):
    return False  # -2 as a uint8 is 254 in both, but torch's floor division of the wrapped value differs
  return True

@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16, dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.int64,
                                dtypes.bool], ids=str)
def test_scalar_operands(dt):
  if dtypes.is_float(dt): vals = [1.5, 2.0, 3.25, -4.5, 0.75, 7.0]
  elif dt == dtypes.bool: vals = [True, False, True, True]
  else: vals = [1, 2, 3, 5, 4, 7] if dtypes.is_unsigned(dt) else [1, 2, 3, 5, -4, 7]
  tol = 2e-3 if dt == dtypes.float16 else 1e-5
  results = []
  for op, fn in SCALAR_OPS.items():
    for s in [3, -2, 2.5, True]:
      if not _scalar_case_ok(op, dt, s): continue
      x, t = pair(vals, dt)
      results.append(Result(f"{op} {s!r}", fn(x, s), fn(t, s), tol, tol, int64_is_default=dt != dtypes.int64))
  check_all(results)

SCALAR_GRADS = [
  ("add", lambda x: x + 2.5), ("rsub", lambda x: 2.5 - x), ("mul", lambda x: x * -3), ("div", lambda x: x / 1.5),
  ("rdiv", lambda x: 2 / x), ("mod", lambda x: x % 0.7), ("pow3", lambda x: x ** 3), ("pow-2", lambda x: x ** -2),
  ("pow2.0", lambda x: x ** 2.0), ("pow0", lambda x: x ** 0), ("pow1", lambda x: x ** 1),
  ("pow8.0", lambda x: x ** 8.0),
  ("pow0.5", lambda x: x ** 0.5), ("pow-1.5", lambda x: x ** -1.5), ("rpow2", lambda x: 2 ** x),
  ("rpow0.5", lambda x: 0.5 ** x),
  ("mul_bool", lambda x: x * True), ("sub_int", lambda x: 3 - x),
  ("maximum", lambda x: x.maximum(0.9), lambda x: torch.maximum(x, torch.tensor(0.9))),
  ("minimum", lambda x: x.minimum(1.1), lambda x: torch.minimum(x, torch.tensor(1.1))),
]

def test_scalar_gradients():
  check_cases([Case(g[0], g[1], [unary_input(0.5, 2)], g[2] if len(g) > 2 else None) for g in SCALAR_GRADS])
  # torch has no derivative for a scalar % or // a tensor
  check_cases([Case("rmod", lambda x: 5.5 % x, [unary_input(0.5, 2)]),
               Case("rfloordiv", lambda x: 2.5 // x, [unary_input(0.5, 2)])], backward=False)

# *** division and remainder ***
def test_floordiv_like_python():
  """a * (1/b) rounds; floor division of whole floats must still be exact."""
  a = np.arange(-200, 201, 7, dtype=np.float32).reshape(-1, 1)
  b = np.array([[1, 2, 3, 7, 13, 14, 15, 28, 49, -3, -7, 0.5, 0.25]], dtype=np.float32)
  (x, t), (y, u) = pair(a), pair(b)
  check_all([Result("floordiv", x // y, t // u), Result("mod", x % y, t % u, atol=1e-5),
             Result("trunc div", x.div(y, rounding_mode="trunc"), t.div(u, rounding_mode="trunc")),
             Result("fmod", x.fmod(y), t.fmod(u), atol=1e-5)])

@pytest.mark.skipif(Device.DEFAULT == "WEBGPU", reason="WGSL's float % is x - y * trunc(x / y), not exact")
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16, dtypes.float64])
def test_mod_fmod_exact_for_large_dividends(dt):
  # %, fmod and // of floats went through self * (1/b): 1e8 % 7 gave 0 (torch 2), 1e10 % 3 gave -1024, -1 // 2**25 gave 0
  a = [1e8, 123456789.0, 1e10, 2.0 ** 33, -1.0, -1.0, -7.0, -65504.0, 1e30, 5.5, -5.5, 7.0, -0.0]
  b = [7.0, 10.0, 3.0, 3.0, 2.0 ** 25, 1e10, 0.001, 3.0, 7.0, -math.inf, math.inf, 7.0, 3.0]
  if dt == dtypes.float16: a, b = [x for x in a if abs(x) <= 65504], [y for x, y in zip(a, b) if abs(x) <= 65504]
  (x, t), (y, u) = pair(a, dt), pair(b, dt)
  check_all([Result("%", x % y, t % u, atol=0, rtol=0), Result("fmod", x.fmod(y), t.fmod(u), atol=0, rtol=0),
             # (a quotient of 2**24 or more is one division's rounding away: 1e8 // 7 in float32)
             # (half: torch's -7 // 0.001 rounds -6998 up to -6996, fusegrad to even, -7000; torch truncates the
             # rounded -7 / 0.001: not in the trunc check)
             Result("//", x // y, t // u, atol=0, rtol=2e-7 if dt != dtypes.float16 else 1e-3),
             Result("trunc", x[:6].div(y[:6], rounding_mode="trunc"), t[:6].div(u[:6], rounding_mode="trunc"), 0, 2e-7)])
  # and many quotients near a whole number (in half, -2968 // 3 gave -991: its steps rounded in half, torch's in float)
  (x, t) = pair(np.random.default_rng(0).integers(-3000, 3000, 512).astype(np.float32), dt)
  check_all([Result(f"{op} {d}", fn(x, d), fn(t, d), 0, 0) for d in (3, 7, -3, 0.75) for op, fn in
             (("//", lambda a, d: a // d), ("%", lambda a, d: a % d), ("trunc", lambda a, d: a.div(d, rounding_mode="trunc")))])

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16])
def test_half_with_a_python_number_it_cant_hold_computes_in_float32_as_torch(dt):
  # the number was made a half constant first: half / 100000 gave 0 (100000 is inf in half), half * 100000 gave nan
  # for 0 (0 * inf), and * 0.1 rounded twice
  (x, t) = pair([1.0, 0.0, -3.5, 1000.0, 0.3, 7.0, -0.0, 65504.0], dt)
  cases = [("/ 100000", lambda a: a / 100000), ("* 100000", lambda a: a * 100000), ("* 0.1", lambda a: a * 0.1),
           ("0.1 -", lambda a: 0.1 - a), ("+ 70000.0", lambda a: a + 70000.0), ("- 1e-5", lambda a: a - 1e-5),
           ("* 3", lambda a: a * 3), ("// 0.3", lambda a: a.div(0.3, rounding_mode="floor")), ("* 2**-30", lambda a: a * 2 ** -30)]
  check_all([Result(name, fn(x), fn(t), atol=0, rtol=0) for name, fn in cases])
  assert (x * 0.1).dtype == dt and (100000 * x).dtype == dt

def test_mod_floordiv_signs():
  va, vb = [-4, 7, 5, 4, -7, 8, -9, 0], [2, -3, 8, -2, 3, 5, -5, 3]
  results = []
  for float_a in (True, False):
    for float_b in (True, False):
      x, t = pair(va, dtypes.float32 if float_a else dtypes.int32)
      y, u = pair(vb, dtypes.float32 if float_b else dtypes.int32)
      for name, fn in [("%", lambda a, b: a % b), ("//", lambda a, b: a // b), ("fmod", lambda a, b: a.fmod(b)),
                       ("% 3", lambda a, b: a % 3), ("% 3.5", lambda a, b: a % 3.5), ("100 %", lambda a, b: 100 % b),
                       ("100.5 %", lambda a, b: 100.5 % b), ("// -3", lambda a, b: a // -3),
                       ("-7 //", lambda a, b: -7 // b)]:
        results.append(Result(f"{name} float_a={float_a} float_b={float_b}", fn(x, y), fn(t, u)))
  check_all(results)

def test_div_rounding_mode():
  results = []
  for dt in (dtypes.int32, dtypes.float32):
    for mode in (None, "trunc", "floor"):
      for denominator in [-10, -3, -1, 1, 2, 5, -2.0, 3.0]:
        x, t = pair([5, 6, 7, 0, -5, -6, -7, 110, -111], dt)
        results.append(Result(f"{dt} {mode} {denominator}", x.div(denominator, rounding_mode=mode),
                              t.div(denominator, rounding_mode=mode)))
      y, u = pair([[-3], [2], [7]], dtypes.int32)
      results.append(Result(f"{dt} {mode} by tensor", x.div(y, rounding_mode=mode), t.div(u, rounding_mode=mode)))
  x, t = pair([-4, 7, 5, 4, -7, 8], dtypes.int32)
  y, u = pair([2, -3, 8, -2, 3, 5], dtypes.int32)
  results.append(Result("idiv", x.idiv(y), torch.div(t, u, rounding_mode="trunc")))
  check_all(results)

def test_mul_div_naninf():
  fns = [lambda x: x * math.inf, lambda x: x * -math.inf, lambda x: x * math.nan, lambda x: x / math.inf,
         lambda x: math.inf / x, lambda x: math.nan / x, lambda x: x / 0.0, lambda x: -0.0 * x, lambda x: x / -math.inf]
  check_cases([Case(f"case {i}", fn, [[-2.0, -0.5, 0.0, 1.5, math.inf]]) for i, fn in enumerate(fns)], backward=False)

# *** pow ***
def test_pow_negative_base():
  """Whole exponents keep the sign of a negative base; fractional ones give nan, and a nan gradient (torch)."""
  fns = [("cube", lambda x: x ** 3), ("square_float", lambda x: x ** 2.0), ("inverse_float", lambda x: x ** -1.0),
         ("cube_float", lambda x: x ** 3.0), ("fractional", lambda x: x ** 0.2),
         ("fractional_above_1", lambda x: x ** 1.2),
         ("large_int", lambda x: x ** 100), ("large_odd_int", lambda x: x ** 101), ("int_over_64", lambda x: x ** 65.0)]
  check_cases([Case(name, fn, [unary_input(-1.2, -0.8)]) for name, fn in fns])

def test_pow_tensor_exponent():
  neg_to_pos = [-2.0, -1, -0.5, 0, 0.5, 1, 2, 3]
  check_cases([Case("zero", lambda x: 0 ** x, [[0.0, 0.5, 1, 2, 3]]),  # 0 ** negative: see the xfail below
               Case("0.7", lambda x: 0.7 ** x, [neg_to_pos]), Case("one", lambda x: 1.0 ** x, [neg_to_pos]),
               Case("5.5", lambda x: 5.5 ** x, [neg_to_pos]), Case("self", lambda x: x ** x, [[0.0, 0.5, 1, 2, 3]]),
               Case("tensors", lambda x, y: x ** y, [[0.5, 1.5, 2.0, 3.0, 1.0], [-1.5, 2.5, 0.0, 1.0, 2.5]])])
  # the values for negative bases: whole exponents keep the sign; the gradient for the exponent is the xfail below
  check_cases([Case("-2 ** x", lambda x: (-2) ** x, [[-2.0, -1, 0, 1, 2, 3, 0.5]]),
               Case("x ** y", lambda x, y: x ** y, [[-2.0, -2, -3, -0.5], [2.0, 3, -1, 0.5]])], backward=False)

@pytest.mark.parametrize("dt", ["int8", "int16", "int32", "int64", "uint8"])
def test_pow_of_integer_tensors_is_exact_and_wraps_as_torch(dt):
  """int ** int with a tensor exponent: exact (3 ** 19 = 1162261467; a float pow gave 1162260608), wrapping past the
  dtype's range as torch's, negative exponents 1 for 1, +-1 for -1, 0 elsewhere; a Python base or exponent too."""
  signed = not dt.startswith("u")
  a = [3, 7, 2, 10, 5, -3, 13, 1, -1, -1, 0, 0, 2] if signed else [3, 7, 2, 10, 5, 254, 13, 1, 255, 0, 0, 2, 4]
  b = [19, 11, 30, 9, 13, 19, 8, -3, -3, -2, -1, 0, 70] if signed else [19, 11, 30, 9, 13, 3, 8, 200, 255, 0, 1, 70, 3]
  fx, fy, tx, ty = Tensor(a, dtype=getattr(dtypes, dt)), Tensor(b, dtype=getattr(dtypes, dt)), \
    torch.tensor(a, dtype=getattr(torch, dt)), torch.tensor(b, dtype=getattr(torch, dt))
  for got, want in [(fx ** fy, tx ** ty), (2 ** fy.abs(), 2 ** ty.abs()), (fx ** 100, tx ** 100)]:
    assert got.dtype == getattr(dtypes, dt)
    np.testing.assert_equal(got.numpy(), want.numpy())

def test_pow_negative_base_exponent_gradient():  # d/dy x**y = x**y * log(x) is nan for x < 0 (torch)
  helper_test_op(None, lambda x: (-2) ** x, vals=[[1.0, 2.0]])

def test_pow_ieee_special_cases():
  """IEEE pow: x**0 is 1 (nan too), 1**y is 1 (nan too), 0**negative is inf, (-inf)**odd is -inf, (-1)**inf is 1."""
  xs = [0.0, 0.0, 0.0, math.nan, 1.0, -1.0, math.inf, -math.inf, -math.inf, -math.inf, 2.0, 0.5, -0.5, -8.0, 4.0, 0.0]
  ys = [0.0, -1.5, 2.0, 0.0, math.nan, math.inf, -2.0, 3.0, 2.0, 0.5, math.inf, math.inf, -math.inf, 1 / 3, 0.5,
        math.nan]
  (x, t), (y, u) = pair(xs), pair(ys)
  check(x ** y, t ** u)

def test_pow_zero_base_gradients():
  """0 ** 0 and 0 ** 2 have gradient 0 for both inputs, 0 ** 1 has 1 for the base, as in torch."""
  cases = [Case("tensors", lambda x, y: x ** y, [[0.0, 0.0, 2.0, 1.0, 3.0], [0.0, 2.0, 0.0, 1.7, 0.0]])]
  for c in [0, 1, 2, 3, 2.0, -1, -1.0, 1.0, 0.0]:
    cases.append(Case(f"x ** {c!r}", lambda x, c=c: x ** c, [[0.0, 1.0, -1.0]]))
  check_cases(cases)

def test_pow_scalar_exponent_special_bases():
  """Values and gradients of x ** c at +-inf, 0, 1 and negative x, for whole, fractional and negative c (torch)."""
  cases = []
  for c in [-1, 0, 0.3, 1, 2, -2, 3, -0.5, 0.5, 2.5, -1.5]:
    vals = [-math.inf, 0.0, 1.0, math.inf, -2.0, 2.0, 0.5, -0.5]
    cases.append(Case(f"x ** {c}", lambda x, c=c: x ** c, [vals]))
  check_cases(cases)

# d/dx x**c at x=0 is inf (0<c<1) or -inf (c<0) in torch, as at x=+-inf for fractional c>1; d/dc 0**c is -inf for c<0
@pytest.mark.parametrize("fn,x", [(lambda x: x ** 0.3, 0.0), (lambda x: x ** -0.3, 0.0), (lambda x: 0 ** (x - 1), 0.0),
                                  (lambda x: x ** 2.5, math.inf)], ids=["0.3", "-0.3", "zero_base", "inf_base"])
def test_pow_infinite_gradient(fn, x):
  helper_test_op(None, fn, vals=[[x]])

POW_BASES = [0.0, -0.0, math.inf, -math.inf, math.nan, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 3.0]
POW_EXPONENTS = [0.0, -0.0, math.inf, -math.inf, math.nan, -2.0, -1.5, -1.0, -0.5, 0.5, 1.0, 2.0, 2.5, 3.0]

def _check_pow_grads(got: list[Tensor], want: list[torch.Tensor]) -> None:
  for i, (g, w) in enumerate(zip(got, want)):  # nan where torch has nan, the sign of inf and of 0 as torch's
    a, b = g.numpy(), w.detach().numpy()
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-30, equal_nan=True, err_msg=f"output {i}")
    assert (np.signbit(a) == np.signbit(b))[~np.isnan(b)].all(), f"output {i}: signs {a} vs {b}"

@pytest.mark.parametrize("e", POW_EXPONENTS)
def test_pow_scalar_exponent_grad_grid(e):  # x ** e at every special base: value and d/dx as torch
  x, tx = Tensor(POW_BASES, requires_grad=True), torch.tensor(POW_BASES, requires_grad=True)
  y, ty = x ** e, tx ** e
  y.sum().backward(), ty.sum().backward()
  _check_pow_grads([y, x.grad], [ty, tx.grad])

def test_pow_tensor_exponent_grad_grid():  # b ** e for every pair of special values: value, d/db and d/de as torch
  bs, es = zip(*[(b, e) for b in POW_BASES for e in POW_EXPONENTS])
  b, e, tb, te = (Tensor(list(bs), requires_grad=True), Tensor(list(es), requires_grad=True),
                  torch.tensor(bs, requires_grad=True), torch.tensor(es, requires_grad=True))
  y, ty = b ** e, tb ** te
  y.sum().backward(), ty.sum().backward()
  _check_pow_grads([y, b.grad, e.grad], [ty, tb.grad, te.grad])

_CL_NAN = pytest.mark.xfail(Device.DEFAULT == "CL", reason="PoCL: a nan constant base gives nan ** y = 0 (forward, "
                            "before the gradient rule too; a renderer/compiler issue)", strict=True)
@pytest.mark.parametrize("b", [pytest.param(b, marks=_CL_NAN) if math.isnan(b) else b for b in POW_BASES])
def test_pow_scalar_base_grad_grid(b):  # b ** e for a Python number b: d/de as torch
  e, te = Tensor(POW_EXPONENTS, requires_grad=True), torch.tensor(POW_EXPONENTS, requires_grad=True)
  y, ty = b ** e, b ** te
  y.sum().backward(), ty.sum().backward()
  _check_pow_grads([y, e.grad], [ty, te.grad])

def test_pow_grad_through_realized_input():  # the rule survives the realized intermediate being substituted back
  h, th = Tensor([math.inf, 0.0, 2.0], requires_grad=True), torch.tensor([math.inf, 0.0, 2.0], requires_grad=True)
  r = (h * 2).realize()
  (r ** 2.5).sum().backward()
  ((th * 2) ** 2.5).sum().backward()
  _check_pow_grads([h.grad], [th.grad])

def test_pow_second_derivative():  # the rule's gradient is itself differentiable: d2/dx2 x**2.5 = 3.75 x**0.5
  x = Tensor([0.5, 2.0, 3.0], requires_grad=True)
  g, = (x ** 2.5).sum().gradient(x)
  gg, = g.sum().gradient(x)
  np.testing.assert_allclose(gg.numpy(), 3.75 * np.array([0.5, 2.0, 3.0]) ** 0.5, rtol=1e-5)

def test_pow_ints():
  """int ** int stays an int (computed in floats and rounded: 3 ** 5 is 243, not 242.99998); a float exponent or base
  gives a float."""
  results = []
  for vals, exponent in [([-2, 0, 2], 0), ([-2, 0, 2], 1), ([-2, 0, 2], 2), ([11, 12, 13], 7), ([-2, 0, 2], 29),
                         ([3, 5, 7], 2.0), ([3, 5, 7], 0.5), ([3, 5, 7], -1.0), ([3, 5, 7], 1.5)]:
    x, t = pair(vals, dtypes.int32)
    results.append(Result(f"{vals} ** {exponent}", x ** exponent, t ** exponent))
  x, t = pair([3, 2, -3, 7, 0, 1, 2], dtypes.int32)
  y, u = pair([5, 10, 3, 4, 3, 0, -1], dtypes.int32)
  results += [Result("int ** int", x ** y, t ** u), Result("3 ** int", 3 ** y, 3 ** u),
              Result("2.5 ** int", 2.5 ** y, 2.5 ** u)]
  check_all(results)

def test_pow_int_negative_exponent_raises():
  with pytest.raises(ValueError, match="pow"): Tensor([1, 2]) ** -2
  with pytest.raises(RuntimeError): Tensor([1, 2]) ** -1  # torch's exception type works too

# *** where, clip, masked_fill ***
@pytest.mark.parametrize("shapes", [[(8,), (1,), (1,)], [(3, 4), (4,), (4,)], [S, S, S], [(3, 1), (1, 5), ()]], ids=str)
def test_where_broadcast(shapes):
  helper_test_op(shapes, lambda c, a, b: torch.where(c > 0.5, a, b), lambda c, a, b: (c > 0.5).where(a, b))

def test_where_scalars():
  c, tc = pair([True, False, True], dtypes.bool)
  x, t = pair([1, 2, 3], dtypes.int32)
  h, th = pair([1.5, 2.5, 3.5], dtypes.float16)
  f, tf = pair([0.0, 2.0, -1.0])
  check_all([Result("4, 2", c.where(4, 2), torch.where(tc, 4, 2), int64_is_default=True),
             Result("1, 2.5", c.where(1, 2.5), torch.where(tc, 1, 2.5)),
             Result("True, False", c.where(True, False), torch.where(tc, True, False)),
             Result("int, 2.5", c.where(x, 2.5), torch.where(tc, t, 2.5)),
             Result("-1, int", c.where(-1, x), torch.where(tc, -1, t)),
             Result("half, 0.1", c.where(h, 0.1), torch.where(tc, th, 0.1), atol=1e-3),
             Result("half, int", c.where(h, x), torch.where(tc, th, t), atol=1e-3),
             Result("float condition", f.where(1, 0), torch.where(tf.bool(), 1, 0), int64_is_default=True)])
  check_cases([Case("x, 0.5", lambda x: (x > 0).where(x, 0.5), [unary_input(-2, 2)],
                    lambda x: torch.where(x > 0, x, 0.5)),
               Case("-3, x", lambda x: (x > 0).where(-3, x), [unary_input(-2, 2)], lambda x: torch.where(x > 0, -3, x)),
               Case("masked_fill", lambda x: x.masked_fill(x < 0, 0.5), [unary_input(-2, 2)])])

def test_where_permute():
  helper_test_op([(3, 5)], lambda x: torch.where(x > 0.5, 4, 2).type(torch.int32).permute((1, 0)),
                 lambda x: (x > 0.5).where(4, 2).permute((1, 0)), forward_only=True)

def test_masked_fill_keeps_dtype():
  x, t = pair([1, -2, 3], dtypes.int32)
  check(x.masked_fill(x < 0, 7), t.masked_fill(t < 0, 7))

def test_clip():
  """Either bound may be missing; min > max gives max (torch); gradient 1 on the bounds."""
  cases = []
  for lo, hi in [(-1, 1), (None, 0.5), (-0.5, None), (1.5, -1.5), (0, 0)]:
    bounds_and_more = [unary_input(-2, 2, [-1.0, 1.0, 0.5, -0.5])]
    cases.append(Case(f"clip({lo}, {hi})", lambda x, lo=lo, hi=hi: x.clip(lo, hi), bounds_and_more))
    cases.append(Case(f"clamp(min={lo}, max={hi})", lambda x, lo=lo, hi=hi: x.clamp(min=lo, max=hi), bounds_and_more,
                      lambda x, lo=lo, hi=hi: torch.clamp(x, min=lo, max=hi)))
  bounds = [unary_input(-3, 3), unary_input(-1, 1, seed=1), unary_input(-1, 1, seed=2)]
  cases.append(Case("tensor bounds", lambda x, lo, hi: x.clip(lo - 1, hi + 1), bounds))
  check_cases(cases)
  x, t = pair([1, 5, -3], dtypes.int32)
  y, u = pair([math.nan, -math.inf, math.inf, 0.0])
  check_all([Result("int, 0.5", x.clip(0.5), t.clip(0.5)), Result("int, 0, 2", x.clip(0, 2), t.clip(0, 2)),
             Result("specials", y.clip(-1, 1), u.clip(-1, 1))])
  with pytest.raises(ValueError, match="clip"): Tensor([1.0]).clip()

# *** comparisons ***
CMPS = [("lt", lambda x, y: x < y), ("le", lambda x, y: x <= y), ("gt", lambda x, y: x > y),
        ("ge", lambda x, y: x >= y), ("eq", lambda x, y: x == y), ("ne", lambda x, y: x != y)]

def test_comparisons():
  """Every dtype, scalars on both sides, mixed dtypes, and nan, inf and -0.0 against each other."""
  specials = [0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, -0.0]
  results = []
  for name, fn in CMPS:
    for dt in [dtypes.float32, dtypes.int32, dtypes.bool, dtypes.uint8, dtypes.float16, dtypes.int64]:
      va, vb = ([0, 1, 2, 1], [2, 1, 0, 1]) if dt != dtypes.bool else ([True, True, False, False],
                                                                      [False, True, False, True])
      (x, t), (y, u) = pair(va, dt), pair(vb, dt)
      results += [Result(f"{name} {dt}", fn(x, y), fn(t, u)), Result(f"{name} {dt} 1", fn(x, 1), fn(t, 1)),
                  Result(f"{name} 1 {dt}", fn(1, y), fn(1, u)), Result(f"{name} {dt} 1.5", fn(x, 1.5), fn(t, 1.5))]
    (x, t), (y, u) = pair([s for s in specials for _ in specials]), pair([s for _ in specials for s in specials])
    results += [Result(f"{name} specials", fn(x, y), fn(t, u)), Result(f"{name} nan", fn(x, math.nan), fn(t, math.nan))]
    (x, t), (y, u) = pair([1, 2, 3, -1], dtypes.int32), pair([1.5, 2.0, 2.5, -1.0])
    results.append(Result(f"{name} int with float", fn(x, y), fn(t, u)))
    (x, t), (y, u) = pair([1, 200, 3, 0], dtypes.uint8), pair([-1, 2, 3, 0], dtypes.int8)
    results.append(Result(f"{name} uint8 with int8", fn(x, y), fn(t, u)))
    (x, t), (y, u) = pair(np.arange(12).reshape(3, 4, 1) % 3), pair(np.arange(5) % 2)
    results.append(Result(f"{name} broadcast", fn(x, y), fn(t, u)))
  check_all(results)

def test_comparison_gradients():
  """A comparison used as a mask passes gradient through the multiply, none through the comparison."""
  vals = [[1.0, 0.0, -2.0, 0.5]]
  check_cases([Case("ne", lambda x: x * (x != 0), vals), Case("lt", lambda x: x * (x < 0), vals)])

# *** logic and bitwise ***
def test_logical():
  results = []
  for name in ["logical_and", "logical_or", "logical_xor"]:
    (x, t), (y, u) = pair([True, True, False, False], dtypes.bool), pair([True, False, True, False], dtypes.bool)
    (f, tf), (i, ti) = pair([1.0, 0.0, 0.5, 0.0]), pair([0, 3, -1, 0], dtypes.int32)
    results += [Result(f"{name} bool", getattr(x, name)(y), getattr(torch, name)(t, u)),
                Result(f"{name} float int", getattr(f, name)(i), getattr(torch, name)(tf, ti))]
  for vals, dt in [([True, False, True], dtypes.bool), ([1.0, 2.0, 0.0, 0.5, -0.0, math.nan], dtypes.float32),
                   ([0, 3, -2], dtypes.int32)]:
    x, t = pair(vals, dt)
    results.append(Result(f"logical_not {dt}", x.logical_not(), torch.logical_not(t)))
  check_all(results)

BITWISE = [("and", lambda a, b: a & b), ("or", lambda a, b: a | b), ("xor", lambda a, b: a ^ b)]

def test_bitwise():
  results = []
  for dt in [dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.int64, dtypes.int16]:
    data = [[1, -8, 1], [32, 1, 6]] if not dtypes.is_unsigned(dt) else [[1, 248, 1], [32, 1, 6]]
    (x, t), (y, u) = pair(data, dt), pair([[7, 3, -1 if not dtypes.is_unsigned(dt) else 255], [5, 0, 2]], dt)
    (b, tb), (c, tc) = pair([True, False, True], dtypes.bool), pair([[True, True, False]], dtypes.bool)
    for name, fn in BITWISE:
      results += [Result(f"{name} {dt}", fn(x, y), fn(t, u)), Result(f"{name} {dt} self", fn(x, x), fn(t, t)),
                  Result(f"{name} {dt} 0x37", fn(x, 0x37), fn(t, 0x37)),
                  Result(f"{name} 0x37 {dt}", fn(0x37, x), fn(0x37, t)),
                  Result(f"{name} {dt} broadcast", fn(x, y[0]), fn(t, u[0])),
                  Result(f"{name} {dt} bool", fn(x, b), fn(t, tb)),
                  Result(f"{name} bool", fn(c, b), fn(tc, tb)), Result(f"{name} bool True", fn(c, True), fn(tc, True))]
  for data, dt in [([[1, -8, 1], [32, 1, 6]], dtypes.int32), ([[0, 255, 7]], dtypes.uint8),
                   ([[0, -128, 127]], dtypes.int8), ([[True, False]], dtypes.bool), ([[2 ** 40, -1, 0]], dtypes.int64)]:
    x, t = pair(data, dt)
    results += [Result(f"~ {dt}", ~x, ~t), Result(f"bitwise_not {dt}", x.bitwise_not(), t.bitwise_not())]
  check_all(results)

def test_shifts():
  results = []
  for dt in [dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.int64]:
    vals = [0, 1, 2, 1 << 6, 5, 7] if dt in (dtypes.int8, dtypes.uint8) else [0, 1, 2, 1 << 8, 1 << 16, 7]
    (x, t), (y, u) = pair(vals, dt), pair([0, 1, 2, 3, 1, 0], dt)
    for n in [0, 1, 5]: results += [Result(f"{dt} << {n}", x << n, t << n), Result(f"{dt} >> {n}", x >> n, t >> n)]
    results += [Result(f"{dt} lshift", x.lshift(3), t.bitwise_left_shift(3)),
                Result(f"{dt} rshift", x.rshift(1), t.bitwise_right_shift(1)),
                Result(f"{dt} << tensor", x << y, t << u), Result(f"{dt} >> tensor", x >> y, t >> u),
                Result(f"1 << {dt}", 1 << y, 1 << u), Result(f"64 >> {dt}", 64 >> y, 64 >> u)]
    if not dtypes.is_unsigned(dt):  # arithmetic shift right keeps the sign; shift left wraps
      z, v = pair([-7, -1, -128, 7, 3, -2], dt)
      results += [Result(f"{dt} negative >> 1", z >> 1, v >> 1),
                  Result(f"{dt} << wraps", z << (dt.itemsize * 8 - 2), v << (dt.itemsize * 8 - 2))]
  check_all(results)
  x = Tensor([0, 1, 2, 1 << 8, 1 << 16, (1 << 31) - 1], dtype=dtypes.uint32)
  assert (x << 31).tolist() == [0, 1 << 31, 0, 0, 0, 1 << 31]
  assert (Tensor([2 ** 32 - 1], dtype=dtypes.uint32) >> 4).tolist() == [2 ** 28 - 1]

# *** isnan, isinf, isfinite ***
def test_isnan_isinf_isfinite():
  vals = [-math.inf, 0.0, math.inf, math.nan, 1.1, -0.0, 3e38]
  results = []
  for name in ["isnan", "isinf", "isfinite"]:
    for dt in [dtypes.float32, dtypes.float16, dtypes.float64, dtypes.bfloat16]:
      x, t = pair(vals if dt != dtypes.float16 else vals[:-1], dt)
      results.append(Result(f"{name} {dt}", getattr(x, name)(), getattr(torch, name)(t)))
    x, t = pair([1, -2, 0], dtypes.int32)
    results.append(Result(f"{name} int", getattr(x, name)(), getattr(torch, name)(t)))
  check_all(results)
  x = Tensor(vals)
  assert x.isinf(detect_positive=True, detect_negative=False).tolist() == [False, False, True] + [False] * 4
  assert x.isinf(detect_positive=False, detect_negative=True).tolist() == [True] + [False] * 6
  assert x.isinf(detect_positive=False, detect_negative=False).tolist() == [False] * 7

# *** extras ***
def test_copysign_logaddexp_edges():
  signs = [-1.0, 0.0, -0.0, 1.0]
  magnitudes = [i for i in [-1.0, 0.0, 1.0] for _ in signs]
  far_apart = [[-1.0, -100, -200, 1.0, 2000, 30000], [-1.0, 2, 3, -1, 2, 3]]
  check_cases([Case("copysign", Tensor.copysign, [magnitudes, signs * 3], torch.copysign),
               Case("logaddexp", Tensor.logaddexp, far_apart, torch.logaddexp)])
  x, t = pair([-math.inf, math.inf, -math.inf, math.nan])
  y, u = pair([-math.inf, 1.0, 2.0, 0.0])
  check(x.logaddexp(y), torch.logaddexp(t, u))

def test_isclose():
  x, t = pair([1.0, 1.0 + 1e-6, 1.1, math.inf, math.inf, math.nan, 0.0, -1e-9, 100.0])
  y, u = pair([1.0, 1.0, 1.0, math.inf, -math.inf, math.nan, 1e-9, 0.0, 100.001])
  i, ti = pair([1, 2, 3], dtypes.int32)
  check_all([Result("default", x.isclose(y), t.isclose(u)),
             Result("equal_nan", x.isclose(y, equal_nan=True), t.isclose(u, equal_nan=True)),
             Result("loose", x.isclose(y, rtol=0.2, atol=0.5), t.isclose(u, rtol=0.2, atol=0.5)),
             Result("scalar", x.isclose(1.0), t.isclose(torch.tensor(1.0))),
             Result("ints", i.isclose(2), ti.isclose(torch.tensor(2, dtype=torch.int32)))])

def test_float64_precision():
  """float64 in, float64 precision out: no step goes through float32."""
  names = ["exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tan", "sigmoid", "tanh", "reciprocal"]
  results = []
  for name in names:
    x, t = pair([2.0, 3.0, 4.0, 0.5, 1e-3, 20.0], dtypes.float64)
    results.append(Result(name, getattr(x, name)(), getattr(t, name)(), atol=1e-12, rtol=1e-12))
  x, t = pair([2.0, 3.0, 4.0, 0.5, 1e-3, 20.0], dtypes.float64)
  results.append(Result("pow", x ** 2.5, t ** 2.5, atol=1e-12, rtol=1e-12))
  check_all(results)

def test_bool_and_int_arithmetic():
  """bool + bool is bool (or), bool with an int or float promotes; int arithmetic wraps like C (and torch)."""
  (x, t), (y, u) = pair([True, False, True], dtypes.bool), pair([True, True, False], dtypes.bool)
  (i, ti), (j, tj) = pair([1, 2, 3], dtypes.int8), pair([100, -100, 127], dtypes.int8)
  (v, tv), (m, tm) = pair([200, 255, 0], dtypes.uint8), pair([dtypes.max(dtypes.int32)], dtypes.int32)
  check_all([Result("bool + bool", x + y, t + u), Result("bool * bool", x * y, t * u),
             Result("bool + 1", x + 1, t + 1, int64_is_default=True), Result("bool * 2.5", x * 2.5, t * 2.5),
             Result("bool / bool", x / y, t / u), Result("bool + int8", x + i, t + ti),
             Result("int8 * 3", j * 3, tj * 3), Result("int8 + 100", j + 100, tj + 100),
             Result("uint8 + uint8", v + v, tv + tv), Result("-uint8", -v, -tv),
             Result("int32 max + 1", m + 1, tm + 1), Result("-bool", -x, torch.logical_not(t))])  # torch refuses -bool

def test_inplace_operators():
  x, t = pair([1.0, 2.0, 3.0])
  x.realize()
  x += 1
  x *= 2
  x -= 0.5
  x /= 2
  x **= 2
  check(x, ((((t + 1) * 2) - 0.5) / 2) ** 2)
  i = Tensor([5, 6, 7]).realize()
  i //= 2
  i %= 2
  i |= 4
  i &= 6
  i ^= 1
  i <<= 2
  i >>= 1
  assert i.tolist() == [((((((v // 2) % 2) | 4) & 6) ^ 1) << 2) >> 1 for v in [5, 6, 7]]

# *** float16 and bfloat16: forward against torch CPU in the same dtype ***
HALF_OPS = [  # (name, fusegrad fn, torch fn or None for the same)
  ("add", lambda x, y: x + y, None), ("mul", lambda x, y: x * y, None), ("div", lambda x, y: x / (y + 3), None),
  ("sub", lambda x, y: x - y, None), ("maximum", lambda x, y: x.maximum(y), None),
  ("exp", lambda x, y: (x * 3).exp(), None),
  ("log", lambda x, y: (x + 3).log(), None), ("sqrt", lambda x, y: (x + 3).sqrt(), None),
  ("sin", lambda x, y: x.sin(), None),
  ("cos", lambda x, y: x.cos(), None), ("sigmoid", lambda x, y: x.sigmoid(), None),
  ("tanh", lambda x, y: x.tanh(), None),
  ("relu", lambda x, y: x.relu(), None), ("gelu", lambda x, y: x.gelu(), lambda x, y: F.gelu(x, approximate="tanh")),
  ("silu", lambda x, y: x.silu(), lambda x, y: F.silu(x)),
  ("softplus", lambda x, y: x.softplus(), lambda x, y: F.softplus(x)),
  ("floor", lambda x, y: x.floor(), None), ("round", lambda x, y: x.round(), None),
  ("pow", lambda x, y: (x + 3) ** (y * 2), None),
  ("rpow", lambda x, y: 2.5 ** (x * 3), None),
  ("where", lambda x, y: (x > y).where(x, y), lambda x, y: torch.where(x > y, x, y)),
  ("abs", lambda x, y: x.abs(), None), ("reciprocal", lambda x, y: (x + 3).reciprocal(), None),
  ("mod", lambda x, y: x % 0.7, None),
  ("erf", lambda x, y: x.erf(), None), ("atan", lambda x, y: x.atan(), None),
]

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=str)
def test_half_precision(dt):
  """Torch computes these in float32 and rounds once; ours may be a few units in the last place off."""
  tol = 3e-3 if dt == dtypes.float16 else 2e-2
  rng = np.random.default_rng(0)
  a, b = rng.uniform(-2, 2, S).astype(np.float32), rng.uniform(-2, 2, S).astype(np.float32)
  results = []
  for name, fn, tfn in HALF_OPS:
    (x, t), (y, u) = pair(a, dt), pair(b, dt)
    results.append(Result(name, fn(x, y), (tfn or fn)(t, u), tol, tol))
  check_all(results)

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16])
def test_low_precision_division(dt):
  """x / y divides in float and rounds once, as torch does: 1/y of a subnormal y would overflow half."""
  tiny = 1e-7 if dt == dtypes.float16 else 1e-38
  (x, t), (y, u) = pair([tiny, 60000.0, 1.0, -3.3, 0.0], dt), pair([tiny, 60000.0, 3.0, 7.7, 0.0], dt)
  check_all([Result("x / y", x / y, t / u, 0, 0), Result("x / 3", x / 3, t / 3, 0, 0)])

def test_half_gradients():
  helper_test_op([S], lambda x: (x * 2).sigmoid() * x, dtype=dtypes.float16, atol=5e-3, rtol=5e-3, grad_atol=5e-3,
                 grad_rtol=5e-3)

def test_mixed_float_dtypes():
  (h, th), (b, tb), (f, tf) = pair([1.5, 2.5], dtypes.float16), pair([1.5, 2.5], dtypes.bfloat16), pair([1.5, 2.5])
  check_all([Result("half + bfloat16", h + b, th + tb), Result("half * float", h * f, th * tf),
             Result("bfloat16 - float", b - f, tb - tf)])

# *** bad input ***
@pytest.mark.parametrize("fn", [
  pytest.param(lambda x, y: x & y, id="and"), pytest.param(lambda x, y: x | y, id="or"),
  pytest.param(lambda x, y: x ^ y, id="xor"), pytest.param(lambda x, y: ~x, id="not"),
  pytest.param(lambda x, y: x << 1, id="lshift"), pytest.param(lambda x, y: x >> 1, id="rshift"),
  pytest.param(lambda x, y: y & 1.5, id="int_and_float_scalar")])
def test_bitwise_on_floats_raises(fn):
  with pytest.raises(TypeError, match="float"): fn(Tensor([1.0, 2.0]), Tensor([1, 2]))
  with pytest.raises(RuntimeError): fn(Tensor([1.0, 2.0]), Tensor([1, 2]))  # torch's exception type works too

@pytest.mark.parametrize("name,fn", [
  ("add", lambda x, y: x + y), ("sub", lambda x, y: x - y), ("mul", lambda x, y: x * y), ("div", lambda x, y: x / y),
  ("pow", lambda x, y: x ** y), ("maximum", lambda x, y: x.maximum(y)), ("lt", lambda x, y: x < y),
  ("where", lambda x, y: (x > 0).where(x, y)), ("bitwise_and", lambda x, y: x.int() & y.int()),
  ("mod", lambda x, y: x % y), ("ne", lambda x, y: x != y)])
def test_broadcast_mismatch_raises(name, fn):
  with pytest.raises(ValueError, match=rf"{name}.*\(3, 4\).*\(3,\)|{name}.*\(3,\).*\(3, 4\)"):
    fn(Tensor.ones(3, 4), Tensor.ones(3))

def test_bad_arguments_raise():
  with pytest.raises(ValueError, match="rounding_mode"): Tensor([1.0]).div(2, rounding_mode="typo")
  with pytest.raises(TypeError, match="add"): Tensor([1.0]) + "a"
  with pytest.raises(TypeError, match="sub"): Tensor([True]) - True

def test_allclose():
  cases = [([1.0, 2.0], [1.0, 2.0 + 1e-6], {}), ([1.0, 2.0], [1.0, 2.1], {}), ([1.0, 2.0], [1.0, 2.1], {"rtol": 0.1}),
           ([1.0, math.nan], [1.0, math.nan], {}), ([1.0, math.nan], [1.0, math.nan], {"equal_nan": True}),
           ([math.inf, -math.inf], [math.inf, -math.inf], {}), ([math.inf, 1.0], [-math.inf, 1.0], {}),
           ([0.0, 1e-9], [1e-9, 0.0], {}), ([0.0, 1e-9], [1e-9, 0.0], {"atol": 0.0}),
           ([[1.0], [2.0]], [1.0, 1.0], {"atol": 1.0})]
  for a, b, kw in cases:
    got, want = Tensor(a).allclose(Tensor(b), **kw), torch.tensor(a).allclose(torch.tensor(b), **kw)
    assert got.shape == () and got.dtype == dtypes.bool and got.item() == want, (a, b, kw)  # a tensor, as tinygrad's
  assert Tensor([2, 2]).allclose(2) and Tensor([2, 3]).allclose(Tensor([2, 3])) and not Tensor([2]).allclose(3)
  with pytest.raises(ValueError, match="isclose"): Tensor.ones(2).allclose(Tensor.ones(3))

# *** gradients at special points, as torch (values and gradients compared with nan and the sign of inf) ***
def _grad_at(fg_fn: Callable, torch_fn: Callable, vals: list[float], dtype: DType = dtypes.float32,
             rtol: float = 1e-5) -> None:
  x, tx = pair(vals, dtype, requires_grad=True)
  y, ty = fg_fn(x), torch_fn(tx)
  y.sum().backward()
  ty.sum().backward()
  np.testing.assert_allclose(y.float().numpy(), ty.detach().float().numpy(), rtol=rtol, atol=1e-30, equal_nan=True)
  np.testing.assert_allclose(x.grad.float().numpy(), tx.grad.float().numpy(), rtol=10 * rtol, atol=1e-30, equal_nan=True)

SPECIAL = [0.0, -0.0, 2.0, -2.0, 0.5, math.inf, -math.inf, 1e30, -1e30]
@pytest.mark.parametrize("e", [0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5])
def test_pow_grad_at_zero_and_inf(e): _grad_at(lambda x: x ** e, lambda x: x ** e, SPECIAL)
def test_pow_fractional_grad_at_zero(): _grad_at(lambda x: x ** 2.5, lambda x: x ** 2.5, [0.0, 0.5, 2.0, -2.0])
def test_pow_exponent_grad_at_zero_base():  # d/de 0 ** e is 0 for e >= 0 (torch masks the 0 * log 0)
  _grad_at(lambda e: Tensor([0.0, 0.0, 2.0, 0.5, 1.0]) ** e, lambda e: torch.tensor([0.0, 0.0, 2.0, 0.5, 1.0]) ** e,
           [2.0, 0.0, 1.0, 3.0, -2.0])
def test_acosh_grad_below_one():  # torch: 1/sqrt(x^2 - 1), finite and positive below -1, inf at -1 and 1
  _grad_at(Tensor.acosh, torch.acosh, [-2.0, -1.0, -0.5, 0.5, 1.0, 1.0001, 2.0, 1e30, -1e30, math.inf, -math.inf],
           rtol=1e-4)  # (float32 acosh just above 1 is good to ~1e-4 relative)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16])
def test_sigmoid_extremes_no_nan(dtype):
  _grad_at(Tensor.sigmoid, torch.sigmoid, [-300.0, 300.0, -1e4, 1e4, -math.inf, math.inf, 0.0], dtype)

def test_bool_arithmetic():
  """bool + bool is logical or and bool * bool logical and (the result stays bool), also when fused into a cast or a
  constant; bool - bool raises, as in torch."""
  x, t = pair([True, False, True, False], dtypes.bool)
  y, u = pair([True, True, False, False], dtypes.bool)
  cases = [("(x+x)*3", lambda a, b: (a + a) * 3), ("(x+y)*3", lambda a, b: (a + b) * 3),
           ("(x*y)*3", lambda a, b: (a * b) * 3), ("x+y", lambda a, b: a + b), ("x*y", lambda a, b: a * b),
           ("(x+y+x)*2.5", lambda a, b: (a + b + a) * 2.5), ("x+True", lambda a, b: (a + True) + b),
           ("(x*True)*2", lambda a, b: (a * True + b) * 2), ("x+1", lambda a, b: a + b + 1),
           ("(x+y).int()+(x*y).int()", lambda a, b: (a + b).int() + (a * b).int()),
           ("((x+y)*x).float().mean()", lambda a, b: ((a + b) * a).float().mean())]
  check_all([Result(name, fn(x, y), fn(t, u), int64_is_default=True) for name, fn in cases] +
            [Result("(x+y).sum()", (x + y).sum(), (t + u).sum())])  # a bool sum is int64 in both
  # a constant folded bool sum: True + True is True
  check(Tensor(True) + Tensor(True), torch.tensor(True) + torch.tensor(True))
  check((Tensor.full((3,), True) + True) * 3, (torch.full((3,), True) + True) * 3, int64_is_default=True)
  for bad in (lambda a, b: a - b, lambda a, b: a - True, lambda a, b: True - a):
    with pytest.raises(Exception): bad(t, u)
    with pytest.raises(TypeError, match="bool"): bad(x, y)

@pytest.mark.parametrize("f", [lambda x: x ** 2.5, lambda x: 2.0 ** x, lambda x: x ** x, lambda x: 3.0 ** (x * 2)],
                         ids=["x**2.5", "2**x", "x**x", "3**(2x)"])
def test_pow_gradient_after_realize(f):
  # pow's result requires grad as its inputs do, and its gradient rule survives realizing the result first
  x, tx = Tensor([1.0, 2.0, 3.0], requires_grad=True), torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
  y = f(x)
  assert y.requires_grad
  y.realize().sum().backward()
  f(tx).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)

def test_shifts_by_the_width_or_more_as_torch():
  # C leaves x << 32 undefined (it gave x, or 0, depending on what ran before)
  for dt, tdt, vals in [(dtypes.int32, torch.int32, [1, -3, 100]), (dtypes.uint8, torch.uint8, [200, 7, 1]),
                        (dtypes.int64, torch.int64, [-5, 9, 1 << 40])]:
    x, tx = Tensor(vals, dtype=dt), torch.tensor(vals, dtype=tdt)
    bits = tx.element_size() * 8
    for n in (bits - 1, bits, bits + 3):
      assert (x << n).tolist() == (tx << n).tolist() and (x >> n).tolist() == (tx >> n).tolist(), (dt, n)
    counts = [1, bits, bits + 1]
    c, tc = Tensor(counts, dtype=dt), torch.tensor(counts, dtype=tdt)
    assert (x << c).tolist() == (tx << tc).tolist() and (x >> c).tolist() == (tx >> tc).tolist(), dt

def test_clamp_with_a_nan_in_a_tensor_bound_gives_nan_as_torch():
  x, lo, hi = [1.0, 5.0, -3.0], [math.nan, 0.0, 0.0], [2.0, math.nan, 2.0]
  want = torch.tensor(x).clamp(torch.tensor(lo), torch.tensor(hi)).numpy()
  np.testing.assert_equal(Tensor(x).clamp(Tensor(lo), Tensor(hi)).numpy(), want)

@pytest.mark.parametrize("op", ["expm1", "log1p", "tanh", "sinh", "asinh", "atanh", "erf", "softplus", "elu", "logsigmoid"])
def test_accurate_near_zero_and_in_half_as_torch(op):
  # exp(x) - 1, log(1 + x), 2 sigmoid(2x) - 1 and A&S's erf lost every digit at 1e-10 (0.0) and 0.1% at 1e-5; half
  # intermediates gave erf(0.001) the wrong sign; asinh(1e20) overflowed
  xs = [1e-10, -1e-5, 3e-4, 0.04, -0.3, 0.6] + ([1e20] if op == "asinh" else [-20.0] if op == "softplus" else [])
  ref = getattr(torch.nn.functional, op) if op in ("softplus", "elu", "logsigmoid") else getattr(torch, op)
  # (not on WEBGPU: WGSL bounds exp's and log's errors near 0 and 1 only absolutely, and lavapipe rounds 1 + 1e-10 to
  # more than 1, so Kahan's correction can't work there: 0.3% at 1e-5 for the ops on expm1/log1p)
  if Device.DEFAULT != "WEBGPU" or op not in ("expm1", "log1p", "sinh", "asinh", "atanh", "elu"):
    np.testing.assert_allclose(getattr(Tensor(xs), op)().numpy(), ref(torch.tensor(xs, dtype=torch.float64)).numpy(),
                               rtol=3e-6, atol=0)
  for dt in (dtypes.float16, dtypes.bfloat16):
    got = getattr(Tensor([0.001, 0.01, -0.2], dtype=dt), op)()
    tdt = torch.float16 if dt == dtypes.float16 else torch.bfloat16
    want = ref(torch.tensor([0.001, 0.01, -0.2]).to(tdt).double()).to(tdt)
    assert got.dtype == dt
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=1e-2 if dt == dtypes.bfloat16 else 2e-3)
  x, tx = Tensor([0.0, 1e-6, 0.3], requires_grad=True), torch.tensor([0.0, 1e-6, 0.3], requires_grad=True)
  getattr(x, op)().sum().backward()
  ref(tx).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)

def test_clamp_int_tensor_with_a_float_bound_as_torch():
  # torch promotes first: uint8 [0, 1, 2].clamp(-1, 2.5) is [0., 1., 2.]; fusegrad compared -1 in uint8 (255): [2.5] * 3
  for vals, dt, lo, hi in (([0, 1, 2], dtypes.uint8, -1, 2.5), ([-3, 5, 1], dtypes.int32, -1.5, 2), ([0, 9], dtypes.int8, 0.5, None)):
    x, t = pair(vals, dt)
    check_all([Result(f"{dt} clamp({lo}, {hi})", x.clamp(lo, hi), t.clamp(lo, hi))])

def test_an_int_bound_or_fill_its_dtype_cant_hold_raises_as_torch():
  # int8.clamp(max=1000) wrapped 1000 to -24 (torch: "value cannot be converted to type int8_t without overflow"); a
  # negative int down to -max still wraps into an unsigned dtype, as torch's
  (x, t), (u, tu) = pair([1, 2], dtypes.int8), pair([1, 2], dtypes.uint8)
  mask, tmask = Tensor([True, False]), torch.tensor([True, False])
  for name, fn, tfn in [("clamp(max=1000)", lambda: x.clamp(max=1000), lambda: t.clamp(max=1000)),
                        ("clamp(min=-129)", lambda: x.clamp(min=-129), lambda: t.clamp(min=-129)),
                        ("uint8 clamp(-300, 2)", lambda: u.clamp(-300, 2), lambda: tu.clamp(-300, 2)),
                        ("masked_fill 1000", lambda: x.masked_fill(mask, 1000), lambda: t.masked_fill(tmask, 1000)),
                        ("pad value 1000", lambda: x.pad((1, 1), value=1000), lambda: F.pad(t, (1, 1), value=1000))]:
    with pytest.raises(RuntimeError): tfn()
    with pytest.raises(RuntimeError, match="without overflow"): fn()
  check_all([Result("uint8 clamp(-1, 2)", u.clamp(-1, 2), tu.clamp(-1, 2), 0, 0),
             Result("uint8 masked_fill -1", u.masked_fill(mask, -1), tu.masked_fill(tmask, -1), 0, 0),
             Result("int8 clamp(-128, 127)", x.clamp(-128, 127), t.clamp(-128, 127), 0, 0)])
