"""Running a schedule: ScheduleItem -> ExecItem (a compiled kernel or a copy) -> run (docs/developer/realize.md)."""
from __future__ import annotations
import contextlib, math, struct, weakref
from dataclasses import dataclass, field
from typing import Any
from fusegrad.device import Buffer, Device
from fusegrad.dtype import dtypes, float_to_bf16_bits
from fusegrad.helpers import DEBUG, GlobalCounters, colored, ansilen, time_to_str, dprint
from fusegrad.helpers import PROGRAM_CACHE, BEAM, NOOPT, COMPILE_CHUNK, VIZ, viz_record, ansistrip, CAPTURING
from fusegrad.uop.ops import UOp, Ops, _arg_key
from fusegrad.renderer import Renderer
from fusegrad.codegen import ProgramSpec, get_program
from fusegrad.codegen.cache import spec_key, cached_spec, cache_spec
from fusegrad.engine.schedule import ScheduleItem
from fusegrad.engine.runner import Runner, CompiledRunner, CopyRunner, Todo, Started, compile_runners
from fusegrad.engine.runner import batch_add, batch_start, batch_load
from fusegrad.engine.search import beam_opts
from fusegrad.engine import state
from fusegrad.engine.state import STATE

# *** the programs of a process: exact kernels, and kernels whose changing constants are parameters ***
@dataclass
class _Structure:
  """Kernels that differ only in value constants: the constants first seen, and once they changed, a program that
  reads the changing ones (positions `params`) from one-element buffers."""
  first: tuple
  params: frozenset[int] = frozenset()
  runner: CompiledRunner | None = None

def _steering(ast: UOp) -> set[UOp]:
  """Nodes whose value picks an address, a branch or an integer from a float: a constant there stays in the code
  (rounding can differ by an ulp between a constant and a parameter, and a comparison or a floor would amplify it)."""
  ret: set[UOp] = set()
  for u in reversed(ast.toposort()):
    if u in ret: edges = list(u.src)
    elif u.op is Ops.LOAD: edges = list(u.src[1:])
    elif u.op is Ops.STORE: edges = [u.src[1], *u.src[3:]]
    elif u.op in (Ops.CMPLT, Ops.CMPNE, Ops.TRUNC): edges = list(u.src)
    elif u.op is Ops.WHERE: edges = [u.src[0]]
    elif u.op is Ops.CAST and dtypes.is_float(u.src[0].dtype) and not dtypes.is_float(u.dtype): edges = [u.src[0]]
    else: edges = []
    ret.update(edges)
  return ret

def _value_consts(ast: UOp) -> list[UOp]:
  """The int and float constants a kernel computes values with (docs/developer/realize.md says which), in a fixed
  order. Kernels with a reduce keep every constant in the code: whether codegen folds a reduce over index comparisons
  (gathers, arange, one-hot masks) must not depend on which kernels ran before."""
  steer, nodes = _steering(ast), ast.toposort()
  if any(u.op is Ops.REDUCE for u in nodes): return []
  return [u for u in nodes if u.op is Ops.CONST and u.dtype != dtypes.index and u.dtype.scalar() == u.dtype
          and (dtypes.is_float(u.dtype) or dtypes.is_int(u.dtype)) and u not in steer]

def _cache(key: tuple, value: CompiledRunner | _Structure) -> None:
  """STATE.programs (LRU): (device, AST, BEAM, NOOPT) -> program; (device, AST less constants, ...) -> _Structure."""
  programs = STATE.programs
  programs[key] = value
  while len(programs) > max(PROGRAM_CACHE.value, 1): programs.popitem(last=False)  # unloaded once nothing uses it

def _param_buffer(device: str, c: UOp) -> Buffer:
  val = c.arg
  if c.dtype == dtypes.float16 and math.isfinite(val) and abs(val) >= 65520: val = math.copysign(math.inf, val)
  raw = (struct.pack("<H", float_to_bf16_bits(val)) if c.dtype == dtypes.bfloat16
         else struct.pack(f"<{c.dtype.fmt}", val))
  return Buffer(device, 1, c.dtype).copyin(raw)

