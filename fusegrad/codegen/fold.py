"""Reduce folding: sums whose loop variable is pinned or bounded by the condition of a `where` are computed directly.
The folded forms: docs/developer/codegen.md (pass 0, fold_reduces)."""
from __future__ import annotations
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops, AxisType
from fusegrad.codegen.kernel import range_kind, reduce_parts, index_stride
from fusegrad.uop.symbolic import simplify
from fusegrad.uop.rewrite import UPat, PatternMatcher, graph_rewrite

def _linear(x: UOp, r: UOp) -> tuple[int, UOp] | None:
  """x as coeff*r + rest with rest free of r (looking through casts between integer types that keep the value)."""
  if r not in x.toposort(): return 0, x
  if x is r: return 1, UOp.const(r.dtype, 0)
  if x.op is Ops.CAST and dtypes.is_int(x.dtype) and dtypes.is_int(x.src[0].dtype) and \
     dtypes.min(x.dtype) <= x.src[0].vmin and x.src[0].vmax <= dtypes.max(x.dtype):  # a cast that keeps the value
    inner = _linear(x.src[0], r)
    return None if inner is None else (inner[0], inner[1].cast(x.dtype))
  if x.op is Ops.ADD:
    a, b = _linear(x.src[0], r), _linear(x.src[1], r)
    if a is None or b is None: return None
    return a[0] + b[0], _add(a[1], b[1])
  if x.op is Ops.MUL and x.src[1].op is Ops.CONST and r not in x.src[1].toposort():
    a = _linear(x.src[0], r)
    return None if a is None else (a[0] * x.src[1].arg, a[1] * x.src[1].arg)
  return None

def _add(a: UOp, b: UOp) -> UOp:
  if a.dtype != b.dtype:
    dt = a.dtype if a.dtype.itemsize >= b.dtype.itemsize else b.dtype
    a, b = a.cast(dt), b.cast(dt)
  return a + b

def _atoms(cond: UOp, positive: bool) -> list[tuple[UOp, bool]] | None:
  """cond (or its negation) as a conjunction of (comparison, holds) atoms; None if it isn't one."""
  if cond.op is Ops.CMPNE and cond.src[1].op is Ops.CONST and cond.src[1].arg is True:
    return _atoms(cond.src[0], not positive)
  if cond.op is (Ops.AND if positive else Ops.OR) and cond.dtype == dtypes.bool:  # not (a or b) is not a and not b
    a, b = _atoms(cond.src[0], positive), _atoms(cond.src[1], positive)
    return None if a is None or b is None else a + b
  return [(cond, positive)]

def _gate_loads(v: UOp, valid: UOp) -> UOp:
  """Every load in v also gated by valid."""
  loads = [u for u in v.toposort() if u.op is Ops.LOAD]
  return v.substitute({ld: ld.replace(src=ld.src[:2] + ((ld.src[2] & valid) if len(ld.src) > 2 else valid,))
                       for ld in loads})

def _is_zero(u: UOp) -> bool: return u.op is Ops.CONST and u.arg == 0 and not isinstance(u.arg, bool)

def _bounds(atoms: list[tuple[UOp, bool]], r: UOp) -> tuple[list[UOp], list[UOp], list[UOp], UOp | None] | None:
  """The atoms as (conditions free of r, bounds r >= b, bounds r < b, e for r == e); None for another atom on r."""
  residual, lower, upper, equal = [], [], [], None
  for atom, holds in atoms:
    if r not in atom.toposort():
      residual.append(atom if holds else atom.logical_not())
      continue
    if atom.op not in (Ops.CMPLT, Ops.CMPNE) or not dtypes.is_int(atom.src[0].dtype): return None
    lin = _linear(_add(atom.src[0], -atom.src[1]), r)  # atom compares coeff*r + rest with 0
    if lin is None or lin[0] not in (1, -1): return None
    coeff, rest = lin
    bound = -rest if coeff == 1 else rest  # the value r is compared with
    if atom.op is Ops.CMPNE:
      if holds: return None  # r != e: not a single element or a range
      equal = bound
    elif (coeff == 1) == holds: upper.append(bound if coeff == 1 else bound + 1)  # r < bound
    else: lower.append(bound if coeff == 1 else bound + 1)  # r >= bound
  return residual, lower, upper, equal

def _span(r: UOp, lower: list[UOp], upper: list[UOp]) -> tuple[UOp, UOp]:
  """(lo, count): r in [lo, lo + count) = [max(lower..., 0), min(upper..., n)) is what the bounds allow."""
  end = r.src[0]  # (a constant, or an expression of Variables: a length from one)
  lo, hi = UOp.const(r.dtype, 0), UOp.const(r.dtype, end.arg) if end.op is Ops.CONST else end
  for x in lower: lo = lo.maximum(x.cast(r.dtype))
  for x in upper: hi = hi.minimum(x.cast(r.dtype))
  return lo, (hi - lo).maximum(0)

