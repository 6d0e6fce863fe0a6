"""Realization state, owned by this module alone (DESIGN.md, invariant 10): where each computed value lives, which
version of a buffer a graph reads, and `STATE`, the rest of it in one object (docs/developer/realize.md)."""
from __future__ import annotations
import itertools, threading, weakref
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, NamedTuple
from fusegrad.device import Buffer
from fusegrad.dtype import dtypes
from fusegrad.helpers import WeakList
from fusegrad.uop.ops import UOp, Ops, GroupOp, SymInt, sym_infer

VIEW_OPS = GroupOp.Movement | {Ops.DETACH}
MAY_FOLLOW = VIEW_OPS | {Ops.BUFFER, Ops.ASSIGN}  # the nodes `current` may replace

class JitError(RuntimeError):
  """A TinyJit call that can't be captured or replayed, or a `function` call that can't be traced."""

def check_not_capturing(what: str) -> None:  # reading values while TinyJit captures is refused, as tinygrad's
  if STATE.capturing: raise JitError(f"TinyJit: {what} reads tensor data during the capture: replays would keep it")

@dataclass
class Capture:
  """What one TinyJit capture records: the ExecItems that run, the index flags' buffers, and the schedule number it
  began at (values stored before it are computed again: see `lookup`)."""
  items: list = field(default_factory=list)
  flags: list = field(default_factory=list)
  bounds: list = field(default_factory=list)  # (start, end, axis size, slice) of each length from a Variable made
  since: int = 0
  thread: int = field(default_factory=threading.get_ident)  # the thread capturing

class NodeMap:
  """node -> value, weakly: kept in the node's own _cache under key, so it lives as long as the node and a lookup (one
  per node of every graph realized) is a plain dict get (no weakref callbacks); a weak list of the nodes given one."""
  def __init__(self, key: str) -> None: self.key, self.nodes = key, WeakList()
  def get(self, n: UOp) -> Any: return n._cache.get(self.key)
  def __contains__(self, n: UOp) -> bool: return self.key in n._cache
  def __setitem__(self, n: UOp, value: Any) -> None:
    if self.key not in n._cache: self.nodes.add(n)
    n._cache[self.key] = value
  def pop(self, n: UOp, default: Any = None) -> Any: return n._cache.pop(self.key, default)
  def items(self) -> list[tuple[UOp, Any]]:
    return [(n, n._cache[self.key]) for n in dict.fromkeys(self.nodes) if self.key in n._cache]
  def __len__(self) -> int: return len(self.items())

@dataclass
class Realization:
  """The realization state of a process (besides the versions and `memo` below, which live on Buffers and nodes)."""
  programs: OrderedDict = field(default_factory=OrderedDict)  # realize.get_runner: (device, AST) -> program, LRU
  templates: OrderedDict = field(default_factory=OrderedDict)  # cache.cached_schedule: graph key -> Template, LRU
  quick: OrderedDict = field(default_factory=OrderedDict)  # cache.plan_schedule: quick key -> QuickPlan | None, LRU
  # schedule.build: recent kernels as built, kept alive with their simplified forms (a capture finds them); LRU
  built: OrderedDict = field(default_factory=OrderedDict)
  index_checks: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)  # node -> [IndexCheck]
  lazy_defs: NodeMap = field(default_factory=lambda: NodeMap("lazy_def"))  # realizer.remember_lazy_def
  # tensors with requires_grad=True, and every floating tensor (backward() fills .grad for those in its graph)
  grad_tensors: weakref.WeakValueDictionary = field(default_factory=weakref.WeakValueDictionary)
  float_tensors: WeakList = field(default_factory=WeakList)
  rng_counter: int = 0  # random numbers drawn since the seed was set (Tensor.manual_seed)
  value_shapes: int = 0  # shapes made from a bound Variable's value (x[:v]): a capture made one can't replay others
  epoch: int = 0  # schedules remembered so far
  captures: list[Capture] = field(default_factory=list)  # TinyJit captures in progress, innermost last
  realize_hooks: list[Callable[[list[UOp]], None]] = field(default_factory=list)  # called with the nodes of a realize

  @property
  def capturing(self) -> Capture | None:
    """The capture this thread is making, if any. Another thread's realizes wait for it (RUN_LOCK); what runs outside
    that lock (graph building, reads) asks this, so that another thread's capture isn't taken for its own."""
    return caps[-1] if (caps := self.captures) and caps[-1].thread == threading.get_ident() else None
  def reset(self) -> None:
    """Drop the caches and pending index checks (tests: as a new process would start; versions and memo stay)."""
    for d in (self.programs, self.templates, self.quick, self.built, self.index_checks): d.clear()

