"""Tensor indexing: ints, slices with any step, None, Ellipsis, integer tensors and bound Variables (see
docs/developer/tensor.md, "Indexing at a Variable" and "Numerics")."""
from __future__ import annotations
import weakref
from typing import TYPE_CHECKING, Any, Sequence
from fusegrad.dtype import dtypes
from fusegrad.helpers import CHECK_INDEX, prod
from fusegrad.engine.realize import add_index_check, IndexCheck
from fusegrad.engine import state
from fusegrad.mixin.elementwise import broadcast_shape, ShapeIndexError
from fusegrad.uop.ops import UOp, Ops, SymInt, sym_infer
from fusegrad.uop.symbolic import simplify

if TYPE_CHECKING: from fusegrad.tensor import Tensor

def check_indices(result: Tensor, idx: Tensor, size: int, op: str, negative: bool = True,
                  ignore: int | None = None, what: str = "index", error: type[Exception] = IndexError) -> Tensor:
  """result, with a check that every idx is in [-size, size) ([0, size) if not negative; ignore is skipped): realizing
  anything computed from result also computes the largest bad index and raises error (IndexError) if there is one.
  CHECK_INDEX=0 turns it off (bad indices read 0)."""
  if not CHECK_INDEX or idx.numel() == 0: return result
  i, lo = idx.detach().cast(dtypes.int64), -size if negative else 0
  bad = (i < lo) | (i >= size)
  if ignore is not None: bad = bad & (i != ignore)
  check = IndexCheck(bad.where(i, dtypes.min(dtypes.int64)).max().uop, op, size, what, error)
  u = idx.uop.src[0] if idx.uop.op is Ops.RESHAPE else idx.uop
  # up to 4096 indices still on the host (Tensor(list), not used yet) checked now, as torch, with no kernel (40 ns each)
  if u.op is Ops.BUFFER and u.arg._pending is not None and u.arg.size <= 4096 and dtypes.is_int(u.dtype) \
      and not state.STATE.capturing:
    if not lo <= min(vals := memoryview(u.arg._pending).cast(u.dtype.fmt)) or max(vals) >= size:
      check.raise_if_set(max((v for v in vals if not lo <= v < size and v != ignore), default=-2 ** 63))
  else: add_index_check(result.uop, check)
  return result

def _stride(x: Tensor, axis: int, step: int) -> Tensor:
  """Every step-th element along axis (the axis already starts at the first one wanted)."""
  n = x.shape[axis]
  count = (n + step - 1) // step
  if step == 1 or n <= 1: return x
  pad = tuple((0, count * step - n) if i == axis else (0, 0) for i in range(x.ndim))
  x = x._view(x.uop.pad(pad)).reshape(x.shape[:axis] + (count, step) + x.shape[axis + 1:])  # a view: see Tensor.assign
  x = x.shrink(tuple((0, 1) if i == axis + 1 else None for i in range(x.ndim)))
  return x.reshape(x.shape[:axis] + (count,) + x.shape[axis + 2:])

def _check_index(t: Tensor, i: Any) -> Any:
  """One index, checked: lists and numpy arrays become Tensors on t's device, numpy integers become ints."""
  is_numpy = type(i).__module__ == "numpy" and hasattr(i, "shape")
  if is_numpy and i.shape == () and i.dtype.kind in "iu": i = int(i)
  elif isinstance(i, (list, tuple)) or is_numpy:  # an empty list indexes nothing, as torch's and numpy's
    i = type(t)(i, device=t.device, dtype=dtypes.int32 if isinstance(i, (list, tuple)) and not len(i) else None)
  if isinstance(i, type(t)):
    if i.device != t.device: i = i.to(t.device)  # as torch, an index may come from another device
    if i.dtype == dtypes.bool:
      raise IndexError("indexing with a boolean mask is not supported (the result size depends on the data)")
    if not dtypes.is_int(i.dtype): raise IndexError(f"tensors used as indices must be integers, got {i.dtype}")
  elif isinstance(i, bool) or not (i is None or i is Ellipsis or isinstance(i, (int, slice, UOp))):
    raise IndexError(f"unsupported index {i!r} ({type(i).__name__})")
  return i

