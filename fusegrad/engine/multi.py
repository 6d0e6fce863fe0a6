"""Multi-device tensors: one graph over a tuple of devices, lowered to one graph per device when realized. MULTI(src=one
node per device, arg=axis): axis None is replicated, an int splits it in equal consecutive parts (docs/devices.md)."""
from __future__ import annotations
import functools, weakref
from fusegrad.helpers import prod
from fusegrad.uop.ops import UOp, Ops, GroupOp

# the live logical gathers: COPY nodes from a tuple of devices to one (gather_node), lowered when realized
_gathers: weakref.WeakSet[UOp] = weakref.WeakSet()

def gather_node(u: UOp, device: str) -> UOp:
  """The logical node u (on a tuple of devices) copied to one device, as a node autograd can go through (its gradient
  is copied back to u's devices); `lower` turns it into `gather`."""
  ret = u.copy_to_device(device)
  _gathers.add(ret)
  return ret

def needs_lowering(u: UOp) -> bool:
  """True when u is on several devices, or its graph gathers from several (a walk only while a gather is alive)."""
  if u.op is Ops.MULTI or isinstance(u.device, tuple): return True
  return bool(_gathers) and any(n in _gathers for n in u.toposort(gate=lambda x: x.op is not Ops.MULTI))

def multi(parts: tuple[UOp, ...], axis: int | None) -> UOp:
  """The logical node over per-device parts (split on axis, or replicated for None)."""
  return UOp(Ops.MULTI, parts[0].dtype, parts, axis)

def _device(u: UOp) -> str:
  """The one device of a part."""
  assert isinstance(u.device, str), f"expected a node on one device, got {u.device}"
  return u.device

def _part(shape: tuple[int, ...], axis: int, i: int, n: int) -> tuple[tuple[int, int], ...]:
  """The shrink argument that cuts part i of n out of shape along axis."""
  k = shape[axis] // n
  return tuple((i * k, (i + 1) * k) if a == axis else (0, s) for a, s in enumerate(shape))

def _check_splits(shape: tuple[int, ...], axis: int | None, n: int) -> None:
  if axis is not None and shape[axis] % n:
    raise RuntimeError(f"shard: axis {axis} of shape {shape} doesn't split evenly across {n} devices")

def shard(u: UOp, devices: tuple[str, ...], axis: int | None) -> UOp:
  """u (a node on one device) split on axis across devices, or copied to each of them for axis None."""
  _check_splits(u.shape, axis, len(devices))
  parts = [u if axis is None else u.shrink(_part(u.shape, axis, i, len(devices))) for i in range(len(devices))]
  return multi(tuple(p if p.device == d else p.copy_to_device(d) for p, d in zip(parts, devices)), axis)

def gather(m: UOp, device: str) -> UOp:
  """All of a MULTI's values on one device: the parts copied there and put side by side."""
  parts = [s if s.device == device else s.copy_to_device(device) for s in m.src]
  if m.arg is None: return next((s for s in m.src if s.device == device), parts[0])
  return _side_by_side(parts, m.arg)

def _side_by_side(parts: list[UOp], axis: int) -> UOp:
  """parts (of one size) put side by side along axis: each padded to its place in the whole, then added (one kernel)."""
  k, n = parts[0].shape[axis], len(parts)
  padded = [p.pad(tuple((i * k, (n - 1 - i) * k) if a == axis else (0, 0) for a in range(len(p.shape))))
            for i, p in enumerate(parts)]
  return functools.reduce(lambda a, b: a.alu(Ops.ADD, b), padded)

def replicate(m: UOp) -> UOp:
  """m replicated: every device gathers all the parts."""
  return m if m.arg is None else multi(tuple(gather(m, _device(s)) for s in m.src), None)

