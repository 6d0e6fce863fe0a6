"""The default choice of optimizations for a kernel, from its shape and the renderer's capabilities.
In: a Kernel. Out: a list of Opts (the kernel is not changed). The steps: docs/developer/codegen.md, "Opts"."""
from __future__ import annotations
import math
from fusegrad.helpers import prod, ceildiv
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops, AxisType, GroupOp
from fusegrad.codegen.kernel import Kernel, Opt, OptOps, KernelOptError, range_size, index_stride
from fusegrad.codegen.fold import bound_reduce
from fusegrad.codegen.vectorize import vector_range, loads_contiguous, is_contiguous, TRANSPOSED

# A kernel of fewer iterations (all loops) on a device without workgroups runs in microseconds whatever its opts: it
# keeps those that make vectors, not tiles and unrolls that copy its code (MNIST's step: 55 such kernels, 29% of its C)
SMALL_WORK = 1 << 16

# A tile or an unroll copies each value operation of the body (index math aside) once per element it varies along:
# at most this many copies in all (a vector's copy is one operation, THREEFRY's ~100 a lane; why: "Tile rules")
BODY_OPS, SCALAR_COST = 4096, {Ops.THREEFRY: 100}
PAGE = 4096  # bytes: rows this far apart are read as separate streams (_unroll)
STREAM = 128  # bytes of each row a step of a reduce streaming rows from memory reads (_unroll)

def _body_ops(k: Kernel) -> int:
  """Value operations of the kernel's body once its tile and unroll copy it (see BODY_OPS)."""
  vec = vector_range(k.stores()[0]) or next(iter(k.ranges_of(AxisType.LANES)), None)
  tiled, total = set(k.ranges_of(AxisType.UPCAST, AxisType.LANES, AxisType.UNROLL)), 0
  varies: dict[UOp, frozenset[UOp]] = {}  # the tiled ranges below each node (sources come first in the toposort)
  for u in k.ast.toposort():
    varies[u] = frozenset({u} & tiled).union(*(varies[s] for s in u.src))
    if u.op not in GroupOp.ALU or u.dtype.scalar() == dtypes.index: continue
    copies = prod(range_size(r) for r in varies[u])
    if u.op in SCALAR_COST: total += SCALAR_COST[u.op] * copies
    else: total += copies // (range_size(vec) if vec is not None and vec in varies[u] else 1)
  return total

def _body_fits(k: Kernel, opt: Opt) -> bool: return (t := k.with_opts([opt])) is not None and _body_ops(t) <= BODY_OPS

def _try(k: Kernel, opt: Opt, opts: list[Opt]) -> bool:
  try: k.apply_opt(opt)
  except KernelOptError: return False
  opts.append(opt)
  return True

def _out_axes(k: Kernel) -> list[tuple[int, UOp]]: return list(enumerate(k.output_axes()))
def _bounded_window(k: Kernel, gated: set[UOp]) -> bool:
  """A padded window (gated: _window_gated's) whose loops bound_gated_reduces bounds to the taps inside the image."""
  return bool(gated) and any(bound_reduce(u) is not None for u in k.ast.toposort() if u.op is Ops.REDUCE)
def _reduce_loads(k: Kernel) -> list[UOp]:
  """The loads inside the reduce loops (not a bias added after them): those a register tile reuses."""
  red = k.ranges_of(AxisType.REDUCE, AxisType.UNROLL, AxisType.LANES, AxisType.GROUP)
  return [ld for ld in k.loads() if any(k.stride(ld, r) != 0 for r in red)]
