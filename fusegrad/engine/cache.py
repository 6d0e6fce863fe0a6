"""The schedule cache: a graph shaped like one scheduled before gets that schedule again, with its own buffers (keys,
templates and the quick path: docs/developer/scheduler.md, section 6). A TinyJit capture takes no quick path."""
from __future__ import annotations
import hashlib, json, math, time, weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable
from fusegrad.device import Buffer, Device
from fusegrad.dtype import dtypes, DType, PtrDType
from fusegrad.helpers import SCHEDULE_CACHE, SPLIT_REDUCEOP, DISABLE_COMPILER_CACHE, ContextVar, diskcache_get
from fusegrad.helpers import diskcache_put, code_version
from fusegrad.uop.ops import UOp, Ops, GroupOp, AxisType, _arg_key
from fusegrad.uop.symbolic import simplify
from fusegrad.codegen.cache import _DTYPES
from fusegrad.engine import state
from fusegrad.engine.state import STATE
from fusegrad.engine.schedule import Graph, Schedule, ScheduleItem, collect, schedule_graph

class CacheStats:
  """Counts since the last reset(): schedules reused (hits; quick: those by the quick path), made and kept (misses),
  made and not cacheable."""
  hits = quick = misses = uncacheable = 0
  @staticmethod
  def reset() -> None: CacheStats.hits = CacheStats.quick = CacheStats.misses = CacheStats.uncacheable = 0

class _Uncacheable(Exception): pass

class _Numbering:
  """The buffers and versions a graph's leaves name, numbered in the order met; parts: their key entries. holes: the
  float constants kernels get as placeholders, fill: each one's constant, values: their values, filled: _fill_item's."""
  def __init__(self) -> None:
    self.bufs, self.versions, self.parts = dict[Buffer, int](), dict[UOp, int](), list[tuple]()
    self.holes, self.fill, self.values, self.filled = dict[UOp, UOp](), dict[UOp, UOp](), list[Any](), dict[UOp, Any]()
  def version(self, v: UOp) -> int:
    if (i := self.versions.get(v)) is None:
      if (b := self.bufs.get(v.arg)) is None:
        b = self.bufs[v.arg] = len(self.bufs)
        self.parts.append(("buf", v.arg.device, v.arg.size, v.arg.dtype))
      i = self.versions[v] = len(self.versions)
      self.parts.append(("version", b, v.dtype, state.is_newest(v)))
    return i
  def view(self, u: UOp) -> tuple:
    chain, base = state.view_chain(u)
    if base.op is not Ops.BUFFER: raise _Uncacheable
    return tuple((c.op, c.dtype, c.arg) for c in chain), self.version(base)

def _arg(n: UOp) -> Any:
  if n.op is Ops.CONST: return _arg_key(n.arg)
  if n.op is Ops.CONTIGUOUS or n.op is Ops.ASSIGN: return None  # a unique id: tells two nodes apart, as positions do
  if n.op is Ops.COPY: return n.arg[0], n.arg[1] is not None
  return _arg_key(n.arg)  # a float by its bits: 0.0 and -0.0 differ

def _is_parameter(c: UOp) -> bool:
  """A float constant whose value the scheduler can't use for anything but its value (0, 1, -1, inf and nan simplify
  expressions: those stay in the key)."""
  return dtypes.is_float(c.dtype) and c.dtype.count == 1 and math.isfinite(c.arg) and c.arg not in (0.0, 1.0, -1.0)

_OWN_ARG = (Ops.CONST, Ops.CONTIGUOUS, Ops.ASSIGN, Ops.COPY)  # ops whose arg _arg keys in its own way

def graph_key(g: Graph) -> tuple[tuple, _Numbering]:
  num, pos, entries, leaves = _Numbering(), dict[UOp, int](), list[tuple](), g.leaves
  for i, n in enumerate(g.nodes):
    pos[n] = i
    if (op := n.op) not in _OWN_ARG and op is not Ops.BUFFER and type(n.arg) is not float and n not in leaves:
      entries.append((op, n.dtype, n.arg, tuple([pos[s] for s in n.src])))  # the common node, quickly (as below)
    elif n in leaves:
      raw = state.lookup_raw(n)  # an assign into a computed assign writes where it wrote (state.storage)
      entries.append(("leaf", num.view(g.becomes[n]), None if raw is None else num.view(raw)))
    elif n.op is Ops.BUFFER: entries.append(("buffer", num.version(n)))
    elif n.op is Ops.CONST and _is_parameter(n):
      num.holes[n] = hole = UOp(Ops.NOOP, n.dtype, (), ("const", i))
      num.fill[hole] = UOp.const(n.dtype, n.arg)
      num.values.append(_arg_key(n.arg))
      entries.append((n.op, n.dtype, "parameter", tuple(map(pos.__getitem__, n.src))))
    else: entries.append((n.op, n.dtype, _arg(n), tuple(map(pos.__getitem__, n.src))))
  # the settings the scheduler reads are part of the key
  return (tuple(entries), tuple(pos[o] for o in g.outs), tuple(num.parts), SPLIT_REDUCEOP.value), num

