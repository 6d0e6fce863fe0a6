"""The scheduler: splits a lazy graph into kernels; every fusion decision is here (docs/developer/scheduler.md)."""
from __future__ import annotations
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable
from fusegrad.dtype import dtypes
from fusegrad.device import Buffer, Device
from fusegrad.helpers import dprint, prod, PROGRAM_CACHE, SPLIT_REDUCEOP
from fusegrad.uop.ops import UOp, Ops, GroupOp, AxisType, SymInt, flat_index, strides_for_shape, postorder
from fusegrad.uop.ops import same_shape, size_one, symbolic, derived
from fusegrad.uop.symbolic import simplify
from fusegrad.engine import state
from fusegrad.engine.state import view_base

@dataclass(frozen=True)
class ScheduleItem:
  """One step of a schedule: a kernel (ast is a SINK of STOREs) or a copy (ast is a COPY); bufs[0] is the output."""
  ast: UOp
  bufs: tuple[Buffer, ...]
  var_vals: dict[UOp, int] = field(default_factory=dict)

def _no_buffer_needed(n: UOp) -> bool: return n.op in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.DEVICE)

def resolve_view(n: UOp, becomes: dict[UOp, UOp]) -> UOp:
  """A view of computed nodes rewritten as a view of BUFFERs; n unchanged when it is not a view of anything computed."""
  return state.resolve(n, becomes.get)

def _same(x: UOp) -> UOp: return x
def _expands(n: UOp) -> bool:  # (to a Variable's length: at any value, even where it is 1 now)
  return n.op is Ops.EXPAND and (n.size > n.src[0].size or symbolic(n.shape))

# *** deciding which nodes become buffers ***
def find_realizes(outs: list[UOp], nodes: list[UOp], becomes: dict[UOp, UOp],
                  parts: frozenset[UOp] = frozenset()) -> dict[UOp, None]:
  """The nodes that get their own buffer (the partial results of split reduces among them), in dependency order."""
  def _is_leaf(n: UOp) -> bool: return n.op is Ops.BUFFER or n in becomes
  consumers: dict[UOp, list[UOp]] = {n: [] for n in nodes}
  for n in nodes:
    for s in dict.fromkeys(n.src): consumers.setdefault(s, []).append(n)
  want: set[UOp] = set(parts)
  for o in outs:
    if not _is_leaf(b := view_base(o)) and not _no_buffer_needed(b): want.add(b)
  for n in nodes:
    if n.op in (Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN): want.add(n)
    # a copy moves one whole buffer
    if n.op is Ops.COPY and not copied_as_is(resolve_view(n.src[0], becomes)): want.add(n.src[0])
  # an expand repeats what is below it: if that is costly elementwise work, compute it once into a buffer instead
  for n in nodes:
    if _expands(n) and (b := _movement_base(n.src[0], becomes)) not in want and _costly(b, want, becomes): want.add(b)
  # decide reduces consumers-first, since a reduce that becomes a buffer ends the fusion paths above it
  for r in reversed(nodes):
    if (r.op is Ops.REDUCE_AXIS and r not in want and not _reads_no_memory(r)
        and not _fuses_into_consumer(r, consumers, want)):
      want.add(r)
  _cut_deep_chains(nodes, want, becomes)
  return {n: None for n in nodes if n in want and not _is_leaf(n)}

MAX_FUSED_DEPTH = 1000

def _cut_deep_chains(nodes: list[UOp], want: set[UOp], becomes: dict[UOp, UOp]) -> None:
  """A node more than MAX_FUSED_DEPTH ALU ops above the last buffer gets a buffer of its own: one kernel stays a size a
  C compiler handles in well under a second, and a chain of 100,000 `x = x + 1` is 100 copies of one kernel."""
  depth: dict[UOp, int] = {}
  for n in nodes:
    if n.op is Ops.BUFFER or n in becomes or n in want: depth[n] = 0
    else: depth[n] = max((depth.get(s, 0) for s in n.src), default=0) + (n.op in GroupOp.ALU)
    if depth[n] > MAX_FUSED_DEPTH and n.op in GroupOp.Elementwise:
      want.add(n)
      depth[n] = 0

def _movement_base(n: UOp, becomes: dict[UOp, UOp]) -> UOp:
  while n.op in GroupOp.Movement and n not in becomes: n = n.src[0]
  return n

COSTLY_OPS, COSTLY_LOADS = 6, 3