def _program(ast: UOp, device: str) -> ProgramSpec:
  """get_program, from the disk cache of codegen where the device has a compile cache (DEBUG>=3 and VIZ generate the
  kernel again, to show what codegen does)."""
  dev = Device[device]
  if dev.compiler.cachekey is None: p = _codegen(ast, dev.renderer)
  elif (p := cached_spec(key := spec_key(ast, dev.renderer), device)) is None or DEBUG >= 3 or VIZ:
    cache_spec(key, p := _codegen(ast, dev.renderer))
  p.device = device  # the renderer names the backend ("CPU"); the kernel runs on this device of it ("CPU:1")
  return p

def _codegen(ast: UOp, ren: Renderer) -> ProgramSpec:
  """get_program, with the opts BEAM search finds when BEAM>=1 (and NOOPT isn't set); the heuristic's otherwise."""
  return get_program(ast, ren, beam_opts(ast, ren, BEAM.value) if BEAM >= 1 and not NOOPT else None)

def get_runner(device: str, ast: UOp, nbufs: int = 0) -> tuple[CompiledRunner, list[Buffer]]:
  """The compiled program for a kernel AST on a device, and the buffers of its parameters (appended to the kernel's).
  Constants changing between calls become parameters (docs/developer/realize.md): a loop over one compiles twice."""
  programs, settings = STATE.programs, (BEAM.value, NOOPT.value)
  if (hit := programs.get(key := (device, ast, *settings))) is not None:
    programs.move_to_end(key)
    return hit, []  # type: ignore[return-value]
  consts = _value_consts(ast)
  holes = {c: UOp(Ops.NOOP, c.dtype, (), ("const", k)) for k, c in enumerate(consts)}
  skel_key = (device, ast.substitute(holes) if consts else ast, *settings)
  if not isinstance(st := programs.get(skel_key), _Structure):  # new structure: constants stay in the code
    runner = CompiledRunner(_program(ast, device))
    _cache(key, runner)
    if consts: _cache(skel_key, _Structure(tuple(_arg_key(c.arg) for c in consts)))
    return runner, []
  programs.move_to_end(skel_key)
  changed = st.params | {k for k, (a, c) in enumerate(zip(st.first, consts)) if a != _arg_key(c.arg)}
  params = sorted(changed)
  limit = Device[device].renderer.max_buffers
  if limit is not None and nbufs + len(params) > limit:  # more than the device binds: constants stay in the code
    _cache(key, runner := CompiledRunner(_program(ast, device)))
    return runner, []
  if st.runner is None or changed != st.params:
    loads = {consts[k]: UOp(Ops.LOAD, consts[k].dtype, (UOp(Ops.DEFINE_GLOBAL, consts[k].dtype.ptr(), (), nbufs + j),
                                                          UOp.const(dtypes.index, 0))) for j, k in enumerate(params)}
    st.params, st.runner = changed, CompiledRunner(_program(ast.substitute(loads), device))
  return st.runner, [_param_buffer(device, consts[k]) for k in params]

@dataclass
class ExecItem:
  runner: Runner
  bufs: list[Buffer]
  var_vals: dict[UOp, int] = field(default_factory=dict)
  # bytes the buffers hold, counted at the first run (TinyJit swaps in buffers of the same sizes)
  mem: int = field(default=-1, repr=False)
  def run(self, var_vals: dict[UOp, int] | None = None, wait: bool = False, jit: bool = False) -> float | None:
    if self.mem < 0: self.mem = sum([b.size * b.dtype.itemsize for b in self.bufs])
    debug = DEBUG.value >= 2
    et = self.runner.run(self.bufs, self.mem, self.var_vals if not var_vals else {**self.var_vals, **var_vals},
                         wait or debug)
    if debug: self._print(et, jit)
    return et
  def _print(self, et: float | None, jit: bool) -> None:
    ptm = time_to_str(et) if et is not None else "      ?"
    flops_s = f"{self.runner.flops / et * 1e-9:9.2f} GFLOPS" if et else ""
    gbs = f"{self.mem / et * 1e-9:7.2f} GB/s" if et else ""  # (self.mem: counted by run())
    name = self.runner.name + " " * max(38 - ansilen(self.runner.name), 0)
    tag = colored(f"*** {self.runner.device[:9]:9s} {GlobalCounters.kernel_count:4d}", "magenta" if jit else "green")
    print(f"{tag} {name} arg {len(self.bufs):2d} mem {GlobalCounters.mem_used / 1e9:5.2f} GB "
          f"tm {ptm}/{GlobalCounters.time_sum_s * 1e3:9.2f}ms ({flops_s} {gbs})")

