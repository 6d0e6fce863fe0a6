"""BEAM search: a Kernel's optimizations found by compiling and timing candidates (BEAM=n keeps the n fastest); in: a
Kernel with no opts applied, out: the Kernel with the best opts found applied. See docs/developer/codegen.md."""
from __future__ import annotations
import hashlib, json, math, random, struct, time
from fusegrad.dtype import DType, dtypes
from fusegrad.device import Buffer, Device, CompileError
from fusegrad.helpers import diskcache_get, diskcache_put, dprint, DEBUG, IGNORE_BEAM_CACHE
from fusegrad.uop.ops import UOp, Ops, pretty_print
from fusegrad.renderer import Renderer
from fusegrad.codegen import PREPARE, program_for, optimize
from fusegrad.codegen.kernel import Kernel, Opt, OptOps, KernelOptError
from fusegrad.engine.runner import CompiledRunner

AMOUNTS = (0, 2, 3, 4, 8, 16)  # 0: the whole axis
SLOW = 20  # a candidate whose first run takes SLOW times the best time so far isn't run again
MIN_TIME = 1e-3  # seconds: a kernel the heuristic's opts run in under this keeps them (searching it gains microseconds)
BUDGET, SHARE = 10.0, 1000  # seconds of search per kernel: at most BUDGET, SHARE times the heuristic kernel's time
TOTAL = [240.0]  # seconds of search left to this process (a model's step: every kernel's search together)
CHUNK = 8  # candidates rendered and compiled together; none is timed after the deadline, the best found so far wins

def candidate_opts(k: Kernel) -> list[Opt]:
  """Every single action that could be tried next on k."""
  out, red = len(k.output_axes()), len(k.reduce_axes())
  return [Opt(op, axis, amt) for op in OptOps if op is not OptOps.COMPILER
          for axis in range(red if op in (OptOps.UNROLL, OptOps.GROUP, OptOps.LANES) else out) for amt in AMOUNTS] + \
         [Opt(OptOps.COMPILER, 0, i) for i in range(1, len(k.ren.compilers))]

