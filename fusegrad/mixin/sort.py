"""Sorting: sort, argsort and topk, built from comparisons of every pair (a rank per element)."""
from __future__ import annotations
from typing import TYPE_CHECKING
from fusegrad.dtype import dtypes
from fusegrad.mixin.elementwise import ShapeError, _resolve_axis

if TYPE_CHECKING: from fusegrad.tensor import Tensor

class SortMixin:
  __slots__ = ()
  def _rank(self: Tensor, descending: bool) -> Tensor:
    """For x (..., n): each element's position in the sorted order (stable: ties keep their order; nan sorts as the
    largest value, as in torch), by counting the elements that go before it."""
    n, a, b = self.shape[-1], self.unsqueeze(-1), self.unsqueeze(-2)  # a: the element i, b: every other element j
    before = b > a if descending else b < a
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
    x, n = self.transpose(d, -1), self.shape[d]
    if not 0 <= k <= n: raise ShapeError(f"{op}: k={k} is out of range for dim {d} of size {n} (shape {self.shape})")
    rank = x._rank(descending)
    # out[r] = the element whose rank is r: a one-hot sum over the elements (slot: (..., k, n))
    slot = rank.unsqueeze(-2) == type(self).arange(k, device=self.device, dtype=dtypes.int32).reshape(k, 1)
    if x.dtype == dtypes.bool: values = slot.where(x.unsqueeze(-2), False).any(-1)
    else: values = slot.where(x.unsqueeze(-2), 0).sum(-1, dtype=x.dtype)
    idx = slot.where(type(self).arange(n, device=self.device, dtype=dtypes.int32), 0).sum(-1, dtype=dtypes.int32)
    return values.transpose(d, -1), idx.transpose(d, -1)

  def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    """(values, indices) sorted along dim; ties keep their order, nan sorts last (first when descending).
    `Tensor([3, 1, 2]).sort()[0].tolist()` is [1, 2, 3]."""
    n = self.shape[_resolve_axis(dim, self.ndim, "sort")] if self.ndim else 1
    return self._sorted_top(n, dim, descending, "sort")

  def argsort(self: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
    """The indices that sort x along dim."""; return self.sort(dim, descending)[1]

  def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True, *,
           sorted: bool | None = None) -> tuple[Tensor, Tensor]:
    """(values, indices) of the k largest (or smallest) elements along dim, always sorted (sorted_, sorted ignored).
    `Tensor([1, 5, 3]).topk(2)[1].tolist()` is [1, 2]."""
    return self._sorted_top(k, dim, largest, "topk")