# *** templates ***
VersionRef = tuple  # ("key", i) | ("new", j) | ("made", buffer ref, dtype) | ("newest", i)
ViewRef = tuple[tuple, VersionRef]  # (the views over it, outermost first, as (op, dtype, arg); the version)

@dataclass
class Template:
  items: list[tuple[UOp, tuple[int, ...], dict[UOp, int]]]  # ast, buffer refs (>= 0: the key's, < 0: made), vars
  becomes: list[tuple[tuple, ViewRef]]  # (("node", position) or a version ref, where its value is)
  overwritten: list[tuple[VersionRef, int]]
  made: list[tuple[str, int, Any]]  # the buffers the schedule makes: device, size, dtype
  new: list[tuple[int, Any]]  # the versions it writes: buffer ref, dtype
  reads_input: tuple[bool, ...] = ()  # Graph.reads_input by node position (the key fixes it)
  filled: OrderedDict[tuple, list[tuple[UOp, tuple[int, ...] | None]]] = field(default_factory=OrderedDict)  # by values

def _fill_one(ast: UOp, num: _Numbering) -> tuple[UOp, tuple[int, ...] | None]:
  """A kernel made with placeholders, with the constants in it, simplified as the scheduler would have; and if that
  removed every load of a buffer (a where its value decides), the positions of the buffers it still uses (renumbered,
  as the scheduler drops unused buffers)."""
  if (new := ast.substitute(num.fill)) is ast: return ast, None
  new = simplify(new)
  before = {u.arg: u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}
  used = sorted({u.arg for u in new.toposort() if u.op is Ops.DEFINE_GLOBAL})
  if len(used) == len(before): return new, None
  return new.substitute({before[old]: before[old].replace(arg=i) for i, old in enumerate(used)}), tuple(used)

def _pick(bufs: tuple, kept: tuple[int, ...] | None) -> tuple:
  return bufs if kept is None else tuple(bufs[i] for i in kept)

def _fill_item(si: ScheduleItem, num: _Numbering) -> ScheduleItem:
  ast, kept = num.filled.get(si.ast) or num.filled.setdefault(si.ast, _fill_one(si.ast, num))
  return ScheduleItem(ast, _pick(si.bufs, kept), si.var_vals)

def fill(sched: Schedule, num: _Numbering) -> Schedule:
  """sched (made with the float constants as placeholders) with the constants' values in its kernels."""
  if num.fill: sched.items = [_fill_item(si, num) for si in sched.items]
  return sched

def _filled(t: Template, num: _Numbering) -> list[tuple[UOp, tuple[int, ...] | None]]:
  """t's kernels with num's constants in them (the last few sets of values are kept)."""
  if not num.fill: return [(ast, None) for ast, _, _ in t.items]
  if (asts := t.filled.get(values := tuple(num.values))) is None:
    asts = t.filled[values] = [_fill_one(ast, num) for ast, _, _ in t.items]
    if len(t.filled) > 4: t.filled.popitem(last=False)
  return asts

class _Refs:
  """A recorded schedule's buffers as references: i >= 0 the key's i-th buffer, -1 - j the j-th buffer the schedule
  makes (made again at each use: one not yet allocated and not a view); anything else raises _Uncacheable."""
  def __init__(self, keyed: dict[Buffer, int]): self.keyed, self.made = keyed, dict[Buffer, int]()
  def __call__(self, b: Buffer) -> int:
    if (i := self.keyed.get(b)) is not None: return i
    if (j := self.made.get(b)) is None:
      if b.is_allocated() or b._base is not None: raise _Uncacheable
      j = self.made[b] = len(self.made)
    return -1 - j
  def parts(self) -> list[tuple[str, int, Any]]: return [(b.device, b.size, b.dtype) for b in self.made]