STATE = Realization()

def concrete(x: Any) -> Any:
  """x (a size, or tuples and lists of them) with each expression of bound Variables as its value: no shape is symbolic
  here (Tensor.ones(v, 3), x[:v]); STATE.value_shapes counts them, so TinyJit and function trace per value then."""
  if isinstance(x, (tuple, list)): return x if all(type(v) is int for v in x) else type(x)(concrete(v) for v in x)
  if not isinstance(x, UOp): return x
  STATE.value_shapes += 1
  return SymInt(x) if x.variables() else sym_infer(x, {})

# *** views: the one walk down a chain of movement ops (and DETACH) ***
def view_chain(u: UOp) -> tuple[list[UOp], UOp]:
  """(the movement ops and DETACHes over u's base, outermost first; the base)."""
  chain = []
  while u.op in VIEW_OPS:
    chain.append(u)
    u = u.src[0]
  return chain, u

def view_base(u: UOp) -> UOp:
  """The node under movement ops and DETACH: what a view is a view of."""
  while u.op in VIEW_OPS: u = u.src[0]
  return u

def rebuild(base: UOp, chain: list[UOp]) -> UOp:
  """The chain of views (outermost first) put back on top of base."""
  for c in reversed(chain): base = c.replace(src=(base,))
  return base

def is_realized(u: UOp) -> bool:
  """True when u is a view of memory that holds its values (or of a constant): realize has nothing to do."""
  return view_base(u).op in (Ops.BUFFER, Ops.CONST)

# *** versions of a buffer *** the write id of a buffer's newest version is kept on the Buffer (Buffer.newest_write,
# set only from here); read by every lookup of a buffer's node, so a plain attribute rather than a weak dictionary
_write_ids = itertools.count(1)

def buffer_node(buf: Buffer) -> UOp:
  """The node of buf's newest version."""
  w = buf.newest_write
  return UOp(Ops.BUFFER, buf.dtype, () if w is None else (UOp(Ops.NOOP, dtypes.void, (), w),), buf)

def new_version(view: UOp) -> UOp:
  """The view over a new version of its buffer (what a write into it leaves; `remember` makes it the newest)."""
  chain, base = view_chain(view)
  return rebuild(version_node(base.arg, base.dtype), chain)

def version_node(buf: Buffer, dtype: Any) -> UOp:
  """A new version of buf (not the newest until `remember`)."""
  return UOp(Ops.BUFFER, dtype, (UOp(Ops.NOOP, dtypes.void, (), next(_write_ids)),), buf)

def rewritten(bufs: list[Buffer]) -> None:
  """bufs were written outside a schedule (a TinyJit replay): each gets a new newest version, so that a graph built
  after reads the new contents instead of a value computed before from the old ones (a tensor viewing a buffer
  follows it: `current`)."""
  for b in bufs: b.base.written(next(_write_ids))

def version_id(v: UOp) -> tuple[Buffer, int | None]:
  """(buffer, write id) of a version node: which contents it names, even after the node itself is gone."""
  return v.arg, v.src[0].arg if v.src else None

def is_newest(v: UOp) -> bool:
  """True when the version node v is its buffer's newest."""
  return (v.src[0].arg if v.src else None) == v.arg.newest_write