def getitem(t: Tensor, indices: Any) -> Tensor:
  """t[indices]: basic indexing as views, then advanced indexing for the tensor indices (see the module doc). Slices
  alone, one at a Variable position (`cache[v:v+1, :]`), make a window that assign() writes through, as shrink's."""
  x, tensor_idx = basic_index(t, idx := as_tuple(t, indices))
  if tensor_idx: return _advanced(x, tensor_idx)
  if any(isinstance(i, UOp) for i in idx): windows[x.uop] = None  # x[v]: a copy, which assign() must refuse
  if all(isinstance(i, slice) and i.step is None for i in idx) and \
     any(_is_symbolic(i) and not _var_length(i) for i in idx):
    windows[x.uop] = (t.uop, tuple((0 if i.start is None else i.start, n if i.stop is None else i.stop)
                                   if _is_symbolic(i) else i.indices(n)[:2] for i, n in zip(idx, t.shape)) +
                      tuple((0, n) for n in t.shape[len(idx):]))
  return x

def as_tuple(t: Tensor, idx: Any) -> tuple:
  """The index as a tuple; a list of lists, slices, Tensors... is one (x[[rows, cols]]: x[rows, cols], as torch's)."""
  if type(idx) is list and any(isinstance(i, (list, tuple, slice, type(t), type(None), type(...))) for i in idx):
    return tuple(idx)
  return idx if isinstance(idx, tuple) else (idx,)

def basic_index(t: Tensor, indices: Any) -> tuple[Tensor, list[tuple[int, Tensor]]]:
  """t with the ints, slices, None and ... of indices applied (a view), and the tensor indices left, with their axes."""
  idx_list: list[Any] = [_check_index(t, i) for i in as_tuple(t, indices)]
  consuming = [i for i in idx_list if i is not None and i is not Ellipsis]
  ellipses = [k for k, i in enumerate(idx_list) if i is Ellipsis]  # by identity: == on a Tensor is elementwise
  if len(ellipses) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
  if len(consuming) > t.ndim: raise IndexError(f"index: too many indices for tensor of shape {t.shape}")
  e = ellipses[0] if ellipses else len(idx_list)  # the axes not indexed: full slices at the ellipsis, else at the end
  idx_list = idx_list[:e] + [slice(None)] * (t.ndim - len(consuming)) + idx_list[e + 1:]

  # ints always select (as torch: x[1, :, idx] indexes a tensor with the first axis gone), so only tensors are advanced
  x, axis = t, 0
  squeeze: list[int] = []
  tensor_idx: list[tuple[int, Tensor]] = []  # (axis of x after basic indexing, index tensor)
  for i in idx_list:
    if i is None: x = x.reshape(x.shape[:axis] + (1,) + x.shape[axis:])
    elif isinstance(i, int):
      size = x.shape[axis]
      if not -size <= i < size: raise IndexError(f"index {i} is out of bounds for dimension {axis} with size {size}")
      x = x.shrink(tuple((i % size, i % size + 1) if a == axis else None for a in range(x.ndim)))
      squeeze.append(axis)
    elif _var_length(i):  # x[:v]: a view, its length from a Variable (a SymInt)
      state.STATE.value_shapes += 1
      if not 0 <= (b := i.start or 0) <= (e := SymInt(i.stop, _value(i.stop))) <= x.shape[axis]:
        raise IndexError(f"slice {_show(i)} is [{b}, {e}) outside dimension {axis} with size {x.shape[axis]}")
      if (cap := state.STATE.capturing) is not None: cap.bounds.append((b, e, x.shape[axis], _show(i)))  # (replays)
      x = x.shrink(tuple((b, e) if a == axis else None for a in range(x.ndim)))
    elif isinstance(i, UOp) or (isinstance(i, slice) and _is_symbolic(i)):
      idx, check = _symbolic_index(x, axis, i)
      x = _advanced(x, [(axis, idx)], check=check)
      if isinstance(i, UOp): continue  # the axis is gone
    elif isinstance(i, slice): x = _slice(x, axis, i)
    else: tensor_idx.append((axis, i))
    axis += 1
  if squeeze:
    x = x.reshape(tuple(s for a, s in enumerate(x.shape) if a not in squeeze))
    tensor_idx = [(a - sum(q < a for q in squeeze), i) for a, i in tensor_idx]
  return x, tensor_idx

