"""Elementwise math, comparisons and activations, composed from the ALU primitives (how each form avoids overflow and
which gradient it has at a kink: docs/developer/tensor.md, "Numerics")."""
from __future__ import annotations
import functools, math
from typing import TYPE_CHECKING, Any, Callable
from fusegrad.dtype import dtypes, least_upper_float, least_upper_dtype, truncate_float, IntegerDivisionByZeroError
from fusegrad.uop.ops import Ops, UOp, SymInt
from fusegrad.gradient import with_rule
from fusegrad.helpers import CHECK_INDEX, _numpy_scalar
from fusegrad.engine.realize import add_index_check, IndexCheck

if TYPE_CHECKING: from fusegrad.tensor import Tensor

LOG2_E, LN_2 = 1 / math.log(2), math.log(2)
SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805

# the errors users catch, each also the class torch raises for the same input (docs/developer/tensor.md)
class DTypeError(TypeError, NotImplementedError):
  """An op got a dtype it can't work on (a float to a bitwise op, bools to sub)."""

class ArgumentError(ValueError, RuntimeError):
  """An op got an argument it can't work on (an unknown rounding mode, an int to a negative power)."""

class ShapeError(ValueError, RuntimeError):
  """Shapes that don't fit together (matmul, broadcasting, reshape, cat)."""

class UnsupportedError(ArgumentError, NotImplementedError):
  """An unknown mode (pad, interpolate) or a dtype an op has no meaning for."""

class ShapeIndexError(IndexError, ShapeError):
  """A shape problem torch reports as IndexError: argmax over a zero-size axis, index tensors that don't broadcast."""

def _in_float32(f: Callable) -> Callable:
  """f computed in float32 for float16 and bfloat16 tensors (Tensor._wide: intermediates would round away), as torch."""
  def g(x: Tensor, *a: Any, **k: Any) -> Tensor:
    return f(x, *a, **k) if (y := x._wide()) is x else f(y, *a, **k).cast(x.dtype)
  return functools.wraps(f)(g)

def _number_in_float32(f: Callable) -> Callable:
  """f(x, number) computed in float32 when x is float16 or bfloat16 and the Python number isn't one of its values, as
  torch: `half / 100000` is not 0, `half * 0.1` rounds once (the number made a half constant first: inf, 0.0999)."""
  wide = _in_float32(f)
  def g(x: Tensor, y: Any, *a: Any, **k: Any) -> Tensor:
    if x._wide() is x or type(y) not in (int, float) or y != y: return f(x, y, *a, **k)  # (nan: any float holds it)
    return f(x, y, *a, **k) if abs(y) < 2 ** 1023 and truncate_float(float(y), x.dtype) == y else wide(x, y, *a, **k)
  return functools.wraps(f)(g)

def _fits(x: Tensor, value: Any, op: str) -> Any:  # value, if it fits x's integer dtype (as torch; an int down to -max
  lo = -dtypes.max(x.dtype) if type(value) is int and dtypes.is_unsigned(x.dtype) else dtypes.min(x.dtype)  # wraps)
  if type(value) in (int, float) and dtypes.is_int(x.dtype) and not lo <= value <= dtypes.max(x.dtype):
    raise ArgumentError(f"{op}: value {value} can't be converted to {x.dtype} without overflow")
  return value

def _resolve_axis(axis: int, ndim: int, op: str, name: str = "dim") -> int:
  """axis as an index in [0, ndim) (negative counts from the end); IndexError naming op and axis when out of range."""
  if not hasattr(axis, "__index__"): raise TypeError(f"{op}: {name} must be an int, not {type(axis).__name__}")
  if not -max(ndim, 1) <= axis < max(ndim, 1):
    raise IndexError(f"{op}: {name} {axis} is out of range for a tensor with {ndim} dims")
  return axis % max(ndim, 1)

def broadcast_shape(*shapes: tuple[int, ...], op: str = "broadcast", error: type = ShapeError) -> tuple[int, ...]:
  """The shape shapes broadcast to (NumPy rules); raises naming the op when they can't."""
  if len(shapes) == 2 and shapes[0] == shapes[1]: return tuple(shapes[0])  # (the common case, quickly)
  n, ret = max(len(s) for s in shapes), []
  for sizes in zip(*[(1,) * (n - len(s)) + tuple(s) for s in shapes]):  # each shape padded with 1s in front to n
    non1 = [s for s in sizes if s != 1]
    if any(s != non1[0] for s in non1):
      raise error(f"{op}: shapes {' and '.join(str(tuple(s)) for s in shapes)} can't be broadcast")
    ret.append(next((s for s in non1 if type(s) is SymInt), non1[0]) if non1 else 1)  # (a Variable's length kept)
  return tuple(ret)

def _nonzero_divisor(result: Tensor, b: Tensor, op: str) -> Tensor:
  """result of an integer division by b, checked as torch does: a zero constant raises now; a tensor b adds a flag
  (b == 0 anywhere) read when anything computed from result is realized (the index checks' mechanism, CHECK_INDEX)."""
  if (base := b.uop.base).op is Ops.CONST:
    if base.arg == 0 and result.numel(): raise IntegerDivisionByZeroError(f"{op}: integer division by zero")
    return result  # (no element: nothing is divided, as torch)
  if CHECK_INDEX and b.numel():
    flag = b.detach().eq(0).where(0, dtypes.min(dtypes.int64)).cast(dtypes.int64).max()
    add_index_check(result.uop, IndexCheck(flag.uop, op, 0, error=IntegerDivisionByZeroError,
                                           message=f"{op}: integer division by zero"))
  return result