def _buffers_for(k: Kernel) -> list[Buffer] | None:
  """Scratch buffers big enough for every access of the kernel (sized from the largest index it can compute), or
  None where they would hold over 4 GiB: an index read from memory (a gather, x[idx]) can be anything."""
  sizes: dict[int, tuple[int, DType]] = {}
  for u in k.ast.toposort():
    if u.op in (Ops.LOAD, Ops.STORE):
      g = u.src[0]
      sizes[g.arg] = (max(sizes.get(g.arg, (1, None))[0], int(u.src[1].vmax) + 1),
                      g.dtype.base)  # type: ignore[attr-defined]
  if sum(n * dt.itemsize for n, dt in sizes.values()) > 1 << 32: return None
  # written once (a fresh mapping reads the shared zero page: every load an L1 hit): floats random as data are (period
  # 4099), so code that branches on values times as it runs (gcc's jump in a max: 2x slower on data); integers zero
  rng = random.Random(0)
  def data(n: int, dt: DType) -> bytes | memoryview:
    if dt not in (dtypes.float16, dtypes.float32, dtypes.float64): return bytes(n * dt.itemsize)
    block = struct.pack(f"4099{dt.fmt}", *(rng.uniform(-1, 1) for _ in range(4099)))
    return memoryview(block * (n // 4099 + 1))[:n * dt.itemsize]  # (a view: no second copy of a big buffer)
  return [Buffer(k.ren.device, n, dt).allocate().copyin(data(n, dt)) for n, dt in (sizes[i] for i in sorted(sizes))]

def compile_candidates(kernels: list[Kernel]) -> list[CompiledRunner | None]:
  """A loaded CompiledRunner for each kernel (None where lowering or compiling failed), one batch per compiler."""
  runners: list[CompiledRunner | None] = []
  for k in kernels:
    try: runners.append(CompiledRunner(program_for(k)))
    except (KernelOptError, RuntimeError, ValueError) as e:
      dprint(5, f"beam: candidate failed: {e}")
      runners.append(None)
  for index in {r.p.compiler for r in runners if r is not None}:
    todo = [r for r in runners if r is not None and r.p.compiler == index]
    for r, lib in zip(todo, Device[todo[0].p.device].compiler_for(index).compile_cached_batch([r.p.src for r in todo])):
      try: r.load(lib)
      except (CompileError, OSError, RuntimeError) as e: dprint(5, f"beam: candidate failed: {e}")
  return [r if r is not None and r.prg is not None else None for r in runners]

def time_kernel(runner: CompiledRunner | None, bufs: list[Buffer], repeats: int = 3, limit: float = math.inf) -> float:
  """The fastest of a few runs of a compiled kernel, in seconds (inf if it failed or its first run took over limit)."""
  if runner is None: return math.inf
  try:
    vals = {v: v.arg[1] for v in runner.p.vars}
    first = runner(bufs, vals, wait=True) or math.inf
    if first > limit: return math.inf
    return min([first] + [runner(bufs, vals, wait=True) or math.inf for _ in range(repeats - 1)])
  except (RuntimeError, OSError) as e:
    dprint(5, f"beam: candidate failed: {e}")
    return math.inf

def _cached_opts(key: str) -> list[Opt] | None:
  """The opts BEAM found for this key before (stored as JSON), or None."""
  if (data := diskcache_get("beam_search", key)) is None: return None
  try: return [Opt(OptOps[op], int(axis), int(amt)) for op, axis, amt in json.loads(data)]
  except (ValueError, KeyError, TypeError): return None

def _time_all(kernels: list[Kernel], bufs: list[Buffer], best: float, deadline: float = math.inf) -> list[float]:
  """Each kernel's time, CHUNK at a time (rendered, compiled, timed); inf for those not reached by the deadline."""
  out: list[float] = []
  for i in range(0, len(kernels), CHUNK):
    if time.perf_counter() >= deadline: return out + [math.inf] * (len(kernels) - i)
    out += [time_kernel(r, bufs, limit=best * SLOW) if time.perf_counter() < deadline else math.inf
            for r in compile_candidates(kernels[i:i + CHUNK])]
  return out

def beam_opts(ast: UOp, ren: Renderer, width: int) -> list[Opt]:
  """The opts BEAM search finds for a kernel AST, for get_program (which prepares the kernel the same way)."""
  for _, prepare in PREPARE: ast = prepare(ast)
  return beam_search(Kernel(ast, ren), width).applied_opts

def search_key(k: Kernel, width: int) -> str:
  """The cache key of a search: the renderer (its machine model and instruction set, compilers, threads), the beam width
  and the kernel's AST."""
  return hashlib.sha256(f"{k.ren!r}|{width}|{pretty_print(k.ast, max_nodes=10**9)}".encode()).hexdigest()

def beam_search(k: Kernel, width: int) -> Kernel:
  """Grow the opts list one action at a time, keeping the `width` fastest kernels, until nothing gets faster."""
  key = search_key(k, width)
  if not IGNORE_BEAM_CACHE and (cached := _cached_opts(key)) is not None and (ret := k.with_opts(cached)) is not None:
    return ret  # (a cached entry that doesn't fit this kernel is searched again)
  bufs, heuristic = _buffers_for(k), optimize(k.copy())
  if bufs is None or TOTAL[0] <= 0: return heuristic  # not searched (nor cached: searched in a later process)
  beam = [(heuristic, _time_all([heuristic], bufs, math.inf)[0])]
  start = time.perf_counter()  # the search's time, counted in TOTAL (the heuristic's kernel is compiled anyway)
  deadline = start + min(BUDGET, SHARE * beam[0][1], TOTAL[0])
  seen: set[tuple[Opt, ...]] = {tuple(heuristic.applied_opts)}
  while beam[0][1] >= MIN_TIME and time.perf_counter() < deadline:
    candidates: list[Kernel] = []
    for kern, _ in beam:
      for opt in candidate_opts(kern):
        if (new := kern.with_opts([opt])) is None or (ident := tuple(new.applied_opts)) in seen: continue
        seen.add(ident)
        candidates.append(new)
    timed = list(zip(candidates, _time_all(candidates, bufs, beam[0][1], deadline)))
    best_now = sorted(beam + timed, key=lambda x: x[1])[:width]
    if best_now[0][1] >= beam[0][1]: break  # no faster kernel this round
    beam = best_now
    if DEBUG >= 2: dprint(2, f"beam: {beam[0][1] * 1e6:9.2f} us {beam[0][0].applied_opts}")
  best = beam[0][0]
  if best is not heuristic:  # timed again, by turns with the heuristic's: a lucky run on a loaded machine doesn't win
    again = _time_all([best, heuristic] * 2, bufs, math.inf)
    if min(again[0::2]) >= min(again[1::2]): best = heuristic
  TOTAL[0] -= time.perf_counter() - start
  diskcache_put("beam_search", key, json.dumps([[o.op.name, o.axis, o.arg] for o in best.applied_opts]).encode())
  return best
