"""Convolution and pooling, composed from Tensor methods: sliding windows are views (`_pool`), so a convolution is one
broadcast multiply and one sum. See docs/developer/tensor.md, "Numerics"."""
from __future__ import annotations
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import prod, flatten, make_tuple
from fusegrad.gradient import with_rule, compute_gradient
from fusegrad.mixin.elementwise import ArgumentError, ShapeError, _resolve_axis
from fusegrad.mixin.convgrad import ConvArgs, conv_rule, _channel_last, _dilate
from fusegrad.uop.ops import UOp

Ints = int | tuple[int, ...]  # one value for every spatial axis, or one per axis

if TYPE_CHECKING: from fusegrad.tensor import Tensor

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

def _first_max(windows: Tensor, m: Tensor, real: Tensor | None, k: tuple[int, ...]) -> Tensor:
  """True at each window's (last len(k) axes) first real element that holds its max m, or is a nan (m is nan)."""
  axes, kn, T = tuple(range(-len(k), 0)), prod(k), type(m)
  hit = (windows == m.reshape(*m.shape, *[1] * len(k))) | (windows != windows)
  if real is not None: hit = hit & real
  first = kn - (hit * T.arange(kn, 0, -1, device=m.device, dtype=dtypes.int32).reshape(k)).max(axes, keepdim=True)
  return (first == T.arange(kn, device=m.device, dtype=dtypes.int32).reshape(k)).detach()

def _pad_last(x: Tensor, pads: Sequence[tuple[int, int]], value: float = 0.0) -> Tensor:
  """x padded (or cut, for negative amounts) on its last len(pads) axes."""
  return x if all(p == (0, 0) for p in pads) else x.pad(((0, 0),) * (x.ndim - len(pads)) + tuple(pads), value=value)

class _PoolArgs(NamedTuple):
  """Pooling arguments per spatial axis; padded: pads plus the right padding ceil_mode adds (<= 0 otherwise)."""
  kernel: tuple[int, ...]
  stride: tuple[int, ...]
  dilation: tuple[int, ...]
  pads: list[tuple[int, int]]
  padded: list[tuple[int, int]]

