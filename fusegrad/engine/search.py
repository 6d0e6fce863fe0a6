"""BEAM search: find a kernel's optimizations by compiling and timing candidates (BEAM=n keeps the n fastest).

In: a Kernel with no opts applied. Out: the Kernel with the best opts found applied. Results are cached on disk per
(device, kernel AST, beam width), so a kernel is searched once per machine.
"""
from __future__ import annotations
import hashlib, json, math
from fusegrad.dtype import DType
from fusegrad.device import Buffer, CompileError
from fusegrad.helpers import diskcache_get, diskcache_put, dprint, DEBUG
from fusegrad.uop.ops import Ops, pretty_print
from fusegrad.codegen.kernel import Kernel, Opt, OptOps, KernelOptError

AMOUNTS = (0, 2, 3, 4, 8, 16)  # 0: the whole axis

def candidate_opts(k: Kernel) -> list[Opt]:
  """Every single action that could be tried next on k."""
  out, red = len(k.output_axes()), len(k.reduce_axes())
  return [Opt(op, axis, amt) for op in OptOps
          for axis in range(red if op in (OptOps.UNROLL, OptOps.GROUP) else out) for amt in AMOUNTS]

def _buffers_for(k: Kernel) -> list[Buffer]:
  """Scratch buffers big enough for every access of the kernel (sized from the largest index it can compute)."""
  sizes: dict[int, tuple[int, DType]] = {}
  for u in k.ast.toposort():
    if u.op in (Ops.LOAD, Ops.STORE):
      g = u.src[0]
      sizes[g.arg] = (max(sizes.get(g.arg, (0, None))[0], int(u.src[1].vmax) + 1),
                      g.dtype.base)  # type: ignore[attr-defined]
  return [Buffer(k.ren.device, max(n, 1), dt).allocate() for _, (n, dt) in sorted(sizes.items())]

def time_kernel(k: Kernel, bufs: list[Buffer], repeats: int = 3) -> float:
  """The fastest of a few runs of k, in seconds (inf if it doesn't compile)."""
  from fusegrad.codegen import program_for
  from fusegrad.engine.realize import CompiledRunner
  try:
    spec = program_for(k)
    runner = CompiledRunner(spec)
    vals = {v: v.arg[1] for v in spec.vars}
    return min(runner(bufs, vals, wait=True) or math.inf for _ in range(repeats))
  except (CompileError, KernelOptError, RuntimeError) as e:
    dprint(5, f"beam: candidate failed: {e}")
    return math.inf

def _cached_opts(key: str) -> list[Opt] | None:
  """The opts BEAM found for this key before (stored as JSON), or None."""
  if (data := diskcache_get("beam_search", key)) is None: return None
  try: return [Opt(OptOps[op], int(axis), int(amt)) for op, axis, amt in json.loads(data)]
  except (ValueError, KeyError, TypeError): return None

def beam_search(k: Kernel, width: int) -> Kernel:
  """Grow the opts list one action at a time, keeping the `width` fastest kernels, until nothing gets faster."""
  key = hashlib.sha256(f"{k.ren!r}|{width}|{pretty_print(k.ast, max_nodes=10**9)}".encode()).hexdigest()
  if (cached := _cached_opts(key)) is not None:
    try:
      ret = k.copy()
      for o in cached: ret.apply_opt(o)
      return ret
    except KernelOptError: pass  # an entry that doesn't fit this kernel: search again
  bufs = _buffers_for(k)
  beam: list[tuple[Kernel, float]] = [(k, time_kernel(k, bufs))]
  seen: set[tuple[Opt, ...]] = {()}
  while True:
    candidates = []
    for kern, _ in beam:
      for opt in candidate_opts(kern):
        new = kern.copy()
        try: new.apply_opt(opt)
        except KernelOptError: continue
        ident = tuple(new.applied_opts)
        if ident in seen: continue
        seen.add(ident)
        candidates.append((new, time_kernel(new, bufs)))
    best_now = sorted(beam + candidates, key=lambda x: x[1])[:width]
    if best_now[0][1] >= beam[0][1]: break  # no faster kernel this round
    beam = best_now
    if DEBUG >= 2: dprint(2, f"beam: {beam[0][1] * 1e6:9.2f} us {beam[0][0].applied_opts}")
  best = beam[0][0]
  diskcache_put("beam_search", key, json.dumps([[o.op.name, o.axis, o.arg] for o in best.applied_opts]).encode())
  return best
