"""Network ops composed from Tensor methods: convolution, pooling, normalization, dropout, one-hot, gather/scatter,
losses and attention.

Sliding windows are views: `_pool` turns the last n axes into (output positions..., window offsets...) with pad,
expand, reshape and shrink only, so a convolution is one broadcast multiply and one sum (one reduce kernel), and
pooling is one max or sum over the trailing window axes. Gathers and scatters compare an index with an arange (a
one-hot mask) and sum: codegen folds such sums back into direct loads (see codegen/fold.py).
"""
from __future__ import annotations
import math
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import prod, flatten, make_tuple, argfix, TRAINING
from fusegrad.gradient import with_rule, with_materialized_grad
from fusegrad.mixin.elementwise import ArgumentError, ShapeError, UnsupportedError, DTypeError, _resolve_axis, \
  broadcast_shape
from fusegrad.mixin.convgrad import ConvArgs, conv_rule
from fusegrad.mixin.indexing import check_indices

Ints = int | tuple[int, ...]  # one value for every spatial axis, or one per axis

if TYPE_CHECKING:
  from fusegrad.tensor import Tensor

def _tuple(x: int | Sequence[int], n: int, what: str, op: str) -> tuple[int, ...]:
  """x as one int per spatial axis; raises naming op when it is the wrong length."""
  ret = make_tuple(x, n)
  if len(ret) != n or not all(isinstance(v, int) for v in ret):
    raise ArgumentError(f"{op}: {what} {x!r} must be an int or {n} ints (one per spatial axis)")
  return ret

def _resolve_pads(padding: Any, n: int, op: str) -> list[tuple[int, int]]:
  """(before, after) for each of the last n axes, first axis first. padding is an int, one int per axis, pairs per
  axis, or a flat (left, right, top, bottom, ...) tuple that starts from the last axis (torch.nn.functional.pad)."""
  if isinstance(padding, int): return [(padding, padding)] * n
  pads = tuple(padding)
  if len(pads) == n and all(isinstance(p, int) for p in pads): return [(p, p) for p in pads]
  if len(pads) == n and all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pads):
    return [(p[0], p[1]) for p in pads]
  if len(pads) == 2 * n and all(isinstance(p, int) for p in pads):
    return [(pads[2 * i], pads[2 * i + 1]) for i in range(n)][::-1]
  raise ArgumentError(f"{op}: padding {padding!r} must be an int, {n} ints, {n} pairs or {2 * n} ints")

def _pad_last(x: Tensor, pads: Sequence[tuple[int, int]], value: float = 0.0) -> Tensor:
  """x padded (or cut, for negative amounts) on its last len(pads) axes."""
  if all(p == (0, 0) for p in pads): return x
  return x.pad(((0, 0),) * (x.ndim - len(pads)) + tuple(pads), value=value)

def _reduction(x: Tensor, reduction: str, op: str) -> Tensor:
  if reduction == "none": return x
  if reduction == "sum": return x.sum()
  if reduction == "mean": return x.mean()
  raise ArgumentError(f"{op}: reduction must be 'none', 'mean' or 'sum', not {reduction!r}")

class ClassIdError(IndexError, ArgumentError):
  """one_hot: a class id outside [0, num_classes); an IndexError as other out-of-range indices, and the ValueError
  and RuntimeError (torch) that a bad argument is."""

class _PoolArgs(NamedTuple):
  """Pooling arguments resolved per spatial axis; extra is the right padding ceil_mode adds (<= 0 otherwise)."""
  kernel: tuple[int, ...]
  stride: tuple[int, ...]
  dilation: tuple[int, ...]
  pads: list[tuple[int, int]]
  extra: list[int]

def _counted_span(plane: Sequence[int], pads: Sequence[tuple[int, int]], include_pad: bool) -> list[tuple[int, int]]:
  """Per axis, the [lo, hi) cells (in padded coordinates) that count in an average: the input, or input and padding."""
  return [(0, pb + i + pa) if include_pad else (pb, pb + i) for i, (pb, pa) in zip(plane, pads)]