def lower_schedule_item(si: ScheduleItem) -> ExecItem:
  if si.ast.op is Ops.COPY:
    return ExecItem(CopyRunner(si.bufs[0].device, si.bufs[1].device, si.bufs[0].nbytes), list(si.bufs))
  runner, params = get_runner(si.bufs[0].device, si.ast, len(si.bufs))
  return ExecItem(runner, list(si.bufs) + params, dict(si.var_vals))

def lower_kernels(kernels: list[tuple[UOp, list[Buffer]]], plan: Any = None) -> list[ExecItem]:
  """The ExecItems of kernels (AST, buffers) whose programs are compiled (or cached); see lower_schedule. plan (a
  cache.QuickPlan, whose kernels these are) keeps their programs for run_ready when none takes a parameter."""
  items = []
  for ast, bufs in kernels:
    runner, params = get_runner(bufs[0].device, ast, len(bufs))
    items.append(ExecItem(runner, bufs + params if params else bufs))
  if None in [ei.runner.prg for ei in items]: compile_runners([ei.runner for ei in items])  # type: ignore[attr-defined]
  if plan is not None and all(ei.bufs is bufs for ei, (_, bufs) in zip(items, kernels)):  # no parameter buffers
    # (held weakly: PROGRAM_CACHE still decides what stays loaded)
    plan.ready = (BEAM.value, NOOPT.value, [weakref.ref(ei.runner) for ei in items],
                  [sum([b.nbytes for b in ei.bufs]) for ei in items])
  return items

def run_ready(kernels: list[tuple[UOp, list[Buffer]]], plan: Any) -> bool:
  """Run a quick plan's kernels with the programs lower_kernels kept (no ExecItem, no lookup); False, nothing run, when
  they must be looked up (another BEAM or NOOPT, a program unloaded since, DEBUG or VIZ showing each run)."""
  if not (ready := plan.ready) or ready[0] != BEAM.value or ready[1] != NOOPT.value or DEBUG.value >= 2 or VIZ.value:
    return False
  if None in (runners := [ref() for ref in ready[2]]): return False
  for (_, bufs), runner, mem in zip(kernels, runners, ready[3]): runner.run(bufs, mem)
  return True

class Lowering:
  """Items lowered as they come, each once (handed over by the scheduler as it builds them, then by lower_schedule); new
  kernels compiled in COMPILE_CHUNK batches beside codegen's core, the rest spread over the cores (docs/speed.md)."""
  def __init__(self) -> None:
    self.todo, self.seen, self.started = Todo(), dict[str, list[CompiledRunner]](), Started()
    self.lowered: dict[tuple, ExecItem] = {}  # (ast, buffers, variables) -> its ExecItem
  def add(self, si: ScheduleItem) -> ExecItem:
    if (ei := self.lowered.get(ident := (si.ast, si.bufs, tuple(si.var_vals.items())))) is not None: return ei
    self.lowered[ident] = ei = lower_schedule_item(si)  # (no batch started beside a BEAM search: same cores)
    if (key := batch_add(self.todo, ei.runner, self.seen)) is not None and BEAM < 1 and \
       0 < COMPILE_CHUNK <= sum(map(len, self.todo[key])): self.started += batch_start(key, self.todo.pop(key), 1)
    return ei
  def abandon(self) -> None:
    with contextlib.suppress(Exception): batch_load(self.started)  # reap the compiler processes, keep the first error