def fold_one(value: UOp, r: UOp) -> UOp | None:
  """The sum of value over range r, without a loop; None when it doesn't have a foldable form."""
  n = r.src[0].arg if r.src[0].op is Ops.CONST else r.src[0]  # the range's end (or a Variable length's)
  if r not in value.toposort():  # sum of something that doesn't change: v*n
    return value * (UOp.const(value.dtype, n) if isinstance(n, int) else n.cast(value.dtype))
  if value.op is not Ops.WHERE: return None
  cond, a, b = value.src
  if _is_zero(b): v, atoms = a, _atoms(cond, True)
  elif _is_zero(a): v, atoms = b, _atoms(cond, False)
  else: return None
  if atoms is None or (found := _bounds(atoms, r)) is None: return None
  residual, lower, upper, e = found
  if e is not None:  # sum of where(r == e, v, 0): v at r = e, if e is in range
    valid = (e < 0).logical_not() & (e < (n if isinstance(n, int) else n.cast(e.dtype)))
    for lo in lower: valid = valid & (e < lo).logical_not()
    for hi in upper: valid = valid & (e < hi)
    for c in residual: valid = valid & c
    picked = _gate_loads(v.substitute({r: e.cast(r.dtype) if e.dtype != r.dtype else e}), valid)
    return valid.where(picked, UOp.const(v.dtype, 0))
  if r in v.toposort(): return None
  # sum of where(lo <= r < hi, v, 0) with v free of r: v times the count of r in [max(lo, 0), min(hi, n))
  _, count = _span(r, lower, upper)
  ret = v * count.cast(v.dtype)
  for c in residual: ret = c.where(ret, UOp.const(v.dtype, 0))
  return ret

def _fold_reduce(red: UOp) -> UOp | None:
  """The sum without the first of its loops that folds (the rewriter tries again on the result until none folds)."""
  value, ranges = red.src[0], list(red.src[1:])
  for r in ranges:
    if (folded := fold_one(simplify(value), r)) is not None:
      rest = [x for x in ranges if x is not r]
      return UOp(Ops.REDUCE, red.dtype, (folded, *rest), red.arg) if rest else folded
  return None

# sum over r of f(r) -> f without the loop over r
pm_fold_reduces = PatternMatcher([(UPat(Ops.REDUCE, arg=Ops.ADD, name="red"), _fold_reduce)])

def fold_reduces(ast: UOp) -> UOp:
  """Every sum that can be computed without its loops (see the module doc), folded."""
  return simplify(graph_rewrite(ast, pm_fold_reduces))

# *** loops over the span a gate allows ***
OUTER_LOOPS = (AxisType.GLOBAL, AxisType.LOOP, AxisType.THREAD)  # the kinds of range that are loops around a reduce
def _gate(v: UOp) -> UOp | None:
  """A condition the product v is zero without (the gate of a load or of a where with a zero that it multiplies)."""
  if v.op is Ops.LOAD and len(v.src) > 2 and v.src[2].dtype == dtypes.bool: return v.src[2]
  if v.op is Ops.WHERE and _is_zero(v.src[2]): return v.src[0]
  return (_gate(v.src[0]) or _gate(v.src[1])) if v.op is Ops.MUL else _gate(v.src[0]) if v.op is Ops.CAST else None

def bound_reduce(red: UOp) -> UOp | None:
  """The sum with its first loop r that a factor's gate bounds (by outer loops) run over that span only, or None."""
  values, ranges = reduce_parts(red)
  if len(values) != 1 or (gate := _gate(values[0])) is None or (atoms := _atoms(gate, True)) is None: return None
  for i, r in enumerate(ranges):
    found = _bounds(atoms, r) if range_kind(r) is AxisType.REDUCE and r.src[0].op is Ops.CONST else None
    outer = {*ranges[:i], *(x for x in red.toposort() if x.op is Ops.RANGE and range_kind(x) in OUTER_LOOPS)}
    if found is None or found[3] is not None or not (found[1] or found[2]) or \
       any(x.op is Ops.RANGE and x not in outer for b in found[1] + found[2] for x in b.toposort()): continue
    lo, count = _span(r, found[1], found[2])
    spanned = UOp(Ops.RANGE, r.dtype, (simplify(count),), r.arg)
    # each condition on r holds in the span, in the gate and wherever else it is tested (a load's own gate)
    value = values[0].substitute({atom: UOp.const(dtypes.bool, holds) for atom, holds in atoms if r in atom.toposort()})
    value = value.substitute({r: spanned + lo})
    return red.replace(src=(value, *_spans_outside([*ranges[:i], spanned, *ranges[i + 1:]], value)))
  return None

def _spans_outside(rs: list[UOp], value: UOp) -> list[UOp]:
  """Spans (the taps of a window inside the image, counted at run time) outermost where one is innermost and a load
  reads the loop then innermost contiguously (channel-last channels): a whole loop for the compiler to unroll."""
  spans = [r for r in rs if r.src[0].op is not Ops.CONST and not any(x in rs for x in r.src[0].toposort())]
  inner = [r for r in rs if r not in spans]
  return spans + inner if rs[-1] in spans and inner and any(index_stride(ld.src[1], inner[-1]) == 1
                                                             for ld in value.toposort() if ld.op is Ops.LOAD) else rs

pm_bound_reduces = PatternMatcher([(UPat(Ops.REDUCE, arg=Ops.ADD, name="red"), bound_reduce)])

def bound_gated_reduces(ast: UOp) -> UOp:
  """(CPU) A sum of a product gated by lo <= r + e < hi loops over that span of r only (codegen.md, pass 2b)."""
  return simplify(graph_rewrite(ast, pm_bound_reduces))