class ConvMixin:
  __slots__ = ()
  # *** sliding windows ***
  def _pool(self: Tensor, k_: tuple[int, ...], stride: Ints = 1, dilation: Ints = 1, op: str = "pool") -> Tensor:
    """The windows of the last len(k_) axes as trailing axes: (..., i1, i2) -> (..., o1, o2, k1, k2), where
    out[..., a, b, p, q] = x[..., a*s1 + p*d1, b*s2 + q*d2]. Only views: no data moves."""
    n = len(k_)
    if self.ndim < n: raise ShapeError(f"{op}: kernel {k_} needs at least {n} axes, input has shape {self.shape}")
    s_, d_ = _tuple(stride, n, "stride", op), _tuple(dilation, n, "dilation", op)
    if any(v <= 0 for v in k_ + s_) or any(d < 0 for d in d_):  # (dilation 0: k copies of one element, as tinygrad's)
      raise ArgumentError(f"{op}: kernel {k_}, stride {s_} must be positive, dilation {d_} at least 0")
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
    argument names). `Tensor.arange(5).unfold(0, 2, 2).tolist()` is [[0, 1], [2, 3]]."""
    d = _resolve_axis(dim, self.ndim, "unfold")
    if self.ndim == 0: return self.reshape(1).unfold(d, size, step).reshape(size)  # (as torch: the window's axis alone)
    if size > self.shape[d]: raise ShapeError(f"unfold: size {size} is larger than dimension {d} of shape {self.shape}")
    if size < 0 or step <= 0: raise ArgumentError(f"unfold: size must be >= 0 and step > 0, got {size} and {step}")
    xt = self.transpose(d, -1)
    if size == 0:  # n // step + 1 empty windows (torch)
      windows = xt[..., :0].unsqueeze(-2).expand(*xt.shape[:-1], xt.shape[-1] // step + 1, 0)
    else: windows = xt._pool((size,), step, op="unfold")  # (..., o, size), dim d at the end before pooling
    return windows.transpose(d, -2) if d != self.ndim - 1 else windows

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
    if 0 in d_: raise ArgumentError(f"conv2d: dilation {d_} must be positive")  # (as torch; pooling takes 0: tinygrad)
    if padding == "valid": padding = 0
    elif padding == "same":
      if any(s != 1 for s in s_): raise ArgumentError("conv2d: padding='same' needs stride 1")
      padding = [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for d, k in zip(d_, k_)]
    pads = _resolve_pads(padding, n, "conv2d")
    # integer input, float weights (raw pixels): cast first, as the product would, so the gradient rule below applies;
    # once, into a buffer, not in every load of every output tile (gcc converts byte vectors lane by lane: 5x slower)
    if dtype is None and dtypes.is_float(weight.dtype) and not dtypes.is_float(self.dtype):
      self = self.cast(weight.dtype).contiguous()
    if weight.requires_grad and not type(self).no_grad and cin_g % 8 == 0 and (cout // groups) % 8 == 0:
      self = _channel_last(self)  # as the weight gradient reads it: stored so once, where it is computed, not copied
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
      ret = self._new(with_rule(ret.uop, (self.uop, weight.uop), rule), weight)  # requires grad as x and w do
    return ret if bias is None else ret + bias.reshape(1, cout, *[1] * n)

  def conv_transpose2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: Ints = 1,
                       dilation: Ints = 1, padding: Any = 0, output_padding: Ints = 0) -> Tensor:
    """N-d transposed convolution as torch.nn.functional.conv_transpose{1,2,3}d: x (batch, cin, *spatial), weight
    (cin, cout // groups, *kernel); zeros between inputs (stride), then a convolution with the flipped kernel."""
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
    x = _dilate(self, s_)  # s-1 zeros between neighbours: (.., i) -> (.., (i-1)*s+1)
    conv_pads = [(d * (k - 1) - b, d * (k - 1) - a + o) for (b, a), d, k, o in zip(pads, d_, k_, op_)]
    return x.conv2d(w, bias, groups=groups, dilation=d_, padding=conv_pads)

  def conv1d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: Ints = 1,
             dilation: Ints = 1, padding: Any = 0) -> Tensor:
    """1-d convolution: the same as conv2d with a (cout, cin // groups, k) weight."""
    return self.conv2d(weight, bias, groups, stride, dilation, padding)

  # *** pooling ***
  def _pool_setup(self: Tensor, kernel_size: Any, stride: Any, dilation: Any, padding: Any, ceil_mode: bool,
                  op: str) -> _PoolArgs:
    """(kernel, stride, dilation, padding per axis, and the padding with the extra right padding ceil_mode needs)."""
    k_ = make_tuple(kernel_size, 2)
    n = len(k_)
    s_ = k_ if stride is None or stride == () or stride == [] else _tuple(stride, n, "stride", op)
    d_, pads = _tuple(dilation, n, "dilation", op), _resolve_pads(padding, n, op)
    if any(v <= 0 for v in k_ + s_) or any(d < 0 for d in d_):  # (dilation 0: a strided sample, tinygrad's examples)
      raise ArgumentError(f"{op}: kernel {k_}, stride {s_} must be positive, dilation {d_} at least 0")
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
    return _PoolArgs(k_, s_, d_, pads, [(pb, pa + e) for (pb, pa), e in zip(pads, extra)])

  def max_pool2d(self: Tensor, kernel_size: Ints = (2, 2), stride: Ints | None = None, dilation: Ints = 1,
                 padding: Any = 0, ceil_mode: bool = False,
                 return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Max over windows of the last len(kernel_size) axes (2 for an int), as torch.nn.functional.max_pool{1,2,3}d;
    padding counts as -inf. With return_indices, also the flat index (int32) of each max within its input plane.
    `Tensor.arange(16).reshape(1, 1, 4, 4).max_pool2d().tolist()` is [[[[5, 7], [13, 15]]]]."""
    k_, s_, d_, _, all_pads = self._pool_setup(kernel_size, stride, dilation, padding, ceil_mode, "max_pool2d")
    low, T = dtypes.min(self.dtype), type(self)  # (padding counts as the lowest value)
    def windows(x: Tensor, pad: Any = low) -> Tensor:  # (each window along the last len(k_) axes)
      return _pad_last(x, all_pads, pad)._pool(k_, s_, d_)
    real = None  # (padding ties with a real -inf: it is never the first max)
    if any(map(any, all_pads)): real = windows(T.ones(self.shape, dtype=dtypes.bool, device=self.device), False).uop
    ret = windows(self).max(axes := tuple(range(-len(k_), 0)))
    def rule(g: UOp, n: UOp, x: UOp) -> tuple[UOp | None]:
      # all into each window's first max (torch's: not shared by ties), in a buffer of its own (a norm reads it often)
      w = windows(T._wrap(x))
      picked = _first_max(w, T._wrap(n), None if real is None else T._wrap(real), k_).where(w, 0).sum(axes)
      return (None if (gx := compute_gradient(picked.uop, g, {x}).get(x)) is None else gx.contiguous(),)
    if dtypes.is_float(ret.dtype): ret = self._new(with_rule(ret.uop, (self.uop,), rule))
    if not return_indices: return ret
    plane = self.shape[-len(k_):]  # the flat input-plane index of every window element
    pos = windows(T.arange(prod(plane), device=self.device, dtype=dtypes.int32).reshape(plane), -1)
    idx = _first_max(windows(self), ret, None if real is None else T._wrap(real), k_).where(pos, 0).sum(axes)
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
    out = tuple(output_size)[-n:] if output_size is not None else \
      tuple((i - 1) * s - pb - pa + d * (k - 1) + 1 for i, s, (pb, pa), d, k in zip(self.shape[-n:], s_, pads, d_, k_))
    # each output cell: the values whose index names it (overlapping windows can name a cell twice, with equal values)
    hit = indices.flatten(-n).unsqueeze(-1) == type(self).arange(prod(out), device=self.device, dtype=indices.dtype)
    total = hit.where(self.flatten(-n).unsqueeze(-1), 0).sum(-2, dtype=self.dtype)
    count = hit.sum(-2, dtype=dtypes.int32).maximum(1).cast(self.dtype)
    return (total / count).reshape(*self.shape[:-n], *out)

  def avg_pool2d(self: Tensor, kernel_size: Ints = (2, 2), stride: Ints | None = None, dilation: Ints = 1,
                 padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """Mean over windows of the last len(kernel_size) axes, as torch.nn.functional.avg_pool{1,2,3}d: with
    count_include_pad the padding counts in the divisor (but not the extra cells ceil_mode adds)."""
    k_, s_, d_, pads, all_pads = self._pool_setup(kernel_size, stride, dilation, padding, ceil_mode, "avg_pool2d")
    n = len(k_)
    x = self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
    total = _pad_last(x, all_pads)._pool(k_, s_, d_).sum(tuple(range(-n, 0)))
    # the divisor: cells of each window in [lo, hi) of the input (or input and padding), per axis (host-made: no kernel)
    spans = [(0, pb + i + pa) if count_include_pad else (pb, pb + i) for i, (pb, pa) in zip(self.shape[-n:], pads)]
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