def _costly(n: UOp, want: set[UOp], becomes: dict[UOp, UOp]) -> bool:
  """True when inlining n means real work per copy: at least COSTLY_OPS ALU ops or COSTLY_LOADS buffers read (a
  matmul of (a+1) stays one kernel; the gradient of a pooling layer feeding a convolution's backward doesn't)."""
  # aranges and boolean masks stay inline: codegen folds sums over one-hot masks into direct loads
  if n.op not in GroupOp.Elementwise or n in becomes or n.dtype == dtypes.bool or _reads_no_memory(n): return False
  ops, loads, seen, stack = 0, set(), {n}, [n]
  while stack:
    x = stack.pop()
    if x.op in GroupOp.ALU: ops += 1
    for s in x.src:
      if s in seen: continue
      seen.add(s)
      if s.op is Ops.BUFFER or s in becomes or s in want: loads.add(s)
      elif s.op is not Ops.REDUCE_AXIS: stack.append(s)
    if ops >= COSTLY_OPS or len(loads) >= COSTLY_LOADS: return True
  return False

def _reads_no_memory(r: UOp) -> bool:
  """True when r is computed from constants alone (an arange): codegen folds such sums into index math, so copying
  it into every consumer costs nothing, and keeping it in the consumer's kernel lets a gather fold to one load."""
  return not derived(r, "reads_memory", _reads_memory)  # (kept per node: a walk per reduce was quadratic in depth)

def _reads_memory(n: UOp) -> bool: return n.op is Ops.BUFFER or any(s._cache["reads_memory"] for s in n.src)

def _fuses_into_consumer(r: UOp, consumers: dict[UOp, list[UOp]], want: set[UOp]) -> bool:
  """True when every path from r leads, with no expand on the way, to the same one node that gets a buffer: then r is
  computed inside that node's kernel, once per output (x.sum(1).relu() uses the sum three times, in one expression).
  Not through a pad for a sum over 3+ axes (a conv's): its im2col index math under the pad's gate doesn't simplify."""
  roots: set[UOp] = set()
  seen, stack = {r}, [r]
  while stack:
    n = stack.pop()
    if not (users := consumers.get(n)): return False
    for u in users:
      if _expands(u) or u.op is Ops.SINK or (u.op is Ops.PAD and len(r.arg[1]) > 2): return False
      if u in want: roots.add(u)
      elif u not in seen:
        seen.add(u)
        stack.append(u)
  return len(roots) == 1

# *** splitting big reduces ***
SPLIT_MIN, SPLIT_OUTPUTS, SPLIT_PARTIALS, SPLIT_CHUNK = 1 << 15, 64, 256, 1024

def split_reduces(nodes: list[UOp], becomes: dict[UOp, UOp]) -> tuple[dict[UOp, UOp], frozenset[UOp]]:
  """Big reduces into few outputs split in two, and big matmuls packed (docs/developer/scheduler.md, section 0).
  Returns the new node of each node of the graph that changes, and the partial results (each gets a buffer)."""
  new: dict[UOp, UOp] = {}
  parts: set[UOp] = set()
  for n in nodes:
    if n in becomes: continue  # computed before
    src = tuple(new.get(s, s) for s in n.src)
    m = n if src == n.src else n.replace(src=src)
    if m.op is Ops.REDUCE_AXIS and SPLIT_REDUCEOP and (split := _split_reduce(m)) is not None:
      m = split[0]
      parts.add(split[1])
    elif m.op is Ops.REDUCE_AXIS and (packed := pack_matmul(m)) is not None: m = packed
    if m is not n: new[n] = m
  return new, frozenset(parts)

def _broadcast(n: UOp, axis: int) -> bool: return n.op is Ops.EXPAND and n.src[0].shape[axis] == 1 < n.shape[axis]