def all_reduce(parts: tuple[UOp, ...], op: Ops) -> tuple[UOp, ...]:
  """Each device's part combined (op) with every other's, on every device: a ring. The flattened parts are cut in n
  chunks; in n-1 steps each device passes one chunk on to the next, which combines it with its own (reduce-scatter),
  so device i ends with the whole of chunk i+1; n-1 more steps pass the finished chunks round (all-gather)."""
  n, shape, devices = len(parts), parts[0].shape, [_device(p) for p in parts]
  if n == 1: return parts
  if n == 2:  # each sends its whole part: the ring's bytes in one round, not two (the same sum on both, in one order)
    return tuple(parts[0].copy_to_device(d).alu(op, parts[1]) if i else parts[0].alu(op, parts[1].copy_to_device(d))
                 for i, d in enumerate(devices))
  size = prod(shape)
  c = -(-size // n)
  flat = [p.reshape((size,)).pad(((0, c * n - size),)) for p in parts]
  chunks = [[f.shrink(((j * c, (j + 1) * c),)) for j in range(n)] for f in flat]
  for step in range(n - 1):
    for i, j in [(i, (i - step) % n) for i in range(n)]:
      chunks[(i + 1) % n][j] = chunks[i][j].copy_to_device(devices[(i + 1) % n]).alu(op, chunks[(i + 1) % n][j])
  for step in range(n - 1):
    for i, j in [(i, (i + 1 - step) % n) for i in range(n)]:
      chunks[(i + 1) % n][j] = chunks[i][j].copy_to_device(devices[(i + 1) % n])
  return tuple(_side_by_side(row, 0).shrink(((0, size),)).reshape(shape) for row in chunks)

def _reshape_axis(old: tuple[int, ...], axis: int, new: tuple[int, ...], n: int) -> int | None:
  """The axis of new that the split axis becomes, if each part stays one block of it (else None)."""
  outer, inner = prod(old[:axis]), old[axis] // n * prod(old[axis + 1:])  # elements before the axis; in a part's block
  for b in range(len(new)):
    if prod(new[:b]) == outer and inner % prod(new[b + 1:]) == 0 and new[b] % n == 0: return b
  return None

def _align(s: UOp, axis: int | None, n: int) -> tuple[UOp, ...]:
  """s as n per-device parts split on axis (s not a MULTI: a device-free node, the same on every device)."""
  if s.op is not Ops.MULTI: return (s,) * n
  if s.arg == axis: return s.src
  full = replicate(s).src
  return full if axis is None else tuple(f.shrink(_part(f.shape, axis, i, n)) for i, f in enumerate(full))

def _per_device(n: UOp, m: UOp, arg_of: tuple | None = None) -> UOp:
  """n applied to each part of m, keeping m's axis (arg_of: a per-part arg)."""
  return multi(tuple(n.replace(src=(s,), arg=n.arg if arg_of is None else arg_of[i]) for i, s in enumerate(m.src)),
               m.arg)

def _lower_movement(n: UOp, m: UOp) -> UOp:
  axis, parts = m.arg, len(m.src)
  if axis is None: return _per_device(n, m)
  if n.op is Ops.PERMUTE: return multi(tuple(n.replace(src=(s,)) for s in m.src), n.arg.index(axis))
  if n.op in (Ops.RESHAPE, Ops.EXPAND):
    b = _reshape_axis(m.shape, axis, n.arg, parts) if n.op is Ops.RESHAPE else axis
    if b is not None:
      shape = tuple(s // parts if a == b else s for a, s in enumerate(n.arg))
      return multi(tuple(n.replace(src=(s,), arg=shape) for s in m.src), b)
  untouched = {Ops.PAD: (0, 0), Ops.SHRINK: (0, m.shape[axis]), Ops.FLIP: False}
  if n.op in untouched and n.arg[axis] == untouched[n.op]:  # the split axis is left alone
    local = (0, m.src[0].shape[axis]) if n.op is Ops.SHRINK else n.arg[axis]
    return _per_device(n, m, (tuple(local if a == axis else x for a, x in enumerate(n.arg)),) * parts)
  return _per_device(n, replicate(m))

def _lower_node(n: UOp, srcs: list[UOp]) -> UOp:
  """The per-device form of the logical node n (srcs: its sources, lowered)."""
  devices = n.device
  assert isinstance(devices, tuple)
  if n.op is Ops.DEVICE: return n
  if n.op is Ops.CONST: return multi(tuple(n.replace(src=(UOp(Ops.DEVICE, arg=d),)) for d in devices), None)
  m = srcs[0]
  if n.op in GroupOp.Movement: return _lower_movement(n, m)
  if n.op is Ops.REDUCE_AXIS:
    partial = tuple(n.replace(src=(s,)) for s in m.src)
    if m.arg is None or m.arg not in n.arg[1]: return multi(partial, m.arg)
    return multi(all_reduce(partial, n.arg[0]), None)
  if n.op is Ops.COPY and m.op is not Ops.MULTI: return shard(m, devices, None)  # one device to several (a gradient)
  if n.op is Ops.COPY:  # a clone on the same devices
    return multi(tuple(n.replace(src=(s,), arg=(d, n.arg[1])) for s, d in zip(m.src, devices)), m.arg)
  if n.op in (Ops.CONTIGUOUS, Ops.DETACH): return _per_device(n, m)
  if n.op is Ops.ASSIGN or n.op in GroupOp.Elementwise:
    axis = m.arg if n.op is Ops.ASSIGN else next((s.arg for s in srcs if s.op is Ops.MULTI and s.arg is not None), None)
    aligned = [_align(s, axis, len(devices)) for s in srcs]
    return multi(tuple(n.replace(src=tuple(a[i] for a in aligned)) for i in range(len(devices))), axis)
  raise NotImplementedError(f"{n.op.name.lower()} on tensors spread over several devices")

def reshard(u: UOp, axis: int | None) -> UOp:
  """The logical node u (on a tuple of devices) split on axis instead (a replicated u is cut, nothing moves)."""
  m = lower(u)
  _check_splits(m.shape, axis, len(m.src))
  return multi(_align(m, axis, len(m.src)), axis)

def parts_like(g: UOp, m: UOp) -> tuple[UOp, ...]:
  """g (the gradient of the MULTI m, a logical node) as one part per device, split like m: its sources' gradients."""
  return _align(lower(g), m.arg, len(m.src))

def lower(root: UOp) -> UOp:
  """The logical node root as per-device graphs: a MULTI of one node per device for a root on a tuple of devices, a
  graph with its gathers lowered for a root on one device."""
  done: dict[UOp, UOp] = {}
  for n in root.toposort(gate=lambda u: u.op is not Ops.MULTI):
    if n.op is Ops.MULTI:
      done[n] = n  # (its sources, one per device, are not walked)
      continue
    srcs = [done[s] for s in n.src]
    if isinstance(n.device, tuple): done[n] = _lower_node(n, srcs)
    elif n.op is Ops.COPY and srcs[0].op is Ops.MULTI: done[n] = gather(srcs[0], n.arg[0])
    else: done[n] = n if all(a is b for a, b in zip(srcs, n.src)) else n.replace(src=tuple(srcs))
  return done[root]