def _buffers(keyed: list[Buffer], made: list[tuple[str, int, Any]]) -> list[Buffer]:
  """One list for every buffer ref (_Refs): the key's from the front, new ones for the made from the back."""
  return [*keyed, *reversed([Buffer(d, s, dt) for d, s, dt in made])]

def record(g: Graph, num: _Numbering, sched: Schedule) -> Template:
  """sched as a template; raises _Uncacheable if it names a buffer or version that isn't the key's or its own."""
  buf = _Refs(num.bufs)
  written = [state.view_base(v) for n, v in sched.becomes.items() if n.op is Ops.ASSIGN]  # the versions assigns make
  new = {state.version_id(base): k for k, base in enumerate(written)}
  new_parts: list[tuple[int, Any]] = [(buf(base.arg), base.dtype) for base in written]
  key_ids = {state.version_id(v): i for v, i in num.versions.items()}
  def version(vid: tuple[Buffer, int | None], dtype: Any) -> VersionRef:
    if (j := new.get(vid)) is not None: return ("new", j)
    if (i := key_ids.get(vid)) is not None: return ("key", i)
    if vid[1] is None and vid[0] not in num.bufs: return ("made", buf(vid[0]), dtype or vid[0].dtype)
    if vid[0] in num.bufs and vid[1] == vid[0].newest_write: return ("newest", num.bufs[vid[0]])
    raise _Uncacheable
  def view(u: UOp) -> ViewRef:
    chain, base = state.view_chain(u)
    if base.op is not Ops.BUFFER: raise _Uncacheable
    return tuple((c.op, c.dtype, c.arg) for c in chain), version(state.version_id(base), base.dtype)
  pos = {n: i for i, n in enumerate(g.nodes)}
  becomes: list[tuple[tuple, ViewRef]] = []
  for n, v in sched.becomes.items():
    if n in pos: becomes.append((("node", pos[n]), view(v)))
    elif n.op is Ops.BUFFER: becomes.append((version(state.version_id(n), n.dtype), view(v)))
    else: raise _Uncacheable
  items = [(si.ast, tuple(buf(b) for b in si.bufs), dict(si.var_vals)) for si in sched.items]
  overwritten = [(version(vid, None), i) for vid, (_, i) in zip(sched.overwritten_ids, sched.overwritten)]
  reads = g.reads_input()
  return Template(items, becomes, overwritten, buf.parts(), new_parts, tuple(reads[n] for n in g.nodes))

def _version(r: VersionRef, bufs: list[Buffer], key_versions: list[UOp], new: list[UOp]) -> UOp:
  if r[0] == "key": return key_versions[r[1]]
  if r[0] == "new": return new[r[1]]
  return UOp(Ops.BUFFER, r[2], (), bufs[r[1]]) if r[0] == "made" else state.buffer_node(bufs[r[1]])

def instantiate(t: Template, g: Graph, num: _Numbering) -> Schedule:
  """The schedule t stands for, for graph g (whose key is t's): the key's buffers, new ones for those it makes."""
  bufs, key_versions = _buffers(list(num.bufs), t.made), list(num.versions)
  new = [state.version_node(bufs[b], dt) for b, dt in t.new]
  becomes: dict[UOp, UOp] = {}
  reads: dict[UOp, bool] = {}  # Graph.reads_input of the nodes computed (state.remember walks the others itself)
  for k, (chain, vref) in t.becomes:
    if k[0] == "node": reads[node := g.nodes[k[1]]] = t.reads_input[k[1]]
    else: node = _version(k, bufs, key_versions, new)
    u = _version(vref, bufs, key_versions, new)
    for op, dtype, arg in reversed(chain): u = UOp(op, dtype, (u,), arg)
    becomes[node] = u
  items = [ScheduleItem(ast, tuple([bufs[b] for b in _pick(refs, kept)]), dict(vv) if vv else {})
           for (ast, kept), (_, refs, vv) in zip(_filled(t, num), t.items)]
  versions = [(_version(r, bufs, key_versions, new), i) for r, i in t.overwritten]
  return Schedule(items, becomes, [(weakref.ref(v), i) for v, i in versions],
                  [state.version_id(v) for v, _ in versions], reads)

