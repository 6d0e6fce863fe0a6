"""Network ops composed from Tensor methods: normalization, dropout, attention, resampling (interpolate) and einsum."""
from __future__ import annotations
import functools, math, operator
from typing import TYPE_CHECKING, Any
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import prod, argfix, TRAINING
from fusegrad.mixin.elementwise import ArgumentError, ShapeError, UnsupportedError, _resolve_axis

Ints = int | tuple[int, ...]  # one value for every spatial axis, or one per axis

if TYPE_CHECKING: from fusegrad.tensor import Tensor

class NNMixin:
  __slots__ = ()
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
    # the mask in a buffer of its own (as tinygrad's): else each kernel of the backward computes its random bits again
    keep = (type(self).rand(*self.shape, device=self.device) >= p).contiguous()
    return keep.where(self * (1 / (1 - p)), 0).cast(self.dtype)

  # *** attention ***
  def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                   dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False,
                                   scale: float | None = None) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v for q = x (..., L, E), k (..., S, E), v (..., S, Ev), as
    torch.nn.functional.scaled_dot_product_attention: a bool mask keeps where true, a float mask is added; a row with
    nothing kept gives 0."""
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
    if attn_mask is not None: qk = attn_mask.where(qk, -math.inf) if attn_mask.dtype == dtypes.bool else qk + attn_mask
    # softmax, except that a row masked out entirely gets weights 0 (not nan), as torch
    top = qk.max(-1, keepdim=True).detach()
    e = (qk - (top == -math.inf).where(0, top)).exp()
    total = e.sum(-1, keepdim=True)
    return (e / (total == 0).where(1, total)).dropout(dropout_p).matmul(value)

  # *** resampling ***
  def interpolate(self: Tensor, size: Ints | None = None, mode: str = "linear", align_corners: bool = False,
                  scale_factor: float | tuple[float, ...] | None = None) -> Tensor:
    """Resize the last len(size) axes, as torch.nn.functional.interpolate on (batch, channels, *spatial) inputs:
    mode 'linear' (also 'bilinear', 'trilinear'), 'nearest' or 'nearest-exact'. An int size or a scale_factor
    applies to every axis after the first two. An integer tensor keeps its dtype (linear: rounded; uint8 as torch).
    `Tensor([[[1.0, 3.0]]]).interpolate((4,)).tolist()` is [[[1.0, 1.5, 2.5, 3.0]]]."""
    mode = "linear" if mode in ("bilinear", "trilinear") else mode
    if mode not in ("linear", "nearest", "nearest-exact"):
      raise UnsupportedError(f"interpolate: mode must be 'linear', 'bilinear', 'trilinear', 'nearest' or "
                             f"'nearest-exact', not {mode!r}")
    if align_corners and mode != "linear":
      raise ArgumentError("interpolate: align_corners only goes with mode 'linear'")
    sizes, scales = _resize_plan(self.shape, size, scale_factor)
    fixed = mode == "linear" and self.dtype == dtypes.uint8  # torch's uint8 rule: fixed point, axis by axis
    x = self if dtypes.is_float(self.dtype) or mode != "linear" or fixed else self.cast(dtypes.default_float)
    for axis, o, scale in reversed(list(zip(range(self.ndim - len(sizes), self.ndim), sizes, scales))):
      i = x.shape[axis]
      wide = mode == "linear" and x.dtype == dtypes.float64  # (float64 positions for float64 weights, as torch's)
      dst = type(self).arange(o, device=self.device, dtype=dtypes.float64 if wide else dtypes.float32)
      along = [o if a == axis else 1 for a in range(x.ndim)]
      out_shape = tuple(o if a == axis else s for a, s in enumerate(x.shape))
      def at(idx: Tensor) -> Tensor: return x.gather(axis, idx.reshape(along).expand(out_shape))
      if fixed: x = _uint8_linear(x, at, along, i, o, scale, align_corners)
      elif mode == "linear":
        if align_corners: src = dst * ((i - 1) / (o - 1)) if o > 1 else dst * 0
        else: src = ((dst + 0.5) * scale - 0.5).maximum(0)
        low = src.floor().cast(dtypes.int32).minimum(i - 1)
        frac = (src - low.cast(dst.dtype)).clip(0, 1).reshape(along).cast(x.dtype)
        x = at(low).lerp(at((low + 1).minimum(i - 1)), frac)
      else:
        src = dst * scale if mode == "nearest" else (dst + 0.5) * scale
        x = at(src.floor().cast(dtypes.int32).minimum(i - 1))
    if x.dtype == self.dtype: return x
    # an integer input stays integer, as torch's: rounded to nearest, clipped to the dtype's range
    return x.round().clip(dtypes.min(self.dtype), dtypes.max(self.dtype)).cast(self.dtype)

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
        sizes[c] = s if sizes.get(c, 1) == 1 else sizes[c]  # (a size 1 broadcasts; 0 is a size: an empty sum)
    order = out + sorted(set(sizes) - set(out))
    aligned = []
    for t, term in zip(ops, letters):  # every operand over all the letters, in order (size 1 where it lacks one)
      size_of = dict(zip(term, t.shape))
      aligned.append(t.permute([term.index(c) for c in order if c in term]).reshape([size_of.get(c, 1) for c in order]))
    prod_all = functools.reduce(operator.mul, aligned).expand([sizes[c] for c in order])
    if len(order) == len(out): return prod_all if dtype is None else prod_all.cast(dtype)
    return prod_all.sum(tuple(range(len(out), len(order))), dtype=dtype).cast(dtype or prod_all.dtype)  # (as torch)

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

def _uint8_linear(x: Tensor, at: Any, along: list[int], i: int, o: int, scale: float, align_corners: bool) -> Tensor:
  """One axis of x's uint8 linear resize as torch computes it (`at` gathers along it): two weights in fixed point of
  the most bits (up to 15) that keep them below 2**15, the sum rounded and clipped to uint8 before the next axis."""
  src = [d * (i - 1) / max(o - 1, 1) if align_corners else max((d + 0.5) * scale - 0.5, 0.0) for d in range(o)]
  low = [min(math.floor(s), i - 1) for s in src]
  frac = [min(max(s - lo, 0.0), 1.0) for s, lo in zip(src, low)]
  bits = 14 if any(int(max(f, 1 - f) * (1 << 15) + 0.5) >= 1 << 15 for f in frac) else 15
  def ints(v: list[int]) -> Tensor: return type(x)(v, device=x.device, dtype=dtypes.int32)
  w0, w1 = (ints([int(f * (1 << bits) + 0.5) for f in fs]).reshape(along) for fs in ([1 - f for f in frac], frac))
  total = at(ints(low)) * w0 + at(ints([min(v + 1, i - 1) for v in low])) * w1  # (uint8 * int32: int32)
  return ((total + (1 << (bits - 1))) // (1 << bits)).clip(0, 255).cast(dtypes.uint8)

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
  """t with every repeated letter reduced to its diagonal (Tensor.diagonal, a view), moved to the last axis."""
  while len(set(term)) != len(term):
    c = next(c for c in term if term.count(c) > 1)
    p, q = term.index(c), term.index(c, term.index(c) + 1)
    if t.shape[p] != t.shape[q]:
      raise ShapeError(f"einsum: repeated letter {c!r} of {formula!r} has sizes {t.shape[p]} and {t.shape[q]}")
    t, term = t.diagonal(0, p, q), "".join(term[i] for i in range(len(term)) if i not in (p, q)) + c
  return t, term
