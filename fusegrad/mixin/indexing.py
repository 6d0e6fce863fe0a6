"""Tensor indexing: ints, slices with any step, None, Ellipsis, and integer tensors (advanced indexing).

Basic indexing is a chain of views (shrink, flip, reshape). Advanced indexing compares each index with an arange and
sums the matches: codegen folds that sum back into one load per element at the indexed address, with a bounds check,
so an out-of-range index reads 0 instead of outside the buffer.
"""
from __future__ import annotations
from typing import TYPE_CHECKING, Any
from fusegrad.dtype import dtypes

if TYPE_CHECKING:
  from fusegrad.tensor import Tensor

def _stride(x: Tensor, axis: int, step: int) -> Tensor:
  """Every step-th element along axis (the axis already starts at the first one wanted)."""
  n = x.shape[axis]
  count = (n + step - 1) // step
  if step == 1 or n <= 1: return x
  pad = tuple((0, count * step - n) if i == axis else (0, 0) for i in range(x.ndim))
  x = x.pad(pad).reshape(x.shape[:axis] + (count, step) + x.shape[axis + 1:])
  return x.shrink(tuple((0, 1) if i == axis + 1 else None for i in range(x.ndim))).reshape(x.shape[:axis] + (count,) + x.shape[axis + 2:])

def getitem(t: Tensor, indices: Any) -> Tensor:
  from fusegrad.tensor import Tensor
  if not isinstance(indices, tuple): indices = (indices,)
  idx_list: list[Any] = []
  for i in indices:
    if isinstance(i, (list, tuple)) or type(i).__module__ == "numpy" and hasattr(i, "shape"): i = Tensor(i, device=t.device)
    if isinstance(i, Tensor) and i.dtype == dtypes.bool: raise IndexError("indexing with a boolean mask is not supported (the result size depends on the data)")
    if isinstance(i, Tensor) and not dtypes.is_int(i.dtype): raise IndexError(f"tensors used as indices must be integers, got {i.dtype}")
    if isinstance(i, bool) or not (i is None or i is Ellipsis or isinstance(i, (int, slice, Tensor))):
      raise IndexError(f"unsupported index {i!r} ({type(i).__name__})")
    idx_list.append(i)
  consuming = [i for i in idx_list if i is not None and i is not Ellipsis]
  ellipses = [k for k, i in enumerate(idx_list) if i is Ellipsis]  # by identity: == on a Tensor is elementwise
  if len(ellipses) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
  if len(consuming) > t.ndim: raise IndexError(f"too many indices for tensor of dimension {t.ndim}")
  if ellipses:
    e = ellipses[0]
    idx_list = idx_list[:e] + [slice(None)] * (t.ndim - len(consuming)) + idx_list[e + 1:]
  else: idx_list = idx_list + [slice(None)] * (t.ndim - len(consuming))

  # with tensor indices present, ints index like 0-d tensors (numpy's rule for where the new axes go)
  has_tensor = any(isinstance(i, Tensor) for i in idx_list)
  x, axis = t, 0
  squeeze: list[int] = []
  tensor_idx: list[tuple[int, Tensor]] = []  # (axis of x after basic indexing, index tensor)
  for i in idx_list:
    if i is None:
      x = x.reshape(x.shape[:axis] + (1,) + x.shape[axis:])
      axis += 1
      continue
    size = x.shape[axis]
    if isinstance(i, int):
      if not -size <= i < size: raise IndexError(f"index {i} is out of bounds for dimension {axis} with size {size}")
      i %= size
      if has_tensor: tensor_idx.append((axis, Tensor(i, device=t.device)))
      else:
        x = x.shrink(tuple((i, i + 1) if a == axis else None for a in range(x.ndim)))
        squeeze.append(axis)
    elif isinstance(i, slice):
      start, stop, step = i.indices(size)
      if step > 0:
        n = max(0, (stop - start + step - 1) // step)
        x = x.shrink(tuple((start, start + max((n - 1) * step + 1, 0)) if a == axis else None for a in range(x.ndim)))
      else:
        n = max(0, (start - stop - step - 1) // -step)
        x = x.flip(axis)
        first = size - 1 - start
        x = x.shrink(tuple((first, first + max((n - 1) * -step + 1, 0)) if a == axis and n else (0, 0) if a == axis else None
                           for a in range(x.ndim)))
      x = _stride(x, axis, abs(step))
    else: tensor_idx.append((axis, i))
    axis += 1
  if tensor_idx: return _advanced(x, tensor_idx)
  return x.reshape(tuple(s for a, s in enumerate(x.shape) if a not in squeeze)) if squeeze else x

def _advanced(x: Tensor, tensor_idx: list[tuple[int, Tensor]]) -> Tensor:
  """x indexed by integer tensors on some axes (torch's rules for where the new axes go)."""
  from fusegrad.tensor import Tensor, broadcast_shape
  axes = [a for a, _ in tensor_idx]
  bshape = broadcast_shape(*(i.shape for _, i in tensor_idx), op="index")
  rest = [a for a in range(x.ndim) if a not in axes]
  # one mask per indexed axis: (broadcast index shape) + (axis size,), true where the index hits
  mask: Tensor | None = None
  for a, idx in tensor_idx:
    n = x.shape[a]
    idx = idx._broadcast_to(bshape)
    idx = (idx < 0).where(idx + n, idx)
    hit = idx.reshape(*bshape, *[1] * len(axes)) == Tensor.arange(n, device=x.device, dtype=idx.dtype).reshape(
      *[1] * len(bshape), *[n if b == a else 1 for b in axes])
    mask = hit if mask is None else mask & hit
  assert mask is not None
  xp = x.permute(rest + axes)
  rest_shape = tuple(x.shape[a] for a in rest)
  xp = xp.reshape(*rest_shape, *[1] * len(bshape), *(x.shape[a] for a in axes))
  mask = mask.reshape(*[1] * len(rest), *mask.shape)
  picked = mask.where(xp, Tensor(0, dtype=x.dtype, device=x.device))
  red = tuple(range(picked.ndim - len(axes), picked.ndim))
  out = picked.sum(red, dtype=x.dtype) if x.dtype != dtypes.bool else picked.any(red)
  # torch: adjacent indexed axes keep their place, separated ones go first
  if axes == list(range(axes[0], axes[0] + len(axes))) and axes[0] > 0:
    first = axes[0]
    nb, nr = len(bshape), len(rest)
    before = [i for i in range(nr) if rest[i] < first]
    after = [i for i in range(nr) if rest[i] > first]
    out = out.permute(before + list(range(nr, nr + nb)) + after)
  else: out = out.permute(list(range(len(rest), len(rest) + len(bshape))) + list(range(len(rest))))
  return out
