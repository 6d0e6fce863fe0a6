"""The default choice of optimizations for a kernel, from its shape and the renderer's capabilities.

In: a Kernel. Out: a list of Opts (the kernel is not changed). BEAM search (engine/search.py) replaces this by
timing candidates; both produce the same kind of list.
"""
from __future__ import annotations
from fusegrad.helpers import prod
from fusegrad.uop.ops import UOp, Ops, AxisType
from fusegrad.codegen.kernel import Kernel, Opt, OptOps, KernelOptError, range_size

def _try(k: Kernel, opt: Opt, opts: list[Opt]) -> bool:
  try: k.apply_opt(opt)
  except KernelOptError: return False
  opts.append(opt)
  return True

def _out_axes(k: Kernel) -> list[tuple[int, UOp]]: return list(enumerate(k.output_axes()))
def _red_axes(k: Kernel) -> list[tuple[int, UOp]]: return list(enumerate(k.reduce_axes()))

def _grouped_reduce(k: Kernel, opts: list[Opt]) -> None:
  """A big reduce into few outputs on a device with workgroups: reduce across the workgroup in shared memory."""
  if not (k.ren.has_local and k.ren.has_shared and _red_axes(k)) or prod(range_size(r) for _, r in _out_axes(k)) > 2048:
    return
  last, r = _red_axes(k)[-1]
  for amt in (256, 128, 64, 32, 16):
    if range_size(r) % amt == 0 and range_size(r) >= amt * 4 and _try(k, Opt(OptOps.GROUP, last, amt), opts): return

def _lanes(k: Kernel, opts: list[Opt]) -> None:
  """A reduce along an axis every load is contiguous in (or doesn't move along), on a device with vectors: that
  axis's iterations go to the lanes of one vector accumulator (codegen/vectorize.py), summed up after the loop."""
  if not k.ren.vector_widths or not _red_axes(k): return
  last, r = _red_axes(k)[-1]
  moving = [ld for ld in k.loads() if k.stride(ld, r) != 0]
  if not moving or any(k.stride(ld, r) != 1 for ld in moving): return
  itemsize = k.stores()[0].src[0].dtype.base.itemsize  # type: ignore[attr-defined]
  for amt in sorted(k.ren.vector_widths, reverse=True):
    if amt * itemsize <= k.ren.simd_width and range_size(r) % amt == 0 and _try(k, Opt(OptOps.LANES, last, amt), opts):
      return

