"""Passes between an optimized kernel AST and the flat program, each reading the renderer's capabilities (the pass
table in docs/developer/codegen.md)."""
from __future__ import annotations
from fusegrad.dtype import dtypes, DType, PtrDType
from fusegrad.helpers import prod
from fusegrad.renderer import Renderer
from fusegrad.uop.ops import UOp, Ops, GroupOp, AxisType, flat_index
from fusegrad.codegen.expand import tree_reduce
from fusegrad.uop.alu import THREEFRY_ROTATIONS, THREEFRY_PARITY
from fusegrad.uop.rewrite import UPat, PatternMatcher, graph_rewrite
from fusegrad.uop.symbolic import simplify, split_terms, build_sum
from fusegrad.codegen.kernel import range_kind, range_size, ranges_in, replace_range, reduce_parts, new_range

def _count_divmod(ast: UOp) -> int: return sum(1 for u in ast.toposort() if u.op in (Ops.IDIV, Ops.MOD))

def _merge(ast: UOp, outer: UOp, inner: UOp) -> UOp:
  size = range_size(inner)
  merged = new_range(range_size(outer) * size, outer.arg)
  ast = replace_range(ast, outer, merged // size, (merged,))
  return simplify(replace_range(ast, inner, merged % size, ()))

def merge_axes(ast: UOp) -> UOp:
  """Adjacent output loops (and adjacent loops of one reduce) merged where that adds no division or modulo:
  an elementwise op on a contiguous (4, 5, 6) tensor becomes one loop of 120."""
  changed = True
  while changed:
    changed = False
    outputs = ranges_in(ast, AxisType.GLOBAL)
    pairs = list(zip(outputs, outputs[1:]))
    for red in (u for u in ast.toposort() if u.op is Ops.REDUCE):
      ranges = reduce_parts(red)[1]
      pairs += list(zip(ranges, ranges[1:]))
    base = _count_divmod(ast)
    for outer, inner in pairs:
      if outer.src[0].op is not Ops.CONST or inner.src[0].op is not Ops.CONST: continue  # (a length from a Variable)
      candidate = _merge(ast, outer, inner)
      if _count_divmod(candidate) <= base:
        ast, changed = candidate, True
        break
  return ast

# *** indices simplified under their loads' validity gates ***
def _gate_bounds(gate: UOp) -> dict[UOp, tuple[int, int]]:
  """Bounds the gate implies on the index expressions it compares with constants: (x%25) < 20 gives [0, 19]."""
  bounds: dict[UOp, tuple[int, int]] = {}
  stack = [(gate, True)]
  while stack:
    c, holds = stack.pop()
    if c.op is Ops.AND and holds: stack += [(c.src[0], True), (c.src[1], True)]
    elif c.op is Ops.CMPNE and c.src[1].op is Ops.CONST and c.src[1].arg is True: stack.append((c.src[0], not holds))
    elif (c.op is Ops.CMPLT and c.src[1].op is Ops.CONST and c.src[0].dtype == dtypes.index
          and c.src[0].op is not Ops.CONST):
      x, k = c.src[0], c.src[1].arg
      lo, hi = bounds.get(x, (x.vmin, x.vmax))
      bounds[x] = (lo, min(hi, k - 1)) if holds else (max(lo, k), hi)
  return {x: b for x, b in bounds.items() if b[0] <= b[1] and b != (x.vmin, x.vmax)}

def _recentered_divmod(x: UOp, hi: int) -> dict[UOp, UOp]:
  """For x = X % m known to be at most hi: X written as m*Q + E with each coefficient taken to its nearest multiple of
  m, so E is small. Where E can't be negative while the gate holds (a negative E makes X % m = E + m > hi), X % m is E
  and X // m is Q: (r + 24*k) % 25 < 20, with r < 24 and k < 5, gives r - k and k (a convolution's input gradient)."""
  X, m = x.src[0], x.src[1].arg
  if not isinstance(m, int) or m <= 1: return {}
  terms, const = split_terms(X)
  q_terms = [(t, round(c / m)) for t, c in terms]
  e_terms = [(t, c - q * m) for (t, c), (_, q) in zip(terms, q_terms)]
  q0 = round(const / m)
  E, Q = build_sum(e_terms, const - q0 * m, X), build_sum(q_terms, q0, X)
  if not (E.vmin > -m and E.vmax < m and m + E.vmin > hi): return {}
  return {x: E, UOp(Ops.IDIV, X.dtype, (X, x.src[1])): Q}

def simplify_given_valid(idx: UOp, gate: UOp) -> UOp:
  """idx simplified knowing gate holds (a load's address only matters when its gate is true): the expressions the
  gate bounds become bounded placeholders while simplifying. Loads inside idx stay as they are (opaque placeholders):
  they run whether or not the gate holds, so their own gates and indices must not assume it."""
  bounds = _gate_bounds(gate)
  if not bounds: return idx
  loads = {u: UOp(Ops.DEFINE_VAR, u.dtype, (), (f"_load{i}", u.vmin, u.vmax))
           for i, u in enumerate(idx.toposort()) if u.op is Ops.LOAD and u not in bounds}
  idx = idx.substitute(loads)  # first, so that no rewrite below reaches into a load's own index
  for x, (lo, hi) in list(bounds.items()):
    if x.op is Ops.MOD and x.src[1].op is Ops.CONST and (sub := _recentered_divmod(x, hi)):
      idx = simplify(idx.substitute(sub))
      bounds[sub[x]] = (max(lo, 0), hi)  # where the gate holds, E is X % m
  stand_in = {x: UOp(Ops.DEFINE_VAR, dtypes.index, (), (f"_valid{i}", lo, hi))
              for i, (x, (lo, hi)) in enumerate(bounds.items())}
  # a bounded sum r + rest that idx holds term by term (896*r2 + 896*r5 in a padded view's rows): r as the sum - rest
  nodes = idx.toposort()
  firsts = {x: t[0][0] for x in stand_in if x not in nodes and len(t := split_terms(x)[0]) > 1 and t[0][1] == 1}
  sub = {x: v for x, v in stand_in.items() if x in nodes} | {r: stand_in[x] - (x - r) for x, r in firsts.items()}
  ret = simplify(simplify(idx.substitute(sub)).substitute({v: x for x, v in stand_in.items()}))
  return ret.substitute({v: u for u, v in loads.items()})

def _gated_load(ld: UOp, idx: UOp, gate: UOp) -> UOp | None:
  if gate.dtype != dtypes.bool: return None
  return None if (new := simplify_given_valid(idx, gate)) is idx else ld.replace(src=(ld.src[0], new, *ld.src[2:]))

pm_gated_loads = PatternMatcher([
  # load(buf, idx, gate) -> load(buf, idx simplified knowing gate holds, gate)
  (UPat(Ops.LOAD, src=(UPat(), UPat.var("idx"), UPat.var("gate")), allow_any_len=True, name="ld"), _gated_load)])

def simplify_gated_loads(ast: UOp) -> UOp:
  """Every gated load's index simplified given its gate (the padding of a view cuts divisions out of its index)."""
  return graph_rewrite(ast, pm_gated_loads)

def _launch_split(glbl: list[UOp], limits: tuple[int, ...]) -> tuple[UOp, int] | None:
  """The first launch axis over its dimension's limit and the largest divisor of its size that fits that dimension
  while the quotient fits the next one (None: every axis fits, or no divisor does)."""
  for dim, r in enumerate(reversed(glbl)):
    if (n := range_size(r)) <= limits[dim]: continue
    fits = [d for d in range(min(limits[dim], n), 0, -1) if n % d == 0 and n // d <= limits[dim + 1]][:1]
    return (r, fits[0]) if fits else None
  return None

def to_launch_dims(ast: UOp, ren: Renderer) -> UOp:
  """Output loops -> SPECIAL launch indices (the last, fastest-moving axis is gidx0), if the device launches a grid;
  else they stay loops (GLOBAL ranges render as loops: renaming them LOOP would rebuild, and simplify again, every
  node of the kernel). Too many output axes are merged into the first ones."""
  if ren.global_max is None: return ast
  ranges = ranges_in(ast)
  glbl = [r for r in ranges if range_kind(r) is AxisType.GLOBAL]
  def too_big(rs: list[UOp]) -> bool:
    return any(range_size(r) > m for r, m in zip(reversed(rs), ren.global_max))  # type: ignore[arg-type]
  # too many axes, or an axis over its dimension's limit (CUDA's y and z stop at 65535): merge the two outermost
  while len(glbl) > len(ren.global_max) or (len(glbl) > 1 and too_big(glbl)):
    ast = _merge(ast, glbl[0], glbl[1])
    glbl = ranges_in(ast, AxisType.GLOBAL)
  # fewer axes than dimensions, one over its dimension's limit (WebGPU's x stops at 65535): split it in two
  while len(glbl) < len(ren.global_max) and (split := _launch_split(glbl, ren.global_max)) is not None:
    r, inner_size = split
    inner = new_range(inner_size, (max(u.arg[0] for u in ranges) + 1, AxisType.GLOBAL))
    outer = new_range(range_size(r) // inner_size, r.arg)
    ast = simplify(replace_range(ast, r, outer * inner_size + inner, (outer, inner)))
    ranges = ranges_in(ast)
    glbl = [r for r in ranges if range_kind(r) is AxisType.GLOBAL]
  local = [r for r in ranges if range_kind(r) in (AxisType.LOCAL, AxisType.GROUP)]
  mapping = {r: UOp(Ops.SPECIAL, dtypes.index, (), (f"gidx{i}", range_size(r))) for i, r in enumerate(reversed(glbl))}
  mapping.update({r: UOp(Ops.SPECIAL, dtypes.index, (), (f"lidx{i}", range_size(r)))
                  for i, r in enumerate(reversed(local))})
  for r, sp in mapping.items(): ast = replace_range(ast, r, sp, ())
  return simplify(ast)

# *** grouped reductions: a reduce split across a workgroup, combined through shared memory ***
def lower_group_reduces(ast: UOp) -> UOp:
  """Each REDUCE over a GROUP range: every thread of the workgroup reduces its share, stores the partial result in a
  shared buffer, waits at a barrier, then adds up the buffer; the group's first thread alone stores to global memory."""
  groups = sorted({r for u in ast.toposort() if u.op is Ops.REDUCE
                   for r in reduce_parts(u)[1] if range_kind(r) is AxisType.GROUP}, key=lambda r: r.arg[0])
  if not groups: return ast
  local = ranges_in(ast, AxisType.LOCAL, AxisType.GROUP)
  tid = flat_index(local, [range_size(r) for r in local])  # this thread's slot in the workgroup
  next_id = max(u.arg[0] for u in ast.toposort() if u.op is Ops.RANGE) + 1
  replace: dict[UOp, UOp] = {}
  for i, red in enumerate(u for u in ast.toposort()
                          if u.op is Ops.REDUCE and any(r in groups for r in reduce_parts(u)[1])):
    values, ranges = reduce_parts(red)
    kept = tuple(r for r in ranges if r not in groups)
    mine = tuple(r for r in ranges if r in groups)
    partial = UOp(Ops.REDUCE, red.dtype, values + kept, red.arg) if kept else tree_reduce(red.arg, list(values))
    smem = UOp(Ops.DEFINE_LOCAL, red.dtype.ptr(local=True), (), (f"temp{i}", prod(range_size(r) for r in local)))
    barrier = UOp(Ops.BARRIER, dtypes.void, (UOp(Ops.STORE, dtypes.void, (smem, tid, partial)),))
    j = new_range(prod(range_size(r) for r in mine), (next_id + i, AxisType.REDUCE))
    digits, rest = {}, j
    for r in reversed(mine):  # j enumerates the group positions: its digits stand for the group ranges
      digits[r], rest = rest % range_size(r), rest // range_size(r)
    replace[red] = UOp(Ops.REDUCE, red.dtype, (UOp(Ops.LOAD, red.dtype, (smem, tid.substitute(digits), barrier)), j),
                       red.arg)
  ast = ast.substitute(replace)
  first = UOp.const(dtypes.bool, True)
  for g in groups: first = first & g.ne(0).logical_not()
  stores = [st.replace(src=st.src[:3] + ((st.src[3] & first) if len(st.src) > 3 else first,)) for st in ast.src]
  return simplify(ast.replace(src=tuple(stores)))

# *** THREEFRY as 32-bit integer ops ***
def _rotl(x: UOp, r: int) -> UOp: return (x.alu(Ops.SHL, x.const_like(r))) | (x.alu(Ops.SHR, x.const_like(32 - r)))

def threefry_ops(x: UOp, key: UOp) -> UOp:
  """Threefry-2x32, 20 rounds, the same function as uop.alu.threefry2x32, built from uint32 ALU ops."""
  u32, u64 = dtypes.uint32, dtypes.uint64
  def lo(v: UOp) -> UOp: return (v & v.const_like(0xFFFFFFFF)).cast(u32)
  def hi(v: UOp) -> UOp: return v.alu(Ops.SHR, v.const_like(32)).cast(u32)
  x0, x1, k0, k1 = lo(x), hi(x), lo(key), hi(key)
  ks = (k0, k1, k0 ^ k1 ^ UOp.const(u32, THREEFRY_PARITY))
  x0, x1 = x0 + ks[0], x1 + ks[1]
  for r in range(20):
    x0 = x0 + x1
    x1 = _rotl(x1, THREEFRY_ROTATIONS[r % 8]) ^ x0
    if r % 4 == 3:
      s = r // 4 + 1
      x0, x1 = x0 + ks[s % 3], x1 + ks[(s + 1) % 3] + s
  return (x1.cast(u64).alu(Ops.SHL, UOp.const(u64, 32))) | x0.cast(u64)

# threefry(x, key) -> uint32 ALU ops
pm_threefry = PatternMatcher([(UPat(Ops.THREEFRY, src=(UPat.var("x"), UPat.var("key"))), threefry_ops)])

def decompose_threefry(ast: UOp) -> UOp:
  """THREEFRY as integer ALU ops, for renderers without it."""; return graph_rewrite(ast, pm_threefry)

# *** bfloat16 without hardware support: float32 registers, 16-bit memory ***
def _bf16_bits_to_float(raw: UOp) -> UOp:
  return (raw.cast(dtypes.uint32).alu(Ops.SHL, UOp.const(dtypes.uint32, 16))).bitcast(dtypes.float32)

def _float_to_bf16_bits(f: UOp) -> UOp:
  """Round to nearest even; nan stays nan."""
  b = f.bitcast(dtypes.uint32)
  rounded = (b + 0x7FFF + (b.alu(Ops.SHR, b.const_like(16)) & 1)).alu(Ops.SHR, b.const_like(16))
  return f.ne(f).where(UOp.const(dtypes.uint32, 0x7FC0), rounded).cast(dtypes.uint16)

def _bf16_buffer(u: UOp) -> UOp | None:
  if u.dtype.base != dtypes.bfloat16: return None  # type: ignore[attr-defined]
  return u.replace(dtype=dtypes.uint16.ptr(u.dtype.local))  # type: ignore[attr-defined]

def _bf16_value(u: UOp) -> UOp | None:
  """A new bfloat16 value: computed in float32, then rounded to bfloat16 (a select or a constant already holds one)."""
  if u.dtype != dtypes.bfloat16: return None
  out = u.replace(dtype=dtypes.float32)
  return out if u.op in (Ops.WHERE, Ops.CONST, Ops.MAX) else _bf16_bits_to_float(_float_to_bf16_bits(out))

# bottom-up, so a rule sees its sources already rewritten: a bfloat16 buffer is a uint16 one, a bfloat16 value a float32
pm_bfloat16 = PatternMatcher([
  # bfloat16* -> uint16*
  (UPat((Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL), name="u"), _bf16_buffer),
  # load bfloat16 -> float32 from the loaded bits
  (UPat(Ops.LOAD, dtypes.bfloat16, name="u"),
   lambda u: _bf16_bits_to_float(u.replace(dtype=dtypes.uint16)) if u.dtype == dtypes.bfloat16 else None),
  # store float32 to a uint16* (was bfloat16*) -> store its bfloat16 bits
  (UPat(Ops.STORE, src=(UPat.var("buf"), UPat.var("idx"), UPat.var("val", dtypes.float32)), allow_any_len=True,
        name="u"), lambda u, buf, idx, val: u.replace(src=(buf, idx, _float_to_bf16_bits(val)) + u.src[3:])
   if buf.dtype.base == dtypes.uint16 and val.dtype == dtypes.float32 else None),
  # bitcast to bfloat16 -> float32 from the bits; from bfloat16 (now float32, to a 2-byte type) -> its bits
  (UPat(Ops.BITCAST, dtypes.bfloat16, src=(UPat.var("x"),), name="u"),
   lambda u, x: _bf16_bits_to_float(x.bitcast(dtypes.uint16)) if u.dtype == dtypes.bfloat16 else None),
  (UPat(Ops.BITCAST, src=(UPat.var("x", dtypes.float32),), name="u"),
   lambda u, x: _float_to_bf16_bits(x).bitcast(u.dtype) if u.dtype.itemsize == 2 and x.dtype == dtypes.float32
   else None),
  # any other bfloat16 op -> float32, rounded to bfloat16
  (UPat(dtype=dtypes.bfloat16, name="u"), _bf16_value)])

def emulate_bfloat16(ast: UOp) -> UOp:
  """Every bfloat16 value becomes a float32 holding a bfloat16-rounded number; memory stays 16-bit."""
  if not any(u.dtype == dtypes.bfloat16 or (isinstance(u.dtype, PtrDType) and u.dtype.base == dtypes.bfloat16)
             for u in ast.toposort()):
    return ast
  return simplify(graph_rewrite(ast, pm_bfloat16))

# *** index arithmetic: int32 where it fits ***
def resolve_index_dtype(ast: UOp, ranges64: bool = True) -> UOp:
  """Give index arithmetic a real type: int32 if every index value of the kernel fits, else int64. Variables stay
  int32 parameters (cast where the kernel computes in int64); so do loop counters and launch indices that fit when
  the renderer has no 64-bit counters (ranges64=False: WGSL, whose int64 is emulated)."""
  nodes = [u for u in ast.toposort() if u.dtype == dtypes.index]
  if not nodes: return ast
  wide = any(u.vmin < -2 ** 31 or u.vmax > 2 ** 31 - 1 for u in nodes)
  if wide and not ranges64: return graph_rewrite(ast, pm_int32_counters)
  return graph_rewrite(ast, pm_index_dtype, ctx=dtypes.int64 if wide else dtypes.int32, once=True)

def _int32_counter(u: UOp) -> UOp | None:
  if not (all(s.op is Ops.CONST for s in u.src) and u.vmax <= 2 ** 31 - 1): return None
  return u.replace(dtype=dtypes.int32, src=tuple(s.replace(dtype=dtypes.int32) for s in u.src)).cast(dtypes.int64)

def _counter_uses(u: UOp) -> UOp:  # the same node where no source is a widened counter: no match
  return u.replace(src=tuple(s.src[0] if s.op is Ops.CAST and s.src[0].op in (Ops.RANGE, Ops.SPECIAL)
                             and s.src[0].dtype == dtypes.int32 else s for s in u.src))

# index math in int64 around int32 loop counters and launch indices (of sizes below 2**31): a counter's value uses
# (ALU, CAST) get it widened, its other uses (ENDRANGE, a REDUCE's ranges) keep the counter itself
pm_int32_counters = PatternMatcher([
  # variable -> an int32 parameter widened to int64
  (UPat(Ops.DEFINE_VAR, dtypes.index, name="u"), lambda u: u.replace(dtype=dtypes.int32).cast(dtypes.int64)),
  # counter of a constant size below 2**31 -> an int32 counter widened to int64
  (UPat((Ops.RANGE, Ops.SPECIAL), dtypes.index, name="u"), _int32_counter),
  # other index math -> int64
  (UPat(dtype=dtypes.index, name="u"), lambda u: u.replace(dtype=dtypes.int64)),
  # op(..., widened counter, ...) -> op(..., counter, ...) for an op that doesn't compute with it (not ALU or CAST)
  (UPat(tuple(set(Ops) - GroupOp.ALU - {Ops.CAST}), name="u"), _counter_uses)])

def _typed_index(ctx: DType, u: UOp) -> UOp | None:
  if u.dtype != dtypes.index: return None
  return u.replace(dtype=dtypes.int32).cast(ctx) if u.op is Ops.DEFINE_VAR else u.replace(dtype=ctx)

pm_index_dtype = PatternMatcher([
  # index -> the kernel's index type (ctx); a variable -> an int32 parameter cast to it
  (UPat(dtype=dtypes.index, name="u"), _typed_index)])

# *** cleanups of the lowered AST ***
pm_lowered = PatternMatcher([
  # load gated by True -> load
  (UPat(Ops.LOAD, src=(UPat(), UPat(), UPat.const(True)), name="ld"), lambda ld: ld.replace(src=ld.src[:2])),
  # g ? load(g) : 0 -> load(g)
  (UPat.var("g").where(UPat(Ops.LOAD, src=(UPat(), UPat(), UPat.var("g")), name="ld"), UPat.const(0)),
   lambda g, ld: ld)])
