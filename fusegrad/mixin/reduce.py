"""Reductions (sum, max, prod, mean, var, argmax, softmax, logsumexp ...), cumulative ops, and matrix products: each
a REDUCE_AXIS over a view (docs/developer/tensor.md)."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING, Any, Callable
from fusegrad.dtype import DType, dtypes, least_upper_dtype, least_upper_float, sum_acc_dtype, to_dtype
from fusegrad.helpers import make_tuple, ceildiv
from fusegrad.uop.ops import Ops
from fusegrad.mixin.elementwise import ArgumentError, ShapeIndexError, ShapeError, _resolve_axis, broadcast_shape

if TYPE_CHECKING: from fusegrad.tensor import Tensor

CUM_BLOCK = 256  # cumulative ops over longer axes work in blocks of this size
LONG_CUM_BLOCK = 16  # and over axes longer than 2**16, in blocks of this size

def _cum_identity(op: str, dtype: DType) -> Any:
  return {"sum": 0, "prod": 1, "max": dtypes.min(dtype), "logsumexp": -math.inf}[op]

def _cum_combine(op: str, a: Tensor, b: Tensor) -> Tensor:
  """Two partial results of a running op merged into one."""
  if op == "sum": return a + b
  return a * b if op == "prod" else a.maximum(b) if op == "max" else a.logaddexp(b)

class ReduceMixin:
  __slots__ = ()
  def _axes(self: Tensor, axis: Any, op: str) -> tuple[int, ...]:
    """The axes a reduce named op runs over, resolved (all if None); raises naming op for a bad or repeated one."""
    if axis is None: return tuple(range(self.ndim))
    axes = tuple(_resolve_axis(a, self.ndim, op) for a in make_tuple(axis, 1))
    if len(set(axes)) != len(axes): raise ArgumentError(f"{op}: dim {axis} names an axis twice (shape {self.shape})")
    return axes
  def _reduce(self: Tensor, op: Ops, axis: Any = None, keepdim: bool = False, name: str = "") -> Tensor:
    """The REDUCE_AXIS primitive over axes (all if None), keeping them as size 1 if keepdim; name is the user's op."""
    axes = self._axes(axis, name or {Ops.ADD: "sum", Ops.MUL: "prod", Ops.MAX: "max"}[op])
    if self.ndim == 0: return self._new(self.uop)  # a 0-d tensor reduced over its axis 0 (or -1) is itself, as torch
    empty, x = tuple(a for a in axes if self.shape[a] == 0), self
    if empty:  # one identity element padded on (gradients are zeros): 0, 1, or the least value (tinygrad's max)
      ident = {Ops.ADD: 0, Ops.MUL: 1}.get(op, dtypes.min(self.dtype))
      x = x.pad(tuple((0, 1) if a in empty else (0, 0) for a in range(x.ndim)), value=ident)
    ret = x._new(x.uop.r(op, axes))
    return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))
  def sum(self: Tensor, axis: Any = None, keepdim: bool = False, dtype: DType | str | None = None,
          acc_dtype: DType | None = None) -> Tensor:
    """Sum over axes (all by default). Ints sum in at least 32 bits; half/bfloat16 accumulate in float32.
    >>> Tensor([[1, 2], [3, 4]]).sum(axis=1).tolist()
    [3, 7]"""
    given = dtype if dtype is not None else acc_dtype
    acc = to_dtype(given) if given is not None else sum_acc_dtype(self.dtype)
    ret = self.cast(acc)._reduce(Ops.ADD, axis, keepdim)
    half = self.dtype in (dtypes.float16, dtypes.bfloat16)
    return ret.cast(self.dtype) if dtype is None and acc_dtype is None and half else ret
  def prod(self: Tensor, axis: Any = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    """Product over axes."""; return self._acc_input(dtype)._reduce(Ops.MUL, axis, keepdim)
  def max(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:
    """Largest value over axes.
    >>> Tensor([[1, 5], [7, 2]]).max(axis=1).tolist()
    [5, 7]"""
    if self.dtype == dtypes.bool: return self.cast(dtypes.uint8).max(axis, keepdim).cast(dtypes.bool)
    return self._reduce(Ops.MAX, axis, keepdim)
  def min(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:
    """Smallest value over axes."""
    if self.dtype == dtypes.bool: return self.cast(dtypes.uint8).min(axis, keepdim).cast(dtypes.bool)
    return self._inverse()._reduce(Ops.MAX, axis, keepdim, "min")._inverse()
  def _inverse(self: Tensor) -> Tensor:
    """An order-reversing map that is its own inverse: -x for floats, ~x for ints."""
    return -self if dtypes.is_float(self.dtype) else ~self
  def amax(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:
    """The same as max."""; return self.max(axis, keepdim)
  def amin(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:
    """The same as min."""; return self.min(axis, keepdim)
  def mean(self: Tensor, axis: Any = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    """Average over axes (ints give a float; dtype: of self first, as torch's).
    >>> Tensor([[1, 2], [3, 4]]).mean(axis=0).tolist()
    [2.0, 3.0]"""
    out_dtype, _ = least_upper_float(self.dtype if dtype is None else to_dtype(dtype)), self._axes(axis, "mean")
    total = self.cast(out_dtype).sum(axis, keepdim, dtype=sum_acc_dtype(out_dtype))  # (half: in float32, no overflow)
    count = self.numel() // max(total.numel(), 1) if self.numel() else 0
    return (total / count if count else total * math.nan).cast(out_dtype)
  def var(self: Tensor, axis: Any = None, keepdim: bool = False, correction: int = 1,
          unbiased: bool | None = None) -> Tensor:
    """Variance over axes, dividing by N - correction."""
    if unbiased is not None: correction = int(unbiased)
    x, _ = self._float()._wide(), self._axes(axis, "var")  # (half in float32, as torch: 300**2 overflows half)
    total = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
    n = self.numel() // max(total.numel(), 1)
    # as torch: inf (or nan for 0/0) when correction leaves nothing
    return (total / max(n - correction, 0)).cast(least_upper_float(self.dtype))
  def std(self: Tensor, axis: Any = None, keepdim: bool = False, correction: int = 1,
          unbiased: bool | None = None) -> Tensor:
    """Standard deviation over axes. Where it is 0 its gradient is 0 (as torch), not the inf * 0 of sqrt'."""
    _, v = self._axes(axis, "std"), self._float()._wide().var(axis, keepdim, correction, unbiased)
    nonzero = v.ne(0)
    return nonzero.where(nonzero.where(v, 1).sqrt(), 0).cast(least_upper_float(self.dtype))
  def var_mean(self: Tensor, axis: Any = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    """(var, mean) over axes."""; return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
  def std_mean(self: Tensor, axis: Any = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    """(std, mean) over axes."""; return self.std(axis, keepdim, correction), self.mean(axis, keepdim)
  def any(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:
    """True where any element along the axes is non-zero (False over an empty axis)."""
    return self.bool().sum(axis, keepdim) > 0 if 0 in self.shape else self.bool().max(axis, keepdim)
  def all(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:
    """True where every element along the axes is non-zero."""
    return self.logical_not().any(axis, keepdim).logical_not()
  def argmax(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the (first) largest value; over the flattened tensor if axis is None.
    >>> Tensor([[1, 9, 3], [7, 2, 7]]).argmax(axis=1).tolist()
    [1, 0]"""
    return self._argmax(axis, keepdim, "argmax")
  def _argmax(self: Tensor, axis: int | None, keepdim: bool, op: str) -> Tensor:
    if axis is None:
      if self.numel() == 0: raise ShapeIndexError(f"{op}: reduction over the zero-size tensor of shape {self.shape}")
      ret = self.flatten()._argmax(0, False, op)
      return ret.reshape((1,) * self.ndim) if keepdim else ret
    axis = _resolve_axis(axis, self.ndim, op)
    if self.ndim == 0: return self.reshape(1)._argmax(0, False, op)
    n = self.shape[axis]
    if n == 0: raise ShapeIndexError(f"{op}: reduction over a zero-size axis of {self.shape}")
    is_max = self == self.max(axis, keepdim=True)
    if dtypes.is_float(self.dtype): is_max = is_max | self.isnan()  # as torch: a nan is the largest value
    # count down from n so that the largest score belongs to the first maximum
    idx_dt = dtypes.int32 if n < 2 ** 31 else dtypes.int64  # int32 as tinygrad, int64 where int32 can't hold n
    countdown = type(self).arange(n, 0, -1, dtype=idx_dt, device=self.device).reshape(n, *[1] * (self.ndim - axis - 1))
    return (n - is_max.where(countdown, 0).max(axis, keepdim)).cast(idx_dt)
  def argmin(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the (first) smallest value; over the flattened tensor if axis is None."""
    return (self.logical_not() if self.dtype == dtypes.bool else self._inverse())._argmax(axis, keepdim, "argmin")
  def logsumexp(self: Tensor, axis: Any = None, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) over axes, computed stably."""
    self._axes(axis, "logsumexp")
    if not dtypes.is_float(self.dtype): return self.cast(least_upper_float(self.dtype)).logsumexp(axis, keepdim)
    if self.numel() == 0:  # log of an empty sum
      return self.sum(axis, keepdim=keepdim).full_like(-math.inf, dtype=least_upper_float(self.dtype))
    m = self.max(axis, keepdim=True)
    m = m.isinf().where(0, m).detach()  # lanes that are all -inf (or inf) must not turn into nan
    ret = (self - m).exp().sum(axis, keepdim=True).log() + m
    return ret if keepdim else ret.reshape(self.sum(axis).shape)
  def softmin(self: Tensor, axis: int = -1, dtype: DType | None = None) -> Tensor:
    """softmax of -x along axis: `Tensor([1.0, 2.0]).softmin()` is [0.731, 0.269]."""
    return (-(self.cast(dtype) if dtype is not None else self)).softmax(axis)
  def softmax(self: Tensor, axis: int = -1, dtype: DType | None = None) -> Tensor:
    """exp(x) / sum(exp(x)) along axis, computed stably.
    >>> Tensor([[0.0, 0.0], [0.0, 2e9]]).softmax().tolist()
    [[0.5, 0.5], [0.0, 1.0]]"""
    x = self.cast(dtype or least_upper_float(self.dtype))  # (ints as floats: uint8's x - max would wrap)
    _resolve_axis(axis, x.ndim, "softmax")  # a bad axis raises, even on an empty tensor
    if x.numel() == 0: return x.cast(least_upper_float(x.dtype))
    e = (x - x.max(axis, keepdim=True).detach()).exp()
    return e / e.sum(axis, keepdim=True)
  def log_softmax(self: Tensor, axis: int = -1, dtype: DType | None = None) -> Tensor:
    """log(softmax(x)) along axis, computed stably."""
    x = self.cast(dtype or least_upper_float(self.dtype))
    _resolve_axis(axis, x.ndim, "log_softmax")  # a bad axis raises, even on an empty tensor
    if x.numel() == 0: return x.cast(least_upper_float(x.dtype))
    m = x - x.max(axis, keepdim=True).detach()
    return m - m.exp().sum(axis, keepdim=True).log()
  def _cumulative(self: Tensor, axis: int, op: str) -> Tensor:
    """x combined with everything before it along axis (op is "sum", "prod", "max" or "logsumexp")."""
    axis = _resolve_axis(axis, self.ndim, "logcumsumexp" if op == "logsumexp" else "cum" + op)
    if self.ndim == 0: return self  # a 0-d tensor's running op is itself (axis 0 or -1), as torch
    x = self.transpose(axis, -1) if axis != self.ndim - 1 else self
    if x.shape[-1] == 0: return self
    out = x._cum_blocks(op)
    return out.transpose(axis, -1) if axis != self.ndim - 1 else out
  def _cum_blocks(self: Tensor, op: str) -> Tensor:
    """The running op along the last axis. A long axis is cut into blocks: the running op inside each block, combined
    with the running op of the block totals (recursively), so the work is n * CUM_BLOCK, not n * n."""
    n, lead = self.shape[-1], self.shape[:-1]
    if n <= 2 * CUM_BLOCK: return self._cum_window(op)
    # very long axes: short blocks (the work is n * block) as triangles (their index math has no division)
    block = CUM_BLOCK if n <= 2 ** 16 else LONG_CUM_BLOCK
    m, keep_lead = ceildiv(n, block), ((0, 0),) * len(lead)
    x = self.pad(keep_lead + ((0, m * block - n),), value=_cum_identity(op, self.dtype)).reshape(*lead, m, block)
    inner = x._cum_window(op) if block == CUM_BLOCK else x._cum_triangle(op)
    totals = inner.shrink(tuple((0, s) for s in inner.shape[:-1]) + ((block - 1, block),)).squeeze(-1)
    before = totals._cum_blocks(op).pad(keep_lead + ((1, -1),), value=_cum_identity(op, inner.dtype)).unsqueeze(-1)
    return _cum_combine(op, inner, before).reshape(*lead, m * block).shrink(tuple((0, s) for s in lead) + ((0, n),))
  def _cum_triangle(self: Tensor, op: str) -> Tensor:
    """The running op along a short last axis: output j reduces x[k] for k <= j (a lower-triangular mask)."""
    n = self.shape[-1]
    pos = type(self).arange(n, device=self.device)
    keep = pos.reshape(n, 1) >= pos.reshape(1, n)
    return keep.where(self.unsqueeze(-2), _cum_identity(op, self.dtype))._cum_reduce(op, self.dtype)
  def _cum_window(self: Tensor, op: str) -> Tensor:
    """The running op along the last axis in one reduce kernel: x is padded with n-1 identity values in front, and
    output i reduces the window of n values ending at i (a view: broadcast, reshape, cut)."""
    n, lead = self.shape[-1], self.shape[:-1]
    xp = self.pad(((0, 0),) * len(lead) + ((n - 1, 0),), value=_cum_identity(op, self.dtype))
    length = 2 * n - 1
    windows = xp.unsqueeze(-2).expand(*lead, n, length).reshape(*lead, n * length)
    windows = windows.pad(((0, 0),) * len(lead) + ((0, n),)).reshape(*lead, n, length + 1)
    return windows.shrink(tuple((0, s) for s in lead) + ((0, n), (0, n)))._cum_reduce(op, self.dtype)
  def _cum_reduce(self: Tensor, op: str, dtype: DType) -> Tensor:
    if op == "sum": return self.sum(-1, dtype=dtype if dtype != dtypes.bool else dtypes.int32)  # cumsum widened ints
    return self.logsumexp(-1) if op == "logsumexp" else self.prod(-1, dtype=dtype) if op == "prod" else self.max(-1)
  def cumsum(self: Tensor, axis: int = 0, dtype: DType | str | None = None) -> Tensor:
    """Running sum along axis: `Tensor([1, 2, 3]).cumsum()` is [1, 3, 6] (ints add in int64; dtype casts first)."""
    return self._acc_input(dtype)._cumulative(axis, "sum")
  def cumprod(self: Tensor, axis: int = 0, dtype: DType | str | None = None) -> Tensor:
    """Running product along axis (ints and bools multiply in int64, as torch)."""
    return self._acc_input(dtype)._cumulative(axis, "prod")
  def _acc_input(self: Tensor, dtype: DType | str | None) -> Tensor:  # self in the dtype prod, cumsum, cumprod work in
    return self.cast(to_dtype(dtype) if dtype is not None else self.dtype if dtypes.is_float(self.dtype) else
                     sum_acc_dtype(self.dtype))
  def cummax(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
    """(values, int32 indices) of the running maximum along axis, as torch.cummax (a nan, once seen, stays the maximum).
    `Tensor([1, 3, 2, 3]).cummax()` is ([1, 3, 3, 3], [0, 1, 1, 3])."""
    return self._cum_extreme(axis, largest=True)
  def cummin(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
    """(values, indices) of the running minimum along axis, as torch.cummin (ties and nan as in cummax).
    `Tensor([3, 1, 2, 1]).cummin()` is ([3, 1, 1, 1], [0, 1, 1, 3])."""
    return self._cum_extreme(axis, largest=False)
  def _cum_extreme(self: Tensor, axis: int, largest: bool) -> tuple[Tensor, Tensor]:
    axis = _resolve_axis(axis, self.ndim, "cummax" if largest else "cummin")
    if self.ndim == 0: return self, type(self).zeros((), dtype=dtypes.int32, device=self.device)
    x = self.cast(dtypes.uint8) if self.dtype == dtypes.bool else self
    values = x._cumulative(axis, "max") if largest else x._inverse()._cumulative(axis, "max")._inverse()
    # the running extreme changes (or ties) exactly where x equals it: the index is the last such position so far
    hit = values.detach() == x.detach()
    if dtypes.is_float(x.dtype): hit = hit | x.detach().isnan()
    pos = type(self).arange(x.shape[axis], dtype=dtypes.int32, device=self.device).reshape(-1, *[1] * (x.ndim-axis-1))
    indices = hit.where(pos, 0)._cumulative(axis, "max")
    if dtypes.is_float(x.dtype): values = x.gather(axis, indices)  # its gradient goes to the index, as torch's
    return values.cast(self.dtype), indices
  def logcumsumexp(self: Tensor, axis: int = 0) -> Tensor:
    """log(cumsum(exp(x))) along axis, each running sum a logsumexp (small early values survive a large later one).
    `Tensor([0.0, 0.0]).logcumsumexp()` is [0.0, 0.693]."""
    return self._float()._cumulative(axis, "logsumexp")

  # *** triangles ***
  def triu(self: Tensor, diagonal: int = 0) -> Tensor:
    """Zero below the diagonal (of the last two axes); diagonal > 0 moves it up and right."""
    return self._triangle(diagonal, upper=True)
  def tril(self: Tensor, diagonal: int = 0) -> Tensor:
    """Zero above the diagonal (of the last two axes)."""; return self._triangle(diagonal, upper=False)
  def _triangle(self: Tensor, diagonal: int, upper: bool) -> Tensor:
    if self.ndim < 2: raise ShapeError(f"{'triu' if upper else 'tril'}: needs at least 2 dims, got shape {self.shape}")
    r, c = self.shape[-2:]
    row = type(self).arange(r, device=self.device).unsqueeze(1) + diagonal
    col = type(self).arange(c, device=self.device).unsqueeze(0)
    keep = row <= col if upper else row >= col
    return keep.where(self, self.zeros_like())  # keeps the dtype (a bool mask stays bool)

  # *** matrix products ***
  def dot(self: Tensor, w: Tensor, dtype: DType | None = None) -> Tensor:
    """Matrix product with broadcasting of batch axes (1-D operands as in numpy.matmul)."""
    x = self
    if x.ndim == 0 or w.ndim == 0:
      raise ShapeError(f"matmul: both operands need at least 1 dim, got {x.shape} and {w.shape}")
    k = x.shape[-1]
    kw = w.shape[-2] if w.ndim > 1 else w.shape[0]
    if k != kw: raise ShapeError(f"matmul: shapes {x.shape} and {w.shape} don't match ({k} != {kw})")
    dt = least_upper_dtype(x.dtype, w.dtype)
    x, w = x.cast(dt), w.cast(dt)  # (a no-op for the one already of dtype dt)
    if dt in (dtypes.float16, dtypes.bfloat16):  # products and both passes' sums in float32, as torch
      x, w = x.cast(dtypes.float32), w.cast(dtypes.float32)
    x1d, w1d = x.ndim == 1, w.ndim == 1
    if x1d: x = x.unsqueeze(0)
    if w1d: w = w.unsqueeze(-1)
    # (..., n, 1, k) * (..., 1, m, k) summed over k
    try: batch = broadcast_shape(x.shape[:-2], w.shape[:-2], op="matmul")
    except ValueError:
      raise ShapeError(f"matmul: batch dims of {self.shape} and {w.shape} can't be broadcast") from None
    xe = x.reshape(*x.shape[:-1], 1, k)._broadcast_to((*batch, x.shape[-2], w.shape[-1], k))
    out_shape = (*batch, x.shape[-2], w.shape[-1], k)
    we = w.transpose(-1, -2).reshape(*w.shape[:-2], 1, w.shape[-1], k)._broadcast_to(out_shape)
    ret = (xe * we).sum(-1, dtype=dtype)
    if dtype is None and ret.dtype != dt: ret = ret.cast(dt)
    if w1d: ret = ret.squeeze(-1)
    if x1d: ret = ret.squeeze(-2 if not w1d else -1)
    return ret
  def matmul(self: Tensor, x: Tensor, reverse: bool = False, dtype: DType | None = None) -> Tensor:
    """Matrix product self @ x (x @ self if reverse).
    >>> Tensor([[1.0, 2.0]]).matmul(Tensor([[3.0], [4.0]])).tolist()
    [[11.0]]"""
    return x.dot(self, dtype) if reverse else self.dot(x, dtype)
  def __matmul__(self: Tensor, x: Tensor) -> Tensor: return self.matmul(x)
  def __rmatmul__(self: Tensor, x: Tensor) -> Tensor: return self.matmul(x, reverse=True)
  def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None, dtype: DType | None = None) -> Tensor:
    """x @ weight (+ bias), weight (in, out) (a 1-D weight scales elementwise); dtype: the accumulation dtype."""
    x = self * weight if weight.ndim == 1 else self.dot(weight, dtype)
    return x + bias if bias is not None else x
  def sequential(self: Tensor, layers: list[Callable[[Tensor], Tensor]]) -> Tensor:
    """Apply each layer in turn."""
    x = self
    for f in layers: x = f(x)
    return x