def current(u: UOp, newer: dict[Buffer, UOp] | None = None) -> UOp:
  """u, or if u is a view of an older version of a buffer (or of a write done already), the same view of its newest
  version (newer: versions a schedule being built writes, not yet the newest)."""
  base = u
  while base.op in VIEW_OPS: base = base.src[0]
  if base.op is Ops.ASSIGN and lookup_raw(base) is not None: return storage(u)  # a write done already
  if base.op is not Ops.BUFFER: return u
  if (node := newer.get(base.arg) if newer else None) is None:
    if (base.src[0].arg if base.src else None) == base.arg.newest_write: return u
    node = buffer_node(base.arg)
  return u if node is base else rebuild(node, view_chain(u)[0])

# *** computed values ***
class Realized(NamedTuple):
  """Where a node's value lives: a view of a BUFFER (for an assign, the view written). (A named tuple: one is made
  per value computed, and a frozen dataclass is several times slower to make.)"""
  view: UOp
  epoch: int  # which schedule stored it (see capture)

memo = NodeMap("realized")  # node -> Realized

@contextmanager
def capture() -> Iterator[Capture]:
  """While TinyJit captures: every ExecItem run and index flag read is recorded in the Capture, and values computed
  before are computed again, so that every kernel is recorded. (Snapshots of overwritten versions still apply: they
  are the only place those values are.)"""
  STATE.captures.append(cap := Capture(since=STATE.epoch))
  try: yield cap
  finally: STATE.captures.pop()

def lookup(n: UOp, raw: bool = False) -> UOp | None:
  """Where n's value is, if not in n itself: the buffer view holding it if n was computed; for an overwritten version
  of a buffer (unless raw), its copy, or if nothing referred to it when it was overwritten, the newest version (it was
  made again since, and names the buffer)."""
  if (entry := memo.get(n)) is not None:
    # a capture computes values again (to record their kernels), but never a write done before it: that is history
    caps = STATE.captures
    if not (caps and n.op not in (Ops.BUFFER, Ops.ASSIGN) and entry.epoch < caps[-1].since): return entry.view
  elif n.op is Ops.BUFFER and not raw and (cur := current(n)) is not n: return cur
  return None

def lookup_raw(n: UOp) -> UOp | None: return None if n.op is Ops.BUFFER else lookup(n, raw=True)

def resolve(u: UOp, get: Callable[[UOp], UOp | None] = lookup) -> UOp:
  """u as a view of memory: the first computed node on the way down its view chain replaced by where its value is
  (get), the views above it kept. u itself when it is not a view of anything computed."""
  chain: list[UOp] = []
  while (found := get(u)) is None:
    if u.op not in VIEW_OPS: return rebuild(u, chain)
    chain.append(u)
    u = u.src[0]
  return rebuild(resolve(found, get), chain)

def storage(u: UOp, get: Callable[[UOp], UOp | None] = lookup_raw, newer: dict[Buffer, UOp] | None = None) -> UOp:
  """The memory a view names (of a buffer, or of a write into one: an assign), as a view of its buffer's newest version.
  An assign names storage, not a value: a tensor holding one, and a write into it, follow later writes into it (get:
  where computed nodes are, not following copies of old versions)."""
  chain, base = view_chain(u)
  if base.op is not Ops.BUFFER:
    if (found := get(base)) is None: return u
    u = rebuild(found, chain)
  return current(u, newer)

def remember(becomes: dict[UOp, UOp], reads_input: dict[UOp, bool] | None = None) -> None:
  """Record what a schedule computed (call before running it: the writes must be known to decide snapshots).
  The version an assign writes becomes its buffer's newest."""
  reads_input = {} if reads_input is None else reads_input  # known answers (Graph.reads_input), added to here
  for n, view in becomes.items():
    if n.op is Ops.ASSIGN:
      base = view_base(view)
      base.arg.written(base.src[0].arg)
    # a value of constants alone (an arange) is computed again by its users, folded into index math, unless contiguous
    if n.op in (Ops.ASSIGN, Ops.CONTIGUOUS) or reads_input.get(n) or _reads_input(n, reads_input):  # (known: no call)
      memo[n] = Realized(view, STATE.epoch)
  STATE.epoch += 1