# *** the cache ***
def cached_schedule(outs: list[UOp], built: Callable[[ScheduleItem], Any] = lambda si: None) -> Schedule:
  """create_schedule(outs), reusing the template of a graph with the same key (STATE.templates); built as in
  schedule_graph (each item with its constants: as the schedule returned will have it)."""
  g = collect(outs)
  try: key, num = graph_key(g)
  except _Uncacheable:
    CacheStats.uncacheable += 1
    return schedule_graph(g, built)
  templates = STATE.templates
  if SCHEDULE_CACHE.value and (t := templates.get(key)) is not None:  # (0: made fresh the same way, not reused)
    templates.move_to_end(key)
    CacheStats.hits += 1
    return instantiate(t, g, num)
  disk = _disk_key(key) if SCHEDULE_CACHE.value and len(g.nodes) >= DISK_NODES and not DISABLE_COMPILER_CACHE else None
  if disk is not None and (t := _template_from(diskcache_get("schedule", disk))) is not None:
    templates[key] = t
    CacheStats.hits += 1
    return instantiate(t, g, num)
  g.holes, st = num.holes, time.perf_counter()
  sched = schedule_graph(g, lambda si: built(_fill_item(si, num) if num.fill else si))
  try: templates[key] = t = record(g, num, sched)
  except _Uncacheable:
    CacheStats.uncacheable += 1
    return fill(sched, num)
  CacheStats.misses += 1
  if disk is not None and time.perf_counter() - st >= DISK_SECONDS and (data := _template_bytes(t)) is not None:
    diskcache_put("schedule", disk, data)
  while len(templates) > max(SCHEDULE_CACHE.value, 0): templates.popitem(last=False)
  return fill(sched, num)

# *** templates on disk, for the next process: JSON, checked as it is read and written (never unpickled) ***
DISK_NODES = 256  # graphs with fewer nodes aren't looked up on disk (scheduling them costs less than the lookup)
DISK_SECONDS = 0.01  # nor written there when they took less time than this to schedule

def _enc(x: Any) -> Any:
  """x (a key part, a node's dtype or arg) as JSON: tuples and lists as lists, the rest tagged (else _Uncacheable)."""
  if x is None or type(x) in (bool, int, str): return x
  if type(x) in (tuple, list): return [_enc(v) for v in x]
  if type(x) in (float, bytes, Ops, AxisType): return {type(x).__name__: x.hex() if type(x) is bytes else repr(x)}
  if type(x) is DType: return {"DType": [x.name, x.count]}
  if type(x) is PtrDType: return {"PtrDType": [_enc(x.base), x.local]}
  raise _Uncacheable

def _dec(x: Any) -> Any:
  """What _enc made x from (lists as tuples); ValueError, KeyError or TypeError for anything it can't have made."""
  if type(x) is list: return tuple(map(_dec, x))
  if type(x) is not dict: return x
  ((tag, v),) = x.items()
  if tag == "float": return float(v)
  if tag == "bytes": return bytes.fromhex(v)
  if tag in ("Ops", "AxisType"): return (Ops if tag == "Ops" else AxisType)[v.split(".")[1]]
  if tag == "DType": return _DTYPES[v[0]].vec(v[1])
  if tag == "PtrDType" and type(v[1]) is bool: return _dec(v[0]).ptr(v[1])
  raise ValueError(f"not a value of a template: {x!r}")

def _disk_key(key: tuple) -> str | None:
  """The disk cache's key of a graph key: with the package's code, every flag and the devices' renderers (the
  scheduler reads their machine models); None when a part of it can't be written."""
  try: text = json.dumps(_enc(key))
  except _Uncacheable: return None
  flags = " ".join(f"{k}={v.value!r}" for k, v in sorted(ContextVar._cache.items()) if k not in ("DEBUG", "VIZ"))
  devices = " ".join(repr(Device[d].renderer) for d in sorted({p[1] for p in key[2] if p[0] == "buf"}))
  return hashlib.sha256("\n".join([code_version("**/*.py"), flags, devices, text]).encode()).hexdigest()