def pack_matmul(r: UOp) -> UOp | None:
  """A big matmul (..., n, m, k) summed over k with w's column panels stored contiguously along k first, where the
  device's machine model has panel_bytes; None for anything else. Why and when: docs/developer/scheduler.md."""
  mul, nd = r.src[0], len(r.shape)
  if r.arg != (Ops.ADD, (nd - 1,)) or mul.op is not Ops.MUL or nd < 3: return None
  x, w = mul.src if _broadcast(mul.src[0], -2) else mul.src[::-1]
  (n, m, k), lead = mul.shape[-3:], mul.shape[:-3]
  if not (_broadcast(x, -2) and _broadcast(w, -3)) or not isinstance(r.device, str): return None
  if not all(isinstance(s, int) for s in mul.shape) or n < 256 or k < 16: return None
  p = Device[r.device].renderer.machine.panel_bytes // r.dtype.itemsize
  # a small product too where w's rows run along k (q @ k.T in attention): else each output sums k across a vector
  along_k = not _transposed(w.src[0])
  if not p or m < 2 * p or k * m < (1 << 12 if along_k else 1 << 16) or (k < 64 and not along_k): return None
  panels = w.src[0].pad(((0, 0),) * (nd - 2) + ((0, -m % p), (0, 0)))  # (..., 1, m', k), m' whole panels
  order = tuple(range(nd - 2)) + (nd - 2, nd, nd - 1)  # (..., m'/p, p, k) <-> (..., m'/p, k, p): the panels' layout
  panels = panels.reshape(panels.shape[:-2] + (panels.shape[-2] // p, p, k)).permute(order).contiguous() \
    .permute(order).reshape(panels.shape)
  rows = x.src[0].contiguous() if _transposed(x.src[0]) and n * k >= 1 << 16 else x.src[0]  # (a.T @ b: rows too)
  out = (*lead, n, panels.shape[-2], k)
  a, b = (rows, panels) if x is mul.src[0] else (panels, rows)
  ret = a.expand(out) * b.expand(out)
  return ret.r(Ops.ADD, (nd - 1,)).shrink(tuple((0, s) for s in r.shape))

def _transposed(view: UOp) -> bool:
  """True when view's last axis is not its storage's (permutes moved it): w = b.T of a row-major b runs along m."""
  axis = len(view.shape) - 1  # (where the last axis is, down the view chain)
  while view.op in (Ops.RESHAPE, Ops.PERMUTE):
    if view.op is Ops.PERMUTE: axis = view.arg[axis]
    elif axis != len(view.shape) - 1: return True
    elif view.src[0].op not in (Ops.RESHAPE, Ops.PERMUTE): return False  # (a reshape of rows in memory: still rows)
    elif view.src[0].shape[-1] != view.shape[-1]: return True  # (not followed further)
    else: axis = len(view.src[0].shape) - 1
    view = view.src[0]
  return axis != len(view.shape) - 1

def _split_reduce(r: UOp) -> tuple[UOp, UOp] | None:
  """(r done in two steps, the first step's partial results), or None when r is small or has many outputs. Which axis
  is split and how: docs/developer/scheduler.md, section 0."""
  op, axes = r.arg
  x = r.src[0]
  n_red = prod(x.shape[i] for i in axes)
  n_out = x.size // n_red
  if n_red < SPLIT_MIN or n_out >= SPLIT_OUTPUTS or _reads_no_memory(r): return None
  a = next((i for i in axes if x.shape[i] >= 16), next(i for i in axes if x.shape[i] >= 2))
  size, inner = x.shape[a], n_red // x.shape[a]
  most = max(min(SPLIT_PARTIALS // n_out, size, n_red // SPLIT_CHUNK), 2)
  chunks = next((c for c in range(most, most // 2, -1) if size % c == 0), most)
  length = size // chunks if inner > 1 or size // chunks < 16 else size // chunks // 16 * 16
  main = x.shrink(tuple((0, chunks * length) if i == a else (0, s) for i, s in enumerate(x.shape)))
  main = main.reshape(x.shape[:a] + (chunks, length) + x.shape[a + 1:])
  part = main.r(op, tuple(i + (i >= a) for i in axes))
  ret = part.r(op, (a,)).reshape(r.shape)
  if chunks * length < size:
    ret = ret.alu(op, x.shrink(tuple((chunks * length, s) if i == a else (0, s) for i, s in enumerate(x.shape)))
                  .r(op, axes))
  return ret, part

def is_identity_view(n: UOp) -> bool:
  """True when n (a view of a BUFFER) reads the whole buffer in order, so it can be used without a copy."""
  return n.size == view_base(n).size and contiguous_offset(n) == 0

def contiguous_offset(n: UOp) -> int | None:
  """Where n starts when it is a view reading a run of its BUFFER's elements in order (a reshape, a slice of the first
  axis: x[2:5], x[1]); None when it isn't."""
  if (b := view_base(n)).op is not Ops.BUFFER: return None
  if n is b: return 0
  ranges = [UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, s),), (i, AxisType.LOOP))
            for i, s in enumerate(n.shape)]
  idxs, valid = map_view(n, b, ranges)
  start = simplify(flat_index(idxs, b.shape) - flat_index(ranges, n.shape))
  return start.arg if valid is None and start.op is Ops.CONST else None

def copied_as_is(v: UOp) -> bool:
  """True when a copy reads v where it is: a whole buffer, or a run of one on a device that runs no kernels (a file)."""
  return is_identity_view(v) or ((b := view_base(v)).op is Ops.BUFFER and not Device[b.arg.device].runs_kernels
                                 and contiguous_offset(v) is not None)

def run_buffer(v: UOp) -> Buffer:
  """The buffer holding exactly the elements of v (a view reading a run of its BUFFER in order): it or a view of it."""
  b, start = view_base(v).arg, contiguous_offset(v)
  assert start is not None, "run_buffer of a view that isn't a run"
  return b if start == 0 and v.size == b.size else b.view(v.size, v.dtype, start * v.dtype.itemsize)

# *** movement ops as index arithmetic ***
def movement_index(n: UOp, idxs: list[UOp]) -> tuple[list[UOp], UOp | None]:
  """The indices into n.src[0] that element idxs of the movement op n reads, and when that element is valid."""
  in_shape, valid = n.src[0].shape, None
  if n.op is Ops.RESHAPE:
    flat, sym = flat_index(idxs, n.shape), symbolic((*n.shape, *in_shape))
    return [UOp.const(dtypes.index, 0) if size_one(s) else flat // st  # (flat < size: a mod by
            if i == 0 and sym else (flat // st) % s  # a value would differ with the Variable)
            for i, (st, s) in enumerate(zip(strides_for_shape(in_shape), in_shape))], None
  if n.op is Ops.PERMUTE:
    ret: list[UOp] = [UOp.const(dtypes.index, 0)] * len(in_shape)
    for i, axis in enumerate(n.arg): ret[axis] = idxs[i]
    return ret, None
  if n.op is Ops.EXPAND:  # (a Variable's length of 1 kept: not a broadcast)
    return [UOp.const(dtypes.index, 0) if s == 1 and (type(s) is not SymInt or not same_shape((s,), (o,))) else i
            for i, s, o in zip(idxs, in_shape, n.shape)], None
  if n.op is Ops.SHRINK: return [i + b for i, (b, _) in zip(idxs, n.arg)], None
  if n.op is Ops.FLIP: return [(s - 1) - i if f else i for i, s, f in zip(idxs, in_shape, n.arg)], None
  if n.op is Ops.PAD:
    ret = []
    for i, s, (b, a) in zip(idxs, in_shape, n.arg):
      if b or a:
        cond = (i < b).logical_not() & (i < b + s) if b else (i < s)
        valid = cond if valid is None else valid & cond
      ret.append(i - b if b else i)
    return ret, valid
  raise RuntimeError(f"{n.op} is not a movement op")

def map_view(n: UOp, base: UOp, idxs: list[UOp]) -> tuple[list[UOp], UOp | None]:
  """Indices into base (below a chain of movement ops ending at n) and the validity condition."""
  valid = None
  while n is not base:
    if n.op is not Ops.DETACH:
      idxs, v = movement_index(n, idxs)
      if v is not None: valid = v if valid is None else valid & v
    n = n.src[0]
  return idxs, valid

# *** building one kernel ***
class KernelBuilder:
  """Lowers the fused subgraph under one realized node into a kernel AST of loads, ALU ops, reduces and a store."""
  def __init__(self, becomes: dict[UOp, UOp], holes: dict[UOp, UOp] | None = None):
    self.becomes, self.holes = becomes, holes or {}
    self.bufs: list[Buffer] = []
    self.var_vals: dict[UOp, int] = {}
    self.reads: set[UOp] = set()  # computed nodes this kernel reads (their kernels must run first)
    self.globals: dict[UOp, int] = {}  # the version (BUFFER node) each kernel argument holds -> its position
    self.memo: dict[tuple, UOp] = {}
    self.next_range = 0

  def global_for(self, version: UOp) -> UOp:
    """The kernel argument for a version of a buffer: one per version, so that a kernel can read two versions of one
    buffer (one of them copied aside, see _order)."""
    if (i := self.globals.get(version)) is None:
      i = self.globals[version] = len(self.bufs)
      self.bufs.append(version.arg)
    return UOp(Ops.DEFINE_GLOBAL, version.arg.dtype.ptr(), (), i)

  def new_ranges(self, shape: tuple[int, ...], kind: AxisType, axes: tuple[int, ...] | None = None) -> list[UOp]:
    ret = []
    for i, s in enumerate(shape):
      sym = type(s) is SymInt  # (a length from a Variable: a loop to it at every value, never split or launched across)
      if size_one(s) or (axes is not None and i not in axes): ret.append(UOp.const(dtypes.index, 0))
      else:
        ret.append(UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, s),),
                       (self.next_range, AxisType.LOOP if sym and kind is AxisType.GLOBAL else kind)))
        self.next_range += 1
    return ret

  def lower(self, n: UOp, idxs: tuple[UOp, ...], gate: UOp | None) -> UOp:
    """The value of node n at indices idxs, loading anything that has a buffer. Iterative: each (node, idxs, gate) is
    planned once, in a recursive walk's order (range numbers follow it), and built once the values it needs are."""
    plans: dict[tuple, tuple[list[tuple], Callable[..., UOp]]] = {}
    stack = [(n, idxs, gate)]
    while stack:
      key = stack[-1]
      if key in self.memo:
        stack.pop()
        continue
      if key not in plans: plans[key] = self._plan(*key)
      needs, make = plans[key]
      if missing := [k for k in needs if k not in self.memo]: stack.extend(reversed(missing))
      else: self.memo[stack.pop()] = make(*(self.memo[k] for k in needs))
    return self.memo[(n, idxs, gate)]

  def _plan(self, n: UOp, idxs: tuple[UOp, ...], gate: UOp | None) -> tuple[list[tuple], Callable[..., UOp]]:
    """One step of lower: the (node, idxs, gate) values n at idxs needs, and how to make it from them."""
    if n in self.becomes:  # computed already: read it from its buffer
      self.reads.add(n)
      return [(self.becomes[n], idxs, gate)], _same
    if n.op is Ops.BUFFER:
      load = UOp(Ops.LOAD, n.dtype, (self.global_for(n), idxs[0]) + ((gate,) if gate is not None else ()))
      return [], lambda: load
    if n.op is Ops.CONST:
      const = h if (h := self.holes.get(n)) is not None else UOp.const(n.dtype, n.arg)
      return [], lambda: const
    if n.op is Ops.BIND:
      var, val = n.unbind()
      if self.var_vals.setdefault(var, val) != val:  # one kernel has one value of each variable
        raise RuntimeError(f"bind mismatch on {var.arg[0]}: bound to {self.var_vals[var]} and to {val} in one kernel")
      return [], lambda: var
    if n.op is Ops.DEFINE_VAR: raise RuntimeError(f"variable {n.arg[0]} is unbound (no value): bind it with .bind(v)")
    if n.op in (Ops.DETACH, Ops.CONTIGUOUS): return [(n.src[0], idxs, gate)], _same
    if n.op in GroupOp.Movement:
      in_idxs, valid = movement_index(n, list(idxs))
      if valid is None: return [(n.src[0], tuple(in_idxs), gate)], _same
      return [(n.src[0], tuple(in_idxs), valid if gate is None else gate & valid)], \
        lambda val: valid.where(val, UOp.const(n.dtype, 0))
    if n.op is Ops.REDUCE_AXIS:
      op, axes = n.arg
      ranges = self.new_ranges(n.src[0].shape, AxisType.REDUCE, axes)
      red_idxs = tuple(r if i in axes else idx for i, (idx, r) in enumerate(zip(idxs, ranges)))
      return [(n.src[0], red_idxs, gate)], \
        lambda val: UOp(Ops.REDUCE, n.dtype, (val,) + tuple(r for r in ranges if r.op is Ops.RANGE), op)
    if n.op in GroupOp.Elementwise: return [(s, idxs, gate) for s in n.src], lambda *src: UOp(n.op, n.dtype, src, n.arg)
    raise RuntimeError(f"the scheduler can't lower {n.op}")

  def build(self, out_buf: Buffer, value: UOp, target: UOp | None = None) -> UOp:
    """The kernel storing value into out_buf: contiguously, or through the view target (a view of the version of
    out_buf it overwrites) if assigning."""
    out = self.global_for(view_base(target) if target is not None else UOp(Ops.BUFFER, out_buf.dtype, (), out_buf))
    ranges = tuple(self.new_ranges(value.shape, AxisType.GLOBAL))
    val = self.lower(value, ranges, None)
    idx = flat_index(ranges, value.shape)
    if target is not None:
      base = view_base(target)
      tidxs, valid = map_view(target, base, list(ranges))
      # a pad the view cuts away again (strided slices pad, reshape, then shrink) leaves a condition that always holds
      if valid is not None and simplify(valid) is not UOp.const(dtypes.bool, True):
        raise ValueError(f"assign: can't assign into a padded view of shape {target.shape}")
      idx = flat_index(tidxs, base.shape)
    raw = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, idx, val)),))
    if binds := [u for u in raw.toposort() if u.op is Ops.BIND]:  # sizes from Variables (SymInt): their values
      for b in binds: self.lower(b, (), None)
      raw = raw.substitute({b: b.src[0] for b in binds})
    built = state.STATE.built
    built[raw] = None
    built.move_to_end(raw)
    while len(built) > max(PROGRAM_CACHE.value, 1): built.popitem(last=False)
    return self._drop_unused_buffers(simplify(raw))

  def _drop_unused_buffers(self, ast: UOp) -> UOp:
    """Simplification can remove every load of a buffer (a read that padding hides): renumber the rest."""
    used = sorted({u.arg for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL})
    if used == list(range(len(self.bufs))): return ast
    renumber = {UOp(Ops.DEFINE_GLOBAL, self.bufs[old].dtype.ptr(), (), old):
                UOp(Ops.DEFINE_GLOBAL, self.bufs[old].dtype.ptr(), (), new) for new, old in enumerate(used)}
    self.bufs = [self.bufs[old] for old in used]
    self.globals = {v: used.index(i) for v, i in self.globals.items() if i in used}
    return ast.substitute(renumber)