def _red_axes(k: Kernel) -> list[tuple[int, UOp]]: return list(enumerate(k.reduce_axes()))
def _window_gated(k: Kernel) -> set[UOp]:
  """Ranges a load's gate tests with a reduce range (a padded window's edges): not tiled, the gates become loop bounds
  (bound_gated_reduces) and images take the tile where a batch is as long ("Tile rules"), on CPUs where 4 images x 2
  vectors fill half the registers or each reduce axis is gated or read contiguously (conv_rule's views; NCHW: 0.77x)."""
  rs = [{u for u in g.toposort() if u.op is Ops.RANGE} for ld in k.loads() for g in ld.src[2:]]
  gated = {r for s in rs if any(x.arg[1] is AxisType.REDUCE for x in s) for r in s}
  chans = {r for ld in k.loads() if len(ld.src) > 2 for _, r in _red_axes(k) if k.stride(ld, r) == 1} - gated
  if not (k.ren.tiles_images() or not k.ren.global_max and chans and chans | gated >= {*k.reduce_axes()}): return set()
  edge = max((range_size(r) for r in gated if r.arg[1] is not AxisType.REDUCE), default=0)
  return gated if sum(r not in gated and range_size(r) >= max(edge, 4) for r in k.output_axes()) > 1 else set()

def _grouped_reduce(k: Kernel, opts: list[Opt]) -> None:
  """A big reduce into few outputs on a device with workgroups: reduce across the workgroup in shared memory."""
  if not (k.ren.has_local and k.ren.has_shared and _red_axes(k)) or prod(range_size(r) for _, r in _out_axes(k)) > 2048:
    return
  last, r = _red_axes(k)[-1]
  for amt in (256, 128, 64, 32, 16):
    if range_size(r) % amt == 0 and range_size(r) >= amt * 4 and _try(k, Opt(OptOps.GROUP, last, amt), opts): return

def _lanes(k: Kernel, opts: list[Opt]) -> None:
  """A reduce along an axis every load is contiguous in (or doesn't move along) keeps it in the lanes of one vector
  accumulator (vectorize.py); on a CPU a long one into integers keeps its plain loop (docs/developer/codegen.md)."""
  if not k.ren.vector_widths or not _red_axes(k): return
  last, r = _red_axes(k)[-1]
  moving = [ld for ld in k.loads() if k.stride(ld, r) != 0]
  if not moving or any(k.stride(ld, r) != 1 for ld in moving): return
  itemsize, n = k.stores()[0].src[0].dtype.base.itemsize, range_size(r)  # type: ignore[attr-defined]
  if not k.ren.has_local and n >= 64 and n % 16 == 0 and \
     any(u.op is Ops.REDUCE and r in u.src and dtypes.is_int(u.dtype) for u in k.ast.toposort()): return
  any(amt <= k.ren.machine.vector(itemsize) and n % amt == 0 and _try(k, Opt(OptOps.LANES, last, amt), opts)
      for amt in sorted(k.ren.vector_widths, reverse=True))

def tile_registers(k: Kernel, loads: list[UOp]) -> int:
  """Registers a register tile holds through one (unrolled) reduce step: its accumulators and the operands `loads`
  loaded for them (how each is counted: docs/developer/codegen.md, "Tile rules")."""
  vec = next(iter(k.ranges_of(AxisType.LANES)), None) or vector_range(k.stores()[0])  # (a reduce's accumulators)
  lanes = range_size(vec) if vec is not None else 1
  unroll, red = k.ranges_of(AxisType.UNROLL), [r for _, r in _red_axes(k)]
  split = len(unroll) == len(red) == 1 and all(  # one reduce axis: a loop of unrolled steps
    k.stride(ld, red[0]) == (k.stride(ld, unroll[0]) or 0) * range_size(unroll[0]) for ld in _reduce_loads(k))
  steps = range_size(unroll[0]) if split and _big_matmul(k) else 1
  def regs(ld: UOp) -> int:
    n = prod(range_size(u) for u in k.ranges_of(AxisType.UPCAST, AxisType.LANES, *[AxisType.UNROLL] * (steps == 1))
             if k.stride(ld, u) != 0)
    return n // lanes if vec is not None and k.stride(ld, vec) == 1 else n
  footprints = sorted(regs(ld) for ld in loads)
  operands = footprints[0] + (len(footprints) > 1) + (k.ren.machine.fma_units == 0) if footprints else 0
  return k.upcast_size() // lanes + operands + steps - 1