def _slice(x: Tensor, axis: int, i: slice) -> Tensor:
  """x[..., start:stop:step, ...] on one axis, as views (a negative step flips first)."""
  size = x.shape[axis]
  start, stop, step = i.indices(size)
  if step < 0: x, start, stop, step = x.flip(axis), size - 1 - start, size - 1 - stop, -step  # walk the flip forward
  n = max(0, (stop - start + step - 1) // step)
  span = (start, start + (n - 1) * step + 1) if n else (0, 0)
  return _stride(x.shrink(tuple(span if a == axis else None for a in range(x.ndim))), axis, step)

# windows at a Variable position cut by shrink: the window's node -> (the node it was cut from, the ranges), so that
# assign() writes through the window into that tensor's buffer, as it does through a plain shrink (a view)
windows: weakref.WeakKeyDictionary[UOp, tuple[UOp, tuple] | None] = weakref.WeakKeyDictionary()

def symbolic_shrink(x: Tensor, arg: Sequence[tuple[Any, Any] | None]) -> Tensor:
  """x.shrink(arg) where a start or end is a Variable expression: a gather, remembered in windows (by getitem)."""
  return x[tuple(slice(None) if a is None else slice(*a) for a in arg)]

def assign_window(target: Tensor, value: Tensor) -> bool:
  """Write value through target, a window of symbolic_shrink, into the buffer it was cut from (False: target is no
  such window). Every element of the buffer is written: value's inside the window, its own value elsewhere."""
  if (w := windows.get(target.uop)) is None:  # a view of a window, or x[v]: a write would reach no buffer
    node, parent = target.uop, target._view_of
    while node not in windows:
      if parent is None: return False
      node, parent = parent[1], parent[0]._view_of
    raise IndexError("assign: x[v] or a view of a window at a Variable v doesn't reach x: assign to x[v:v+1] itself")
  if state.view_base(w[0]).op not in (Ops.BUFFER, Ops.ASSIGN, Ops.MULTI): return False
  source, ranges = type(target)(w[0]), w[1]
  inside: Tensor | None = None
  for axis, (begin, end) in enumerate(ranges):
    size = source.shape[axis]
    if not isinstance(begin, UOp) and (begin, end) == (0, size): continue
    rel = type(target).arange(size, device=source.device) - _position(source, begin)  # position in the window
    ok = (rel >= 0) & (rel < target.shape[axis])
    value = _advanced(value, [(axis, ok.where(rel, 0))], check=False)  # value[position - begin] along this axis
    ok = ok.reshape(*[size if a == axis else 1 for a in range(source.ndim)])
    inside = ok if inside is None else inside & ok
  source.assign(value if inside is None else inside.where(value, source))
  target.uop = symbolic_shrink(source, ranges).uop  # the window now reads the written buffer
  return True

def _position(x: Tensor, i: UOp | int) -> Tensor | int:
  """An int, or a Variable expression as a 0-d int32 tensor on x's device."""
  return type(x)(i.cast(dtypes.int32)).to(x.device) if isinstance(i, UOp) else i

def _show(i: slice) -> str:
  """A slice as it is written: 'i:(i+4):'."""
  def part(x: Any) -> str: return "" if x is None else x.render() if isinstance(x, UOp) else str(x)
  return f"{part(i.start)}:{part(i.stop)}:{part(i.step)}"

def _is_symbolic(i: slice) -> bool: return isinstance(i.start, UOp) or isinstance(i.stop, UOp)
def _var_length(i: Any) -> bool:
  return isinstance(i, slice) and isinstance(i.stop, UOp) and i.step in (None, 1) and type(i.start or 0) is int and \
    simplify(i.stop - (i.start or 0)).op is not Ops.CONST

def _value(e: UOp | int) -> int:
  try: return sym_infer(e, {})
  except ValueError as err: raise IndexError(f"a Variable slice: {err}") from None

def _symbolic_index(x: Tensor, axis: int, i: UOp | slice) -> tuple[Tensor, bool]:
  """The positions a Variable index (0-d) or a slice between Variable expressions (1-d) picks on axis of x, as an int32
  tensor, and whether a realize must check them (a range that may leave the axis while the bound value is inside). A
  length from a value (x[v:2*v]) is the bound value's (x[:v] is a view: basic_index). docs/jit.md has both rules."""
  size, name = x.shape[axis], f"index {i.render()}" if isinstance(i, UOp) else f"slice {_show(i)}"
  start, stop, step = (i, i + 1, 1) if isinstance(i, UOp) else (i.start, i.stop, 1 if i.step is None else i.step)
  start, stop = 0 if start is None else start, size if stop is None else stop
  if not isinstance(step, int) or step < 1: raise IndexError(f"{name}: a Variable slice needs a positive int step")
  lo, hi = (start.vmin, start.vmax) if isinstance(start, UOp) else (start, start)
  if (n := simplify(UOp.const(dtypes.index, 0) + stop - start)).op is not Ops.CONST:  # (no replay: the values' range)
    n, lo = UOp.const(dtypes.index, _value(n)), _value(start)
    hi, state.STATE.value_shapes = lo, state.STATE.value_shapes + 1
  if (check := lo < 0 or hi + n.arg > size) and not 0 <= _value(start) <= size - n.arg:
    raise IndexError(f"{name} reaches [{lo}, {hi + n.arg}) outside dimension {axis} with size {size}")
  if isinstance(i, UOp): return type(x)(i.cast(dtypes.int32), device=x.device), check  # 0-d: the axis goes
  return type(x).arange(0, n.arg, step, device=x.device) + _position(x, start), check

SPLIT = 4096  # an indexed axis of 2**31 or more is indexed as (i // SPLIT, i % SPLIT): two short aranges to compare

def _split_long_axes(x: Tensor, tensor_idx: list[tuple[int, Tensor]]) -> tuple[Tensor, list[tuple[int, Tensor]]]:
  """Axes of 2**31 elements or more, indexed by tensors, reshaped into (blocks, SPLIT) and indexed by two tensors, so
  the index compares stay short (the address block*SPLIT + offset is computed in 64 bits by codegen)."""
  for k, (a, idx) in enumerate(tensor_idx):
    n = x.shape[a]
    if n < 2 ** 31: continue
    m = -(-n // SPLIT)
    x = x.pad(tuple((0, m * SPLIT - n) if b == a else (0, 0) for b in range(x.ndim)))
    x = x.reshape(x.shape[:a] + (m, SPLIT) + x.shape[a + 1:])
    idx = idx.cast(dtypes.int64)
    idx = (idx < 0).where(idx + n, idx)
    idx = (idx < n).where(idx, -1)  # past the end (into the padding): out of range, as below
    hi, lo = (idx < 0).where(-1, idx // SPLIT), (idx < 0).where(-1, idx % SPLIT)
    moved = [(b + 1 if b > a else b, i) for b, i in tensor_idx]  # the axes after a move up one
    return _split_long_axes(x, moved[:k] + [(a, hi), (a + 1, lo)] + moved[k + 1:])
  return x, tensor_idx

def _advanced(x: Tensor, tensor_idx: list[tuple[int, Tensor]], check: bool = True) -> Tensor:
  """x indexed by integer tensors on some axes (torch's rules place the new axes); check: add check_indices' checks."""
  checked = [(idx, x.shape[a]) for a, idx in tensor_idx]
  x, tensor_idx = _split_long_axes(x, tensor_idx)
  axes = [a for a, _ in tensor_idx]
  bshape = broadcast_shape(*(i.shape for _, i in tensor_idx), op="index", error=ShapeIndexError)
  rest = [a for a in range(x.ndim) if a not in axes]
  # one mask per indexed axis: (broadcast index shape) + (axis size,), true where the index hits
  mask: Tensor | None = None
  for a, idx in tensor_idx:
    n = x.shape[a]
    idx = idx._broadcast_to(bshape)
    if idx.dtype == dtypes.uint64: idx = idx.cast(dtypes.int64)  # room for negatives
    elif idx.dtype.itemsize < 4 or idx.dtype == dtypes.uint32: idx = idx.cast(dtypes.int32)
    idx = (idx < 0).where(idx + n, idx)
    hit = idx.reshape(*bshape, *[1] * len(axes)) == type(x).arange(n, device=x.device, dtype=idx.dtype).reshape(
      *[1] * len(bshape), *[n if b == a else 1 for b in axes])
    mask = hit if mask is None else mask & hit
  assert mask is not None
  for idx, n in checked if check else []: mask = check_indices(mask, idx, n, "getitem")  # backward reads it too
  nb, nr = len(bshape), len(rest)
  before, order = _layout(tensor_idx, rest, nb)
  xp = x.permute(rest + axes).reshape(*(x.shape[a] for a in rest), *[1] * nb, *(x.shape[a] for a in axes))
  xp = xp.permute(order + list(range(nr + nb, xp.ndim)))
  mask = mask.reshape(*[1] * before, *bshape, *[1] * (nr - before), *mask.shape[nb:])
  picked = mask.where(xp, type(x)(0, dtype=x.dtype, device=x.device))
  red = tuple(range(picked.ndim - len(axes), picked.ndim))
  return picked.sum(red, dtype=x.dtype) if x.dtype != dtypes.bool else picked.any(red)

def _layout(tensor_idx: list[tuple[int, Tensor]], rest: list[int], nb: int) -> tuple[int, list[int]]:
  """torch's rule for x[tensor indices]: the nb index axes replace the indexed ones if adjacent (0-d ones don't count),
  else go first. Returns how many other axes (rest) come before them, and the result's axes as a permutation of both."""
  nd_axes = [a for a, idx in tensor_idx if idx.ndim]
  adjacent = bool(nd_axes) and not any(min(nd_axes) < a < max(nd_axes) for a in rest)
  before, nr = sum(a < min(nd_axes) for a in rest) if adjacent else 0, len(rest)
  return before, list(range(before)) + list(range(nr, nr + nb)) + list(range(before, nr))

def setitem_value(x: Tensor, tensor_idx: list[tuple[int, Tensor]], v: Tensor) -> Tensor:
  """x with v written where the tensor indices point (for x[idx] = v; where an index repeats, the last write wins): the
  indexed axes flattened into one and scattered into, at every position of the other axes."""
  axes = [a for a, _ in tensor_idx]
  rest = [a for a in range(x.ndim) if a not in axes]
  bshape = broadcast_shape(*(i.shape for _, i in tensor_idx), op="setitem", error=ShapeIndexError)
  rest_shape, k = tuple(x.shape[a] for a in rest), prod(bshape)
  flat: Any = 0  # the position each index points at in the indexed axes, flattened
  for a, idx in tensor_idx:
    idx = idx.cast(dtypes.int32)._broadcast_to(bshape)
    flat = flat * x.shape[a] + (idx < 0).where(idx + x.shape[a], idx)
  order = _layout(tensor_idx, rest, len(bshape))[1]
  v = v.cast(x.dtype)._broadcast_to(tuple((rest_shape + bshape)[o] for o in order))
  v = v.permute([order.index(i) for i in range(len(order))]).reshape(*rest_shape, k)
  flat = flat.reshape(*[1] * len(rest), k).expand(*rest_shape, k)
  xr = x.permute(rest + axes).reshape(*rest_shape, prod(x.shape[a] for a in axes)).scatter(len(rest), flat, v)
  out = xr.reshape(*rest_shape, *(x.shape[a] for a in axes)).permute([(rest + axes).index(a) for a in range(x.ndim)])
  for a, idx in tensor_idx: out = check_indices(out, idx, x.shape[a], "setitem")
  return out