# *** the schedule ***
@dataclass
class _Step:
  node: UOp
  item: ScheduleItem
  reads: set[UOp]  # computed nodes it reads
  loads: dict[UOp, int]  # the versions of buffers it reads -> their position in item.bufs
  overwrites: UOp | None = None  # for the step of an assign that writes the target: the version it overwrites
  writes: UOp | None = None  # ... and the version it makes

@dataclass
class Schedule:
  """The result of scheduling: items in run order; what each realized node becomes (and where a version the schedule
  copied aside is); and for each write, the version it overwrites with the index of its item (a weak reference:
  `state.snapshot_before` copies it first if something else still refers to it)."""
  items: list[ScheduleItem]
  becomes: dict[UOp, UOp]
  overwritten: list[tuple[weakref.ReferenceType[UOp], int]]
  overwritten_ids: list[tuple[Buffer, int | None]] = field(default_factory=list)  # state.version_id of each
  reads_input: dict[UOp, bool] = field(default_factory=dict)  # Graph.reads_input, for state.remember

@dataclass
class Graph:
  """The part of a graph a schedule computes: its nodes (sources first, down to the leaves), and for each leaf that
  was computed before (or is an old version of a buffer) where its value is now."""
  outs: list[UOp]
  nodes: list[UOp]
  becomes: dict[UOp, UOp]
  leaves: set[UOp]
  holes: dict[UOp, UOp] = field(default_factory=dict)  # constants kernels get as placeholders (engine/cache.py)

  def reads_input(self) -> dict[UOp, bool]:
    """For each node: does its graph have a buffer or a variable in it (a leaf: a stored value, always does)?"""
    ret: dict[UOp, bool] = {}
    for n in self.nodes:
      ret[n] = n.op in (Ops.BUFFER, Ops.BIND, Ops.DEFINE_VAR) or n in self.leaves or any(ret[s] for s in n.src)
    return ret

