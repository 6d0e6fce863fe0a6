"""One-hot, gather and scatter (an index compared with an arange, then a sum that codegen folds into loads), and
selections with a data-dependent length (masked_select, nonzero)."""
from __future__ import annotations
from typing import TYPE_CHECKING, Any
from fusegrad.dtype import dtypes
from fusegrad.helpers import prod
from fusegrad.mixin.elementwise import ArgumentError, ShapeError, DTypeError, _resolve_axis, broadcast_shape
from fusegrad.mixin.indexing import check_indices

if TYPE_CHECKING: from fusegrad.tensor import Tensor

class ClassIdError(IndexError, ArgumentError):
  """one_hot: a class id outside [0, num_classes): an IndexError as other out-of-range indices, and an ArgumentError."""

class GatherMixin:
  __slots__ = ()
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
    return mask.where(x, False).any(-1) if x.dtype == dtypes.bool else mask.where(x, 0).sum(-1, dtype=self.dtype)

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
    """(size, n) bool: slot j picks the j-th true element of mask (flattened, n elements); without size, the number
    of true elements is read back (a sync, as in torch)."""
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
    coords: list[Tensor] = []  # (last axis first: with a 0-size axis, its `% 0` raises before a `// 0`)
    for i in reversed(range(self.ndim)): coords.insert(0, (flat // prod(self.shape[i + 1:])) % self.shape[i])
    rows = type(self).stack(*coords, dim=1) if coords else flat.reshape(-1, 1)[:, :0]
    return pick.any(1).reshape(-1, 1).where(rows, fill_value).cast(dtypes.int32)