def _register_tile(k: Kernel, opts: list[Opt]) -> None:
  """Upcast the output axes some input doesn't move along (a matmul's i and j), so loaded values are reused from
  registers: a SIMD register's worth on one axis (a vector: one every load of the reduce is contiguous in, else the
  output's), more axes while the tile fits the vector registers with one reduce step's loads (tile_registers)."""
  store = k.stores()[0]
  itemsize = store.src[0].dtype.base.itemsize  # type: ignore[attr-defined]
  vec = max(k.ren.machine.vector(itemsize), 4)
  done: set[int] = set()
  lanes = prod(range_size(r) for r in k.ranges_of(AxisType.LANES))
  # lanes of at least half a register: a window sliding along them loads a vector per tap, no window stays live
  lane_vector = lanes * 2 >= vec
  def operands(k: Kernel) -> list[UOp]:  # a matmul's bias is not in the tile
    return _reduce_loads(k) if len(_red_axes(k)) == 1 and lanes == 1 else k.loads()
  reused = operands(k)
  long_reduce = prod(range_size(r) for r in k.ranges_of(AxisType.REDUCE)) >= 64
  def slides(r: UOp) -> bool:  # a load moves along r as along a reduce axis (a conv's window): it keeps more loads live
    sliding = k.ranges_of(AxisType.REDUCE, *[AxisType.LANES] * (not lane_vector))
    return any(k.stride(ld, r) and any(k.stride(ld, q) == k.stride(ld, r) for q in sliding) for ld in k.loads())
  # axes upcast whole (a pooled 3 x 3), for a long reduce, on CPUs (a GPU thread's registers are its occupancy too)
  short = {r.arg[0] for _, r in _out_axes(k) if 2 <= range_size(r) < 8 and long_reduce and not k.ren.has_local
           and not slides(r)}
  half, cap, gated = k.ren.machine.vector_registers // 2, 0, _window_gated(k)
  bounded = _bounded_window(k, gated)  # 4 images (8 ran slower: docs/developer/codegen.md, "Tile rules")
  way = max(k.ren.machine.l1d // k.ren.machine.l1_ways, 1)  # bytes between two addresses of one L1 set (4 KB on x86)
  def crowded(r: UOp, amt: int) -> bool:
    """amt loads along r, of values read again later, put more than half the L1's ways in one set (codegen.md)."""
    if k.ren.has_local: return False
    reread = [ld for ld in operands(k) if any(k.stride(ld, q) == 0 for _, q in _out_axes(k))]  # (for other outputs)
    return any(ceildiv(amt, way // math.gcd(abs(s) * ld.src[0].dtype.base.itemsize, way)) > k.ren.machine.l1_ways // 2  # type: ignore[attr-defined]
               for ld in reread if (s := k.stride(ld, r)))
  def candidates() -> list[tuple[int, UOp, int, bool, bool, bool, int]]:
    """(axis, range, loads it broadcasts, output contiguous in it, can be a vector, a vector of loads, the largest
    stride of the loads that move along it) for each output axis worth tiling. A vector needs the output or every load
    that moves along the axis to be contiguous."""
    out = []
    for i, r in _out_axes(k):
      if r.arg[0] in done or range_size(r) < 8 and r.arg[0] not in short or r in gated: continue
      broadcast = sum(1 for ld in reused if k.stride(ld, r) == 0)
      contiguous, loads = k.stride(store, r) == 1, loads_contiguous(k.ast, r)
      # a vector the output isn't contiguous in is stored lane by lane: worth it only for a long enough reduce
      vector = contiguous or (long_reduce and loads)
      strides = [k.stride(ld, r) for ld in reused]
      reach = max((1 << 62 if s is None else abs(s) for s in strides if s != 0), default=0)
      if broadcast: out.append((i, r, broadcast, contiguous, vector, loads, reach))
    return out
  wide = _big_matmul(k)  # _matmul_panels doubles the vector's columns: the other axes leave room for that
  def fits(i: int, amt: int, registers: int = 0) -> bool:
    if (trial := k.with_opts(_padded_upcast(k, i, amt))) is None: return False
    doubled = trial.upcast_size() // vec + 1 if wide and done else 0  # as many accumulators more, and a column operand
    return tile_registers(trial, operands(trial)) + doubled <= (registers or k.ren.machine.vector_registers) and \
      _body_ops(trial) <= BODY_OPS
  def second_vector() -> None:
    """A second vector along the output's vector axis where the registers allow: one more vector load per reduce step
    for as many accumulators as the broadcasts (the tile nearer square: fewer loads per multiply-add)."""
    if (v := vector_range(st := k.stores()[0])) is None or not (step := k.stride(st, v)): return
    i = next((i for i, r in _out_axes(k) if k.stride(st, r) == step * range_size(v) and range_size(r) % 2 == 0), None)
    if i is not None and fits(i, 2): _try(k, Opt(OptOps.UPCAST, i, 2), opts)
  while cands := candidates():
    best = None
    for i, r, broadcast, contiguous, vector, loads, reach in cands:
      # the vector first (a vector of loads before one of stores, then the longest); then the axes left share the
      # registers (8 for the last one, 4 images by a padded window; a big matmul's rows: all that fit, 6 x 2 at 16)
      first = vector and not done
      rows = wide and not first and len(cands) == 1  # padded to the tile where it doesn't divide them (PADTO)
      amounts = (vec, vec // 2, 4) if first else (4, 2) if len(cands) > 1 or bounded else range(8, 1, -1) if wide else \
        (8, 4, 2)
      # a short axis whole, the tile then in half the registers; not one a window slides along; never as the vector,
      # unless the reduce's lanes are the vector (each rule's measurements: docs/developer/codegen.md, "Tile rules")
      tries = [(range_size(r), half)] * (not first or lane_vector) if r.arg[0] in short else [(a, cap) for a in amounts]
      amt = next((a for a, regs in tries if (range_size(r) % a == 0 or rows) and not crowded(r, a)
                  and fits(i, a, regs)), None)
      # the first axis after the vector's: the one whose loads lie nearest; then the next in axis order ("Tile rules")
      key = (first and loads, amt if first else 0, broadcast, contiguous, -reach if len(done) == 1 else 0)
      if amt is not None and (best is None or key > best[0]): best = (key, i, amt, r.arg[0])
    if best is None or not all(_try(k, o, opts) for o in _padded_upcast(k, best[1], best[2])): break
    done.add(best[3])
    if best[3] in short and not lane_vector: cap = half
    # the second vector right after the first, before the broadcast axes take the registers; a big matmul's last
    if len(done) == 1 and not wide: second_vector()
  if wide: second_vector()

def _padded_upcast(k: Kernel, i: int, amt: int) -> list[Opt]:
  """Output axis i upcast by amt, padded first to a multiple of it (PADTO) where amt doesn't divide it."""
  return [Opt(OptOps.PADTO, i, amt)] * (range_size(k.output_axes()[i]) % amt != 0) + [Opt(OptOps.UPCAST, i, amt)]

def _big_matmul(k: Kernel) -> bool:
  """A reduce over one axis of two operands (a matmul, batched or not, either operand transposed) that hold half the L2
  cache or more, on a device without workgroups (loops, not a launch grid)."""
  if k.ren.has_local or len(_red_axes(k)) != 1 or len(_reduce_loads(k)) != 2 or k.ranges_of(AxisType.LANES):
    return False
  itemsize = k.stores()[0].src[0].dtype.base.itemsize  # type: ignore[attr-defined]
  elements = sum(prod(range_size(r) for r in k.ranges() if k.stride(ld, r) != 0) for ld in _reduce_loads(k))
  return elements * itemsize >= k.ren.machine.l2 // 2

def _matmul_panels(k: Kernel, opts: list[Opt]) -> None:
  """A register-tiled reduce over one axis (a matmul) whose operands hold half the L2 or more, on a device without
  workgroups: the vector axis upcast by 2 again (3 where the FMAs need more accumulators) where the registers allow,
  then the tiled output loop re-reading less memory goes outside the other (docs/developer/codegen.md, "Tile rules")."""
  if not _big_matmul(k): return  # operands that fit in the cache together: any loop order
  store, itemsize = k.stores()[0], k.stores()[0].src[0].dtype.base.itemsize  # type: ignore[attr-defined]
  vec = next((range_size(u) for u in k.ranges_of(AxisType.UPCAST) if k.stride(store, u) == 1), 0)
  if not vec: return
  for i, r in _out_axes(k):  # the vector axis's outer part has store stride vec
    if k.stride(store, r) != vec: continue
    # 3 vectors where 2 would hold no more accumulators than the FMA units keep in flight (units x latency), padded to
    # a multiple of 3 on an axis of 32 or more (at most 6% more work)
    three = k.upcast_size() // vec * 2 <= k.ren.machine.fma_units * k.ren.machine.fma_latency and range_size(r) >= 32
    for wider in [_padded_upcast(k, i, 3)] * three + [[Opt(OptOps.UPCAST, i, 2)]]:
      if (t := k.with_opts(wider)) and tile_registers(t, _reduce_loads(t)) <= k.ren.machine.vector_registers:
        all(_try(k, o, opts) for o in wider)
        break
  def reread(outer: UOp, inner: UOp) -> int:
    """Elements read again for each iteration of outer: all that the loads outer doesn't move read along inner."""
    return range_size(outer) * sum(prod(range_size(r) for r in k.ranges() if k.stride(ld, r) != 0)
                                   for ld in k.loads() if k.stride(ld, inner) != 0 and k.stride(ld, outer) == 0)
  for i in range(len(_out_axes(k)) - 1):
    a0, a1 = k.output_axes()[i:i + 2]
    if range_size(a1) >= 8 and reread(a1, a0) < reread(a0, a1):  # the outer loop gets the threads: keep it long
      _try(k, Opt(OptOps.SWAP, i, i + 1), opts)
  # the streamed operand cut into blocks that fit the L2 cache, each meeting every panel ("Tile rules")
  if len(_out_axes(k)) < 2: return  # a matrix-vector product: one output axis, nothing to block
  i, (outer, inner), batch = len(_out_axes(k)) - 2, k.output_axes()[-2:], k.output_axes()[:-2]
  streamed = sum(prod(range_size(r) for r in k.ranges() if k.stride(ld, r) != 0 and r not in batch)
                 for ld in _reduce_loads(k) if k.stride(ld, inner) != 0 and k.stride(ld, outer) == 0) * itemsize
  # rows padded to whole blocks (PADTO), a padded tile's rows counted; a block up to 1/16 over the L2 is as fast
  blocks = next((b for b in (2, 4, 8, 16, 32) if streamed // b <= k.ren.machine.l2 * 17 // 16
                 and range_size(inner) // b >= 8), None)
  if streamed <= k.ren.machine.l2 or not blocks or range_size(inner) % blocks and \
     not _try(k, Opt(OptOps.PADTO, i + 1, blocks), opts): return
  if _try(k, Opt(OptOps.SPLIT, i + 1, range_size(k.output_axes()[i + 1]) // blocks), opts):
    _try(k, Opt(OptOps.SWAP, i, i + 1), opts)

def _column_reduce(k: Kernel, opts: list[Opt]) -> None:
  """A reduce along an axis its loads are strided in (column sums: x.sum(0)) whose output axis is contiguous in the
  store and in every load moving along it (none of them gated): that axis becomes a vector (a SIMD register of
  columns per load and per accumulator), 4 vectors per thread, not one strided scalar load per element."""
  if not k.ren.vector_widths or not _red_axes(k) or k.upcast_size() > 1: return
  store, red = k.stores()[0], _red_axes(k)[-1][1]
  vec = k.ren.machine.vector_bytes // store.src[2].dtype.itemsize
  if any(len(ld.src) > 2 or k.stride(ld, red) in (0, 1) for ld in k.loads() if k.stride(ld, red) != 0): return
  for i, r in reversed(_out_axes(k)):
    if k.stride(store, r) != 1: continue
    moving = [ld for ld in k.loads() if k.stride(ld, r) != 0]
    if moving and all(k.stride(ld, r) == 1 and len(ld.src) == 2 for ld in moving) and range_size(r) % vec == 0 \
       and vec in k.ren.vector_widths and _try(k, Opt(OptOps.UPCAST, i, vec), opts) and range_size(r) % (4 * vec) == 0 \
       and _body_fits(k, Opt(OptOps.UPCAST, i, 4)):
      _try(k, Opt(OptOps.UPCAST, i, 4), opts)
    return

def _unroll(k: Kernel, opts: list[Opt]) -> None:
  """Unroll the innermost reduce loop a little (small ones whole: up to 8 steps, 16 where nothing is upcast, as a batch
  norm's short rows, which gcc keeps as a loop: up to 2x slower) while the tile's operands fit the registers; not a tile
  filling half of them (but a big matmul's), nor rows a page apart read a few at a time. A CPU's vector reduce streaming
  rows a page or more long, more than the L2 in all: STREAM bytes a row a step, 4x for exp2s/log2s ("Tile rules")."""
  tile = k.ren.machine.register_tile(k.upcast_size() * k.stores()[0].src[0].dtype.base.itemsize)  # type: ignore
  if not _red_axes(k) or tile and not k.ren.has_local and not _big_matmul(k): return
  last, r = _red_axes(k)[-1]
  size, ups, lanes = range_size(r), k.ranges_of(AxisType.UPCAST), k.ranges_of(AxisType.LANES)
  rows = ups and lanes and all(abs(k.stride(ld, u) or 0) * ld.dtype.itemsize >= PAGE
                               for u in ups for ld in _reduce_loads(k))
  step = [range_size(lanes[0]) * ld.dtype.itemsize for ld in k.loads() if k.stride(ld, lanes[0])] if lanes else []
  stream = bool(step) and not ups and not k.ren.has_local and min(step) * size >= PAGE and \
    sum(step) * size * prod(range_size(q) for q in k.output_axes()) > k.ren.machine.l2  # (step: bytes a load reads)
  reduced = {v.op for u in k.ast.toposort() if u.op is Ops.REDUCE for v in u.src[0].toposort()} if stream else set()
  for amt in (max(STREAM * (4 if reduced & {Ops.EXP2, Ops.LOG2} else 1) // max(step), 1),) if stream else \
             ((size,) if size <= (16 if not ups else 8) else ()) + (() if rows else (4, 2)):  # (1: no unroll)
    if (unrolled := k.with_opts([Opt(OptOps.UNROLL, last, amt)])) is None: continue
    loopless = amt == size <= 4 and len(_red_axes(k)) == 1  # (no loop left to carry the registers from step to step)
    if k.upcast_size() > 1 and not loopless and tile_registers(unrolled, _reduce_loads(unrolled)) > \
       k.ren.machine.vector_registers or _body_ops(unrolled) > BODY_OPS: continue
    if _try(k, Opt(OptOps.UNROLL, last, amt), opts): return

def _elementwise_upcast(k: Kernel, opts: list[Opt]) -> None:
  """An elementwise kernel on the CPU: 16 bytes of its widest values (4 at least) per step of the contiguous axis."""
  if k.reduce_op or k.ren.has_local: return
  store, widest = k.stores()[0], max(x.dtype.itemsize for x in [*k.loads(), k.stores()[0].src[2]])
  for i, r in reversed(_out_axes(k)):
    if k.stride(store, r) == 1:
      for amt in [a for a in (16, 8, 4, 2) if a <= max(4, 16 // widest)]:
        opt = Opt(OptOps.UPCAST, i, amt)
        if range_size(r) % amt == 0 and range_size(r) >= 4 * amt and _body_fits(k, opt) and _try(k, opt, opts): return
      return

def _pooled_loads(k: Kernel, opts: list[Opt]) -> None:
  """An elementwise kernel with loads at r // n (n up to 4) along an output axis r (a max pool's gradient reads the
  pooled value and its gradient once per window): r upcast by n, each such load serving n outputs from a register."""
  if k.reduce_op or k.ren.has_local: return
  for i, r in reversed(_out_axes(k)):
    n = next((d.src[1].arg for ld in k.loads() for d in ld.src[1].toposort() if d.op is Ops.IDIV
              and d.src[1].op is Ops.CONST and index_stride(d.src[0], r) == 1), 0)
    if 1 < n <= 4 and range_size(r) % n == 0 and _body_fits(k, opt := Opt(OptOps.UPCAST, i, n)): _try(k, opt, opts)

def _transposed_reads(k: Kernel, opts: list[Opt]) -> None:
  """An elementwise kernel whose loads gather along the store's vector (a batch norm's backward read NCHW, written NHWC)
  but are contiguous along another output axis: that axis upcast by as many (a square tile), so the loads read vectors
  along it, transposed in registers (codegen/vectorize.py)."""
  if k.reduce_op or k.ren.has_local or (lanes := vector_range(st := k.stores()[0])) is None or st.src[2].op is Ops.LOAD:
    return  # (a copy: _transpose_tile)
  if (n := range_size(lanes)) not in TRANSPOSED or all(k.stride(ld, lanes) in (0, 1) for ld in k.loads()): return
  for i, r in _out_axes(k):
    if range_size(r) % n or range_size(r) < 2 * n: continue
    opt = Opt(OptOps.UPCAST, i, n)
    if (trial := k.with_opts([opt])) is None: continue  # (a gate along r, padding, may not depend on q)
    vec, q = vector_range(trial.stores()[0]), next(u for u in trial.ranges_of(AxisType.UPCAST) if u not in k.ranges())
    if vec is not None and any(trial.stride(ld, vec) not in (0, 1) and is_contiguous(ld, q) for ld in trial.loads()) \
       and _body_ops(trial) <= BODY_OPS and _try(k, opt, opts): return

def _transpose_tile(k: Kernel, opts: list[Opt]) -> None:
  """A copy reading along another axis than it writes (a transpose, a.T made rows for a matmul): the read axis upcast
  by a cache line's elements and the written one to as many: each line read or written is used whole in cache."""
  st, step = k.stores()[0], k.upcast_size()  # step: the written axis's upcast (_elementwise_upcast)
  if k.reduce_op or k.ren.has_local or len(k.stores()) != 1 or st.src[2].op is not Ops.LOAD: return  # a copy
  line = k.ren.machine.cache_line // st.src[0].dtype.base.itemsize  # type: ignore[attr-defined]
  for i, r in _out_axes(k):
    if k.stride(st, r) != 0 and any(k.stride(ld, r) == 1 for ld in k.loads()) and range_size(r) % line == 0:
      if _try(k, Opt(OptOps.UPCAST, i, line), opts):
        written = next((j for j, w in _out_axes(k) if k.stride(st, w) == step), None)
        if written is not None and step < line: _try(k, Opt(OptOps.UPCAST, written, line // step), opts)
      return

def _copy_order(k: Kernel, opts: list[Opt]) -> None:
  """A copy of rows of 64 bytes or more into another layout (pack_matmul's panels, a permute keeping the last axis): the
  two loops around the row copy ordered so the reads stream (writes are whole cache lines anyway), when the inner one
  is short (each iteration writes another page: a few hundred stay within the TLB's reach)."""
  if k.reduce_op or k.ren.has_local or not k.loads() or len(_out_axes(k)) < 3: return
  st, step = k.stores()[0], k.upcast_size()
  (i, a0), (_, a1), (_, row) = _out_axes(k)[-3:]
  itemsize = st.src[0].dtype.base.itemsize  # type: ignore[attr-defined]
  if any(k.stride(x, row) != step for x in [st, *k.loads()]): return
  if range_size(row) * step * itemsize < k.ren.machine.cache_line: return
  strides = [(k.stride(ld, a0), k.stride(ld, a1)) for ld in k.loads()]  # a cat (padded last panel): several loads
  known = [(s0, s1) for s0, s1 in strides if s0 is not None and s1 is not None and 0 <= s0 <= s1]
  if range_size(a0) <= 256 and len(known) == len(strides) and sum(s0 for s0, _ in known) < sum(s1 for _, s1 in known):
    _try(k, Opt(OptOps.SWAP, i, i + 1), opts)

def _elementwise_vector_math(k: Kernel, opts: list[Opt]) -> None:
  """An elementwise kernel that computes math functions per element (softmax's exp) on a device with vectors: a whole
  SIMD register of elements per iteration of the contiguous axis, as the functions cost more than the memory traffic."""
  if k.reduce_op or not k.ren.vector_widths or not any(u.op in GroupOp.Math for u in k.ast.toposort()): return
  store = k.stores()[0]
  amt = k.ren.machine.vector_bytes // store.src[2].dtype.itemsize
  for i, r in reversed(_out_axes(k)):
    if k.stride(store, r) == 1:
      if amt in k.ren.vector_widths and range_size(r) % amt == 0 and range_size(r) >= 4 * amt \
         and _body_fits(k, Opt(OptOps.UPCAST, i, amt)):
        _try(k, Opt(OptOps.UPCAST, i, amt), opts)
      return

def _workgroups(k: Kernel, opts: list[Opt]) -> None:
  """Workgroups along the innermost output axis, on devices that have them."""
  if not k.ren.has_local or not (axes := _out_axes(k)): return
  i, r = axes[-1]
  any(range_size(r) % amt == 0 and _try(k, Opt(OptOps.LOCAL, i, amt), opts) for amt in (16, 8, 4, 2))  # (largest)

def _threads(k: Kernel, opts: list[Opt]) -> None:
  """Split the outermost output loop across CPU threads when the kernel does enough work to pay for it."""
  if k.ren.threads and _out_axes(k) and prod(range_size(r) for r in k.ranges()) >= SMALL_WORK and \
     range_size(_out_axes(k)[0][1]) >= 2: _try(k, Opt(OptOps.THREAD, _out_axes(k)[0][0], 0), opts)

def hand_coded_optimizations(kernel: Kernel) -> list[Opt]:
  """Opts for a kernel, in order: grouped reduce, vector lanes of a reduce, register tiling (with column tiles outside
  for a big matmul), column vectors for a strided reduce, unrolling (not a padded window's bounded loops), elementwise
  upcast (a whole vector for math, a pool's window for loads shared across it), a second axis for gathering loads,
  copies' tiles, workgroups, threads."""
  k, opts = kernel.copy(), list[Opt]()
  steps = (_grouped_reduce, _lanes, _register_tile if kernel.reduce_op else None, _matmul_panels, _column_reduce,
           None if _bounded_window(k, _window_gated(k)) else _unroll, _elementwise_vector_math, _elementwise_upcast,
           _pooled_loads, _transposed_reads, _transpose_tile, _copy_order, _workgroups, _threads)
  if not k.ren.has_local and prod(range_size(r) for r in k.ranges()) < SMALL_WORK:  # see SMALL_WORK
    # random bits (THREEFRY) keep a plain loop, which gcc vectorizes (upcasts repeat scalar rounds; codegen.md)
    steps = (_lanes, _elementwise_vector_math) + (() if _random_bits(k) else (_elementwise_upcast,))
  for step in steps:
    if step is not None: step(k, opts)
  return opts

def _random_bits(k: Kernel) -> bool: return any(u.op is Ops.THREEFRY for u in k.ast.toposort())

def pick_compiler(k: Kernel) -> list[Opt]:
  """Where the device offers gcc besides its default (clang): gcc for kernels that compute random bits (THREEFRY:
  gcc vectorizes its uint32 rounds, clang doesn't), the default elsewhere (bench/compilers.py, docs/speed.md)."""
  if "gcc" not in k.ren.compilers[1:] or not _random_bits(k): return []
  opt = Opt(OptOps.COMPILER, 0, k.ren.compilers.index("gcc"))
  return [opt] if _try(k.copy(), opt, []) else []
