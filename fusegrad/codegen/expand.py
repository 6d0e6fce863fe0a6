"""Unrolling: UPCAST and UNROLL ranges become copies of the code, one per value (docs/developer/codegen.md, pass 3)."""
from __future__ import annotations
import itertools
from fusegrad.uop.ops import UOp, Ops, AxisType
from fusegrad.uop.symbolic import simplify
from fusegrad.uop.rewrite import UPat, PatternMatcher, graph_rewrite
from fusegrad.codegen.kernel import range_kind, range_size, ranges_in, reduce_parts

def _combos(ranges: list[UOp]) -> list[dict[UOp, UOp]]:
  values = itertools.product(*(range(range_size(r)) for r in ranges))
  return [{r: UOp.const(r.dtype, v) for r, v in zip(ranges, combo)} for combo in values]

def copies(root: UOp, ranges: list[UOp]) -> list[UOp]:
  """root.substitute(c) for each combination c of the ranges' values (in _combos' order), walking the graph once:
  only the nodes that depend on a range are rebuilt per copy."""
  combos = _combos(ranges)
  if not ranges: return [root] * len(combos)
  keys, moving = set(ranges), set(ranges)
  nodes = root.toposort(gate=lambda n: n not in keys)
  for n in nodes:
    if any(s in moving for s in n.src): moving.add(n)
  rebuild = [n for n in nodes if n in moving and n not in keys]
  out = []
  for c in combos:
    memo: dict[UOp, UOp] = dict(c)
    for n in rebuild: memo[n] = UOp(n.op, n.dtype, tuple([memo.get(s, s) for s in n.src]), n.arg)  # (hot: no replace)
    out.append(memo.get(root, root))
  return out

def tree_reduce(op: Ops, vals: list[UOp]) -> UOp:
  """vals combined pairwise: ((a+b)+(c+d)), which is shorter to wait for than (((a+b)+c)+d)."""
  while len(vals) > 1:
    vals = [UOp(op, vals[i].dtype, (vals[i], vals[i + 1])) if i + 1 < len(vals) else vals[i]
            for i in range(0, len(vals), 2)]
  return vals[0]

_COPIED = (AxisType.LANES, AxisType.UNROLL)  # a reduce's ranges that become copies

def _expand_reduce(red: UOp, value: UOp, ranges: tuple[UOp, ...]) -> UOp:
  """A REDUCE without its UNROLL and LANES ranges. Each LANES value gets its own accumulator (partial sums over the
  loops left, combined after them), which adds its UNROLL copies in (linearize.py, _Linearizer.copies)."""
  lanes = [r for r in ranges if range_kind(r) is AxisType.LANES]
  unrolled = [r for r in ranges if range_kind(r) is AxisType.UNROLL]
  kept = tuple(r for r in ranges if range_kind(r) not in _COPIED)
  def accumulator(v: UOp) -> UOp:
    vs = copies(v, unrolled)
    return tree_reduce(red.arg, vs) if not kept else UOp(Ops.REDUCE, red.dtype, tuple(vs) + kept, red.arg)
  return tree_reduce(red.arg, [accumulator(v) for v in copies(value, lanes)])

def _expand_reduce_rule(red: UOp) -> UOp | None:
  (value, *_), ranges = reduce_parts(red)
  return _expand_reduce(red, value, ranges) if any(range_kind(r) in _COPIED for r in ranges) else None

pm_expand = PatternMatcher([
  # reduce over UNROLL or LANES ranges -> copies of its value, combined (partial sums over the loops left)
  (UPat(Ops.REDUCE, name="red"), _expand_reduce_rule),
  # sink(store, ...) -> sink(a copy of each store per value of its UPCAST ranges, ...)
  (UPat(Ops.SINK, name="sink"), lambda sink: sink.replace(
    src=tuple(c for store in sink.src for c in copies(store, ranges_in(store, AxisType.UPCAST)))))])

def expand_unrolled(sink: UOp) -> UOp:
  """The AST with no UPCAST, UNROLL or LANES ranges left."""; return simplify(graph_rewrite(sink, pm_expand, once=True))