class NNMixin:
  __slots__ = ()

  # *** sliding windows ***
  def _pool(self: Tensor, k_: tuple[int, ...], stride: Ints = 1, dilation: Ints = 1, op: str = "pool") -> Tensor:
    """The windows of the last len(k_) axes as trailing axes: (..., i1, i2) -> (..., o1, o2, k1, k2), where
    out[..., a, b, p, q] = x[..., a*s1 + p*d1, b*s2 + q*d2]. Only views: no data moves."""
    n = len(k_)
    if self.ndim < n: raise ShapeError(f"{op}: kernel {k_} needs at least {n} axes, input has shape {self.shape}")
    s_, d_ = _tuple(stride, n, "stride", op), _tuple(dilation, n, "dilation", op)
    if any(v <= 0 for v in k_ + s_ + d_):
      raise ArgumentError(f"{op}: kernel {k_}, stride {s_}, dilation {d_} must be positive")
    pre, i_ = self.shape[:-n], self.shape[-n:]
    o_ = tuple((i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(i_, k_, s_, d_))
    if any(o <= 0 for o in o_):
      raise ShapeError(f"{op}: kernel {k_} with dilation {d_} is larger than the input {i_} (shape {self.shape})")
    keep_pre = tuple(None for _ in pre)
    if all(k <= s for k, s in zip(k_, s_)) and all(d == 1 for d in d_):
      # windows don't overlap: make each axis o*s long, split it into (o, s) and keep the first k of every step
      x = _pad_last(self, [(0, o * s - i) for o, s, i in zip(o_, s_, i_)])
      x = x.reshape(*pre, *flatten((o, s) for o, s in zip(o_, s_)))
      x = x.shrink(keep_pre + tuple(flatten(((0, o), (0, k)) for o, k in zip(o_, k_))))
    else:
      # repeat each axis k times, laid out with period i'+d: row r starts d*r further on, so (r, j) reads x[j + d*r]
      ip_ = tuple((k - 1) * d + o * s for k, d, o, s in zip(k_, d_, o_, s_))  # long enough for every window; >= i
      x = _pad_last(self, [(0, ip - i) for ip, i in zip(ip_, i_)])
      x = x.reshape(*pre, *flatten((1, ip) for ip in ip_)).expand(*pre, *flatten((k, ip) for k, ip in zip(k_, ip_)))
      x = _pad_last(x.reshape(*pre, *(k * ip for k, ip in zip(k_, ip_))), [(0, k * d) for k, d in zip(k_, d_)])
      x = x.reshape(*pre, *flatten((k, ip + d) for k, ip, d in zip(k_, ip_, d_)))
      x = x.shrink(keep_pre + tuple(flatten(((0, k), (0, o * s)) for k, o, s in zip(k_, o_, s_))))
      # keep every s-th start: (k, o*s) -> (k, o, s) -> (k, o)
      x = x.reshape(*pre, *flatten((k, o, s) for k, o, s in zip(k_, o_, s_)))
      x = x.shrink(keep_pre + tuple(flatten(((0, k), (0, o), (0, 1)) for k, o in zip(k_, o_))))
      x = x.reshape(*pre, *flatten((k, o) for k, o in zip(k_, o_))).permute(
        *range(len(pre)), *flatten((len(pre) + 2 * j + 1, len(pre) + 2 * j) for j in range(n)))
    # (..., o1, k1, o2, k2) -> (..., o1, o2, k1, k2)
    return x.permute(*range(len(pre)), *(len(pre) + 2 * j for j in range(n)), *(len(pre) + 2 * j + 1 for j in range(n)))

  def unfold(self: Tensor, dim: int, size: int, step: int) -> Tensor:
    """All slices of length size along dim, every step elements, as a new last axis (torch.Tensor.unfold; tinygrad's
    argument names).

    `Tensor.arange(5).unfold(0, 2, 2).tolist()` is [[0, 1], [2, 3]]."""
    d = _resolve_axis(dim, self.ndim, "unfold") if self.ndim else 0
    x = self.reshape(1) if self.ndim == 0 else self
    if size > x.shape[d]: raise ShapeError(f"unfold: size {size} is larger than dimension {d} of shape {self.shape}")
    if size < 0 or step <= 0: raise ArgumentError(f"unfold: size must be >= 0 and step > 0, got {size} and {step}")
    xt = x.transpose(d, -1)
    if size == 0:  # n // step + 1 empty windows (torch)
      windows = xt[..., :0].unsqueeze(-2).expand(*xt.shape[:-1], xt.shape[-1] // step + 1, 0)
    else: windows = xt._pool((size,), step, op="unfold")  # (..., o, size), dim d at the end before pooling
    return windows.transpose(d, -2) if d != x.ndim - 1 else windows

  # *** convolution ***
  def conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: Ints = 1,
             dilation: Ints = 1, padding: Any = 0, dtype: DType | None = None) -> Tensor:
    """N-d cross-correlation as torch.nn.functional.conv{1,2,3}d: x (batch, cin, *spatial), weight
    (cout, cin // groups, *kernel), bias (cout,). padding: an int, one per spatial axis, a flat torch-style tuple
    (left, right, top, bottom), 'valid' or 'same'. One reduce kernel.

    `Tensor.ones(1, 1, 3, 3).conv2d(Tensor.ones(1, 1, 2, 2)).tolist()` is [[[[4.0, 4.0], [4.0, 4.0]]]]."""
    n = weight.ndim - 2
    if n >= 1 and self.ndim == n + 1:  # unbatched (cin, *spatial)
      return self.unsqueeze(0).conv2d(weight, bias, groups, stride, dilation, padding, dtype).squeeze(0)
    bs, cin = self.shape[:2] if self.ndim >= 2 else (0, 0)
    cout, cin_g, k_ = weight.shape[0], weight.shape[1] if weight.ndim > 1 else 0, weight.shape[2:]
    if n < 1 or self.ndim != n + 2 or groups <= 0 or cin != cin_g * groups or cout % groups:
      raise ShapeError(f"conv2d: input {self.shape} and weight {weight.shape} (groups={groups}) don't match: want "
                       "input (batch, cin, *spatial), weight (cout, cin // groups, *kernel), cout divisible by groups")
    if bias is not None and bias.shape != (cout,):
      raise ShapeError(f"conv2d: bias shape {bias.shape} should be ({cout},)")
    s_, d_ = _tuple(stride, n, "stride", "conv2d"), _tuple(dilation, n, "dilation", "conv2d")
    if padding == "valid": padding = 0
    elif padding == "same":
      if any(s != 1 for s in s_): raise ArgumentError("conv2d: padding='same' needs stride 1")
      padding = [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for d, k in zip(d_, k_)]
    pads = _resolve_pads(padding, n, "conv2d")
    # integer input, float weights (raw pixels): cast first, as the product would, so the gradient rule below applies
    if dtype is None and dtypes.is_float(weight.dtype) and not dtypes.is_float(self.dtype):
      self = self.cast(weight.dtype)
    x = _pad_last(self, pads)._pool(k_, s_, d_, "conv2d")  # (bs, cin, *o, *k)
    o_, rcout = x.shape[2:2 + n], cout // groups
    # (bs, groups, rcout, *o, cin_g, *k) * (1, groups, rcout, *1, cin_g, *k), summed over cin_g and the kernel
    x = x.reshape(bs, groups, cin_g, 1, *o_, *k_).expand(bs, groups, cin_g, rcout, *o_, *k_)
    x = x.permute(0, 1, 3, *range(4, 4 + n), 2, *range(4 + n, 4 + 2 * n))
    w = weight.reshape(groups, rcout, cin_g, *k_)
    if rcout % 8 == 0:  # weights copied channel-last (small): a vector of output channels loads them contiguously
      w = w.permute(0, *range(2, 3 + n), 1).contiguous().permute(0, n + 2, *range(1, n + 2))
    # integer convolutions keep their dtype, as integer matmuls do
    xw = x * w.reshape(1, groups, rcout, *[1] * n, cin_g, *k_)
    ret = xw.sum(tuple(range(-1 - n, 0)), dtype=dtype or (None if dtypes.is_float(xw.dtype) else xw.dtype))
    ret = ret.reshape(bs, cout, *o_)
    if dtypes.is_float(ret.dtype) and self.dtype == weight.dtype == ret.dtype:  # gradients as convolutions
      rule = conv_rule(ConvArgs(groups, s_, d_, pads), type(self))
      ret = type(self)(with_rule(ret.uop, (self.uop, weight.uop), rule))
    return ret if bias is None else ret + bias.reshape(1, cout, *[1] * n)

  def conv_transpose2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: Ints = 1,
                       dilation: Ints = 1, padding: Any = 0, output_padding: Ints = 0) -> Tensor:
    """N-d transposed convolution as torch.nn.functional.conv_transpose{1,2,3}d: x (batch, cin, *spatial), weight
    (cin, cout // groups, *kernel). Zeros go between input elements (stride), then a convolution with the flipped
    kernel; output size (i-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1."""
    n = weight.ndim - 2
    if n >= 1 and self.ndim == n + 1:  # unbatched (cin, *spatial)
      return (self.unsqueeze(0).conv_transpose2d(weight, bias, groups, stride, dilation, padding, output_padding)
              .squeeze(0))
    cin = self.shape[1] if self.ndim >= 2 else 0
    if n < 1 or self.ndim != n + 2 or groups <= 0 or cin != weight.shape[0] or cin % groups:
      raise ShapeError(f"conv_transpose2d: input {self.shape}, weight {weight.shape} (groups={groups}) don't match: "
                       "want input (batch, cin, *spatial), weight (cin, cout // groups, *kernel), cin % groups == 0")
    k_, rcout = weight.shape[2:], weight.shape[1]
    s_, d_ = _tuple(stride, n, "stride", "conv_transpose2d"), _tuple(dilation, n, "dilation", "conv_transpose2d")
    op_ = _tuple(output_padding, n, "output_padding", "conv_transpose2d")
    if any(o >= s and o >= d for o, s, d in zip(op_, s_, d_)):
      raise ArgumentError(f"conv_transpose2d: output_padding {op_} must be smaller than stride {s_} or dilation {d_}")
    pads = _resolve_pads(padding, n, "conv_transpose2d")
    # (cin, rcout, *k) -> (groups, cin_g, rcout, *k) -> (groups * rcout, cin_g, *k), kernel flipped
    w = weight.reshape(groups, cin // groups, rcout, *k_).transpose(1, 2).reshape(groups * rcout, cin // groups, *k_)
    w = w.flip(*range(2, 2 + n))
    x = self
    for j, s in enumerate(s_):  # s-1 zeros after every element but the last: (.., i) -> (.., i, s) -> (.., (i-1)*s+1)
      if s == 1: continue
      axis, i = 2 + j, x.shape[2 + j]
      x = x.unsqueeze(axis + 1).pad(tuple((0, s - 1) if a == axis + 1 else (0, 0) for a in range(x.ndim + 1)))
      x = x.reshape(*x.shape[:axis], i * s, *x.shape[axis + 2:]).shrink(
        tuple((0, (i - 1) * s + 1) if a == axis else None for a in range(x.ndim - 1)))
    conv_pads = [(d * (k - 1) - b, d * (k - 1) - a + o) for (b, a), d, k, o in zip(pads, d_, k_, op_)]
    return x.conv2d(w, bias, groups=groups, dilation=d_, padding=conv_pads)

  def conv1d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: Ints = 1,
             dilation: Ints = 1, padding: Any = 0) -> Tensor:
    """1-d convolution: the same as conv2d with a (cout, cin // groups, k) weight."""
    return self.conv2d(weight, bias, groups, stride, dilation, padding)

  # *** pooling ***
  def _pool_setup(self: Tensor, kernel_size: Any, stride: Any, dilation: Any, padding: Any, ceil_mode: bool,
                  op: str) -> _PoolArgs:
    """(kernel, stride, dilation, padding per axis, extra right padding per axis that ceil_mode needs)."""
    k_ = make_tuple(kernel_size, 2)
    n = len(k_)
    s_ = k_ if stride is None or stride == () or stride == [] else _tuple(stride, n, "stride", op)
    d_ = _tuple(dilation, n, "dilation", op)
    pads = _resolve_pads(padding, n, op)
    if any(v <= 0 for v in k_ + s_ + d_):
      raise ArgumentError(f"{op}: kernel {k_}, stride {s_}, dilation {d_} must be positive")
    if self.ndim < n: raise ShapeError(f"{op}: kernel {k_} needs at least {n} axes, input has shape {self.shape}")
    if any(max(p) * 2 > d * (k - 1) + 1 for p, k, d in zip(pads, k_, d_)):
      raise ArgumentError(f"{op}: padding {padding!r} must be at most half the (dilated) kernel {k_}")
    extra = []
    for i, k, s, d, (pb, pa) in zip(self.shape[-n:], k_, s_, d_, pads):
      span = i + pb + pa - d * (k - 1) - 1
      if span < 0:
        raise ShapeError(f"{op}: kernel {k_} with dilation {d_} is larger than the padded input {self.shape}")
      o = (-(-span // s) if ceil_mode else span // s) + 1
      if ceil_mode and (o - 1) * s >= i + pb: o -= 1  # torch: the last window must start inside the input or left pad
      extra.append((o - 1) * s + d * (k - 1) + 1 - (i + pb + pa))  # > 0 only in ceil mode
    return _PoolArgs(k_, s_, d_, pads, extra)

  def max_pool2d(self: Tensor, kernel_size: Ints = (2, 2), stride: Ints | None = None, dilation: Ints = 1,
                 padding: Any = 0, ceil_mode: bool = False,
                 return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Max over windows of the last len(kernel_size) axes (2 for an int), as torch.nn.functional.max_pool{1,2,3}d;
    padding counts as -inf. With return_indices, also the flat index (int32) of each max within its input plane.

    `Tensor.arange(16).reshape(1, 1, 4, 4).max_pool2d().tolist()` is [[[[5, 7], [13, 15]]]]."""
    k_, s_, d_, pads, extra = self._pool_setup(kernel_size, stride, dilation, padding, ceil_mode, "max_pool2d")
    lowest = dtypes.min(self.dtype)
    all_pads = [(pb, pa + e) for (pb, pa), e in zip(pads, extra)]
    windows = _pad_last(self, all_pads, lowest)._pool(k_, s_, d_)
    axes = tuple(range(-len(k_), 0))
    ret = windows.max(axes)
    if dtypes.is_float(ret.dtype):  # the gradient into a buffer: a norm's backward before the pool reads it many times
      ret = type(self)(with_materialized_grad(ret.uop, (self.uop,)))
    if not return_indices: return ret
    # the flat input-plane index of every window element, and the first one that holds the max
    plane = self.shape[-len(k_):]
    pos = type(self).arange(prod(plane), device=self.device, dtype=dtypes.int32).reshape(plane)
    pos = _pad_last(pos, all_pads, -1)._pool(k_, s_, d_).flatten(-len(k_))
    hit = windows.flatten(-len(k_)) == ret.unsqueeze(-1)
    kn = pos.shape[-1]
    countdown = type(self).arange(kn, 0, -1, device=self.device, dtype=dtypes.int32)
    first = kn - (hit * countdown).max(-1, keepdim=True)
    idx = (first == type(self).arange(kn, device=self.device, dtype=dtypes.int32)).where(pos, 0).sum(-1)
    # int32 as argmax and tinygrad (its tests compare torch's indices cast to int32), int64 where int32 can't hold them
    return ret, idx.cast(dtypes.int32 if prod(plane) < 2 ** 31 else dtypes.int64).detach()

  def max_unpool2d(self: Tensor, indices: Tensor, kernel_size: Ints = (2, 2), stride: Ints | None = None,
                   dilation: Ints = 1, padding: Any = 0, output_size: Sequence[int] | None = None) -> Tensor:
    """The partial inverse of max_pool2d (torch.nn.functional.max_unpool2d): every value goes to the flat plane
    position its index names, zeros elsewhere. The plane is (i-1)*stride - 2*padding + dilation*(k-1) + 1 per axis,
    or the last axes of output_size."""
    k_ = make_tuple(kernel_size, 2)
    n = len(k_)
    s_ = k_ if stride is None else _tuple(stride, n, "stride", "max_unpool2d")
    d_, pads = _tuple(dilation, n, "dilation", "max_unpool2d"), _resolve_pads(padding, n, "max_unpool2d")
    if indices.shape != self.shape or not dtypes.is_int(indices.dtype) or self.ndim < n:
      raise ShapeError(f"max_unpool2d: indices {indices.shape} {indices.dtype} must be integers shaped like the input "
                       f"{self.shape}")
    if output_size is None:
      out = tuple((i - 1) * s - pb - pa + d * (k - 1) + 1
                  for i, s, (pb, pa), d, k in zip(self.shape[-n:], s_, pads, d_, k_))
    else: out = tuple(output_size)[-n:]
    # each output cell: the values whose index names it (overlapping windows can name a cell twice, with equal values)
    hit = indices.flatten(-n).unsqueeze(-1) == type(self).arange(prod(out), device=self.device, dtype=indices.dtype)
    total = hit.where(self.flatten(-n).unsqueeze(-1), 0).sum(-2, dtype=self.dtype)
    count = hit.sum(-2, dtype=dtypes.int32).maximum(1).cast(self.dtype)
    return (total / count).reshape(*self.shape[:-n], *out)

  def avg_pool2d(self: Tensor, kernel_size: Ints = (2, 2), stride: Ints | None = None, dilation: Ints = 1,
                 padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """Mean over windows of the last len(kernel_size) axes, as torch.nn.functional.avg_pool{1,2,3}d: with
    count_include_pad the padding counts in the divisor (but not the extra cells ceil_mode adds)."""
    k_, s_, d_, pads, extra = self._pool_setup(kernel_size, stride, dilation, padding, ceil_mode, "avg_pool2d")
    n = len(k_)
    all_pads = [(pb, pa + e) for (pb, pa), e in zip(pads, extra)]
    axes = tuple(range(-n, 0))
    x = self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
    total = _pad_last(x, all_pads)._pool(k_, s_, d_).sum(axes)
    # the divisor: how many cells of each window count, per axis (small host-made tensors: no extra kernel)
    spans = _counted_span(self.shape[-n:], pads, count_include_pad)
    per_axis = [[sum(lo <= o * s + q * d < hi for q in range(k)) for o in range(out)]
                for out, (lo, hi), k, s, d in zip(total.shape[-n:], spans, k_, s_, d_)]
    if all(len(set(c)) == 1 for c in per_axis): return total / prod(c[0] for c in per_axis)
    count = type(self).ones((), dtype=x.dtype, device=self.device)
    for j, c in enumerate(per_axis):
      count = count * type(self)(c, dtype=x.dtype, device=self.device).reshape(-1, *[1] * (n - 1 - j))
    return total / count

  def max_pool1d(self: Tensor, kernel_size: int = 2, stride: Any = None, dilation: int = 1, padding: Any = 0,
                 ceil_mode: bool = False, return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Max over windows of the last axis."""
    return self.max_pool2d((kernel_size,), stride, dilation, padding, ceil_mode, return_indices)
  def avg_pool1d(self: Tensor, kernel_size: int = 2, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> Tensor:
    """Mean over windows of the last axis."""
    return self.avg_pool2d((kernel_size,), stride, 1, padding, ceil_mode, count_include_pad)

  # *** normalization and dropout ***
  def batchnorm(self: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,
                axis: int | tuple[int, ...] = 1) -> Tensor:
    """(x - mean) * invstd * weight + bias, the statistics laid along axis (the channels): inference-time batch norm
    (torch.nn.functional.batch_norm with invstd = 1 / sqrt(var + eps)). weight and bias may be None."""
    axes = tuple(_resolve_axis(a, self.ndim, "batchnorm") for a in argfix(axis))
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    def along(t: Tensor, name: str) -> Tensor:
      if t.numel() != prod(shape) and t.numel() != 1:
        raise ShapeError(f"batchnorm: {name} of shape {t.shape} doesn't fit axis {axis} of input {self.shape}")
      return t.reshape(shape) if t.numel() == prod(shape) else t.reshape(())
    x = (self - along(mean, "mean")) * along(invstd, "invstd")
    if weight is not None: x = x * along(weight, "weight")
    return x + along(bias, "bias") if bias is not None else x

  def layernorm(self: Tensor, axis: int | tuple[int, ...] = -1, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over axis (biased variance), as torch.nn.functional.layer_norm without affine."""
    y = self - self.mean(axis, keepdim=True)
    return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()

  def normalize(self: Tensor, p: float = 2.0, dim: int | tuple[int, ...] = 1, eps: float = 1e-12) -> Tensor:
    """x / max(norm_p(x over dim), eps), as torch.nn.functional.normalize (p may be inf, -inf or 0 too).

    `Tensor([[3.0, 4.0]]).normalize().tolist()` is [[0.6, 0.8]]."""
    dims = tuple(_resolve_axis(d, self.ndim, "normalize") for d in argfix(dim))
    x = self if dtypes.is_float(self.dtype) else self.float()
    a = x.abs()
    if p == math.inf: norm = a.max(dims, keepdim=True)
    elif p == -math.inf: norm = a.min(dims, keepdim=True)
    elif p == 0: norm = x.ne(0).sum(dims, keepdim=True, dtype=x.dtype)
    else:
      total = a.pow(p).sum(dims, keepdim=True)
      # a zero norm would give sqrt'(0) = inf (and inf * 0 = nan) on the way back; torch's gradient there is 0
      nonzero = total.ne(0)
      norm = nonzero.where(nonzero.where(total, 1).pow(1 / p), 0)
    return x / norm.maximum(eps)

  def dropout(self: Tensor, p: float = 0.5) -> Tensor:
    """In training (Tensor.training or TRAINING=1) zero each element with probability p and scale the rest by
    1/(1-p); otherwise the input unchanged."""
    if not 0 <= p <= 1: raise ArgumentError(f"dropout: p must be in [0, 1], got {p}")
    if not (type(self).training or TRAINING) or p == 0: return self
    if p == 1: return self * 0
    keep = type(self).rand(*self.shape, device=self.device) >= p
    return keep.where(self * (1 / (1 - p)), 0).cast(self.dtype)

  # *** one-hot, gather, scatter ***
  def one_hot(self: Tensor, num_classes: int = -1) -> Tensor:
    """Integer class ids -> a trailing axis of num_classes with 1 at the id (-1: max id + 1, which reads the data).

    `Tensor([0, 2]).one_hot(3).tolist()` is [[1, 0, 0], [0, 0, 1]]."""
    if not dtypes.is_int(self.dtype): raise DTypeError(f"one_hot: needs an integer tensor, not {self.dtype}")
    if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < -1:
      raise ArgumentError(f"one_hot: num_classes must be -1 or an int >= 0, got {num_classes!r}")
    if read := num_classes == -1:  # the shape needs the largest id: this reads the data
      i = self.cast(dtypes.int64)
      lo, hi = (int(v) for v in i.min().stack(i.max()).tolist()) if self.numel() else (0, -1)
      if lo < 0: raise ClassIdError(f"one_hot: class ids must be >= 0, got {lo}")
      num_classes = hi + 1
    if num_classes == 0 and self.numel():  # an empty result would compute nothing, so no flag either
      raise ClassIdError(f"one_hot: num_classes is 0, so none of the {self.numel()} class ids is in range")
    hot = self.unsqueeze(-1) == type(self).arange(num_classes, device=self.device, dtype=self.dtype)
    hot = hot.cast(dtypes.default_int)
    if read: return hot
    # as torch, ids outside [0, num_classes) raise (at realize)
    return check_indices(hot, self, num_classes, "one_hot", negative=False, what="class id", error=ClassIdError)

  def _index_mask(self: Tensor, index: Tensor, dim: int, op: str) -> Tensor:
    """index (integers, as many dims as self) compared with an arange of self's size along dim: (*index.shape, n)."""
    if not isinstance(index, type(self)) or not dtypes.is_int(index.dtype):
      raise DTypeError(f"{op}: index must be an integer Tensor, got {getattr(index, 'dtype', type(index).__name__)}")
    if index.ndim != self.ndim:
      raise ShapeError(f"{op}: index {index.shape} and input {self.shape} need the same number of dims")
    if any(si > sx for a, (si, sx) in enumerate(zip(index.shape, self.shape)) if a != dim):
      raise ShapeError(f"{op}: index {index.shape} is larger than input {self.shape} outside dim {dim}")
    n = self.shape[dim]
    positions = type(self).arange(n, device=self.device, dtype=index.dtype)
    return check_indices(index.unsqueeze(-1) == positions, index, n, op, negative=False)

  def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:
    """Values picked along dim by index (torch.gather): `out[i][j] = x[index[i][j]][j]` for dim 0; index has as many
    dims as x, sizes at most x's.

    `Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[0, 0], [1, 0]])).tolist()` is [[1, 1], [4, 3]]."""
    d = _resolve_axis(dim, self.ndim, "gather")
    mask = self._index_mask(index, d, "gather")
    # x cut to index's shape off dim, dim moved to a new last axis: (*index.shape with 1 at dim, n)
    x = self.shrink(tuple(None if a == d else (0, s) for a, s in enumerate(index.shape))).unsqueeze(-1).transpose(d, -1)
    if x.dtype == dtypes.bool: return mask.where(x, False).any(-1)
    return mask.where(x, 0).sum(-1, dtype=self.dtype)

  def _scatter_back(self: Tensor, t: Tensor, d: int, fill: Any) -> Tensor:
    """t shaped (*index.shape with 1 at d, n) laid out like self: dim d back in place, padded with fill to the shape."""
    t = t.transpose(d, -1).squeeze(-1)
    return t.pad(tuple((0, s - ts) for s, ts in zip(self.shape, t.shape)), value=fill) if t.shape != self.shape else t

  def _scatter_src(self: Tensor, index: Tensor, src: Any, op: str) -> Tensor:
    """src as a tensor of index's shape in self's dtype (a scalar broadcasts)."""
    if not isinstance(src, type(self)): return type(self).full(index.shape, src, dtype=self.dtype, device=self.device)
    if src.ndim != index.ndim or any(si > ss for si, ss in zip(index.shape, src.shape)):
      raise ShapeError(f"{op}: src {src.shape} must have index's dims and be at least index's size {index.shape}")
    if src.dtype != self.dtype: raise DTypeError(f"{op}: src is {src.dtype}, self {self.dtype} (they must match)")
    return src.shrink(tuple((0, s) for s in index.shape)).cast(self.dtype)

  def scatter(self: Tensor, dim: int, index: Tensor, src: Any, reduce: str | None = None) -> Tensor:
    """A copy of x with `x[index[i][j]][j] = src[i][j]` for dim 0 (torch.Tensor.scatter); src may be a scalar. With
    reduce='add' or 'multiply' the values combine with x instead; with repeated indices and no reduce, the last wins."""
    d = _resolve_axis(dim, self.ndim, "scatter")
    mask, src_t = self._index_mask(index, d, "scatter"), self._scatter_src(index, src, "scatter")
    src_b = src_t.unsqueeze(-1)  # (*index.shape, 1) against mask (*index.shape, n)
    if reduce == "add": return self + self._scatter_back(mask.where(src_b, 0).sum(d, True, dtype=self.dtype), d, 0)
    if reduce == "multiply":
      return self * self._scatter_back(mask.where(src_b, 1).prod(d, True, dtype=self.dtype), d, 1)
    if reduce is not None: raise ArgumentError(f"scatter: reduce must be None, 'add' or 'multiply', not {reduce!r}")
    # the last position along dim that writes each cell (0: none), then the value written there
    m = index.shape[d]
    order = type(self).arange(1, m + 1, device=self.device, dtype=dtypes.int32).reshape(m, *[1] * (index.ndim - d))
    last = mask.where(order, 0).max(d, keepdim=True)
    picked = (mask & (order == last)).where(src_b, 0)
    value = picked.any(d, keepdim=True) if self.dtype == dtypes.bool else picked.sum(d, keepdim=True, dtype=self.dtype)
    return self._scatter_back(last > 0, d, False).where(self._scatter_back(value, d, 0), self)

  def scatter_reduce(self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str,
                     include_self: bool = True) -> Tensor:
    """Combine src into x at index along dim (torch.Tensor.scatter_reduce) with reduce 'sum', 'prod', 'mean', 'amax'
    or 'amin'; include_self=False leaves x's own value out wherever something is written."""
    d = _resolve_axis(dim, self.ndim, "scatter_reduce")
    identities = {"sum": 0, "mean": 0, "prod": 1, "amax": dtypes.min(self.dtype), "amin": dtypes.max(self.dtype)}
    if reduce not in identities:
      raise ArgumentError(f"scatter_reduce: reduce must be one of {list(identities)}, not {reduce!r}")
    mask, src_t = self._index_mask(index, d, "scatter_reduce"), self._scatter_src(index, src, "scatter_reduce")
    values = mask.where(src_t.unsqueeze(-1), identities[reduce])  # (*index.shape, n): src at the cells it goes to
    hits = mask.sum(d, keepdim=True, dtype=dtypes.int32)
    if include_self:  # x (cut to index's extent off dim) as one more entry along d in the same layout
      own = self.shrink(tuple(None if a == d else (0, s) for a, s in enumerate(index.shape)))
      values = own.unsqueeze(-1).transpose(d, -1).cat(values, dim=d)
    if reduce in ("sum", "mean"): red = values.sum(d, keepdim=True, dtype=self.dtype)
    elif reduce == "prod": red = values.prod(d, keepdim=True, dtype=self.dtype)
    else: red = values.max(d, keepdim=True) if reduce == "amax" else values.min(d, keepdim=True)
    if reduce == "mean":
      count = hits + int(include_self)
      red = red / count.maximum(1) if dtypes.is_float(self.dtype) else red.div(count.maximum(1), rounding_mode="floor")
    return self._scatter_back(hits > 0, d, False).where(self._scatter_back(red.cast(self.dtype), d, 0), self)

  def scatter_add(self: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """x with src added at index along dim (torch.Tensor.scatter_add)."""
    return self.scatter_reduce(dim, index, src, "sum")

  # *** selections with a data-dependent length ***
  def _select_slots(self: Tensor, mask: Tensor, size: int | None, op: str) -> Tensor:
    """(size, n) bool: slot j picks the j-th true element of mask (flattened, n elements). Without size, the number
    of true elements is read back (a sync, as in torch). Compares every slot with every element: for modest sizes."""
    m = mask.flatten() if mask.ndim else mask.reshape(1)
    if m.dtype != dtypes.bool: raise TypeError(f"{op}: the mask must be bool, got {m.dtype}")
    if size is None: size = int(m.sum().item())
    if not isinstance(size, int) or size < 0: raise ArgumentError(f"{op}: size must be an int >= 0, got {size!r}")
    rank = m.cumsum() - 1  # among the true elements, the position of each
    slots = type(self).arange(size, dtype=rank.dtype, device=self.device).reshape(size, 1)
    return (rank.reshape(1, -1) == slots) & m.reshape(1, -1)
  def masked_select(self: Tensor, mask: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:
    """The elements where mask (broadcast to self's shape) is true, in order, as a 1-D tensor (torch.masked_select).
    With size, the result has exactly size elements (truncated, or padded with fill_value) and nothing is read back.

    `Tensor([1, 2, 3, 4]).masked_select(Tensor([True, False, True, False])).tolist()` is [1, 3]."""
    shape = broadcast_shape(self.shape, mask.shape, op="masked_select")
    x, m = self._broadcast_to(shape), mask._broadcast_to(shape)
    pick = x._select_slots(m, size, "masked_select")
    values = pick.where(x.flatten().reshape(1, -1) if x.ndim else x.reshape(1, 1), 0).sum(1, dtype=self.dtype)
    return pick.any(1).where(values, fill_value).cast(self.dtype)
  def nonzero(self: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:
    """The indices of the non-zero elements, one row (of ndim coordinates) each, in order: shape (count, ndim), int32
    (torch.nonzero). With size, exactly size rows (truncated, or padded with fill_value) and nothing is read back.

    `Tensor([[0, 1], [2, 0]]).nonzero().tolist()` is [[0, 1], [1, 0]]."""
    pick = self._select_slots(self != 0, size, "nonzero")
    flat = pick.where(type(self).arange(max(self.numel(), 1), device=self.device).reshape(1, -1), 0).sum(1)
    coords: list[Tensor] = []
    stride = 1
    for n in reversed(self.shape):
      coords.insert(0, (flat // stride) % n)
      stride *= n
    rows = type(self).stack(*coords, dim=1) if coords else flat.reshape(-1, 1)[:, :0]
    return pick.any(1).reshape(-1, 1).where(rows, fill_value).cast(dtypes.int32)

  # *** losses ***
  def _class_targets(self: Tensor, Y: Tensor, axis: int, weight: Tensor | None, ignore_index: int | None,
                     op: str) -> tuple[Tensor, Tensor, Tensor]:
    """For integer targets Y (self's shape without the class axis): the one-hot mask along axis, the class weights
    laid along axis, and each target's weight (0 where Y == ignore_index)."""
    n_cls = self.shape[axis]
    if not dtypes.is_int(Y.dtype):
      raise DTypeError(f"{op}: class-index targets must be integers, got {Y.dtype} (shape {Y.shape}; probabilities "
                       f"need the input's shape {self.shape})")
    if Y.shape != self.shape[:axis] + self.shape[axis + 1:]:
      raise ShapeError(f"{op}: targets {Y.shape} don't fit input {self.shape} (classes on axis {axis})")
    if weight is not None and weight.shape != (n_cls,):
      raise ShapeError(f"{op}: weight {weight.shape} should be ({n_cls},)")
    along = (n_cls,) + (1,) * (self.ndim - axis - 1)
    hot = Y.unsqueeze(axis) == type(self).arange(n_cls, device=self.device, dtype=Y.dtype).reshape(along)
    w = (weight if weight is not None else type(self).ones(n_cls, device=self.device)).cast(self.dtype).reshape(along)
    w_y = hot.where(w, 0).sum(axis)
    if ignore_index is not None: w_y = (Y != ignore_index).where(w_y, 0)
    return hot, w, check_indices(w_y, Y, n_cls, op, negative=False, ignore=ignore_index, what="target")

  def nll_loss(self: Tensor, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None,
               reduction: str = "mean") -> Tensor:
    """Negative log likelihood of log-probabilities x (classes on axis 1, or 0 for a 1-D x) at integer targets Y, as
    torch.nn.functional.nll_loss: 'mean' divides by the summed weights of the targets that count."""
    axis = 1 if self.ndim > 1 else 0
    hot, w, w_y = self._class_targets(Y, axis, weight, ignore_index, "nll_loss")
    loss = -hot.where(self, 0).sum(axis) * w_y
    return loss.sum() / w_y.sum() if reduction == "mean" else _reduction(loss, reduction, "nll_loss")

  def cross_entropy(self: Tensor, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0,
                    weight: Tensor | None = None, ignore_index: int = -100) -> Tensor:
    """Cross entropy of logits x (classes on axis 1, or 0 for a 1-D x) against class indices or class probabilities
    Y, as torch.nn.functional.cross_entropy (label smoothing mixes in the uniform distribution).

    `Tensor([[0.0, 0.0]]).cross_entropy(Tensor([1])).item()` is log(2)."""
    if not 0.0 <= label_smoothing <= 1.0:
      raise ArgumentError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    axis = 1 if self.ndim > 1 else 0
    logp, n_cls = self.log_softmax(axis), self.shape[axis]
    if Y.shape == self.shape and not dtypes.is_int(Y.dtype):  # class probabilities
      w = weight.cast(self.dtype).reshape((n_cls,) + (1,) * (self.ndim - axis - 1)) if weight is not None else 1.0
      target = Y * (1 - label_smoothing) + label_smoothing / n_cls
      return _reduction(-(logp * target * w).sum(axis), reduction, "cross_entropy")
    hot, w, w_y = logp._class_targets(Y, axis, weight, ignore_index, "cross_entropy")
    loss = -hot.where(logp, 0).sum(axis) * w_y
    if label_smoothing > 0:  # plus eps/C times the weighted log-probabilities of every class
      smooth = -(logp * w).sum(axis) * (Y != ignore_index)
      loss = (1 - label_smoothing) * loss + (label_smoothing / n_cls) * smooth
    return loss.sum() / w_y.sum() if reduction == "mean" else _reduction(loss, reduction, "cross_entropy")

  def sparse_categorical_crossentropy(self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                      reduction: str = "mean") -> Tensor:
    """Cross entropy of logits x (classes on the last axis) against integer labels Y; labels equal to ignore_index
    count neither in the loss nor in the mean."""
    x = self.reshape(-1, self.shape[-1]) if self.ndim != 2 else self
    if Y.shape != self.shape[:-1]:
      raise ShapeError(f"sparse_categorical_crossentropy: labels {Y.shape} don't fit logits {self.shape}")
    loss = x.cross_entropy(Y.reshape(-1), reduction, label_smoothing, None, ignore_index)
    return loss.reshape(Y.shape) if reduction == "none" else loss

  def binary_crossentropy(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:
    """-(y log x + (1 - y) log(1 - x)) for probabilities x, the logs clamped at -100 as in torch."""
    if Y.shape != self.shape: raise ShapeError(f"binary_crossentropy: target {Y.shape} and input {self.shape} differ")
    loss = -(Y * self.log().clip(-100) + (1 - Y) * (1 - self).log().clip(-100))
    return _reduction(loss, reduction, "binary_crossentropy")

  def binary_crossentropy_logits(self: Tensor, Y: Tensor, reduction: str = "mean",
                                 pos_weight: Tensor | None = None) -> Tensor:
    """Binary cross entropy of sigmoid(x) against y, computed from the logits without overflow
    (torch.nn.functional.binary_cross_entropy_with_logits); pos_weight scales the positive term."""
    log_weight = 1 + (pos_weight - 1) * Y if pos_weight is not None else 1
    loss = (1 - Y) * self + log_weight * (-self).softplus()
    return _reduction(loss, reduction, "binary_crossentropy_logits")

  # *** attention ***
  def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                   dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False,
                                   scale: float | None = None) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v for q = x (..., L, E), k (..., S, E), v (..., S, Ev), as
    torch.nn.functional.scaled_dot_product_attention: a bool mask keeps where true, a float mask is added;
    is_causal keeps the lower triangle; a row with nothing kept gives 0. Dropout (of the weights) applies in training
    only, as Tensor.dropout."""
    if min(self.ndim, key.ndim, value.ndim) < 2 or key.shape[-1] != self.shape[-1] or key.shape[-2] != value.shape[-2]:
      raise ShapeError(f"scaled_dot_product_attention: query {self.shape}, key {key.shape}, value {value.shape} "
                       "don't fit")
    if enable_gqa and key.ndim >= 3 and key.shape[-3] != self.shape[-3]:
      if self.shape[-3] % key.shape[-3]: raise ShapeError(f"scaled_dot_product_attention: {self.shape[-3]} query heads "
                                                          f"are not a multiple of {key.shape[-3]} key heads")
      key = key.repeat_interleave(self.shape[-3] // key.shape[-3], dim=-3)
      value = value.repeat_interleave(self.shape[-3] // value.shape[-3], dim=-3)
    qk = self.matmul(key.transpose(-2, -1)) * (scale if scale is not None else 1 / math.sqrt(self.shape[-1]))
    if is_causal:
      if attn_mask is not None:
        raise ArgumentError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
      attn_mask = type(self).ones(*qk.shape[-2:], dtype=dtypes.bool, device=self.device).tril()
    if attn_mask is not None:
      qk = attn_mask.where(qk, -math.inf) if attn_mask.dtype == dtypes.bool else qk + attn_mask
    # softmax, except that a row masked out entirely gets weights 0 (not nan), as torch
    top = qk.max(-1, keepdim=True).detach()
    e = (qk - (top == -math.inf).where(0, top)).exp()
    total = e.sum(-1, keepdim=True)
    weights = e / (total == 0).where(1, total)
    return weights.dropout(dropout_p).matmul(value)

  # *** resampling ***
  def interpolate(self: Tensor, size: Ints | None = None, mode: str = "linear", align_corners: bool = False,
                  scale_factor: float | tuple[float, ...] | None = None) -> Tensor:
    """Resize the last len(size) axes, as torch.nn.functional.interpolate on (batch, channels, *spatial) inputs:
    mode 'linear' (also 'bilinear', 'trilinear'), 'nearest' or 'nearest-exact'. An int size or a scale_factor
    applies to every axis after the first two.

    `Tensor([[[1.0, 3.0]]]).interpolate((4,)).tolist()` is [[[1.0, 1.5, 2.5, 3.0]]]."""
    mode = "linear" if mode in ("bilinear", "trilinear") else mode
    if mode not in ("linear", "nearest", "nearest-exact"):
      raise UnsupportedError(f"interpolate: mode must be 'linear', 'bilinear', 'trilinear', 'nearest' or "
                             f"'nearest-exact', not {mode!r}")
    if align_corners and mode != "linear":
      raise ArgumentError("interpolate: align_corners only goes with mode 'linear'")
    sizes, scales = _resize_plan(self.shape, size, scale_factor)
    x = self if dtypes.is_float(self.dtype) or mode != "linear" else self.cast(dtypes.default_float)
    for axis, o, scale in zip(range(self.ndim - len(sizes), self.ndim), sizes, scales):
      i = x.shape[axis]
      dst = type(self).arange(o, device=self.device, dtype=dtypes.float32)
      along = [o if a == axis else 1 for a in range(x.ndim)]
      out_shape = tuple(o if a == axis else s for a, s in enumerate(x.shape))
      def at(idx: Tensor) -> Tensor: return x.gather(axis, idx.reshape(along).expand(out_shape))
      if mode == "linear":
        if align_corners: src = dst * ((i - 1) / (o - 1)) if o > 1 else dst * 0
        else: src = ((dst + 0.5) * scale - 0.5).maximum(0)
        low = src.floor().cast(dtypes.int32).minimum(i - 1)
        frac = (src - low.cast(dtypes.float32)).clip(0, 1).reshape(along).cast(x.dtype)
        x = at(low).lerp(at((low + 1).minimum(i - 1)), frac)
      else:
        src = dst * scale if mode == "nearest" else (dst + 0.5) * scale
        x = at(src.floor().cast(dtypes.int32).minimum(i - 1))
    return x

  # *** einsum ***
  @classmethod
  def einsum(cls: type[Tensor], formula: str, *operands: Any, dtype: DType | None = None) -> Tensor:
    """Sum of products over the letters of formula (torch.einsum): 'ij,jk->ik' is a matmul, 'ii->i' a diagonal,
    'bij,bjk' (implicit output: the letters seen once, sorted) a batched matmul; '...' stands for broadcast axes."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)): operands = tuple(operands[0])
    ops: list[Tensor] = [t if isinstance(t, cls) else cls(t) for t in operands]
    lhs, arrow, rhs = formula.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ops): raise ArgumentError(f"einsum: {formula!r} has {len(terms)} operands, got {len(ops)}")
    n_ell = max([t.ndim - len(term) + 3 for term, t in zip(terms, ops) if "..." in term], default=0)
    ell = [chr(0x100 + i) for i in range(n_ell)]  # placeholder letters for the broadcast axes
    letters = [_einsum_term(term, t, ell, formula) for term, t in zip(terms, ops)]
    if arrow: out = list(_einsum_term(rhs, None, ell, formula))
    else:
      seen = [c for term in letters for c in term if c not in ell]
      out = ell + sorted(c for c in set(seen) if seen.count(c) == 1)
    if len(set(out)) != len(out) or any(not any(c in term for term in letters) for c in out):
      raise ArgumentError(f"einsum: output of {formula!r} repeats a letter or has one no operand has")
    sizes: dict[str, int] = {}
    for i, t in enumerate(ops):
      ops[i], letters[i] = _einsum_diagonals(t, letters[i], formula)
      for c, s in zip(letters[i], ops[i].shape):
        if sizes.get(c, 1) != 1 and s != 1 and sizes[c] != s:
          raise ShapeError(f"einsum: letter {c!r} of {formula!r} has sizes {sizes[c]} and {s} "
                           f"(shapes {[t.shape for t in operands]})")
        sizes[c] = max(sizes.get(c, 1), s)
    order = out + sorted(set(sizes) - set(out))
    aligned = []
    for t, term in zip(ops, letters):  # every operand over all the letters, in order (size 1 where it lacks one)
      present = [c for c in order if c in term]
      t = t.permute([term.index(c) for c in present])
      size_of = dict(zip(present, t.shape))
      aligned.append(t.reshape([size_of.get(c, 1) for c in order]))
    prod_all = aligned[0]
    for t in aligned[1:]: prod_all = prod_all * t
    prod_all = prod_all.expand([sizes[c] for c in order])
    if len(order) == len(out): return prod_all if dtype is None else prod_all.cast(dtype)
    return prod_all.sum(tuple(range(len(out), len(order))), dtype=dtype)

  # *** sorting ***
  def _rank(self: Tensor, descending: bool) -> Tensor:
    """For x (..., n): each element's position in the sorted order (stable: ties keep their order; nan sorts as the
    largest value, as in torch), by counting the elements that go before it."""
    n = self.shape[-1]
    a, b = self.unsqueeze(-1), self.unsqueeze(-2)  # a: the element i, b: every other element j
    if descending: before = b > a
    else: before = b < a
    if dtypes.is_float(self.dtype):
      a_nan, b_nan = a.isnan(), b.isnan()
      before = (before | (b_nan & a_nan.logical_not())) if descending else (before | (a_nan & b_nan.logical_not()))
      same = (a == b) | (a_nan & b_nan)
    else: same = a == b
    pos = type(self).arange(n, device=self.device, dtype=dtypes.int32)
    earlier = pos.reshape(1, n) < pos.reshape(n, 1)  # j < i
    return (before | (same & earlier)).sum(-1, dtype=dtypes.int32)

  def _sorted_top(self: Tensor, k: int, dim: int, descending: bool, op: str) -> tuple[Tensor, Tensor]:
    """The first k elements along dim in sorted order, and their indices."""
    if self.ndim == 0: return self, type(self).zeros((), dtype=dtypes.int32, device=self.device)
    d = _resolve_axis(dim, self.ndim, op)
    x = self.transpose(d, -1)
    n = x.shape[-1]
    if not 0 <= k <= n: raise ShapeError(f"{op}: k={k} is out of range for dim {d} of size {n} (shape {self.shape})")
    rank = x._rank(descending)
    # out[r] = the element whose rank is r: a one-hot sum over the elements
    slots = type(self).arange(k, device=self.device, dtype=dtypes.int32).reshape(k, 1)
    slot = rank.unsqueeze(-2) == slots  # (..., k, n)
    if x.dtype == dtypes.bool: values = slot.where(x.unsqueeze(-2), False).any(-1)
    else: values = slot.where(x.unsqueeze(-2), 0).sum(-1, dtype=x.dtype)
    idx = slot.where(type(self).arange(n, device=self.device, dtype=dtypes.int32), 0).sum(-1, dtype=dtypes.int32)
    return values.transpose(d, -1), idx.transpose(d, -1)

  def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    """(values, indices) sorted along dim; ties keep their order, nan sorts last (first when descending).
    It compares every pair along dim: for modest sizes.

    `Tensor([3, 1, 2]).sort()[0].tolist()` is [1, 2, 3]."""
    n = self.shape[_resolve_axis(dim, self.ndim, "sort")] if self.ndim else 1
    return self._sorted_top(n, dim, descending, "sort")

  def argsort(self: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
    """The indices that sort x along dim."""
    return self.sort(dim, descending)[1]

  def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True, *,
           sorted: bool | None = None) -> tuple[Tensor, Tensor]:
    """(values, indices) of the k largest (or smallest) elements along dim, always in sorted order (which sorted_,
    tinygrad's name, or sorted, torch's, allows).

    `Tensor([1, 5, 3]).topk(2)[1].tolist()` is [1, 2]."""
    return self._sorted_top(k, dim, largest, "topk")

def _resize_plan(shape: tuple[int, ...], size: Ints | None, scale_factor: float | tuple[float, ...] | None,
                 ) -> tuple[tuple[int, ...], tuple[float, ...]]:
  """interpolate's output size per resized axis and the input step per output step (in/out, or 1/scale_factor as
  torch uses when a scale factor is given)."""
  if (size is None) == (scale_factor is None):
    raise ShapeError("interpolate: give exactly one of size and scale_factor")
  n_spatial = max(len(shape) - 2, 1)
  if size is not None:
    sizes = (size,) * n_spatial if isinstance(size, int) else tuple(size)
    if not 0 < len(sizes) <= len(shape) or any(not isinstance(o, int) or o <= 0 for o in sizes):
      raise ShapeError(f"interpolate: size {size} must be positive ints for at most {len(shape)} axes of {shape}")
    return sizes, tuple(i / o for i, o in zip(shape[len(shape) - len(sizes):], sizes))
  factors = (scale_factor,) * n_spatial if isinstance(scale_factor, (int, float)) else tuple(scale_factor or ())
  if not 0 < len(factors) <= len(shape) or any(f <= 0 for f in factors):
    raise ShapeError(f"interpolate: scale_factor {scale_factor} must be positive, for at most {len(shape)} axes")
  sizes = tuple(math.floor(i * f) for i, f in zip(shape[len(shape) - len(factors):], factors))
  if any(o <= 0 for o in sizes):
    raise ShapeError(f"interpolate: scale_factor {scale_factor} leaves no output of {shape}")
  return sizes, tuple(1 / f for f in factors)

def _einsum_term(term: str, t: Tensor | None, ell: list[str], formula: str) -> str:
  """The letters of one einsum term with '...' spelled out as placeholder letters (right-aligned for an operand)."""
  if term.count("...") > 1 or "." in term.replace("...", ""):
    raise ArgumentError(f"einsum: bad term {term!r} in {formula!r}")
  plain = term.replace("...", "")
  if any(not c.isalpha() for c in plain):
    raise ArgumentError(f"einsum: subscripts must be letters, got {term!r} in {formula!r}")
  if t is None: return term.replace("...", "".join(ell))
  n_here = t.ndim - len(plain)
  if ("..." in term and n_here < 0) or ("..." not in term and n_here != 0):
    raise ShapeError(f"einsum: term {term!r} of {formula!r} doesn't fit an operand of shape {t.shape}")
  return term.replace("...", "".join(ell[len(ell) - n_here:])) if "..." in term else term

def _einsum_diagonals(t: Tensor, term: str, formula: str) -> tuple[Tensor, str]:
  """t with every repeated letter reduced to its diagonal (a view: flatten the pair, step n+1)."""
  while len(set(term)) != len(term):
    c = next(c for c in term if term.count(c) > 1)
    p, q = term.index(c), term.index(c, term.index(c) + 1)
    n = t.shape[p]
    if t.shape[q] != n: raise ShapeError(f"einsum: repeated letter {c!r} of {formula!r} has sizes {n} and {t.shape[q]}")
    rest = [i for i in range(t.ndim) if i not in (p, q)]
    t = t.permute(*rest, p, q).reshape(*[t.shape[i] for i in rest], n * n)
    t = t.pad(((0, 0),) * len(rest) + ((0, n),)).reshape(*[t.shape[i] for i in range(len(rest))], n, n + 1)
    t = t.shrink(tuple(None for _ in rest) + (None, (0, 1))).reshape(*t.shape[:-1])
    term = "".join(term[i] for i in rest) + c
  return t, term
