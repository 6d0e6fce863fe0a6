"""Movement ops: views that move no data (reshape, permute, expand, pad, shrink, flip) and what is built from them
(cat, stack, repeat, split, roll, rearrange ...)."""
from __future__ import annotations
import itertools, re
from typing import TYPE_CHECKING, Any, Sequence, Union
from fusegrad.dtype import dtypes, least_upper_dtype
from fusegrad.helpers import prod, argfix, make_tuple, ceildiv
from fusegrad.uop.ops import UOp
from fusegrad.mixin.elementwise import ArgumentError, ShapeError, UnsupportedError, _resolve_axis, _fits
from fusegrad.mixin.indexing import symbolic_shrink
from fusegrad.engine import state

if TYPE_CHECKING: from fusegrad.tensor import Tensor

def _distinct_axes(axes: Sequence[int], ndim: int, op: str) -> list[int]:
  """axes resolved, each at most once (torch's RuntimeError, naming the repeated one, otherwise)."""
  ret = [_resolve_axis(a, ndim, op) for a in axes]
  if len(set(ret)) != len(ret): raise ArgumentError(f"{op}: dims {tuple(axes)} name an axis twice")
  return ret

PAD_MODES = ("constant", "reflect", "replicate", "circular")

# *** rearrange formulas (einops notation) ***
# one axis of a formula side: a name ("b", or "..." for an ellipsis) or a group of names (() for "()" or "1": unit)
_Axis = Union[str, tuple[str, ...]]

def _parse_side(formula: str, side: str, where: str) -> list[_Axis]:
  """The axes of one side of a rearrange formula: "b (h w) 1" -> ["b", ("h", "w"), ()]. A "1" inside parentheses
  is dropped ("(h 1)" is "h"). Raises ArgumentError for bad tokens, nested or unbalanced parentheses, duplicates."""
  axes: list[_Axis] = []
  group: list[str] | None = None
  for tok in re.findall(r"\.\.\.|[()]|[^\s()]+", side):
    if tok == "(":
      if group is not None: raise ArgumentError(f"rearrange {formula!r}: nested parentheses on the {where} side")
      group = []
    elif tok == ")":
      if group is None: raise ArgumentError(f"rearrange {formula!r}: unmatched ')' on the {where} side")
      axes.append(tuple(group))
      group = None
    elif tok == "1":
      if group is None: axes.append(())
    elif tok == "..." or tok.isidentifier():
      if group is None: axes.append(tok)
      else: group.append(tok)
    elif tok.isdigit():
      raise ArgumentError(f"rearrange {formula!r}: only 1 may be a number, got {tok} (name the axis and give its size)")
    else: raise ArgumentError(f"rearrange {formula!r}: {tok!r} is not a valid axis name")
  if group is not None: raise ArgumentError(f"rearrange {formula!r}: unmatched '(' on the {where} side")
  names = _names(axes)
  dups = sorted({n for n in names if names.count(n) > 1})
  if dups: raise ArgumentError(f"rearrange {formula!r}: duplicate axis name(s) {', '.join(dups)} on the {where} side")
  return axes

def _names(axes: list[_Axis]) -> list[str]:
  """Every axis name of a side, in order (the names in groups included)."""
  return [n for a in axes for n in ((a,) if isinstance(a, str) else a)]

def _expand_ellipsis(axes: list[_Axis], names: list[str]) -> list[tuple[str, ...]]:
  """The side with "..." replaced by `names` (bare: an axis each; in a group: all in it), every axis as a group."""
  out: list[tuple[str, ...]] = []
  for a in axes:
    if a == "...": out.extend((n,) for n in names)
    elif isinstance(a, str): out.append((a,))
    else: out.append(tuple(m for n in a for m in (names if n == "..." else [n])))
  return out