def _reads_input(n: UOp, known: dict[UOp, bool]) -> bool:
  """True when n's graph has a buffer or a variable in it (known: the answers for nodes walked before)."""
  if (ret := known.get(n)) is not None: return ret
  for u in n.toposort(gate=lambda u: u not in known):
    if u not in known: known[u] = u.op in (Ops.BUFFER, Ops.BIND, Ops.DEFINE_VAR) or any(known[s] for s in u.src)
  return known[n]

def forget(bufs: set[Buffer]) -> None:
  """Drop the values stored in bufs (a schedule that failed before filling them)."""
  forget_nodes([n for n, entry in memo.items() if view_base(entry.view).arg in bufs])

def forget_nodes(nodes: list[UOp]) -> None:
  """Drop the stored values of nodes (memory.plan: their memory holds other values later): computed again if asked."""
  for n in nodes: memo.pop(n, None)

def snapshot_before(overwritten: list[tuple[weakref.ReferenceType[UOp], int]], items: list[Any],
                    copy_item: Callable[[Buffer, Buffer], Any]) -> list[Any]:
  """items with a copy of each overwritten version that something still refers to, just before the write (its
  index in items). Later reads of the version go to the copy."""
  if overwritten and STATE.lazy_defs: drop_stale_defs({v for ref, _ in overwritten if (v := ref()) is not None})
  inserts: dict[int, list[Any]] = {}
  for ref, i in overwritten:
    if (version := ref()) is None: continue  # nothing can read it again: overwrite in place
    buf: Buffer = version.arg
    copy = Buffer(buf.device, buf.size, buf.dtype)
    memo[version] = Realized(UOp(Ops.BUFFER, buf.dtype, (), copy), STATE.epoch)
    inserts.setdefault(i, []).append(copy_item(copy, buf))
  return [x for i, si in enumerate(items) for x in (*inserts.get(i, ()), si)] if inserts else items

def drop_stale_defs(versions: set[UOp]) -> None:
  """A graph kept for autograd (STATE.lazy_defs) keeps no version alive (kept losses kept the weights, a copy a step):
  a write over one it reads drops it; a backward through it then raises if it required grad, as torch's."""
  for k, d in STATE.lazy_defs.items():  # (a list: entries may change meanwhile)
    if d is not None and any(b in versions for b in d[2]):
      if d[1]: STATE.lazy_defs[k] = None
      else: STATE.lazy_defs.pop(k)

# *** storage ownership *** the tensor first realized into a buffer owns it: Buffer.owner, a weakref (Buffer.claim)

def buffers_read(u: UOp, resolve_root: bool = True) -> set[Buffer]:
  """The buffers u's graph reads (through computed nodes, and through u itself if resolve_root)."""
  ret = set()
  for n in u.toposort():
    view = lookup(n) if resolve_root or n is not u else None
    b = view_base(view) if view is not None else n
    if b.op is Ops.BUFFER: ret.add(b.arg.base)
  return ret

def claim_storage(t: Any, lazy: UOp) -> bool:
  """Record tensor t (just realized from the node lazy) as the owner of the buffer it is a view of. False (t needs a
  copy) when that is another live tensor's storage that lazy doesn't name: equal graphs are one node, and an assign to
  one of two tensors computing it must not change the other. Views and contiguous() share storage on purpose."""
  base = view_base(t.uop)
  if base.op is not Ops.BUFFER: return True
  buf = base.arg.base
  owner = buf.owner() if buf.owner is not None else None
  owner_base = view_base(owner.uop) if owner is not None else None
  if owner_base is None or owner is t or owner_base.op is not Ops.BUFFER or owner_base.arg.base is not buf:
    buf.claim(t)
    return True
  return buf in buffers_read(lazy, resolve_root=False)