def lower_schedule(schedule: list[ScheduleItem], lowering: Lowering | None = None) -> list[ExecItem]:
  """Each item's ExecItem, every kernel compiled (see Lowering: lowering holds the kernels lowered so far)."""
  lw = lowering or Lowering()
  try: items = [lw.add(si) for si in schedule]
  except BaseException:
    lw.abandon()
    raise
  batch_load(lw.started + [x for key, by_src in lw.todo.items() for x in batch_start(key, by_src)])
  return items

def run_schedule(schedule: list[ScheduleItem], var_vals: dict[UOp, int] | None = None) -> None:
  """Compile (or find cached) and run each item in order; TinyJit, if capturing, records them."""
  run_exec_items(lower_schedule(schedule), var_vals)

def run_exec_items(items: list[ExecItem], var_vals: dict[UOp, int] | None = None) -> None:
  """Run items in order (compiled by lower_schedule or lower_kernels: a kernel that isn't compiles itself on its
  first call); TinyJit, if capturing, records them."""
  times = []
  for ei in items:
    if STATE.captures and CAPTURING: STATE.captures[-1].items.append(ei)
    times.append(ei.run(var_vals, wait=bool(VIZ.value)))
  if VIZ.value: viz_record("realize", items=[_viz_item(ei, et) for ei, et in zip(items, times)])
  if items and DEBUG.value >= 3: dprint(3, f"ran {len(items)} schedule items")  # (no f-string made otherwise)

def _viz_item(ei: ExecItem, et: float | None) -> dict[str, Any]:
  """What the viewer shows of one item run: its kernel (by function name, for codegen's record of it) and timing."""
  function = ei.runner.p.function_name if isinstance(ei.runner, CompiledRunner) else ""
  return {"name": ansistrip(ei.runner.name), "function": function, "device": ei.runner.device, "time": et,
          "flops": ei.runner.flops, "mem": ei.mem}

# *** index checks: an indexing op adds a flag (a tiny reduce over its indices); realizing its result reads the flag ***
@dataclass(frozen=True)
class IndexCheck:
  """flag: an int64 scalar, the largest out-of-range index (int64's minimum when all are in range)."""
  flag: UOp
  op: str
  size: int
  what: str = "index"
  error: type[Exception] = IndexError
  message: str | None = None  # the error's message, instead of "<op>: index <bad> is out of bounds ..."

  def raise_if_set(self, bad: int) -> None:
    if bad == -2 ** 63: return
    raise self.error(self.message or f"{self.op}: {self.what} {bad} is out of bounds for size {self.size}")

def add_index_check(node: UOp, check: IndexCheck) -> None:
  """Realizing anything computed from node runs check.flag in the same schedule and raises IndexError if it's set."""
  STATE.index_checks.setdefault(node, []).append(check)

def pending_index_checks(roots: list[UOp]) -> dict[UOp, list[IndexCheck]]:
  """The checks registered on nodes that roots are computed from. The walk stops at values stored already: the
  checks under them ran when they were computed (and an equal node computes from equal indices)."""
  if not (index_checks := STATE.index_checks): return {}
  def below(u: UOp) -> bool: return u.op is not Ops.BUFFER and state.lookup(u) is None
  return {u: c for u in UOp(Ops.SINK, dtypes.void, tuple(roots)).toposort(gate=below)
          if (c := index_checks.get(u)) is not None}

def verify_index_checks(pending: dict[UOp, list[IndexCheck]], flags: list[Buffer]) -> None:
  """Raise IndexError for the first flag that is set; checks that passed are dropped (their indices can't change)."""
  it = iter(flags)
  for node, checks in pending.items():
    for c in checks: c.raise_if_set(int.from_bytes(next(it).as_bytes(), "little", signed=True))
    STATE.index_checks.pop(node, None)

def read_flags(flags: list[tuple[Buffer, IndexCheck]]) -> None:
  """TinyJit replays: read the captured flags' buffers (written by the replayed kernels), raise if one is set."""
  for buf, c in flags: c.raise_if_set(int.from_bytes(buf.as_bytes(), "little", signed=True))