def collect(outs: list[UOp]) -> Graph:
  """The nodes under outs, not looking below a BUFFER or a node whose value is stored already (state.lookup)."""
  becomes: dict[UOp, UOp] = {}
  leaves: set[UOp] = set()  # nodes computed before (or old versions): becomes holds where their values are now
  def below(n: UOp) -> tuple[UOp, ...]:
    if n.op is not Ops.BUFFER and "realized" not in n._cache: return n.src  # (state.lookup's answer: None, quickly)
    if (view := state.lookup(n)) is not None:
      becomes[n] = state.resolve(view)
      leaves.add(n)
      return ()
    return () if n.op is Ops.BUFFER else n.src
  return Graph(list(outs), list(postorder(outs, below)), becomes, leaves)

def create_schedule(outs: list[UOp]) -> Schedule:
  """Kernels and copies that compute outs, in run order, and what each realized node becomes (a view of its buffer)."""
  return schedule_graph(collect(outs))

def schedule_graph(g: Graph, built: Callable[[ScheduleItem], Any] = lambda si: None) -> Schedule:
  """create_schedule, for the graph collect() walked; built(item) is told of each item as it is made (its kernel can
  compile while the rest is scheduled)."""
  outs, nodes, becomes, leaves = g.outs, g.nodes, dict(g.becomes), g.leaves
  new, parts = split_reduces(nodes, becomes)
  if new:  # the graph with big reduces split: scheduled instead, and each changed node answered for by its new one
    outs = [new.get(o, o) for o in outs]
    sink = UOp(Ops.SINK, dtypes.void, tuple(outs))
    nodes = [n for n in sink.toposort(gate=lambda n: not (n.op is Ops.BUFFER or n in becomes)) if n is not sink]
  to_realize = find_realizes(outs, nodes, becomes, parts)
  steps: list[_Step] = []
  newer: dict[Buffer, UOp] = {}  # the versions this schedule writes, the newest of each buffer
  def get_storage(n: UOp) -> UOp | None: return state.lookup_raw(n) if n in leaves else becomes.get(n)
  def add(*made: _Step) -> None:
    steps.extend(made)
    for st in made: built(st.item)
  for n in to_realize:
    if n.op is Ops.ASSIGN:
      target = state.storage(n.src[0], get_storage, newer)  # the buffer's version when this write runs
      add(*_assign_steps(n, target, becomes, g.holes))
      becomes[n] = steps[-1].writes = state.new_version(target)
      newer[view_base(target).arg] = view_base(becomes[n])
    elif n.op is Ops.CONTIGUOUS and is_identity_view(src := resolve_view(n.src[0], becomes)) and \
         view_base(src).arg not in newer:  # (a buffer this schedule writes: a copy, ordered after the write)
      becomes[n] = src.reshape(n.shape)  # contiguous of an in-order view of a whole buffer is that buffer
    else:
      size = n.size.expr.vmax if type(n.size) is SymInt and n.op is not Ops.COPY else n.size  # (a kernel's result:
      buf = Buffer(n.device or "CPU", size, n.dtype)  # room for every value of its Variables, for replays)
      if n.size and n.op is Ops.COPY:
        src = resolve_view(n.src[0], becomes)
        add(_Step(n, copy_item(buf, run_buffer(src)), {n.src[0]}, {view_base(src): 1}))
      elif n.size: add(_kernel_step(n, KernelBuilder(becomes, g.holes), buf))
      becomes[n] = UOp(Ops.BUFFER, n.dtype, (), buf).shrink(((0, n.size),)).reshape(n.shape)
  realized = {n: becomes[n] for n in to_realize}
  for old, n in new.items():
    if old.op not in GroupOp.Movement and (view := resolve_view(n, realized)) is not n: realized[old] = view
  ordered = _order(steps, set(to_realize), realized)
  dprint(3, f"scheduled {len(steps)} kernels/copies for {len(outs)} outputs ({len(nodes)} graph nodes)")
  writes = [(st.overwrites, i) for i, st in enumerate(ordered) if st.overwrites is not None
            and st.overwrites not in realized]
  if new:  # the nodes the split made are not the caller's: only the graph's own are answered for
    orig = set(g.nodes)
    realized = {n: v for n, v in realized.items() if n in orig}
  return Schedule([st.item for st in ordered], realized, [(weakref.ref(v), i) for v, i in writes],
                  [state.version_id(v) for v, _ in writes], g.reads_input())