def _template_bytes(t: Template) -> bytes | None:
  """t as JSON (its kernels as one table of nodes), or None when it can't be written or doesn't read back as t."""
  index, nodes = dict[UOp, int](), list[list]()
  try:
    for ast, _, var_vals in t.items:
      if var_vals: return None
      for u in ast.toposort():
        if u not in index:
          index[u] = len(nodes)
          nodes.append([u.op.name, _enc(u.dtype), _enc(u.arg), [index[s] for s in u.src]])
    rest = _enc([[index[ast] for ast, _, _ in t.items], [r for _, r, _ in t.items], t.becomes, t.overwritten, t.made,
                 t.new, t.reads_input])
  except (_Uncacheable, KeyError, ValueError, TypeError): return None  # (a cache: never an error of the realize)
  data = json.dumps({"nodes": nodes, "rest": rest}).encode()
  def parts(t: Template) -> tuple:
    return [(a, r) for a, r, _ in t.items], t.becomes, t.overwritten, t.made, t.new, t.reads_input
  return data if (back := _template_from(data)) is not None and parts(back) == parts(t) else None

def _template_from(data: bytes | None) -> Template | None:
  """The template _template_bytes wrote as data, or None for anything else."""
  if data is None: return None
  try:
    d, nodes = json.loads(data), list[UOp]()
    for op, dtype, arg, src in d["nodes"]:
      if not all(type(i) is int and 0 <= i < len(nodes) for i in src): return None
      nodes.append(UOp(Ops[op], _dec(dtype), tuple(nodes[i] for i in src), _dec(arg)))
    asts, refs, becomes, overwritten, made, new, reads = _dec(d["rest"])
    return Template([(nodes[i], r, {}) for i, r in zip(asts, refs)], list(becomes), list(overwritten), list(made),
                    list(new), reads)
  except (ValueError, KeyError, TypeError, AttributeError, IndexError): return None

# *** the quick path: a small graph with nothing stored and no writes, from its key straight to its kernels ***
# A "pure" node (no buffer, variable or write under it) is one node per value (hash-consing), never stored: the key
# names it and the walk stops. Others are keyed as in graph_key; the plan is the general path's for a key's first graph.

QUICK_NODES = 64  # graphs deeper or with more nodes (not counting pure ones) go the general way
_IMPURE = {Ops.BUFFER, Ops.BIND, Ops.DEFINE_VAR, Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN, Ops.SINK}
_QUICK_OPS = GroupOp.Elementwise | GroupOp.Movement | {Ops.REDUCE_AXIS, Ops.DETACH}
_NEVER_QUICK = _IMPURE - {Ops.BUFFER}

class _NotQuick(Exception): pass

def _visit(n: UOp, depth: int, pos: dict[UOp, int], entries: list[Any], bufs: dict[Buffer, int], parts: list) -> None:
  """quick_key's walk: n's entry after its sources' (a plain function: a closure calling itself would be a reference
  cycle, keeping the graph's nodes and buffers alive until the garbage collector runs)."""
  if "realized" in (c := n._cache) or depth > QUICK_NODES or len(entries) > QUICK_NODES: raise _NotQuick
  if n.op in _NEVER_QUICK: raise _NotQuick  # before walking below it: a big graph with a write on top stops here
  if n.op is Ops.BUFFER:
    if (n.src[0].arg if n.src else None) != (buf := n.arg).newest_write: raise _NotQuick
    if (b := bufs.get(buf)) is None:
      b = bufs[buf] = len(bufs)
      parts.append((buf.device, buf.size, buf.dtype._key))  # (dtypes by their fields: see DType._key)
    pos[n] = len(entries)
    entries.append((b, n.dtype._key))
    return
  for s in n.src:
    if s not in pos and not s._cache.get("pure"): _visit(s, depth + 1, pos, entries, bufs, parts)
  if n.op not in _IMPURE:
    for s in n.src:
      if not s._cache.get("pure"): break
    else: c["pure"] = True; return
  if n.op not in _QUICK_OPS: raise _NotQuick
  c["pure"] = False
  for s in n.src:
    if s not in pos:  # a pure source
      pos[s] = len(entries)
      entries.append(s)
  pos[n] = len(entries)
  entries.append((n.op, n.dtype._key, _arg_key(n.arg), tuple(map(pos.__getitem__, n.src))))

def quick_key(outs: list[UOp]) -> tuple[tuple, list[UOp], list[Buffer]] | None:
  """(the key, the nodes by position, the buffers in the order met) of a graph for the quick path, in one walk; None
  when the graph isn't one (docs/developer/scheduler.md, "The quick path")."""
  pos: dict[UOp, int] = {}
  entries: list[Any] = []
  bufs: dict[Buffer, int] = {}
  parts: list[tuple] = []
  try:
    for o in outs:
      if o not in pos and not o._cache.get("pure"): _visit(o, 0, pos, entries, bufs, parts)
  except _NotQuick: return None
  for o in outs:
    if o not in pos:
      pos[o] = len(entries)
      entries.append(o)
  return (tuple(entries), tuple(map(pos.__getitem__, outs)), tuple(parts), SPLIT_REDUCEOP.value), list(pos), list(bufs)

