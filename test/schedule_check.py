"""A checked schedule cache: every hit is compared with a fresh schedule of the same graph (same kernels, buffers
mapping one to one, same values and writes). `checked_cache()` turns it on; conftest does for SCHEDULE_CACHE_CHECK=1."""
from contextlib import contextmanager
from fusegrad.engine import cache, state
from fusegrad.engine.schedule import Schedule, ScheduleItem, collect, schedule_graph

class _Match:
  """A one-to-one map between the buffers (and versions) of two schedules, built as they are compared."""
  def __init__(self): self.fwd, self.bwd = {}, {}
  def same(self, a, b, what: str) -> None:
    ka, kb = (what, a if isinstance(a, int) else id(a)), (what, b if isinstance(b, int) else id(b))
    if self.fwd.setdefault(ka, kb) != kb or self.bwd.setdefault(kb, ka) != ka:
      raise AssertionError(f"schedule cache: {what} maps differently: {a} vs {b}")
  def buf(self, a, b) -> None:
    assert (a.device, a.size, a.dtype) == (b.device, b.size, b.dtype), f"buffers differ: {a} vs {b}"
    self.same(a, b, "buffer")
  def view(self, a, b) -> None:
    ca, ba = state.view_chain(a)
    cb, bb = state.view_chain(b)
    assert [(c.op, c.dtype, c.arg) for c in ca] == [(c.op, c.dtype, c.arg) for c in cb], f"views differ: {a} vs {b}"
    self.version(ba, bb)
  def version(self, a, b) -> None:
    assert a.op is b.op and a.dtype == b.dtype, f"versions differ: {a.op} {b.op}"
    self.buf(a.arg, b.arg)
    if bool(a.src) != bool(b.src): raise AssertionError("a version vs a plain buffer")
    if a.src: self.same(a.src[0].arg, b.src[0].arg, "version")

def compare(hit: Schedule, fresh: Schedule) -> None:
  m = _Match()
  assert len(hit.items) == len(fresh.items), f"{len(hit.items)} items vs {len(fresh.items)}"
  for a, b in zip(hit.items, fresh.items):
    assert a.ast is b.ast, "an item's kernel differs"
    assert a.var_vals == b.var_vals
    assert len(a.bufs) == len(b.bufs)
    for x, y in zip(a.bufs, b.bufs): m.buf(x, y)
  assert len(hit.becomes) == len(fresh.becomes)
  for (ka, va), (kb, vb) in zip(hit.becomes.items(), fresh.becomes.items()):
    assert ka is kb, f"realized nodes differ: {ka.op} vs {kb.op}"
    m.view(va, vb)
  assert [i for _, i in hit.overwritten] == [i for _, i in fresh.overwritten]
  for (ba, wa), (bb, wb) in zip(hit.overwritten_ids, fresh.overwritten_ids):
    m.buf(ba, bb)
    assert (wa is None) == (wb is None)
    if wa is not None: m.same(wa, wb, "version")
  for (ra, _), (rb, _) in zip(hit.overwritten, fresh.overwritten): assert (ra() is None) == (rb() is None)

def fresh_schedule(outs) -> Schedule:
  """outs scheduled from scratch, as the cache would on a miss."""
  g = collect(outs)
  _, num = cache.graph_key(g)
  g.holes = num.holes
  return cache.fill(schedule_graph(g), num)

@contextmanager
def checked_cache():
  orig, orig_quick = cache.instantiate, cache.quick_schedule
  def checked(t, g, num):
    ret = orig(t, g, num)
    g.holes = num.holes
    compare(ret, cache.fill(schedule_graph(g), num))
    return ret
  def checked_quick(p, outs, nodes, bufs):
    ret = becomes, reads, kernels, _ = orig_quick(p, outs, nodes, bufs)
    items = [ScheduleItem(ast, tuple(b)) for ast, b in kernels]
    compare(Schedule(items, becomes, [], [], reads), fresh := fresh_schedule(outs))
    assert all(reads[n] == fresh.reads_input[n] for n in becomes), "reads_input differs"
    return ret
  cache.instantiate, cache.quick_schedule = checked, checked_quick
  try: yield
  finally: cache.instantiate, cache.quick_schedule = orig, orig_quick