def copy_item(dest: Buffer, src: Buffer) -> ScheduleItem:
  return ScheduleItem(UOp(Ops.COPY, dest.dtype, (), (dest.device, None)), (dest, src))

def _kernel_step(n: UOp, kb: KernelBuilder, buf: Buffer, value: UOp | None = None, target: UOp | None = None) -> _Step:
  """The kernel storing value (n itself by default) into buf (through target, if assigning)."""
  ast = kb.build(buf, n if value is None else value, target)
  loads = {v: i for v, i in kb.globals.items() if i != 0}
  return _Step(n, ScheduleItem(ast, tuple(kb.bufs), kb.var_vals), kb.reads, loads)

def _assign_steps(n: UOp, target: UOp, becomes: dict[UOp, UOp], holes: dict[UOp, UOp]) -> list[_Step]:
  """The kernel(s) for an assign of n.src[1] into target (a view of the version it overwrites): one kernel, or two
  (value to a temp, then a copy) if the value reads the target at other positions than it writes (x.assign(x.flip(0))
  must not read values it already overwrote)."""
  value, version = n.src[1], view_base(target)
  if version.op is not Ops.BUFFER: raise RuntimeError("assign: the target must be realized first")
  step = _kernel_step(n, KernelBuilder(becomes, holes), version.arg, value, target)
  store = step.item.ast.src[0]
  loads = [u for u in step.item.ast.toposort() if u.op is Ops.LOAD and u.src[0] is store.src[0]]
  if any(u.src[1:] != store.src[1:2] for u in loads):
    tmp = Buffer(version.arg.device, value.size, value.dtype)
    first = _kernel_step(n, KernelBuilder(becomes, holes), tmp, value)
    tmp_view = UOp(Ops.BUFFER, value.dtype, (), tmp).reshape(value.shape)
    step = _kernel_step(n, KernelBuilder(becomes, holes), version.arg, tmp_view, target)
    steps = [first, step]
  else: steps = [step]
  step.overwrites = version
  return steps