@dataclass
class QuickPlan:
  kernels: list[tuple[UOp, tuple[int, ...]]]  # each kernel's AST (constants filled in) and buffer refs (as Template)
  made: list[tuple[str, int, Any]]  # the buffers the schedule makes (as Template)
  becomes: list[tuple[int, tuple, int, Any]]  # (node position, its views, its buffer's ref, the BUFFER node's dtype)
  reads: list[bool]  # Graph.reads_input of each node in becomes
  ready: tuple = ()  # its kernels' programs once looked up (engine/realize.py lower_kernels, run_ready)

def _quick_plan(sched: Schedule, nodes: list[UOp], key_bufs: list[Buffer]) -> QuickPlan | None:
  """sched (made for the graph of nodes) as a plan, or None when it writes or copies or names other buffers."""
  if sched.overwritten: return None
  ref = _Refs({b: i for i, b in enumerate(key_bufs)})
  pos = {n: i for i, n in enumerate(nodes)}
  try:
    kernels = [(si.ast, tuple(ref(b) for b in si.bufs)) for si in sched.items]
    becomes = []
    for n, v in sched.becomes.items():
      chain, base = state.view_chain(v)
      if n not in pos or base.op is not Ops.BUFFER or base.src or base.arg in ref.keyed: return None
      becomes.append((pos[n], tuple((c.op, c.dtype, c.arg) for c in chain), ref(base.arg), base.dtype))
  except _Uncacheable: return None
  if any(si.ast.op is not Ops.SINK or si.var_vals for si in sched.items): return None
  if any(n not in sched.reads_input for n in sched.becomes): return None
  return QuickPlan(kernels, ref.parts(), becomes, [sched.reads_input[n] for n in sched.becomes])

Kernels = list[tuple[UOp, list[Buffer]]]
Quick = tuple[dict[UOp, UOp], dict[UOp, bool], Kernels, QuickPlan]  # quick_schedule's: becomes, reads, kernels, plan

def quick_schedule(p: QuickPlan, outs: list[UOp], nodes: list[UOp], key_bufs: list[Buffer]) -> Quick:
  """What plan p computes for the graph of nodes: (what each node becomes, Graph.reads_input of those, the kernels
  with their buffers, p). outs, the graph's outputs, is for SCHEDULE_CACHE_CHECK (test/schedule_check.py schedules them
  afresh to compare)."""
  bufs = _buffers(key_bufs, p.made)
  becomes: dict[UOp, UOp] = {}
  reads: dict[UOp, bool] = {}
  for (i, chain, r, dtype), read in zip(p.becomes, p.reads):
    u = UOp(Ops.BUFFER, dtype, (), bufs[r])
    for op, dt, arg in reversed(chain): u = UOp(op, dt, (u,), arg)
    becomes[n := nodes[i]] = u
    reads[n] = read
  return becomes, reads, [(ast, list(map(bufs.__getitem__, refs))) for ast, refs in p.kernels], p

def plan_schedule(outs: list[UOp], quick_only: bool = False,
                  built: Callable[[ScheduleItem], Any] = lambda si: None) -> Schedule | Quick | None:
  """The quick path's result for outs (see quick_schedule) when their graph has a plan, else cached_schedule(outs)
  (and a plan made from it for the next graph of the same key, where one can be), or with quick_only None. STATE.quick:
  key -> QuickPlan, or None where that key's graphs go the general way."""
  if not SCHEDULE_CACHE.value or STATE.captures or (k := quick_key(outs)) is None:
    return None if quick_only else cached_schedule(outs, built)
  key, nodes, bufs = k
  quick = STATE.quick
  if (p := quick.get(key, False)) is not False:  # (the key is hashed anew at each use: as few uses as can be)
    if p is None: return None if quick_only else cached_schedule(outs, built)
    quick.move_to_end(key)
    CacheStats.hits += 1
    CacheStats.quick += 1
    return quick_schedule(p, outs, nodes, bufs)
  if quick_only: return None
  sched = cached_schedule(outs, built)
  quick[key] = _quick_plan(sched, nodes, bufs)
  while len(quick) > max(SCHEDULE_CACHE.value, 0): quick.popitem(last=False)
  return sched
