"""Memory planning: the buffers a schedule makes for values that nothing reads after it (intermediates) share memory
where their lifetimes in the schedule don't overlap, so a training step holds the activations it keeps and a few
temporaries at a time, not every value it computes (docs/developer/realize.md, "Memory planning")."""
from __future__ import annotations
from typing import Any
from fusegrad.device import Buffer
from fusegrad.dtype import dtypes
from fusegrad.helpers import DEBUG, NO_MEMORY_PLANNER, dprint
from fusegrad.uop.ops import UOp, Ops
from fusegrad.engine.runner import CompiledRunner
from fusegrad.engine import state
from fusegrad.engine.state import STATE

PLAN_FROM = 1 << 20  # smaller buffers aren't planned (a small CPU buffer comes zeroed; its memory is cheap anyway)

def plan(items: list[Any], becomes: dict[UOp, UOp], todo: list[Any]) -> None:
  """Let the intermediates of items (ExecItems in run order) share memory: each becomes a view of one block per device,
  at an offset no other buffer uses while it lives (_Arena). A value a live tensor may read later keeps a buffer of
  its own; the others' stored values are forgotten (state.forget_nodes): a graph still naming one computes it again."""
  if NO_MEMORY_PLANNER.value or sum(ei.bufs[0].nbytes >= PLAN_FROM and ei.bufs[0]._buf is None for ei in items) < 2:
    return  # (most schedules: no walk over their buffers)
  first, last, unplannable = dict[Buffer, int](), dict[Buffer, int](), set[Buffer]()
  for i, ei in enumerate(items):
    kernel = isinstance(ei.runner, CompiledRunner)
    for b in ei.bufs:
      if b not in first: first[b] = i
      last[b] = i
      if not kernel or b.device != ei.runner.device: unplannable.add(b)  # (copies: another device's queue reads it)
  cands = [b for b, i in first.items() if b not in unplannable and items[i].bufs[0] is b and b.nbytes >= PLAN_FROM
           and b._buf is None and b._base is None and b._pending is None and b.newest_write is None]
  if len(cands) < 2: return
  read = _read_later(todo)
  planned = sorted((b for b in cands if b not in read), key=first.__getitem__)
  arenas: dict[str, _Arena] = {}
  at = {b: arenas.setdefault(b.device, _Arena()).place(first[b], last[b], b.nbytes) for b in planned}
  for device, arena in arenas.items():
    base = Buffer(device, arena.top, dtypes.uint8)
    for b in planned:
      if b.device == device: b.share(base, at[b])
  # their values are not kept (a node that still names one would keep the whole arena): computed again if asked
  state.forget_nodes([n for n, v in becomes.items() if state.view_base(v).arg in at])
  if DEBUG >= 3: dprint(3, f"memory planner: {len(planned)} buffers, {sum(b.nbytes for b in planned) / 1e6:.1f} MB in "
                           f"{sum(a.top for a in arenas.values()) / 1e6:.1f} MB")

class _Arena:
  """Offsets in one block of memory for buffers that each live from one item to another: a buffer takes the smallest
  free range that holds it (a range is free after the item of its last use), else the end of the block grows."""
  ALIGN = 4096  # (every device's buffer views may start at a multiple of it)
  def __init__(self) -> None: self.top, self.free, self.live = 0, list[list[int]](), list[tuple[int, int, int]]()
  def place(self, first: int, last: int, nbytes: int) -> int:
    if ended := [x for x in self.live if x[0] < first]:  # free again, merged with the free ranges beside them
      self.live = [x for x in self.live if x[0] >= first]
      ranges, self.free = sorted([*map(tuple, self.free), *[x[1:] for x in ended]]), []
      for off, size in ranges:
        if self.free and sum(self.free[-1]) == off: self.free[-1][1] += size
        else: self.free.append([off, size])
    need = -(-nbytes // self.ALIGN) * self.ALIGN
    if fits := [r for r in self.free if r[1] >= need]:  # (the rest of the range stays free)
      r = min(fits, key=lambda r: r[1])
      off, r[0], r[1] = r[0], r[0] + need, r[1] - need
    elif self.free and sum(self.free[-1]) == self.top: off = self.free.pop()[0]  # the free range at the end, grown
    else: off = self.top
    self.top, self.free = max(self.top, off + need), [r for r in self.free if r[1]]
    self.live.append((last, off, need))
    return off

def _read_later(todo: list[Any]) -> set[Buffer]:
  """The buffers a live tensor may read later: those a tensor's graph (todo's, or any live floating tensor's) reaches
  before any other stored value, and every stored value in a graph autograd keeps (STATE.lazy_defs). (A tensor of
  another dtype that is still lazy computes again what it finds forgotten.)"""
  ret, seen = set[Buffer](), set[UOp]()
  def walk(stack: list[UOp], whole: bool) -> None:
    while stack:
      if (u := stack.pop()) in seen: continue
      seen.add(u)
      if u.op is Ops.BUFFER: ret.add(u.arg.base)
      elif (entry := state.memo.get(u)) is not None:
        ret.add(state.view_base(entry.view).arg.base)
        if whole: stack.extend(u.src)
      else: stack.extend(u.src)
  walk([t._uop for t in (*todo, *STATE.float_tensors)], False)
  seen.clear()  # (autograd's graphs: walked below the stored values too)
  walk([d[0] for _, d in STATE.lazy_defs.items() if d is not None], True)
  return ret