def _order(steps: list[_Step], scheduled: set[UOp], becomes: dict[UOp, UOp]) -> list[_Step]:
  """Run order: each step after the steps whose results it reads; a step that reads a version of a buffer before the
  write that overwrites it, or, when it must run after that write (it reads a result of it), from a copy of the
  version made before the write (its view goes into becomes)."""
  made_by: dict[UOp, list[int]] = {}
  for i, st in enumerate(steps): made_by.setdefault(st.node, []).append(i)
  deps: list[set[int]] = [set() for _ in steps]
  for i, st in enumerate(steps):
    deps[i].update(j for r in st.reads if r in scheduled for j in made_by.get(r, []) if j < i)
    deps[i].update(j for j in made_by[st.node] if j < i)  # the two halves of an assign
  made_version = {view_base(st.writes): i for i, st in enumerate(steps) if st.writes is not None}
  for j, w in enumerate(steps):  # two writes into one buffer: in order
    if w.overwrites in made_version: deps[j].add(made_version[w.overwrites])
  for j, w in enumerate(list(steps)):
    if (version := w.overwrites) is None: continue
    for i, r in enumerate(list(steps)):
      if i == j or (pos := r.loads.get(version)) is None: continue
      if j not in _all_deps(i, deps):
        deps[j].add(i)  # write after read
        continue
      if version not in becomes:  # the copy, made after the version is written and before it is overwritten
        copy = Buffer(version.arg.device, version.arg.size, version.arg.dtype)
        becomes[version] = UOp(Ops.BUFFER, version.dtype, (), copy)
        steps.append(_Step(version, copy_item(copy, version.arg), set(), {version: 1}))
        deps.append({made_version[version]} if version in made_version else set())
        deps[j].add(len(steps) - 1)
        made_by[version] = [len(steps) - 1]
      bufs = list(r.item.bufs)
      bufs[pos] = view_base(becomes[version]).arg
      r.item = ScheduleItem(r.item.ast, tuple(bufs), r.item.var_vals)
      del r.loads[version]
      deps[i].update(made_by[version])
  # depth first, with no recursive closure (its cycle would keep the versions named alive: needless snapshots)
  order: list[int] = []
  done = [False] * len(steps)
  for root in range(len(steps)):
    stack = [(root, False)]
    while stack:
      i, expanded = stack.pop()
      if done[i]: continue
      if expanded:
        done[i] = True
        order.append(i)
      else: stack.extend([(i, True)] + [(d, False) for d in sorted(deps[i], reverse=True) if not done[d]])
  if len({st.item.bufs[0].device for st in steps}) > 1: order = _by_level(steps, order, deps)
  position = {i: k for k, i in enumerate(order)}
  assert all(position[d] < position[i] for i in order for d in deps[i]), "the schedule's dependencies have a cycle"
  return [steps[i] for i in order]

def _by_level(steps: list[_Step], order: list[int], deps: list[set[int]]) -> list[int]:
  """order re-sorted by depth (stably) for steps on several devices, so each computes its part of a reduce before
  the copy into it waits. A step stays after those that write what it reads or read what it writes before it."""
  level: dict[int, int] = {}
  written, read = dict[Buffer, int](), dict[Buffer, int]()  # the level of the last write into / read of each buffer
  for i in order:
    out, *ins = steps[i].item.bufs
    level[i] = 1 + max([level[d] for d in deps[i]] + [written.get(b, 0) for b in (out, *ins)] + [read.get(out, 0)])
    written[out] = level[i]
    read.update((b, max(read.get(b, 0), level[i])) for b in ins)
  return sorted(order, key=level.__getitem__)

def _all_deps(i: int, deps: list[set[int]]) -> set[int]:
  seen, stack = set(), list(deps[i])
  while stack:
    if (d := stack.pop()) not in seen:
      seen.add(d)
      stack.extend(deps[d])
  return seen