def _split_sizes(formula: str, left: list[tuple[str, ...]], shape: tuple[int, ...], sizes: dict[str, int]) \
    -> dict[str, int]:
  """The size of every name on the left side: given in `sizes`, or inferred from the axis it splits."""
  out: dict[str, int] = {}
  for group, dim in zip(left, shape):
    unknown, known = [n for n in group if n not in sizes], prod(sizes[n] for n in group if n in sizes)
    where = f"axis ({' '.join(group)}) of size {dim} (shape {shape})"
    if len(unknown) > 1: raise ArgumentError(f"rearrange {formula!r}: give the sizes of all but one of {where}")
    if unknown and (known == 0 or dim % known):
      raise ArgumentError(f"rearrange {formula!r}: {where} can't be split by the given sizes (product {known})")
    if unknown: out[unknown[0]] = dim // known
    elif not group and dim != 1: raise ArgumentError(f"rearrange {formula!r}: unit axis '1' has size {dim} ({shape})")
    elif known != dim: raise ArgumentError(f"rearrange {formula!r}: the sizes given for {where} multiply to {known}")
    out.update((n, sizes[n]) for n in group if n in sizes)
  return out

def _rearrange_plan(formula: str, shape: tuple[int, ...], sizes: dict[str, int]) \
    -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
  """(split shape, permutation, final shape): rearrange is reshape(split).permute(order).reshape(final)."""
  if not isinstance(formula, str) or formula.count("->") != 1:
    raise ArgumentError(f"rearrange {formula!r}: the formula must be 'left -> right', with one '->'")
  left_side, right_side = formula.split("->")
  left, right = _parse_side(formula, left_side, "left"), _parse_side(formula, right_side, "right")
  if any(isinstance(a, tuple) and "..." in a for a in left):
    raise ArgumentError(f"rearrange {formula!r}: '...' can't be inside parentheses on the left side")
  only_left, only_right = set(_names(left)) - set(_names(right)), set(_names(right)) - set(_names(left))
  if only_left or only_right:
    problems = [f"{', '.join(sorted(only))} only on the {side} side"
                for only, side in ((only_left, "left"), (only_right, "right")) if only]
    raise ArgumentError(f"rearrange {formula!r}: both sides must name the same axes; {'; '.join(problems)}")
  for name, size in sizes.items():
    if name not in _names(left): raise ArgumentError(f"rearrange {formula!r}: size given for unknown axis {name!r}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
      raise ArgumentError(f"rearrange {formula!r}: the size of {name!r} must be an int >= 0, got {size!r}")
  n_ellipsis = len(shape) - (len(left) - 1) if "..." in left else 0
  if len(left) - ("..." in left) > len(shape) or ("..." not in left and len(left) != len(shape)):
    raise ArgumentError(f"rearrange {formula!r}: the left side has {len(left)} axes, the tensor has shape {shape}")
  hidden = [f"...{i}" for i in range(n_ellipsis)]  # not identifiers, so they can't clash with the user's names
  left_groups, right_groups = _expand_ellipsis(left, hidden), _expand_ellipsis(right, hidden)
  size_of = _split_sizes(formula, left_groups, shape, sizes)
  split = [n for g in left_groups for n in g]
  order = tuple(split.index(n) for g in right_groups for n in g)
  return tuple(size_of[n] for n in split), order, tuple(prod(size_of[n] for n in g) for g in right_groups)

class MovementMixin:
  __slots__ = ()
  def reshape(self: Tensor, shape: Any, *args: Any) -> Tensor:
    """The same elements in a new shape; one size may be -1 (inferred): `x.reshape(2, -1)`.
    >>> Tensor.arange(6).reshape(2, -1).tolist()
    [[0, 1, 2], [3, 4, 5]]"""
    new = list(state.concrete(argfix(shape, *args)))
    if new.count(-1) > 1: raise ShapeError(f"reshape: only one size may be -1, got {tuple(new)} for {self.shape}")
    new = [self.shape[i] if s is None else s for i, s in enumerate(new)]
    if -1 in new:
      known = prod(s for s in new if s != -1)
      if known == 0 or self.numel() % known: raise ShapeError(f"reshape: can't reshape {self.shape} to {tuple(new)}")
      new[new.index(-1)] = self.numel() // known
    if any(not isinstance(s, int) or s < 0 for s in new):
      raise ShapeError(f"reshape: bad shape {tuple(new)} for {self.shape}")
    if prod(new) != self.numel():
      raise ShapeError(f"reshape: can't reshape {self.shape} ({self.numel()} elements) to {tuple(new)}")
    return self._view(self.uop.reshape(tuple(new)))
  def view(self: Tensor, *shape: Any) -> Tensor:
    """The same as reshape: `x.view(2, -1)`."""; return self.reshape(*shape)
  def permute(self: Tensor, order: Any, *args: Any) -> Tensor:
    """Reorder the axes: `x.permute(1, 0)` transposes a matrix.
    >>> Tensor.arange(6).reshape(1, 2, 3).permute(2, 0, 1).shape
    (3, 1, 2)"""
    order = argfix(order, *args)
    if len(order) != self.ndim: raise ShapeError(f"permute: {order} has {len(order)} dims, the tensor {self.shape}")
    return self._view(self.uop.permute(tuple(_distinct_axes(order, self.ndim, "permute"))))  # (ndim distinct axes)
  def expand(self: Tensor, shape: Any, *args: Any) -> Tensor:
    """Repeat size-1 axes (and add leading axes) without copying: -1 keeps a size.
    >>> Tensor([[1], [2]]).expand(2, 3).tolist()
    [[1, 1, 1], [2, 2, 2]]"""
    new = state.concrete(argfix(shape, *args))
    if len(new) < self.ndim or any(s < -1 for s in new): raise ShapeError(f"expand: can't expand {self.shape} to {new}")
    padded = (1,) * (len(new) - self.ndim) + self.shape
    target = tuple(p if s == -1 else s for p, s in zip(padded, new))
    if any(p != s and p != 1 for p, s in zip(padded, target)):
      raise ShapeError(f"expand: can't expand {self.shape} to {tuple(new)}")
    return self._view(self.reshape(padded).uop.expand(target))
  def expand_as(self: Tensor, other: Tensor) -> Tensor:
    """Expand to other's shape."""; return self.expand(other.shape)
  def shrink(self: Tensor, arg: Sequence[tuple[int, int] | None]) -> Tensor:
    """Keep [start, end) on each axis (None keeps the whole axis). start and end may be bound Variables (expressions of
    them): `x.shrink(((i, i + 4), None))` is a gather; `x.shrink(((0, i), None))` a view of length i (docs/jit.md)."""
    if len(arg) != self.ndim: raise ShapeError(f"shrink: {len(arg)} ranges for {self.ndim} axes")
    if any(isinstance(b, UOp) for a in arg if a is not None for b in a): return symbolic_shrink(self, arg)
    full = tuple((0, s) if a is None else tuple(a) for a, s in zip(arg, self.shape))
    if any(not 0 <= b <= e <= s for (b, e), s in zip(full, self.shape)):
      raise ShapeError(f"shrink: bad range {full} for {self.shape}")
    return self._view(self.uop.shrink(full))  # type: ignore[arg-type]
  def pad(self: Tensor, padding: Sequence[Any], mode: str = "constant", value: float = 0.0) -> Tensor:
    """Pad with `value` (or reflect/replicate/circular). padding is ((before, after), ...) per axis, or flat
    (left, right, top, bottom, ...) from the last axis as in torch.nn.functional.pad. Negative pads cut."""
    if mode not in PAD_MODES: raise UnsupportedError(f"pad: unknown mode {mode!r}, not one of {PAD_MODES}")
    padding = state.concrete(list(padding))  # (a size from a Variable's value: engine/state.py)
    if all(isinstance(p, int) for p in padding):
      if len(padding) % 2 or len(padding) // 2 > self.ndim:
        raise ShapeError(f"pad: bad flat padding {tuple(padding)} for {self.shape}")
      pairs = [(0, 0)] * (self.ndim - len(padding) // 2) + list(zip(padding[::2], padding[1::2]))[::-1]
    else:
      if len(padding) != self.ndim: raise ShapeError(f"pad: {len(padding)} pairs for {self.ndim} axes")
      pairs = [(0, 0) if p is None else tuple(p) for p in padding]
    if mode != "constant":  # negative pads cut: after the positive ones fill in, or before for circular (torch's order)
      cut, grow = tuple((min(b, 0), min(a, 0)) for b, a in pairs), [(max(b, 0), max(a, 0)) for b, a in pairs]
      return self.pad(cut)._pad_mode(grow, mode) if mode == "circular" else self._pad_mode(grow, mode).pad(cut)
    cut = tuple((max(-b, 0), s - max(-a, 0)) for (b, a), s in zip(pairs, self.shape))
    x = self.shrink(cut) if any(b < 0 or a < 0 for b, a in pairs) else self
    grow = tuple((max(b, 0), max(a, 0)) for b, a in pairs)
    if all(b == 0 and a == 0 for b, a in grow): return x
    padded = x._new(x.uop.pad(grow))  # a new tensor, as torch's pad (not a view: writes into it stay in it)
    if value == 0: return padded
    inside = type(self)(UOp.const(dtypes.bool, True, x.shape, x.device).pad(grow))
    return inside.where(padded, padded._const(_fits(self, value, "pad")))  # the value in this tensor's dtype, as torch
  def _target_shape(self: Tensor, shape: Any, args: tuple, op: str) -> list[tuple[int, int]]:
    """(current, wanted) size per axis for pad_to/shrink_to; None in shape keeps an axis."""
    new = state.concrete(argfix(shape, *args))
    if len(new) != self.ndim: raise ShapeError(f"{op}: shape {tuple(new)} has {len(new)} dims, the tensor {self.shape}")
    if any(n is not None and (not isinstance(n, int) or n < 0) for n in new):
      raise ShapeError(f"{op}: bad shape {tuple(new)}")
    return [(s, s if n is None else n) for s, n in zip(self.shape, new)]
  def pad_to(self: Tensor, shape: Any, *args: Any, value: float = 0.0) -> Tensor:
    """Pad at the end of each axis up to shape (None keeps an axis): `Tensor([1, 2]).pad_to(4)` is [1, 2, 0, 0]."""
    sizes = self._target_shape(shape, args, "pad_to")
    if any(n < s for s, n in sizes):
      raise ShapeError(f"pad_to: can't pad {self.shape} to the smaller {tuple(n for _, n in sizes)} (use shrink_to)")
    return self.pad(tuple((0, n - s) for s, n in sizes), value=value)
  def shrink_to(self: Tensor, shape: Any, *args: Any) -> Tensor:
    """Keep the first elements of each axis, down to shape (None keeps an axis): `x.shrink_to(2, None)`."""
    sizes = self._target_shape(shape, args, "shrink_to")
    if any(n > s for s, n in sizes):
      raise ShapeError(f"shrink_to: can't shrink {self.shape} to the larger {tuple(n for _, n in sizes)} (use pad_to)")
    return self.shrink(tuple((0, n) for _, n in sizes))
  def _pad_mode(self: Tensor, pairs: list[tuple[int, int]], mode: str) -> Tensor:
    x = self
    for axis, (b, a) in enumerate(pairs):
      if b == 0 and a == 0: continue
      n = x.shape[axis]
      if mode == "reflect" and (b >= n or a >= n):
        raise ArgumentError(f"pad: reflect padding {(b, a)} must be < size {n}")
      def take(lo: int, hi: int) -> Tensor:
        return x.shrink(tuple((lo, hi) if i == axis else None for i in range(x.ndim)))
      if mode == "reflect": parts = [take(1, b + 1).flip(axis), x, take(n - a - 1, n - 1).flip(axis)]
      elif mode == "replicate": parts = [take(0, 1).expand(*[b if i == axis else -1 for i in range(x.ndim)]), x,
                                         take(n - 1, n).expand(*[a if i == axis else -1 for i in range(x.ndim)])]
      elif mode == "circular":
        if b > n or a > n: raise UnsupportedError(f"pad: circular padding {(b, a)} must be <= size {n}")
        parts = [take(n - b, n), x, take(0, a)]
      x = type(x).cat(*[p for p in parts if p.shape[axis] > 0], dim=axis)
    return x
  def flip(self: Tensor, axis: Any, *args: Any) -> Tensor:
    """Reverse the order along the given axes."""
    axes = set(_distinct_axes(argfix(axis, *args), self.ndim, "flip"))
    return self._view(self.uop.flip(tuple(i in axes for i in range(self.ndim))))
  def transpose(self: Tensor, dim0: int = 1, dim1: int = 0) -> Tensor:
    """Swap two axes: `x.transpose(0, 1)`."""
    a, b = _resolve_axis(dim0, self.ndim, "transpose"), _resolve_axis(dim1, self.ndim, "transpose")
    return self.permute([b if i == a else a if i == b else i for i in range(self.ndim)])
  @property
  def T(self: Tensor) -> Tensor:
    """All axes reversed (the transpose of a matrix)."""; return self.permute(tuple(reversed(range(self.ndim))))
  def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge axes start_dim..end_dim into one: `Tensor.zeros(2, 3, 4).flatten(1)` has shape (2, 12)."""
    if self.ndim == 0: return self.reshape(1)
    s, e = _resolve_axis(start_dim, self.ndim, "flatten"), _resolve_axis(end_dim, self.ndim, "flatten")
    if s > e: raise ArgumentError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} of {self.shape}")
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])
  def unflatten(self: Tensor, dim: int, sizes: tuple[int, ...]) -> Tensor:
    """Split axis dim into sizes (one may be -1): `x.unflatten(1, (3, 4))`."""
    d = _resolve_axis(dim, self.ndim, "unflatten")
    if -1 not in sizes and prod(sizes) != self.shape[d]:
      raise ShapeError(f"unflatten: sizes {tuple(sizes)} don't multiply to {self.shape[d]}, dim {dim} of {self.shape}")
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])
  def rearrange(self: Tensor, formula: str, **sizes: int) -> Tensor:
    """Reshape and permute in einops notation: names the axes on both sides of "->"; parentheses merge axes (on the
    right) or split one (on the left, with the sizes given as keywords, one of each group inferred); "1" or "()" is
    a unit axis; "..." stands for the axes not named (once per side)."""
    split, order, final = _rearrange_plan(formula, self.shape, sizes)
    x = self.reshape(split)
    if order != tuple(range(len(order))): x = x.permute(order)
    return x.reshape(final)
  def squeeze(self: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    """Remove size-1 axes (all, or those given)."""
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    dims = {_resolve_axis(d, self.ndim, "squeeze") for d in make_tuple(dim, 1)}  # a 0-d tensor takes dim 0 or -1
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))
  def unsqueeze(self: Tensor, dim: int) -> Tensor:
    """Insert a size-1 axis at dim (negative counts from the end).
    >>> Tensor([1, 2]).unsqueeze(0).shape, Tensor([1, 2]).unsqueeze(-1).shape
    ((1, 2), (2, 1))"""
    d = _resolve_axis(dim, self.ndim + 1, "unsqueeze")
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])
  def cat(self: Tensor, *args: Tensor, dim: int = 0) -> Tensor:
    """Join tensors along an existing axis: Tensor.cat(a, b, dim=1), a.cat(b, dim=1) or Tensor.cat([a, b], dim=1).
    >>> Tensor.cat(Tensor([[1, 2]]), Tensor([[3, 4]]), dim=1).tolist()
    [[1, 2, 3, 4]]"""
    tensors = [*self, *args] if isinstance(self, (list, tuple)) else [self, *args]
    if not tensors: raise ArgumentError("cat: needs at least one tensor")
    self = tensors[0]
    d = _resolve_axis(dim, self.ndim, "cat")
    if len({t.device for t in tensors}) > 1:
      raise ArgumentError(f"cat: tensors are on different devices {[t.device for t in tensors]}")
    for t in tensors:
      if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
        raise ShapeError(f"cat: shapes {[x.shape for x in tensors]} don't match outside dim {d}")
    dt, total = least_upper_dtype(*(t.dtype for t in tensors)), sum(t.shape[d] for t in tensors)
    starts = itertools.accumulate((t.shape[d] for t in tensors), initial=0)  # (zip stops at the last tensor)
    # each tensor zero-padded to its place in the result: their sum is the concatenation
    pieces = [t.cast(dt).pad(tuple((s, total - s - t.shape[d]) if i == d else (0, 0) for i in range(self.ndim)))
              for t, s in zip(tensors, starts)]
    return sum(pieces[1:], pieces[0])
  def stack(self: Tensor, *args: Tensor, dim: int = 0) -> Tensor:
    """Join tensors along a new axis: Tensor.stack(a, b, dim=1), a.stack(b) or Tensor.stack([a, b]).
    >>> Tensor.stack(Tensor([1, 2]), Tensor([3, 4]), dim=1).tolist()
    [[1, 3], [2, 4]]"""
    if isinstance(self, (list, tuple)):
      if len(args) == 1 and isinstance(args[0], int): args, dim = (), args[0]  # torch's Tensor.stack([a, b], 1)
      if not self and not args: raise ArgumentError("stack: needs at least one tensor")
      if self and args: raise ArgumentError("stack: give the tensors as one list or as arguments, not both")
      self, args = (self[0], (*self[1:], *args)) if self else (args[0], args[1:])
    for t in args:
      if t.shape != self.shape: raise ShapeError(f"stack: shapes {[self.shape] + [t.shape for t in args]} differ")
    d = _resolve_axis(dim, self.ndim + 1, "stack")
    return self.unsqueeze(d).cat(*[t.unsqueeze(d) for t in args], dim=d)
  def repeat(self: Tensor, repeats: Any, *args: Any) -> Tensor:
    """Tile the tensor: `Tensor([1, 2]).repeat(2)` is [1, 2, 1, 2]."""
    reps = argfix(repeats, *args)
    if len(reps) < self.ndim: raise ShapeError(f"repeat: {len(reps)} repeats {reps} for the dims of {self.shape}")
    if any(r < 0 for r in reps): raise ArgumentError(f"repeat: repeats {reps} must be >= 0")
    base = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
    # (s0, s1) -> (1, s0, 1, s1) -> (r0, s0, r1, s1) -> (r0 * s0, r1 * s1)
    spread = base.reshape(tuple(x for s in base.shape for x in (1, s)))
    expanded = spread.expand(tuple(x for r, s in zip(reps, base.shape) for x in (r, s)))
    return expanded.reshape(tuple(r * s for r, s in zip(reps, base.shape)))
  def repeat_interleave(self: Tensor, repeats: int, dim: int | None = None) -> Tensor:
    """Repeat each element `repeats` times along dim (the flattened tensor if dim is None)."""
    if type(repeats) is not int or repeats < 0:
      raise ArgumentError(f"repeat_interleave: repeats must be a non-negative int, got {repeats!r}")
    x, d = (self.flatten(), 0) if dim is None else (self, _resolve_axis(dim, self.ndim, "repeat_interleave"))
    return x.unsqueeze(d + 1).expand(*x.shape[:d + 1], repeats, *x.shape[d + 1:]).flatten(d, d + 1)
  def split(self: Tensor, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """Pieces along dim: of `sizes` each (the last may be smaller), or of the listed sizes."""
    d = _resolve_axis(dim, self.ndim, "split")
    n = self.shape[d]
    if isinstance(sizes, int):
      if sizes <= 0: raise ArgumentError("split: size must be positive")
      sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
    if sum(sizes) != n: raise ArgumentError(f"split: sizes {list(sizes)} don't add up to {n}")
    starts = itertools.accumulate(sizes, initial=0)  # (zip stops at the last size)
    return tuple(self.shrink(tuple((start, start + s) if i == d else None for i in range(self.ndim)))
                 for start, s in zip(starts, sizes))
  def chunk(self: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """Split into `chunks` pieces of equal size (the last may be smaller), as torch.chunk."""
    if chunks <= 0: raise ArgumentError(f"chunk: chunks must be positive, got {chunks}")
    d = _resolve_axis(dim, self.ndim, "chunk")
    if self.shape[d] == 0: return self.split([0] * chunks, d)  # torch: `chunks` empty pieces
    return self.split(ceildiv(self.shape[d], chunks), d)
  def unbind(self: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """The slices along dim, with dim removed."""
    d = _resolve_axis(dim, self.ndim, "unbind")
    return tuple(t.squeeze(d) for t in self.split(1, d)) if self.shape[d] else ()
  def roll(self: Tensor, shifts: int | tuple[int, ...], dims: int | tuple[int, ...] | None = None) -> Tensor:
    """Shift elements along dims, wrapping around (over the flattened tensor if dims is None)."""
    if dims is None: return self.flatten().roll(shifts, 0).reshape(self.shape)
    x, shifts, dims = self, make_tuple(shifts, 1), make_tuple(dims, 1)
    if len(shifts) != len(dims): raise ArgumentError(f"roll: shifts {shifts} and dims {dims} differ in length")
    for s, d in zip(shifts, dims):
      d = _resolve_axis(d, self.ndim, "roll")
      n = x.shape[d]
      if n and s % n: x = type(x).cat(*x.split([n - s % n, s % n], d)[::-1], dim=d)  # the last s % n elements first
    return x

  # *** diagonals and grids ***
  def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of the (dim1, dim2) planes as a view, moved to the last axis, as torch.diagonal; offset > 0 is
    above the main diagonal, < 0 below. `Tensor([[1, 2], [3, 4]]).diagonal().tolist()` is [1, 4]."""
    d1, d2 = _resolve_axis(dim1, self.ndim, "diagonal", "dim1"), _resolve_axis(dim2, self.ndim, "diagonal", "dim2")
    if d1 == d2: raise ShapeError(f"diagonal: dim1 and dim2 are both axis {d1} of {self.shape}")
    x = self.permute(*[i for i in range(self.ndim) if i not in (d1, d2)], d1, d2)
    lead, (r, c) = x.shape[:-2], x.shape[-2:]
    keep = tuple((0, s) for s in lead)
    # cut the rows or columns before the diagonal's start: then it starts at (0, 0)
    rows, cols = (0, r) if offset >= 0 else (min(-offset, r), r), (min(offset, c), c) if offset >= 0 else (0, c)
    x = x.shrink(keep + (rows, cols))
    r, c = x.shape[-2:]
    k = min(r, c)
    if k == 0: return x.shrink(keep + ((0, 0), (0, 0))).reshape(*lead, 0)
    # element (i, i) is at i * (c + 1) of the flattened plane: lay it out in rows of c + 1 and take column 0
    flat = x.reshape(*lead, r * c).pad(((0, 0),) * len(lead) + ((0, k * (c + 1) - r * c),))  # a negative pad cuts
    return flat.reshape(*lead, k, c + 1).shrink(keep + ((0, k), (0, 1))).reshape(*lead, k)
  def diag(self: Tensor, diagonal: int = 0) -> Tensor:
    """As torch.diag: a 1-D tensor becomes a square matrix with it on the diagonal (shifted up by diagonal > 0, down
    by < 0); a 2-D tensor gives its diagonal (see diagonal()). `Tensor([1, 2]).diag().tolist()` is [[1, 0], [0, 2]]."""
    if self.ndim == 2: return self.diagonal(diagonal)
    if self.ndim != 1: raise ShapeError(f"diag: needs a 1-D or 2-D tensor, got shape {self.shape} (see diagonal())")
    n = self.shape[0]
    # n rows of [v_i, 0 * n] laid end to end and cut into rows of n put v_i at (i, i): a view, as in eye
    square = self.reshape(n, 1).pad(((0, 0), (0, n))).flatten().shrink(((0, n * n),)).reshape(n, n)
    k = abs(diagonal)
    return square.pad(((0, k), (k, 0)) if diagonal >= 0 else ((k, 0), (0, k)))
  def meshgrid(self: Tensor, *others: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-D tensors, as torch.meshgrid: with "ij" output k varies along axis k; "xy" swaps the
    first two axes (Cartesian). `xs, ys = Tensor([1, 2]).meshgrid(Tensor([3, 4, 5]))` gives two (2, 3) grids."""
    if indexing not in ("ij", "xy"): raise ArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    tensors = (*self, *others) if isinstance(self, (list, tuple)) else (self, *others)  # also Tensor.meshgrid([a, b])
    if not tensors: raise ArgumentError("meshgrid: needs at least one tensor")
    if any(t.ndim > 1 for t in tensors):
      raise ShapeError(f"meshgrid: expects 0-D or 1-D tensors, got shapes {[t.shape for t in tensors]}")
    sizes, swap = [t.numel() for t in tensors], indexing == "xy" and len(tensors) > 1
    if swap: sizes[0], sizes[1] = sizes[1], sizes[0]
    axes = [1 - i if swap and i < 2 else i for i in range(len(tensors))]  # the axis each tensor varies along
    return tuple(t.reshape([-1 if j == a else 1 for j in range(len(sizes))]).expand(sizes)
                 for t, a in zip(tensors, axes))