class ElementwiseMixin:
  __slots__ = ()
  # *** arithmetic ***
  @_number_in_float32
  def add(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """self + x, broadcasting: `Tensor([1, 2]) + 1` is [2, 3]."""
    a, b = self._broadcasted(x, reverse, op="add")
    return a._apply(Ops.ADD, b)
  @_number_in_float32
  def sub(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """self - x: `Tensor([1, 2]) - 1` is [0, 1]."""
    a, b = self._broadcasted(x, reverse, op="sub")
    if a.dtype == dtypes.bool: raise DTypeError("sub: subtracting bool tensors is not supported; use logical_xor")
    return a._apply(Ops.ADD, -b)
  @_number_in_float32
  def mul(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """self * x: `Tensor([1, 2]) * 3` is [3, 6]."""
    a, b = self._broadcasted(x, reverse, op="mul")
    return a._apply(Ops.MUL, b)
  @_number_in_float32
  def div(self: Tensor, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    """True division (ints give floats); rounding_mode 'trunc' or 'floor' rounds the quotient (ints stay ints).
    `Tensor([7, -7]).div(2, rounding_mode="floor")` is [3, -4]."""
    if rounding_mode not in (None, "trunc", "floor"):
      raise ArgumentError(f"div: rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}")
    # a Python int (-2 for a uint8 tensor) divides as itself, not wrapped into the int dtype
    by_number = rounding_mode is None and not dtypes.is_float(self.dtype) and isinstance(x, (int, float))
    a, b = (self._float() if by_number else self)._broadcasted(x, reverse, op="div")
    if rounding_mode == "floor": return a._floordiv(b)
    if rounding_mode == "trunc": return a._truncdiv(b)
    if not dtypes.is_float(a.dtype): a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
    if a.dtype.itemsize < 4:  # half and bfloat16 divide in float: 1/x of a tiny x overflows them, x/x would be inf
      return a.cast(dtypes.float32)._apply(Ops.FDIV, b.cast(dtypes.float32)).cast(a.dtype)
    return a._apply(Ops.FDIV, b)  # (rounded once, as torch: a * (1/b) rounds twice, and x / x could be 0.99999994)
  def _floordiv(self: Tensor, b: Tensor) -> Tensor:
    """floor(self / b) for two tensors of one shape and dtype (Python's //)."""
    if dtypes.is_float(self.dtype): return self._truncdiv(b, floor=True)
    q, inexact = self._apply(Ops.IDIV, b), self._apply(Ops.MOD, b).ne(0)
    return _nonzero_divisor((inexact & ((self < 0) ^ (b < 0))).where(q - 1, q), b, "floordiv")
  def _truncdiv(self: Tensor, b: Tensor, floor: bool = False) -> Tensor:
    """self / b rounded toward zero (C's / for ints), or toward minus infinity (floor). Floats as torch's: through fmod
    (exact), (self - fmod(self, b)) / b is a whole number but for the division's rounding."""
    if not dtypes.is_float(self.dtype): return _nonzero_divisor(self._apply(Ops.IDIV, b), b, "idiv")
    a, w = self._wide(), b._wide()  # (half in float32, as torch: its steps would round)
    r, ab = a._apply(Ops.MOD, w), a.div(w)
    d, zero = (a - r).div(w), ab * 0  # (a zero with the quotient's sign; by 0, and inf truncated, as self / b)
    q = (r._opposite_sign(w).where(d - 1, d) if floor else d).round()  # (whole but for a rounding)
    return (w.ne(0) & (a.isfinite() | floor)).where(q.ne(0).where(q, zero), ab).cast(self.dtype)
  def floordiv(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """self // x, rounding toward minus infinity as Python does: `Tensor([7, -7]) // 2` is [3, -4]."""
    a, b = self._broadcasted(x, reverse, op="floordiv")
    return a._floordiv(b)
  def idiv(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """Integer division that truncates toward zero (C's /): `Tensor([7, -7]).idiv(2)` is [3, -3]."""
    a, b = self._broadcasted(x, reverse, op="idiv")
    return a._truncdiv(b)
  def mod(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """Remainder with the sign of the divisor (Python's %, torch.remainder): `Tensor([7, -7]) % 3` is [1, 2]."""
    a, b = self._broadcasted(x, reverse, op="mod")
    r = a._apply(Ops.MOD, b)  # (floats: fmod, exact; an infinite divisor leaves a, or gives b when the signs differ)
    if dtypes.is_float(a.dtype): return r._opposite_sign(b).where(r + b, r)
    return _nonzero_divisor((r.ne(0) & ((r < 0) ^ (b < 0))).where(r + b, r), b, "mod")
  def _opposite_sign(self: Tensor, b: Tensor) -> Tensor:
    """self is non-zero and its sign differs from b's."""; return self.ne(0) & ((self < 0) ^ (b < 0))
  def fmod(self: Tensor, x: Any) -> Tensor:
    """Remainder with the sign of the dividend (C's fmod): `Tensor([7, -7]).fmod(3)` is [1, -1]."""
    a, b = self._broadcasted(x, op="fmod")
    return _nonzero_divisor(a._apply(Ops.MOD, b), b, "fmod") if not dtypes.is_float(a.dtype) else a._apply(Ops.MOD, b)
  def neg(self: Tensor) -> Tensor:
    """-self (logical not for bools)."""
    return self.logical_not() if self.dtype == dtypes.bool else self._apply(Ops.MUL, self._const(-1))
  def reciprocal(self: Tensor) -> Tensor:
    """1 / self (ints give floats)."""; return self._float()._apply(Ops.RECIPROCAL)
  def _float(self: Tensor) -> Tensor: return self.cast(least_upper_float(self.dtype))
  def _wide(self: Tensor) -> Tensor:
    """float16 and bfloat16 as float32 (for steps that amplify rounding, like exp's x * log2(e)); others as they are."""
    return self.cast(dtypes.float32) if self.dtype in (dtypes.float16, dtypes.bfloat16) else self
  def pow(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """self ** x (x ** self if reverse), int ** int staying int: `Tensor([-2., 3.]) ** 2` is [4., 9.]. A whole number
    exponent multiplies (negative bases and 0 ** 0 come out exact), others go through _pow_float."""
    if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool) and _small_whole(x):
      if isinstance(x, float): base = self._float()
      else: base = self.cast(dtypes.default_int) if self.dtype == dtypes.bool else self  # bool ** 2 is an int (torch)
      return _pow_rule(base, base._const(x), base._pow_whole(int(x)), x)
    if not reverse and isinstance(x, float) and x in (0.5, -0.5):  # as torch
      b = self._float()
      return _pow_rule(b, b._const(x), b.sqrt() if x > 0 else b.rsqrt(), x)
    base, exponent = self._broadcasted(x, reverse, op="pow")
    if dtypes.is_int(base.dtype): return base._pow_int(exponent)
    b, e = base._float()._wide(), exponent._float()._wide()
    scalar = x if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool) else None
    ret = _pow_rule(b, e, _pow_float(b, e), scalar).cast(base._float().dtype)
    return ret if dtypes.is_float(base.dtype) else ret.round().cast(base.dtype)
  def _pow_int(self: Tensor, e: Tensor) -> Tensor:
    """self ** e of integers, exact and wrapping as torch's (a float pow rounds 3 ** 19): square and multiply over e's
    bits; a negative e gives 1 for 1, +-1 for -1 and 0 elsewhere (as torch)."""
    ret, acc = self._const(1), self
    for i in range(self.dtype.itemsize * 8): ret, acc = ((e >> i) & 1).ne(0).where(ret * acc, ret), acc * acc
    if dtypes.is_unsigned(self.dtype): return ret
    return ((e < 0) & self.ne(1) & self.ne(-1)).where(self._const(0), ret)  # (1 and -1 come out right as they are)
  def _pow_whole(self: Tensor, n: int) -> Tensor:
    """self ** n for a whole number n, by repeated squaring."""
    if n < 0 and not dtypes.is_float(self.dtype):
      raise ArgumentError(f"pow: integers to negative integer powers are not allowed ({self.dtype} ** {n})")
    acc, e = (self if n >= 0 else self.reciprocal()), abs(n)
    ret: Tensor | None = None
    while e:
      if e & 1: ret = acc if ret is None else ret * acc
      e >>= 1
      if e: acc = acc * acc
    # x ** 0 is 1, inf and nan too; x * 0 + 1 where x is finite gives x its zero gradient (torch)
    return acc.isfinite().where(acc * 0 + 1, acc._const(1)) if ret is None else ret
  def maximum(self: Tensor, x: Any) -> Tensor:
    """Elementwise larger value (nan wins, ties share the gradient, as in torch)."""
    a, b = self._broadcasted(x, op="maximum")
    return a | b if a.dtype == dtypes.bool else a._apply(Ops.MAX, b)
  def minimum(self: Tensor, x: Any) -> Tensor:
    """Elementwise smaller value (nan wins)."""
    a, b = self._broadcasted(x, op="minimum")
    return a & b if a.dtype == dtypes.bool else a._inverse().maximum(b._inverse())._inverse()
  def where(self: Tensor, x: Any, y: Any) -> Tensor:
    """x where self is true, else y, broadcasting all three: `(a > 0).where(a, 0)`."""
    cond = self.cast(dtypes.bool)
    if isinstance(x, type(self)): xt, yt = x._broadcasted(y, op="where")
    elif isinstance(y, type(self)): yt, xt = y._broadcasted(x, op="where")
    else:
      x, y = (v.item() if _numpy_scalar(v) else v for v in (x, y))  # numpy scalars act as Python numbers
      dt = least_upper_dtype(dtypes.from_py(x), dtypes.from_py(y))
      xt, yt = type(self)(x, dtype=dt, device=self.device), type(self)(y, dtype=dt, device=self.device)
    shape = broadcast_shape(cond.shape, xt.shape, yt.shape, op="where")
    c, xt, yt = cond._broadcast_to(shape), xt._broadcast_to(shape), yt._broadcast_to(shape)
    return xt._new(c.uop.alu(Ops.WHERE, xt.uop, yt.uop), xt, yt)
  def masked_fill(self: Tensor, mask: Tensor, value: Any) -> Tensor:
    """value where mask is true, else self (keeps self's dtype): `x.masked_fill(x < 0, 0)`."""
    broadcast_shape(self.shape, mask.shape, op="masked_fill")
    return mask.where(_fits(self, value, "masked_fill"), self).cast(self.dtype)
  def clip(self: Tensor, min_: Any = None, max_: Any = None, *, min: Any = None, max: Any = None) -> Tensor:
    """Limit values to [min_, max_] (either may be None; torch's min=/max= keywords work too); nan stays nan and the
    gradient is 1 inside the range, bounds included: `Tensor([-2, 0, 2]).clip(-1, 1)` is [-1, 0, 1]."""
    lo, hi = min_ if min_ is not None else min, max_ if max_ is not None else max
    if lo is None and hi is None: raise ArgumentError("clip: give at least one of min_ and max_")
    def past(out: Any, b: Any) -> Any:  # a nan in a tensor bound gives nan there, as torch
      return out | b.isnan() if isinstance(b, type(self)) and dtypes.is_float(b.dtype) else out
    x = self._float() if not dtypes.is_float(self.dtype) and any(isinstance(v, float) for v in (lo, hi)) else self
    lo, hi = (b if b is None or isinstance(b, type(self)) else _fits(x, b, "clip") for b in (lo, hi))
    if lo is not None: x = past(x < lo, lo).where(lo, x)
    if hi is not None: x = past(x > hi, hi).where(hi, x)
    return x
  def clamp(self: Tensor, min_: Any = None, max_: Any = None, *, min: Any = None, max: Any = None) -> Tensor:
    """The same as clip."""; return self.clip(min_, max_, min=min, max=max)
  def abs(self: Tensor) -> Tensor:
    """|x|, as torch: abs(-0.0) and abs(0.0) are +0.0 and nan stays nan; the gradient is sign(x) (0 at 0 and nan)."""
    if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool: return self
    return (self > 0).where(self, (self < 0).where(-self, (self != self).where(self.detach(), 0)))
  def sign(self: Tensor) -> Tensor:
    """-1, 0 or 1 in self's dtype (nan gives 0, as in torch); the gradient is 0."""
    return (self > 0).where(1, (self < 0).where(-1, 0)).cast(self.dtype)
  def copysign(self: Tensor, other: Any) -> Tensor:
    """|self| with the sign of other (-0.0 counts as negative): `Tensor([1., 2.]).copysign(-1)` is [-1., -2.]."""
    a, b = (t._float() for t in self._broadcasted(other, op="copysign"))
    return ((b < 0) | ((b == 0) & (b.reciprocal() < 0))).where(-a.abs(), a.abs())  # b negative (or -0.0)
  def square(self: Tensor) -> Tensor:
    """self * self."""; return self * self
  def lerp(self: Tensor, end: Any, weight: Any) -> Tensor:
    """self + (end - self) * weight."""; return self + (end - self) * weight
  def logaddexp(self: Tensor, other: Any) -> Tensor:
    """log(exp(self) + exp(other)), computed without overflow."""
    a, b = self._broadcasted(other, op="logaddexp")
    m = a.maximum(b).detach()
    m = m.isinf().where(0, m)  # both -inf (or an inf) must not give inf - inf = nan
    return ((a - m).exp() + (b - m).exp()).log() + m

  # *** transcendental ***
  def sqrt(self: Tensor) -> Tensor:
    """Square root (nan below 0)."""; return self._float()._apply(Ops.SQRT)
  def rsqrt(self: Tensor) -> Tensor:
    """1 / sqrt(self)."""; return self.sqrt().reciprocal()
  def exp(self: Tensor) -> Tensor:
    """e ** x (x * log2(e) in at least float32: its rounding error becomes exp's relative error).
    >>> [round(v, 4) for v in Tensor([0.0, 1.0, -1.0]).exp().tolist()]
    [1.0, 2.7183, 0.3679]"""
    x = self._float()
    return x._wide().mul(LOG2_E)._apply(Ops.EXP2).cast(x.dtype)
  def exp2(self: Tensor) -> Tensor:
    """2 ** x, elementwise.
    >>> Tensor([0.0, 1.0, 3.0]).exp2().tolist()
    [1.0, 2.0, 8.0]"""
    return self._float()._apply(Ops.EXP2)
  @_in_float32
  def expm1(self: Tensor) -> Tensor:
    """exp(x) - 1, accurate near 0: below |x| = 0.5 as Kahan's (u - 1) x / log(u) with u = exp(x), which cancels u's
    rounding (each branch is computed on a safe x where it isn't taken: its gradient would be nan)."""
    small = (x := self._float()).abs() < 0.5
    d = (xs := small.where(x, 0.5)).exp() - 1
    return small.where((d == 0).where(xs, d * xs / (d == 0).where(1.0, xs.exp().log())), small.where(1.0, x).exp() - 1)
  def log(self: Tensor) -> Tensor:
    """Natural logarithm (-inf at 0, nan below).
    >>> [round(v, 4) for v in Tensor([1.0, 2.718281828, 0.5]).log().tolist()]
    [0.0, 1.0, -0.6931]"""
    return self._float()._apply(Ops.LOG2).mul(LN_2)
  def log2(self: Tensor) -> Tensor:
    """Base-2 logarithm."""; return self._float()._apply(Ops.LOG2)
  def log10(self: Tensor) -> Tensor:
    """Base-10 logarithm."""; return self.log2() * (1 / math.log2(10))
  @_in_float32
  def log1p(self: Tensor) -> Tensor:
    """log(1 + x), accurate near 0: below |x| = 0.5 as Kahan's log(u) x / (u - 1) with u = 1 + x (see expm1)."""
    small = (x := self._float()).abs() < 0.5
    u = (xs := small.where(x, 0.5)) + 1
    return small.where((u == 1).where(xs, u.log() * xs / (u == 1).where(1.0, u - 1)), (small.where(1.0, x) + 1).log())
  def sin(self: Tensor) -> Tensor:
    """Sine (of radians)."""; return self._float()._apply(Ops.SIN)
  def cos(self: Tensor) -> Tensor:
    """Cosine as 1 - 2 sin(x/2)^2: x/2 is exact, so large x lose nothing (pi/2 - x would round)."""
    s = (self._float() * 0.5).sin()
    return 1 - 2 * s * s
  def tan(self: Tensor) -> Tensor:
    """sin(x) / cos(x)."""; return self.sin() / self.cos()
  def sinh(self: Tensor) -> Tensor:
    """(exp(x) - exp(-x)) / 2, as (expm1(x) - expm1(-x)) / 2 (accurate near 0)."""
    return (self.expm1() - (-self).expm1()) / 2
  def cosh(self: Tensor) -> Tensor:
    """(exp(x) + exp(-x)) / 2."""; return (self.exp() + (-self).exp()) / 2
  @_in_float32
  def asinh(self: Tensor) -> Tensor:
    """Inverse hyperbolic sine with the sign of x: log1p(y + y^2 / (1 + sqrt(1 + y^2))) for y = |x| (accurate near 0),
    log(y) + log(2) past 1e9 (where y^2 would overflow)."""
    def f(y: Tensor) -> Tensor:
      big = y > 1e9  # (each branch on safe values where it isn't taken: its gradient would be nan)
      s, b = big.where(1.0, y), big.where(y, 1.0)
      return big.where(b.log() + math.log(2), (s + s * s / (1 + (1 + s * s).sqrt())).log1p())
    return self._float()._odd(f)
  def acosh(self: Tensor) -> Tensor:
    """Inverse hyperbolic cosine, as log(x) + log(1 + sqrt(1 - 1/x^2)) so that x^2 can't overflow. Below 1 the value
    is nan and the gradient torch's 1/sqrt(x^2 - 1): that of -acosh(-x), plus nan (each branch gets a safe input)."""
    def on_one_up(y: Tensor) -> Tensor: return y.log() + (1 + (1 - y.reciprocal().square()).sqrt()).log()
    low = (x := self._float()) < 1
    return low.where(math.nan - on_one_up(-low.where(x, -2.0)), on_one_up(low.where(2.0, x)))
  def atanh(self: Tensor) -> Tensor:
    """Inverse hyperbolic tangent: log1p(2x / (1 - x)) / 2 (accurate near 0)."""
    return (2 * self / (1 - self)).log1p() / 2
  def atan(self: Tensor) -> Tensor:
    """arctan, by range reduction to |x| <= tan(pi/12) and a short series (error below 1e-8)."""
    return self._float()._odd(_atan_nonneg)
  def asin(self: Tensor) -> Tensor:
    """arcsin: atan(x / sqrt(1 - x^2)) (nan outside [-1, 1])."""; return (self / (1 - self.square()).sqrt()).atan()
  def acos(self: Tensor) -> Tensor:
    """arccos: pi/2 - asin(x)."""; return math.pi / 2 - self.asin()
  @_in_float32
  def erf(self: Tensor) -> Tensor:
    """The error function (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7)."""; return self._float()._odd(_erf_nonneg)
  def _odd(self: Tensor, f: Callable[[Tensor], Tensor]) -> Tensor:
    """An odd function from its half on x >= 0: f(-x) = -f(x). The fold is a `where`, so at 0 the gradient is f'(0)."""
    negative = self < 0
    r = f(negative.where(-self, self))
    return negative.where(-r, r)

  # *** rounding ***
  def trunc(self: Tensor) -> Tensor:
    """Round toward zero."""; return self._apply(Ops.TRUNC) if dtypes.is_float(self.dtype) else self
  def floor(self: Tensor) -> Tensor:
    """Round toward minus infinity."""
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (t > self).where(t - 1, t)
  def ceil(self: Tensor) -> Tensor:
    """Round toward plus infinity."""
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (t < self).where(t + 1, t)
  def round(self: Tensor) -> Tensor:
    """Round to nearest, ties to even (as torch.round): `Tensor([0.5, 1.5, 2.5]).round()` is [0., 2., 2.]."""
    if not dtypes.is_float(self.dtype): return self
    f = self.floor()
    frac, f_is_odd = self - f, (f - (f * 0.5).floor() * 2).ne(0)
    return ((frac > 0.5) | ((frac == 0.5) & f_is_odd)).where(f + 1, f)
  def frac(self: Tensor) -> Tensor:
    """self - trunc(self)."""; return self - self.trunc()

  # *** comparisons and logic ***
  def __lt__(self: Tensor, x: Any) -> Tensor:
    a, b = self._broadcasted(x, op="lt")
    return a._apply(Ops.CMPLT, b)
  def __gt__(self: Tensor, x: Any) -> Tensor:
    a, b = self._broadcasted(x, reverse=True, op="gt")
    return a._apply(Ops.CMPLT, b)
  def ne(self: Tensor, x: Any) -> Tensor:
    """self != x (true where either is nan)."""
    a, b = self._broadcasted(x, op="ne")
    return a._apply(Ops.CMPNE, b)
  def eq(self: Tensor, x: Any) -> Tensor:
    """self == x (false where either is nan)."""; return self.ne(x).logical_not()
  def __ge__(self: Tensor, x: Any) -> Tensor: return (self > x) | self.eq(x)  # not (self < x): nan >= nan is false
  def __le__(self: Tensor, x: Any) -> Tensor: return (self < x) | self.eq(x)
  def __eq__(self: Tensor, x: Any) -> Any: return self.eq(x) if x is not None else False  # (t == None: False, as torch)
  def __ne__(self: Tensor, x: Any) -> Any: return self.ne(x) if x is not None else True
  def lt(self: Tensor, x: Any) -> Tensor:
    """self < x, a bool tensor: `Tensor([1, 2, 3]) < 2` is [True, False, False]."""; return self < x
  def gt(self: Tensor, x: Any) -> Tensor:
    """self > x, elementwise (a bool tensor).
    >>> Tensor([1, 2, 3]).gt(2).tolist()
    [False, False, True]"""
    return self > x
  def le(self: Tensor, x: Any) -> Tensor:
    """self <= x."""; return self <= x
  def ge(self: Tensor, x: Any) -> Tensor:
    """self >= x."""; return self >= x
  def isnan(self: Tensor) -> Tensor:
    """True where self is nan."""; return self.ne(self)
  def isinf(self: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    """True where self is +inf (if detect_positive) or -inf (if detect_negative)."""
    ret = self.zeros_like(dtype=dtypes.bool)
    if detect_positive: ret = ret | (self == math.inf)
    if detect_negative: ret = ret | (self == -math.inf)
    return ret
  def isclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """|self - other| <= atol + rtol * |other|, as torch.isclose: equal infinities are close, nans if equal_nan."""
    a, b = self._broadcasted(other, op="isclose")
    error = (a - b).abs()
    ret = (error.isfinite() & (error <= atol + rtol * b.abs())) | (a == b)
    return ret | (a.isnan() & b.isnan()) if equal_nan else ret
  def allclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """Whether isclose holds everywhere: a 0-d bool tensor as tinygrad's (in an `if` or `assert` it acts as torch's
    bool). `Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-6])).item()` is True."""
    return self.isclose(other, rtol, atol, equal_nan).all()
  def isfinite(self: Tensor) -> Tensor:
    """True where self is neither inf nor nan."""; return (self.isinf() | self.isnan()).logical_not()
  def logical_not(self: Tensor) -> Tensor:
    """True where self is zero (or False)."""
    return self.cast(dtypes.bool)._apply(Ops.CMPNE, self._const(True, dtypes.bool))
  def logical_and(self: Tensor, x: Any) -> Tensor:
    """True where both are non-zero."""; return self.bool().bitwise_and(_as_bool(x))
  def logical_or(self: Tensor, x: Any) -> Tensor:
    """True where either is non-zero."""; return self.bool().bitwise_or(_as_bool(x))
  def logical_xor(self: Tensor, x: Any) -> Tensor:
    """True where exactly one is non-zero."""; return self.bool().bitwise_xor(_as_bool(x))
  def _bitwise(self: Tensor, op: Ops, x: Any, reverse: bool, name: str) -> Tensor:
    a, b = self._broadcasted(x, reverse, op=name)
    if dtypes.is_float(a.dtype): raise DTypeError(f"{name}: needs int or bool tensors, not {a.dtype}")
    out, bits = a._apply(op, b), 8 * a.dtype.itemsize
    if op not in (Ops.SHL, Ops.SHR) or (type(x) is int and not reverse and 0 <= x < bits): return out
    fill = (a < 0).where(-1, 0).cast(a.dtype) if op is Ops.SHR and not dtypes.is_unsigned(a.dtype) else 0
    return (b >= bits).where(fill, out)  # shifted by the width or more: 0, or the sign for >> (as torch; C leaves it)
  def bitwise_and(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """self & x for int or bool tensors."""; return self._bitwise(Ops.AND, x, reverse, "bitwise_and")
  def bitwise_or(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """self | x for int or bool tensors."""; return self._bitwise(Ops.OR, x, reverse, "bitwise_or")
  def bitwise_xor(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """self ^ x for int or bool tensors."""; return self._bitwise(Ops.XOR, x, reverse, "bitwise_xor")
  def xor(self: Tensor, x: Any) -> Tensor:
    """The same as bitwise_xor."""; return self.bitwise_xor(x)
  def bitwise_not(self: Tensor) -> Tensor:
    """~self: every bit flipped (logical not for bools)."""
    if self.dtype == dtypes.bool: return self.logical_not()
    if not dtypes.is_int(self.dtype): raise DTypeError(f"bitwise_not: needs an int or bool tensor, not {self.dtype}")
    return self._apply(Ops.XOR, self._const(dtypes.max(self.dtype) if dtypes.is_unsigned(self.dtype) else -1))
  def lshift(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """self << x for int tensors (wraps like C's fixed-width ints; by the width or more: 0)."""
    return self._bitwise(Ops.SHL, x, reverse, "lshift")
  def rshift(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """self >> x for int tensors (arithmetic shift for signed ints)."""
    return self._bitwise(Ops.SHR, x, reverse, "rshift")

  # *** activations ***
  def relu(self: Tensor) -> Tensor:
    """max(x, 0), with gradient 0 at 0 (nan passes through).
    >>> Tensor([-1.0, 0.0, 2.0]).relu().tolist()
    [0.0, 0.0, 2.0]"""
    return (self <= 0).where(0, self)
  def relu6(self: Tensor) -> Tensor:
    """min(max(x, 0), 6) (gradient 0 at both bounds, as torch)."""; return self.hardtanh(0, 6)
  def leaky_relu(self: Tensor, neg_slope: float = 0.01) -> Tensor:
    """x for x > 0, else neg_slope * x."""; return (self > 0).where(self, self * neg_slope)
  def sigmoid(self: Tensor) -> Tensor:
    """1 / (1 + exp(-x)), from exp(-|x|) so nothing overflows in the value or the gradient."""
    positive = (x := self._float()) >= 0
    e = positive.where(-x, x).exp()  # exp(-|x|), by a where so the gradient at 0 isn't cut by abs
    return positive.where(1 / (1 + e), e / (1 + e))
  def logsigmoid(self: Tensor) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x)."""; return -(-self).softplus()
  def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
    """alpha * x + beta limited to [0, 1] (torch's hardsigmoid with the defaults)."""
    return (alpha * self + beta).hardtanh(0, 1)
  @_in_float32
  def tanh(self: Tensor) -> Tensor:
    """tanh(x) = 2 sigmoid(2x) - 1, and its series below |x| = 1/16 (where that difference loses digits)."""
    s = (small := (x := self._float()).abs() < 0.0625).where(x, 0)  # (a branch on its own inputs: no inf * 0 in grads)
    return small.where(s * (1 + (s2 := s * s) * (-1 / 3 + s2 * (2 / 15 - s2 * 17 / 315))), 2 * (2 * x).sigmoid() - 1)
  def hardtanh(self: Tensor, min_val: float = -1, max_val: float = 1) -> Tensor:
    """x limited to [min_val, max_val]; unlike clip, the gradient is 0 at the bounds (as torch.nn.functional)."""
    return (self <= min_val).where(min_val, (self >= max_val).where(max_val, self))
  @_in_float32
  def gelu(self: Tensor, approximate: str = "tanh") -> Tensor:
    """GELU: x * Phi(x). approximate="tanh" (the default, as tinygrad; torch's approximate='tanh') or "none" (exact,
    with erf: torch's default)."""
    if approximate == "none": return 0.5 * self * (1 + (self * (1 / math.sqrt(2))).erf())
    if approximate != "tanh": raise ArgumentError(f"gelu: approximate must be 'tanh' or 'none', not {approximate!r}")
    return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())
  def quick_gelu(self: Tensor) -> Tensor:
    """x * sigmoid(1.702 x)."""; return self * (self * 1.702).sigmoid()
  def silu(self: Tensor) -> Tensor:
    """x * sigmoid(x)."""; return self * self.sigmoid()
  def swish(self: Tensor) -> Tensor:
    """The same as silu."""; return self.silu()
  def _expm1_nonpositive(self: Tensor) -> Tensor:
    """exp(min(x, 0)) - 1, with the whole gradient at 0 going to x (the elu family's negative half)."""
    return (self > 0).where(0, self).expm1()
  def elu(self: Tensor, alpha: float = 1.0) -> Tensor:
    """x if x > 0 else alpha * (exp(x) - 1)."""; return (self > 0).where(self, alpha * self._expm1_nonpositive())
  def celu(self: Tensor, alpha: float = 1.0) -> Tensor:
    """x if x > 0 else alpha * (exp(x / alpha) - 1)."""
    return (self > 0).where(self, alpha * (self / alpha)._expm1_nonpositive())
  def selu(self: Tensor, alpha: float = SELU_ALPHA, gamma: float = SELU_SCALE) -> Tensor:
    """gamma * elu(x, alpha), with the self-normalizing constants by default."""; return gamma * self.elu(alpha)
  @_in_float32
  def softplus(self: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, computed stably; x itself where beta x > threshold, as in torch."""
    bx = self * beta
    negative_abs = (bx > 0).where(-bx, bx)  # -|bx|; at 0 its gradient pairs with relu's 0 to give 1/2
    return (bx > threshold).where(self, (bx.relu() + negative_abs.exp().log1p()) / beta)
  def mish(self: Tensor) -> Tensor:
    """x * tanh(softplus(x))."""; return self * self.softplus().tanh()
  def hardswish(self: Tensor) -> Tensor:
    """x * relu6(x + 3) / 6."""; return self * (self + 3).relu6() * (1 / 6)
  def softsign(self: Tensor) -> Tensor:
    """x / (1 + |x|)."""; return self / (1 + self.abs())

  # *** operators ***
  def __neg__(self: Tensor) -> Tensor: return self.neg()
  def __abs__(self: Tensor) -> Tensor: return self.abs()
  def __invert__(self: Tensor) -> Tensor: return self.bitwise_not()
  def __add__(self: Tensor, x: Any) -> Tensor: return self.add(x)
  def __radd__(self: Tensor, x: Any) -> Tensor: return self.add(x, True)
  def __sub__(self: Tensor, x: Any) -> Tensor: return self.sub(x)
  def __rsub__(self: Tensor, x: Any) -> Tensor: return self.sub(x, True)
  def __mul__(self: Tensor, x: Any) -> Tensor: return self.mul(x)
  def __rmul__(self: Tensor, x: Any) -> Tensor: return self.mul(x, True)
  def __truediv__(self: Tensor, x: Any) -> Tensor: return self.div(x)
  def __rtruediv__(self: Tensor, x: Any) -> Tensor: return self.div(x, True)
  def __floordiv__(self: Tensor, x: Any) -> Tensor: return self.floordiv(x)
  def __rfloordiv__(self: Tensor, x: Any) -> Tensor: return self.floordiv(x, True)
  def __mod__(self: Tensor, x: Any) -> Tensor: return self.mod(x)
  def __rmod__(self: Tensor, x: Any) -> Tensor: return self.mod(x, True)
  def __pow__(self: Tensor, x: Any) -> Tensor: return self.pow(x)
  def __rpow__(self: Tensor, x: Any) -> Tensor: return self.pow(x, True)
  def __and__(self: Tensor, x: Any) -> Tensor: return self.bitwise_and(x)
  def __rand__(self: Tensor, x: Any) -> Tensor: return self.bitwise_and(x, True)
  def __or__(self: Tensor, x: Any) -> Tensor: return self.bitwise_or(x)
  def __ror__(self: Tensor, x: Any) -> Tensor: return self.bitwise_or(x, True)
  def __xor__(self: Tensor, x: Any) -> Tensor: return self.bitwise_xor(x)
  def __rxor__(self: Tensor, x: Any) -> Tensor: return self.bitwise_xor(x, True)
  def __lshift__(self: Tensor, x: Any) -> Tensor: return self.lshift(x)
  def __rlshift__(self: Tensor, x: Any) -> Tensor: return self.lshift(x, True)
  def __rshift__(self: Tensor, x: Any) -> Tensor: return self.rshift(x)
  def __rrshift__(self: Tensor, x: Any) -> Tensor: return self.rshift(x, True)
  # in place: the one mutation, through assign
  def _inplace(self: Tensor, result: Tensor) -> Tensor:
    """self.assign(result) for t += x: a float result into an int tensor, or a number into a bool one, is refused."""
    if (dtypes.is_float(result.dtype) and not dtypes.is_float(self.dtype)) or self.dtype == dtypes.bool != result.dtype:
      raise DTypeError(f"in-place op: result type {result.dtype} can't be cast to the tensor's {self.dtype} (as torch)")
    return self.assign(result)
  def __iadd__(self: Tensor, x: Any) -> Tensor: return self._inplace(self + x)
  def __isub__(self: Tensor, x: Any) -> Tensor: return self._inplace(self - x)
  def __imul__(self: Tensor, x: Any) -> Tensor: return self._inplace(self * x)
  def __itruediv__(self: Tensor, x: Any) -> Tensor: return self._inplace(self / x)
  def __ifloordiv__(self: Tensor, x: Any) -> Tensor: return self._inplace(self // x)
  def __imod__(self: Tensor, x: Any) -> Tensor: return self._inplace(self % x)
  def __ipow__(self: Tensor, x: Any) -> Tensor: return self._inplace(self ** x)
  def __iand__(self: Tensor, x: Any) -> Tensor: return self._inplace(self & x)
  def __ior__(self: Tensor, x: Any) -> Tensor: return self._inplace(self | x)
  def __ixor__(self: Tensor, x: Any) -> Tensor: return self._inplace(self ^ x)
  def __ilshift__(self: Tensor, x: Any) -> Tensor: return self._inplace(self << x)
  def __irshift__(self: Tensor, x: Any) -> Tensor: return self._inplace(self >> x)
  def __imatmul__(self: Tensor, x: Any) -> Tensor: return self._inplace(self @ x)

# *** helpers: pieces of the ops above that read better as functions ***
def _small_whole(x: int | float) -> bool:
  """True for exponents pow multiplies out: whole numbers up to 64 in size."""
  return math.isfinite(x) and x == int(x) and abs(x) <= 64

def _as_bool(x: Any) -> Any: return x.bool() if hasattr(x, "bool") else bool(x)

def _pow_rule(b: Tensor, e: Tensor, ret: Tensor, scalar: int | float | None = None) -> Tensor:
  """ret = b ** e, differentiated as torch does (its primitives would give 0 or nan at infinite and zero bases):
  d/db = e * b ** (e - 1), 0 where e is 0; d/de = b ** e * ln b, 0 where b is 0 and e >= 0. A Python number
  exponent (scalar) takes b ** (scalar - 1) by the number's own path (sqrt, rsqrt, products), as torch."""
  if not dtypes.is_float(ret.dtype) or ret.uop is b.uop: return ret  # b ** 1 is b: its own derivative is right
  T = type(b)  # (the rule lives with the graph: it holds no tensor, whose .grad backward would fill)
  def rule(g: UOp, n: UOp, bu: UOp, eu: UOp) -> tuple[UOp, UOp]:
    bt, et, gt = T(bu), T(eu), T(g)
    db = (et == 0).where(0.0, gt * et * bt.pow(et - 1 if scalar is None else scalar - 1))
    de = ((bt == 0) & (et >= 0)).where(0.0, gt * T(n) * bt.log())
    return db.uop, de.uop
  return b._new(with_rule(ret.uop, (b.uop, e.uop), rule), e)  # requires grad as b ** e does

def _pow_float(b: Tensor, e: Tensor) -> Tensor:
  """b ** e for float tensors of one shape and dtype, with IEEE pow's special cases: |b| ** e is exp2(e * log2|b|),
  times -1 for a negative base to an odd power, times nan for a negative base to a fractional one (a product, so the
  gradient is nan there too, as in torch); a zero or infinite base is answered by a `where`, so log2(0) = -inf never
  reaches the gradient."""
  zero, infinite = b == 0, b.isinf()
  mag = (e * (zero | infinite).where(1.0, b.abs()).log2()).exp2()
  inf, nought, nan = b._const(math.inf), b._const(0.0), b._const(math.nan)  # nan for e = 0: fixed below
  mag = zero.where((e < 0).where(inf, (e > 0).where(nought, nan)), mag)
  mag = infinite.where((e > 0).where(inf, (e < 0).where(nought, nan)), mag)
  e_whole = e.trunc() == e  # inf counts as a whole (even) number
  odd = e_whole & ((e * 0.5).trunc() * 2).ne(e)
  fractional_of_negative = (b < 0) & (b > -math.inf) & e_whole.logical_not()
  negative = (b < 0) | (zero & (b.reciprocal() < 0))  # -0.0 too: (-0) ** -1 is -inf
  sign = fractional_of_negative.where(nan, (negative & odd).where(b._const(-1.0), b._const(1.0)))
  ret = mag * sign
  # x ** 0, 1 ** y, (-1) ** +-inf are 1 (0 ** 0, nan ** 0, 1 ** nan ...); where already 1 the gradient keeps flowing
  one = (e == 0) | (b == 1) | ((b == -1) & e.isinf())
  return (one & ret.ne(1)).where(1.0, ret)

def _atan_nonneg(t: Tensor) -> Tensor:
  """atan(t) for t >= 0: atan(t) = pi/2 - atan(1/t) above 1, then atan(t) = pi/6 + atan((t sqrt3 - 1) / (t + sqrt3))
  above tan(pi/12), then a series to u^11."""
  big = t > 1
  t = big.where(big.where(t, 1.0).reciprocal(), t)  # 1/t only where t > 1: no inf for the gradient to hit at 0
  mid = t > 0.2679491924311227
  u = mid.where((t * math.sqrt(3) - 1) / (t + math.sqrt(3)), t)
  u2 = u * u
  poly = u * (1 - u2 * (1 / 3 - u2 * (1 / 5 - u2 * (1 / 7 - u2 * (1 / 9 - u2 / 11)))))
  r = mid.where(poly + math.pi / 6, poly)
  return big.where(math.pi / 2 - r, r)

def _erf_nonneg(x: Tensor) -> Tensor:
  """erf(x) for x >= 0: Abramowitz & Stegun 7.1.26, and below 0.5 the Maclaurin series (A&S's error is absolute)."""
  s, big = (small := x < 0.5).where(x, 0), x.minimum(9)  # each branch on its own inputs (erf(9) = 1): no inf * 0
  t, s2 = 1.0 / (1.0 + 0.3275911 * big), s * s
  poly = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t
  series = s * 1.1283791670955126 * (1 + s2 * (-1 / 3 + s2 * (1 / 10 + s2 * (-1 / 42 + s2 * (1 / 216 - s2 / 1320)))))
  return small.where(series, 1 - poly * (-big * big).exp())