def _register_tile(k: Kernel, opts: list[Opt]) -> None:
  """Upcast the output axes some input doesn't move along (a matmul's i and j), so each loaded value is reused from
  registers. The axis the output is contiguous in gets a SIMD register's worth (it becomes a vector, see
  codegen/vectorize.py); more axes multiply the tile up to 16 vectors of accumulators (enough independent
  multiply-adds to hide their latency, few loads per multiply-add) within upcast_max elements."""
  store = k.stores()[0]
  itemsize = store.src[0].dtype.base.itemsize  # type: ignore[attr-defined]
  vec = max(k.ren.simd_width // itemsize, 4)
  done: set[int] = set()
  lanes = prod(range_size(r) for r in k.ranges_of(AxisType.LANES))
  def candidates() -> list[tuple[int, UOp, int, bool]]:
    """(axis, range, loads it broadcasts, output contiguous in it) for each output axis worth tiling."""
    out = []
    for i, r in _out_axes(k):
      if r.arg[0] in done or range_size(r) < 8: continue
      broadcast = sum(1 for ld in k.loads() if k.stride(ld, r) == 0)
      if broadcast: out.append((i, r, broadcast, k.stride(store, r) == 1))
    return out
  while (cands := candidates()) and k.upcast_size() // lanes < 16:
    best = None
    for i, r, broadcast, contiguous in cands:
      # a vector on the contiguous axis first; then the tile is shared among the axes left (8 for the last one)
      amounts = (vec, vec // 2, 4) if contiguous and not done else (4, 2) if len(cands) > 1 else (8, 4, 2)
      room = min(k.ren.upcast_max // k.upcast_size(), 16 * lanes // k.upcast_size())
      amt = next((a for a in amounts if range_size(r) % a == 0 and a <= room), None)
      if amt is not None and (best is None or (broadcast, contiguous) > best[0]):
        best = ((broadcast, contiguous), i, amt, r.arg[0], contiguous)
    if best is None or not _try(k, Opt(OptOps.UPCAST, best[1], best[2]), opts): return
    if not done and best[4] and lanes == 1: lanes = best[2]
    done.add(best[3])

def _column_reduce(k: Kernel, opts: list[Opt]) -> None:
  """A reduce along an axis its loads are strided in (column sums: x.sum(0)) whose output axis is contiguous in the
  store and in every load moving along it (none of them gated): that axis becomes a vector (a SIMD register of
  columns per load and per accumulator), 4 vectors per thread. Otherwise each column is summed on its own with one
  strided scalar load per element (x.sum(0) of 4096 x 4096 was 45x slower than x.sum(1))."""
  if not k.ren.vector_widths or not _red_axes(k) or k.upcast_size() > 1: return
  store, red = k.stores()[0], _red_axes(k)[-1][1]
  vec = k.ren.simd_width // store.src[2].dtype.itemsize
  if any(len(ld.src) > 2 or k.stride(ld, red) in (0, 1) for ld in k.loads() if k.stride(ld, red) != 0): return
  for i, r in reversed(_out_axes(k)):
    if k.stride(store, r) != 1: continue
    moving = [ld for ld in k.loads() if k.stride(ld, r) != 0]
    if moving and all(k.stride(ld, r) == 1 and len(ld.src) == 2 for ld in moving) and range_size(r) % vec == 0 \
       and vec in k.ren.vector_widths and _try(k, Opt(OptOps.UPCAST, i, vec), opts) and range_size(r) % (4 * vec) == 0:
      _try(k, Opt(OptOps.UPCAST, i, 4), opts)
    return

def _unroll(k: Kernel, opts: list[Opt]) -> None:
  """Unroll the innermost reduce loop a little (small ones entirely)."""
  if not _red_axes(k): return
  last, r = _red_axes(k)[-1]
  size = range_size(r)
  for amt in ((size,) if size <= 8 else ()) + (4, 2):
    if _try(k, Opt(OptOps.UNROLL, last, amt), opts): return

def _elementwise_upcast(k: Kernel, opts: list[Opt]) -> None:
  """An elementwise kernel on the CPU: a few elements per iteration of the contiguous axis."""
  if k.reduce_op or k.ren.has_local: return
  store = k.stores()[0]
  for i, r in reversed(_out_axes(k)):
    if k.stride(store, r) == 1:
      for amt in (4, 2):
        if range_size(r) % amt == 0 and range_size(r) >= 4 * amt and _try(k, Opt(OptOps.UPCAST, i, amt), opts): return
      return

VECTOR_MATH = (Ops.EXP2, Ops.LOG2, Ops.SQRT, Ops.SIN, Ops.RECIPROCAL)

def _elementwise_vector_math(k: Kernel, opts: list[Opt]) -> None:
  """An elementwise kernel that computes math functions per element (softmax's exp) on a device with vectors: a whole
  SIMD register of elements per iteration of the contiguous axis, as the functions cost more than the memory traffic
  (softmax's last kernel: 2.2x faster with 16 floats than with 4 on AVX-512)."""
  if k.reduce_op or not k.ren.vector_widths or not any(u.op in VECTOR_MATH for u in k.ast.toposort()): return
  store = k.stores()[0]
  amt = k.ren.simd_width // store.src[2].dtype.itemsize
  for i, r in reversed(_out_axes(k)):
    if k.stride(store, r) == 1:
      if amt in k.ren.vector_widths and range_size(r) % amt == 0 and range_size(r) >= 4 * amt:
        _try(k, Opt(OptOps.UPCAST, i, amt), opts)
      return

def _workgroups(k: Kernel, opts: list[Opt]) -> None:
  """Workgroups along the innermost output axis, on devices that have them."""
  if not k.ren.has_local: return
  for i, r in reversed(_out_axes(k)):
    for amt in (16, 8, 4, 2):
      if range_size(r) % amt == 0 and _try(k, Opt(OptOps.LOCAL, i, amt), opts): return
    return

def _threads(k: Kernel, opts: list[Opt]) -> None:
  """Split the outermost output loop across CPU threads when the kernel does enough work to pay for it."""
  if not k.ren.threads or not _out_axes(k): return
  work = prod(range_size(r) for r in k.ranges())
  i, r = _out_axes(k)[0]
  if work >= 1 << 16 and range_size(r) >= 2: _try(k, Opt(OptOps.THREAD, i, 0), opts)

def hand_coded_optimizations(kernel: Kernel) -> list[Opt]:
  """Opts for a kernel, in order: grouped reduce, vector lanes of a reduce, register tiling, vectors of columns for a
  strided reduce, unrolling, elementwise upcast (by a whole vector for math functions), workgroups, threads."""
  opts: list[Opt]
  k, opts = kernel.copy(), []
  for step in (_grouped_reduce, _lanes, _register_tile if kernel.reduce_op else None, _column_reduce, _unroll,
               _elementwise_vector_math, _elementwise_upcast, _workgroups, _threads):
    if step is not None: step(k, opts)
  return opts
