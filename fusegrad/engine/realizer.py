"""The realize procedure: compute tensors, point them at the buffers holding their values (docs/developer/realize.md).
A tensor here is any handle with a settable `uop` (and `_uop`, `_requires_grad`, `device`, `_wrap`)."""
from __future__ import annotations
import gc, weakref
from typing import Any, Sequence
from fusegrad.device import Buffer
from fusegrad.uop.ops import UOp, Ops, postorder
from fusegrad.engine import state, multi, memory, schedule as engine_schedule, cache as engine_cache
from fusegrad.engine import realize as engine_realize
from fusegrad.engine.state import STATE, MAY_FOLLOW

def realize_all(tensors: Sequence[Any]) -> None:
  """Compute the tensors together (one schedule, so shared work is done once), with the index checks of their graphs.
  A tensor that computed the same value as another live tensor gets its own copy of it (state.claim_storage)."""
  if len(tensors) == 1 and _realize_quick(tensors[0]): return
  if spread := [t for t in tensors if multi.needs_lowering(t._uop)]:
    _realize_multi(spread)
    tensors = [t for t in tensors if not any(t is m for m in spread)]
  copies = [t for t in tensors if not resolve(t)]  # computed already (maybe through another tensor)
  todo = [t for t in tensors if not state.is_realized(t.uop)]
  for hook in STATE.realize_hooks: hook([t.uop for t in todo])
  if todo:
    # out-of-range index flags, computed in the same schedule
    checks = engine_realize.pending_index_checks([t.uop for t in todo])
    flat = [c for cs in checks.values() for c in cs]
    flags = [type(todo[0])._wrap(c.flag) for c in flat]
    collecting = gc.isenabled()  # the cycle collector waits: its full collections walk every live node
    gc.disable()
    try: copies += _realize(todo + flags)
    finally:
      if collecting: gc.enable()
    if flags and STATE.captures:  # TinyJit replays read these flags' buffers again
      bases = [state.view_base(f.uop) for f in flags]
      STATE.captures[-1].flags += [(b.arg, c) for b, c in zip(bases, flat) if b.op is Ops.BUFFER]
    if flags: engine_realize.verify_index_checks(checks, [f._buffer() for f in flags])
  if copies: _realize_copies(copies)

def _realize_copies(copies: list[Any]) -> None:
  """Each tensor gets its own copy of the value another live tensor holds (state.claim_storage)."""
  for t in copies: t.uop = t.uop.copy_to_device(t.device, clone=True)
  realize_all(copies)

def _realize_quick(t: Any) -> bool:
  """realize_all([t]) for a lazy t whose graph has a quick plan (engine/cache.py: nothing in it is on several devices,
  stored, copied or written), when nothing else must see the realize (hooks, index checks): realize_all's checks
  skipped. False when not done."""
  if (u := t._uop).op in MAY_FOLLOW or STATE.realize_hooks or STATE.index_checks: return False
  if (plan := engine_cache.plan_schedule([u], quick_only=True)) is None: return False
  assert type(plan) is tuple  # (quick_only: a quick plan's result or None)
  if copies := _run_quick([t], *plan): _realize_copies(copies)  # (not a second run of the plan's kernels)
  return True

def resolve(t: Any, becomes: dict[UOp, UOp] | None = None) -> bool:
  """Point t at the buffer its value was computed into, if it was (becomes: what a schedule just computed, else look
  in state.memo); False when t needs a copy of its own (see state.claim_storage). A tensor holding an assign is a view
  of the buffer written: it follows later writes into it."""
  lazy = t.uop
  if lazy.op not in MAY_FOLLOW and (state.memo.get(lazy) if becomes is None else becomes.get(lazy)) is None:
    return True  # not computed (what state.resolve says, quickly)
  if state.view_base(lazy).op is Ops.ASSIGN:
    new = state.storage(lazy, state.lookup_raw if becomes is None else becomes.get)
  else: new = state.resolve(lazy, state.lookup if becomes is None else becomes.get)
  if new is lazy: return True
  t.uop = new
  remember_lazy_def(t, lazy)
  if not state.claim_storage(t, lazy): return False
  _forget_view_source(t)
  return True

def _forget_view_source(t: Any) -> None:
  """A view realized into storage of its own no longer shares memory with the tensor it was made from (Tensor.assign
  writes through _view_of): drop the link, which would keep that tensor's graph, and the buffers it reads, alive."""
  if t._view_of is not None and (b := state.view_base(t.uop)).op is Ops.BUFFER \
     and (ref := b.arg.base.owner) is not None and ref() is t: t._view_of = None

