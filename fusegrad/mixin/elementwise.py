"""Elementwise math, comparisons and activations, composed from the ALU primitives.

Forms are chosen so that neither the value nor the gradient overflows: sigmoid uses exp(-|x|), elu uses
exp(min(x, 0)), so that no branch a `where` discards computes an inf whose gradient would be 0*inf = nan.
"""
from __future__ import annotations
import math
from typing import TYPE_CHECKING, Any
from fusegrad.dtype import dtypes, least_upper_float, least_upper_dtype
from fusegrad.uop.ops import Ops

if TYPE_CHECKING:
  from fusegrad.tensor import Tensor

LOG2_E, LN_2 = 1 / math.log(2), math.log(2)

class ElementwiseMixin:
  __slots__ = ()
  # *** arithmetic ***
  def add(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """self + x, broadcasting: `Tensor([1, 2]) + 1` is [2, 3]."""
    a, b = self._broadcasted(x, reverse, op="add")
    return a._apply(Ops.ADD, b)
  def sub(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """self - x."""
    a, b = self._broadcasted(x, reverse, op="sub")
    if a.dtype == dtypes.bool: raise TypeError("sub: subtracting bool tensors is not supported; use logical_xor")
    return a._apply(Ops.ADD, -b)
  def mul(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """self * x."""
    a, b = self._broadcasted(x, reverse, op="mul")
    return a._apply(Ops.MUL, b)
  def div(self: Tensor, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    """True division (ints give floats); rounding_mode 'trunc' or 'floor' rounds the quotient."""
    a, b = self._broadcasted(x, reverse, op="div")
    if rounding_mode == "trunc" and dtypes.is_int(a.dtype): return a._apply(Ops.IDIV, b)
    if rounding_mode == "floor" and dtypes.is_int(a.dtype): return a._floordiv_int(b)
    if not dtypes.is_float(a.dtype): a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
    q = a._apply(Ops.MUL, b._apply(Ops.RECIPROCAL))
    if rounding_mode is None: return q
    if rounding_mode == "trunc": return q.trunc()
    if rounding_mode == "floor": return q.floor()
    raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}")
  def _floordiv_int(self: Tensor, b: Tensor) -> Tensor:
    """Python's // on ints: the truncated quotient, one less when the signs differ and it isn't exact."""
    q = self._apply(Ops.IDIV, b)
    inexact = self._apply(Ops.MOD, b).ne(0)
    return ((inexact & ((self < 0) ^ (b < 0))).where(q - 1, q))
  def floordiv(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse, op="floordiv")
    return a._floordiv_int(b) if not dtypes.is_float(a.dtype) else a.div(b).floor()
  def idiv(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """Integer division that truncates toward zero (C's /)."""
    a, b = self._broadcasted(x, reverse, op="idiv")
    return a._apply(Ops.IDIV, b)
  def mod(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """Remainder with the sign of the divisor (Python's %, torch.remainder)."""
    a, b = self._broadcasted(x, reverse, op="mod")
    if dtypes.is_float(a.dtype): return a - b * (a / b).floor()
    r = a._apply(Ops.MOD, b)
    return (r.ne(0) & ((r < 0) ^ (b < 0))).where(r + b, r)
  def fmod(self: Tensor, x: Any) -> Tensor:
    """Remainder with the sign of the dividend (C's fmod)."""
    a, b = self._broadcasted(x, op="fmod")
    return a._apply(Ops.MOD, b) if not dtypes.is_float(a.dtype) else a - b * (a / b).trunc()
  def neg(self: Tensor) -> Tensor:
    return self.logical_not() if self.dtype == dtypes.bool else self._apply(Ops.MUL, self._const(-1))
  def reciprocal(self: Tensor) -> Tensor:
    x = self._float()
    return x._apply(Ops.RECIPROCAL)
  def _float(self: Tensor) -> Tensor: return self.cast(least_upper_float(self.dtype))
  def pow(self: Tensor, x: Any, reverse: bool = False) -> Tensor:
    """self ** x (x ** self if reverse). Integer exponents use repeated multiplication."""
    if not reverse and isinstance(x, int) and not isinstance(x, bool) and abs(x) <= 64:
      if x < 0 and not dtypes.is_float(self.dtype): raise ValueError("pow: integers to negative integer powers are not allowed")
      base = self if x >= 0 else self.reciprocal()
      ret, acc, e = self.ones_like(dtype=base.dtype), base, abs(x)
      while e:
        if e & 1: ret = ret * acc
        e >>= 1
        if e: acc = acc * acc
      return ret
    if not reverse and isinstance(x, float) and x == 0.5: return self.sqrt()
    base, exp = self._broadcasted(x, reverse, op="pow")
    out_dtype = base.dtype
    b, e = base._float(), exp._float()
    mag = (e * b.abs().log2()).exp2()
    # a negative base: the sign of an odd integer power, nan for a non-integer power
    e_int = e.trunc() == e
    odd = e_int & ((e.abs() * 0.5).trunc() * 2).ne(e.abs())
    neg = b < 0
    ret = neg.where(e_int.where(odd.where(-mag, mag), math.nan), mag)
    ret = (e == 0).where(1.0, (b == 1).where(1.0, ret))
    return ret.cast(out_dtype) if not dtypes.is_float(out_dtype) else ret
  def maximum(self: Tensor, x: Any) -> Tensor:
    """Elementwise larger value (nan wins, as in torch)."""
    a, b = self._broadcasted(x, op="maximum")
    if a.dtype == dtypes.bool: return a | b
    return a._apply(Ops.MAX, b)
  def minimum(self: Tensor, x: Any) -> Tensor:
    """Elementwise smaller value."""
    a, b = self._broadcasted(x, op="minimum")
    if a.dtype == dtypes.bool: return a & b
    return a._inverse().maximum(b._inverse())._inverse()
  def where(self: Tensor, x: Any, y: Any) -> Tensor:
    """x where self is true, else y: `(a > 0).where(a, 0)`."""
    from fusegrad.tensor import Tensor, broadcast_shape
    cond = self.cast(dtypes.bool)
    if isinstance(x, Tensor) and isinstance(y, Tensor): xt, yt = x._broadcasted(y, op="where")
    elif isinstance(x, Tensor): xt, yt = x._broadcasted(y, op="where")
    elif isinstance(y, Tensor): yt, xt = y._broadcasted(x, op="where")
    else:
      dt = least_upper_dtype(dtypes.from_py(x), dtypes.from_py(y))
      xt, yt = Tensor(x, dtype=dt, device=self.device), Tensor(y, dtype=dt, device=self.device)
    shape = broadcast_shape(cond.shape, xt.shape, yt.shape, op="where")
    c, xt, yt = cond._broadcast_to(shape), xt._broadcast_to(shape), yt._broadcast_to(shape)
    return xt._new(c.uop.alu(Ops.WHERE, xt.uop, yt.uop), xt, yt)
  def clip(self: Tensor, min_: Any = None, max_: Any = None) -> Tensor:
    """Limit values to [min_, max_] (either may be None); gradient 1 inside the range, edges included."""
    if min_ is None and max_ is None: raise ValueError("clip: give at least one of min_ and max_")
    x = self
    if min_ is not None: x = (x < min_).where(min_, x)
    if max_ is not None: x = (x > max_).where(max_, x)
    return x
  def clamp(self: Tensor, min_: Any = None, max_: Any = None) -> Tensor: return self.clip(min_, max_)
  def abs(self: Tensor) -> Tensor:
    """|x|: max(x, -x), whose gradient at 0 is 0 as in torch."""
    if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool: return self
    return self.maximum(-self)
  def sign(self: Tensor) -> Tensor:
    """-1, 0 or 1 (nan stays nan)."""
    s = self.ne(0).where((self < 0).where(-1, 1), 0).cast(self.dtype)
    return s + self * 0 if dtypes.is_float(self.dtype) else s
  def square(self: Tensor) -> Tensor: return self * self
  def lerp(self: Tensor, end: Any, weight: Any) -> Tensor: return self + (end - self) * weight

  # *** transcendental ***
  def sqrt(self: Tensor) -> Tensor: return self._float()._apply(Ops.SQRT)
  def rsqrt(self: Tensor) -> Tensor: return self.sqrt().reciprocal()
  def exp(self: Tensor) -> Tensor:
    """e ** x."""
    return self._float().mul(LOG2_E)._apply(Ops.EXP2)
  def exp2(self: Tensor) -> Tensor: return self._float()._apply(Ops.EXP2)
  def expm1(self: Tensor) -> Tensor: return self.exp() - 1
  def log(self: Tensor) -> Tensor:
    """Natural logarithm."""
    return self._float()._apply(Ops.LOG2).mul(LN_2)
  def log2(self: Tensor) -> Tensor: return self._float()._apply(Ops.LOG2)
  def log10(self: Tensor) -> Tensor: return self.log2() * (1 / math.log2(10))
  def log1p(self: Tensor) -> Tensor: return (self + 1).log()
  def sin(self: Tensor) -> Tensor: return self._float()._apply(Ops.SIN)
  def cos(self: Tensor) -> Tensor:
    """cos(x) = sin(pi/2 - x)."""
    x = self._float()
    return (x._const(math.pi / 2) - x).sin()
  def tan(self: Tensor) -> Tensor: return self.sin() / self.cos()
  def sinh(self: Tensor) -> Tensor: return (self.exp() - (-self).exp()) / 2
  def cosh(self: Tensor) -> Tensor: return (self.exp() + (-self).exp()) / 2
  def asinh(self: Tensor) -> Tensor: return (self + (self.square() + 1).sqrt()).log()
  def acosh(self: Tensor) -> Tensor: return (self + (self.square() - 1).sqrt()).log()
  def atanh(self: Tensor) -> Tensor: return ((1 + self) / (1 - self)).log() / 2
  def atan(self: Tensor) -> Tensor:
    """arctan, by range reduction to |x| <= tan(pi/12) and a short series."""
    x = self._float()
    big = x.abs() > 1
    t = big.where(x.abs().reciprocal(), x.abs())
    small = t > 0.2679491924311227  # tan(pi/12): use atan(t) = pi/6 + atan((t*sqrt3 - 1)/(t + sqrt3))
    u = small.where((t * math.sqrt(3) - 1) / (t + math.sqrt(3)), t)
    u2 = u * u
    poly = u * (1 - u2 * (1 / 3 - u2 * (1 / 5 - u2 * (1 / 7 - u2 * (1 / 9 - u2 / 11)))))
    r = small.where(poly + math.pi / 6, poly)
    r = big.where(math.pi / 2 - r, r)
    return x.sign() * r
  def asin(self: Tensor) -> Tensor: return (self / (1 - self.square()).sqrt()).atan()
  def acos(self: Tensor) -> Tensor: return math.pi / 2 - self.asin()
  def erf(self: Tensor) -> Tensor:
    """The error function (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7)."""
    x = self._float()
    t = 1.0 / (1.0 + 0.3275911 * x.abs())
    y = 1 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * (-x.square()).exp()
    return x.sign() * y

  # *** rounding ***
  def trunc(self: Tensor) -> Tensor:
    """Round toward zero."""
    return self._apply(Ops.TRUNC) if dtypes.is_float(self.dtype) else self
  def floor(self: Tensor) -> Tensor:
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (t > self).where(t - 1, t)
  def ceil(self: Tensor) -> Tensor:
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (t < self).where(t + 1, t)
  def round(self: Tensor) -> Tensor:
    """Round to nearest, ties to even (as torch.round)."""
    if not dtypes.is_float(self.dtype): return self
    f = self.floor()
    frac = self - f
    f_is_odd = (f - (f * 0.5).floor() * 2).ne(0)
    return ((frac > 0.5) | ((frac == 0.5) & f_is_odd)).where(f + 1, f)
  def frac(self: Tensor) -> Tensor: return self - self.trunc()

  # *** comparisons and logic ***
  def __lt__(self: Tensor, x: Any) -> Tensor:
    a, b = self._broadcasted(x, op="lt")
    return a._apply(Ops.CMPLT, b)
  def __gt__(self: Tensor, x: Any) -> Tensor:
    a, b = self._broadcasted(x, reverse=True, op="gt")
    return a._apply(Ops.CMPLT, b)
  def ne(self: Tensor, x: Any) -> Tensor:
    a, b = self._broadcasted(x, op="ne")
    return a._apply(Ops.CMPNE, b)
  def eq(self: Tensor, x: Any) -> Tensor: return self.ne(x).logical_not()
  def __ge__(self: Tensor, x: Any) -> Tensor: return (self > x) | self.eq(x) if dtypes.is_float(self.dtype) else (self < x).logical_not()
  def __le__(self: Tensor, x: Any) -> Tensor: return (self < x) | self.eq(x) if dtypes.is_float(self.dtype) else (self > x).logical_not()
  def __eq__(self: Tensor, x: Any) -> Tensor: return self.eq(x)  # type: ignore[override]
  def __ne__(self: Tensor, x: Any) -> Tensor: return self.ne(x)  # type: ignore[override]
  def lt(self: Tensor, x: Any) -> Tensor: return self < x
  def gt(self: Tensor, x: Any) -> Tensor: return self > x
  def le(self: Tensor, x: Any) -> Tensor: return self <= x
  def ge(self: Tensor, x: Any) -> Tensor: return self >= x
  def isnan(self: Tensor) -> Tensor: return self.ne(self)
  def isinf(self: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    pos, neg = self == math.inf, self == -math.inf
    return (pos | neg) if detect_positive and detect_negative else pos if detect_positive else neg if detect_negative else self.ne(self) & False
  def isfinite(self: Tensor) -> Tensor: return (self.isinf() | self.isnan()).logical_not()
  def logical_not(self: Tensor) -> Tensor: return self.cast(dtypes.bool)._apply(Ops.CMPNE, self._const(True, dtypes.bool))
  def logical_and(self: Tensor, x: Any) -> Tensor: return self.bool().bitwise_and(x.bool() if hasattr(x, "bool") else bool(x))
  def logical_or(self: Tensor, x: Any) -> Tensor: return self.bool().bitwise_or(x.bool() if hasattr(x, "bool") else bool(x))
  def logical_xor(self: Tensor, x: Any) -> Tensor: return self.bool().bitwise_xor(x.bool() if hasattr(x, "bool") else bool(x))
  def _bitwise(self: Tensor, op: Ops, x: Any, reverse: bool, name: str) -> Tensor:
    a, b = self._broadcasted(x, reverse, op=name)
    if dtypes.is_float(a.dtype): raise TypeError(f"{name}: needs int or bool tensors, not {a.dtype}")
    return a._apply(op, b)
  def bitwise_and(self: Tensor, x: Any, reverse: bool = False) -> Tensor: return self._bitwise(Ops.AND, x, reverse, "bitwise_and")
  def bitwise_or(self: Tensor, x: Any, reverse: bool = False) -> Tensor: return self._bitwise(Ops.OR, x, reverse, "bitwise_or")
  def bitwise_xor(self: Tensor, x: Any, reverse: bool = False) -> Tensor: return self._bitwise(Ops.XOR, x, reverse, "bitwise_xor")
  def bitwise_not(self: Tensor) -> Tensor:
    if self.dtype == dtypes.bool: return self.logical_not()
    if not dtypes.is_int(self.dtype): raise TypeError(f"bitwise_not: needs an int or bool tensor, not {self.dtype}")
    return self._apply(Ops.XOR, self._const(-1 if not dtypes.is_unsigned(self.dtype) else dtypes.max(self.dtype)))
  def lshift(self: Tensor, x: Any) -> Tensor: return self._bitwise(Ops.SHL, x, False, "lshift")
  def rshift(self: Tensor, x: Any) -> Tensor: return self._bitwise(Ops.SHR, x, False, "rshift")

  # *** activations ***
  def relu(self: Tensor) -> Tensor:
    """max(x, 0), with gradient 0 at 0 (nan passes through)."""
    return ((self > 0) | self.isnan()).where(self, 0)
  def relu6(self: Tensor) -> Tensor: return self.relu() - (self - 6).relu()
  def leaky_relu(self: Tensor, neg_slope: float = 0.01) -> Tensor: return (self > 0).where(self, self * neg_slope)
  def sigmoid(self: Tensor) -> Tensor:
    """1 / (1 + exp(-x)), from exp(-|x|) so nothing overflows in the value or the gradient."""
    x = self._float()
    e = (-x.abs()).exp()
    return (x >= 0).where(1 / (1 + e), e / (1 + e))
  def logsigmoid(self: Tensor) -> Tensor: return -(-self).softplus()
  def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor: return (alpha * self + beta).relu() - (alpha * self + beta - 1).relu()
  def tanh(self: Tensor) -> Tensor:
    """tanh(x) = 2 sigmoid(2x) - 1."""
    return 2.0 * (2.0 * self).sigmoid() - 1.0
  def hardtanh(self: Tensor, min_val: float = -1, max_val: float = 1) -> Tensor: return self.clip(min_val, max_val)
  def gelu(self: Tensor) -> Tensor:
    """GELU, tanh approximation (as tinygrad; torch's approximate='tanh')."""
    return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())
  def quick_gelu(self: Tensor) -> Tensor: return self * (self * 1.702).sigmoid()
  def silu(self: Tensor) -> Tensor:
    """x * sigmoid(x)."""
    return self * self.sigmoid()
  def swish(self: Tensor) -> Tensor: return self.silu()
  def elu(self: Tensor, alpha: float = 1.0) -> Tensor:
    """x if x > 0 else alpha * (exp(x) - 1)."""
    return (self > 0).where(self, alpha * (self.minimum(0).exp() - 1))
  def celu(self: Tensor, alpha: float = 1.0) -> Tensor:
    return self.maximum(0) + (alpha * ((self / alpha).minimum(0).exp() - 1))
  def selu(self: Tensor, alpha: float = 1.67326, gamma: float = 1.0507) -> Tensor:
    return gamma * (self > 0).where(self, alpha * (self.minimum(0).exp() - 1))
  def softplus(self: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, computed stably; linear above the threshold as in torch."""
    bx = self * beta
    soft = (bx.maximum(0) + (1 + (-bx.abs()).exp()).log()) / beta
    return (bx > threshold).where(self, soft)
  def mish(self: Tensor) -> Tensor: return self * self.softplus().tanh()
  def hardswish(self: Tensor) -> Tensor: return self * (self + 3).relu6() * (1 / 6)
  def softsign(self: Tensor) -> Tensor: return self / (1 + self.abs())

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
  def __rshift__(self: Tensor, x: Any) -> Tensor: return self.rshift(x)
  # in place: the one mutation, through assign
  def __iadd__(self: Tensor, x: Any) -> Tensor: return self.assign(self + x)
  def __isub__(self: Tensor, x: Any) -> Tensor: return self.assign(self - x)
  def __imul__(self: Tensor, x: Any) -> Tensor: return self.assign(self * x)
  def __itruediv__(self: Tensor, x: Any) -> Tensor: return self.assign(self / x)
  def __ipow__(self: Tensor, x: Any) -> Tensor: return self.assign(self ** x)
  def __imatmul__(self: Tensor, x: Any) -> Tensor: return self.assign(self @ x)