def remember_lazy_def(t: Any, lazy: UOp, read: bool = False) -> None:
  """Autograd still needs the graph that made a realized intermediate that requires grad: remember it while the buffer
  view lives and the versions it reads are the newest (state.drop_stale_defs). read: a requires_grad None value
  realized to be read (tinygrad's numpy() leaves its graph). A contiguous of a whole buffer is that buffer."""
  if not (t._requires_grad or read and t._requires_grad is None) or lazy.op is Ops.ASSIGN: return
  if t._requires_grad and id(t) in STATE.grad_tensors: return  # (a leaf: STATE.grad_tensors holds those requiring grad)
  root, written, reads, srcs = t.uop, set(), [], _impure_sources(lazy)  # (a constant's graph, "pure": reads nothing)
  for n in [*srcs, lazy] if all(s.op is Ops.BUFFER for s in srcs) else postorder((lazy,), _impure_sources):  # (no walk)
    if n is root: return
    if n.op is Ops.ASSIGN: written.add(state.view_base(n.src[0]))  # (older versions: not read)
    if n is not lazy and (b := state.view_base(e.view if (e := state.memo.get(n)) else n)).op is Ops.BUFFER:
      reads.append(b)  # (not the root: its view is the key)
  if written: reads = [b for b in reads if b not in written]
  if (stale := any(not state.is_newest(b) for b in reads)) and not t._requires_grad: return  # (would keep old copies)
  STATE.lazy_defs[root] = None if stale else (lazy, bool(t._requires_grad), tuple(reads))  # (None: backward raises)
  state.memo.pop(lazy)  # (its value's entry would hold the buffer node, the key, alive: a cycle, a leak per step)
def _impure_sources(n: UOp) -> list[UOp]: return [s for s in n.src if not s._cache.get("pure")]

def _realize_multi(tensors: list[Any]) -> None:
  """Realize tensors spread over devices (or gathered from them): each one's per-device graphs (multi.lower) are
  realized together, and the tensor becomes the MULTI of their buffers (or the one buffer gathered into)."""
  lowered = {t: multi.lower(t.uop) for t in tensors}
  parts = {t: [type(t)._wrap(s) for s in (m.src if m.op is Ops.MULTI else (m,))] for t, m in lowered.items()}
  axes = {t: m.arg if m.op is Ops.MULTI else False for t, m in lowered.items()}
  # while the parts run, the tensors hold a NOOP of their shape, not graphs autograd doesn't need (remember_lazy_def):
  # the versions their assigns overwrite aren't copied aside for nothing. Tensor.uop waits for the realize meanwhile
  lazies = {t: t.uop for t in tensors if t._requires_grad and id(t) not in STATE.grad_tensors}
  olds = {t: weakref.ref(t._uop) for t in tensors}
  del lowered
  for t in tensors: t._uop = UOp(Ops.NOOP, t.dtype, (UOp(Ops.DEVICE, arg=t.device),), t.shape)
  try: realize_all([p for ps in parts.values() for p in ps])
  finally:
    for t, axis in axes.items():
      if (old := olds[t]()) is not None: t._uop = old  # (the setter remembers it: graphs built before refer to it)
      t.uop = multi.multi(tuple(p.uop for p in parts[t]), axis) if axis is not False else parts[t][0].uop
  for t, lazy in lazies.items(): remember_lazy_def(t, lazy)

def _realize(todo: list[Any]) -> list[Any]:
  """Schedule and run the tensors in todo; returns those that need a copy of their own (see state.claim_storage).
  Every kernel is compiled before anything is remembered: a compile error leaves every tensor as it was."""
  lowering = engine_realize.Lowering()  # (each kernel lowered, and compiling, as the scheduler builds it)
  try: sched = engine_cache.plan_schedule([t.uop for t in todo], built=lowering.add)
  except BaseException:
    lowering.abandon()
    raise
  if type(sched) is tuple: return _run_quick(todo, *sched)  # (engine/cache.py) kernels that write nothing older
  assert isinstance(sched, engine_schedule.Schedule)
  items = engine_realize.lower_schedule(sched.items, lowering)
  state.remember(sched.becomes, sched.reads_input)
  copies = [t for t in todo if not resolve(t, sched.becomes)]
  memory.plan(items, sched.becomes, todo)  # (after resolve: what tensors hold now decides what may share memory)
  overwritten = sched.overwritten
  del sched  # drop the old nodes: what else still refers to an overwritten version decides if it's copied aside
  def copy_aside(dest: Buffer, src: Buffer) -> Any:
    return engine_realize.lower_schedule_item(engine_schedule.copy_item(dest, src))
  items = state.snapshot_before(overwritten, items, copy_aside)
  try: engine_realize.run_exec_items(items)
  except Exception:
    state.forget({ei.bufs[0] for ei in items})
    raise
  return copies

def _run_quick(todo: list[Any], becomes: dict[UOp, UOp], reads: dict[UOp, bool], kernels: list, plan: Any) -> list[Any]:
  """_realize's quick path: a plan's kernels (engine/cache.py quick_schedule), no Schedule; their programs kept by the
  plan once looked up (engine/realize.py run_ready). They only write buffers of their own: they run before anything
  is remembered (a failure leaves every tensor as it was)."""
  if not engine_realize.run_ready(kernels, plan):
    engine_realize.run_exec_items(engine_realize.lower_kernels(kernels, plan))
  state.remember(becomes, reads)
  copies = []
  for t in todo:
    if (view := becomes.get(lazy := t._uop)) is not None and (buf := state.view_base(view).arg).owner is None:
      t.uop = view  # a buffer the plan made: no other tensor's (what resolve does, quickly)
      if t._requires_grad: remember_lazy_def(t, lazy)
      buf.claim(t)
      if t._view_of is not None: _forget_view_source(t)
    elif not resolve(t, becomes): copies.append(t)
  return copies
