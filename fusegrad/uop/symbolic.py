"""Algebraic simplification: constant folding, identities, and integer index algebra using value bounds. Each rule is
one line with a `# before -> after` comment; the longer ones are named functions returning None for "no match". See
docs/developer/codegen.md."""
from __future__ import annotations
import math
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops, GroupOp, derived
from fusegrad.uop.alu import exec_alu
from fusegrad.uop.rewrite import UPat, PatternMatcher, graph_rewrite

INTS = dtypes.ints + (dtypes.index,)
Term = tuple[UOp, int]

def order_key(u: UOp) -> tuple:
  """A deterministic sort key for a node, so that sums are built in one canonical order."""
  return derived(u, "key", _order_key)
def _order_key(u: UOp) -> tuple:
  arg = u.arg if u.op in (Ops.RANGE, Ops.SPECIAL, Ops.DEFINE_VAR, Ops.CONST, Ops.DEFINE_GLOBAL) else None
  return (u.op.value, repr(arg), tuple(order_key(s) for s in u.src))

# *** sums as (term, coefficient) lists ***
def split_terms(x: UOp) -> tuple[list[Term], int]:
  """x as sum(term*coeff) + const."""
  if x.op is Ops.ADD:
    t0, c0 = split_terms(x.src[0])
    t1, c1 = split_terms(x.src[1])
    return t0 + t1, c0 + c1
  if x.op is Ops.CONST: return [], x.arg
  if x.op is Ops.MUL and x.src[1].op is Ops.CONST: return [(x.src[0], x.src[1].arg)], 0
  return [(x, 1)], 0

def build_sum(terms: list[Term], const: int, like: UOp) -> UOp:
  ret: UOp | None = None
  for t, c in sorted(terms, key=lambda tc: order_key(tc[0])):
    if c == 0: continue
    t = t if c == 1 else UOp(Ops.MUL, like.dtype, (t, UOp.const(like.dtype, c)))
    ret = t if ret is None else UOp(Ops.ADD, like.dtype, (ret, t))
  if ret is None: return UOp.const(like.dtype, const)
  return ret if const == 0 else UOp(Ops.ADD, like.dtype, (ret, UOp.const(like.dtype, const)))

def combine_terms(terms: list[Term]) -> list[Term]:
  """Like terms added up; (y//c)*c*k + (y%c)*k becomes y*k, ((y//c)%d)*c*k + (y%c)*k becomes (y%(c*d))*k."""
  acc: dict[UOp, int] = {}
  for t, c in terms: acc[t] = acc.get(t, 0) + c
  changed = True
  while changed:
    changed = False
    for t, c in list(acc.items()):
      if t.op is Ops.MOD and t.src[1].op is Ops.CONST and t.src[1].arg != 0 and c != 0:  # (x % 0: empty shapes)
        div = UOp(Ops.IDIV, t.dtype, t.src)
        if div in acc and acc[div] == c * t.src[1].arg:
          del acc[t], acc[div]
          acc[t.src[0]] = acc.get(t.src[0], 0) + c
          changed = True
          break
        # ((y//c)%d)*c*k + (y%c)*k -> (y%(c*d))*k: a flattened (64,3,3) axis's r//3%3*3 + r%3 -> r%9
        outer = next((u for u in acc if u.op is Ops.MOD and u.src[0] == div and u.src[1].op is Ops.CONST and
                      u.src[1].arg > 0 < t.src[1].arg and acc[u] == c * t.src[1].arg), None)
        if outer is not None:
          del acc[t], acc[outer]
          merged = t.src[0] % (t.src[1].arg * outer.src[1].arg)
          acc[merged] = acc.get(merged, 0) + c
          changed = True
          break
  return [(t, c) for t, c in acc.items() if c != 0]

def _const_leaves(x: UOp) -> int:
  if x.op is Ops.ADD: return _const_leaves(x.src[0]) + _const_leaves(x.src[1])
  return int(x.op is Ops.CONST)

def fold_add(x: UOp) -> UOp | None:
  """An integer sum with like terms or several constants, flattened and combined: (a+2)+(a*3) -> a*4+2.
  Index sums are always rebuilt in one canonical order (so equal indices are one node); other integer sums with
  nothing to combine keep their shape, so chains of partial sums stay shared (Threefry would grow quadratically)."""
  a, b = x.src
  if x.dtype == dtypes.index and b.op is Ops.CONST and a.op is not Ops.CONST and not (a.op is Ops.ADD and
                                                                                     a.src[1].op is Ops.CONST):
    return None  # a+c with a canonical and constant-free (sources are rewritten first) -> canonical already
  terms, const = split_terms(x)
  combined = combine_terms(terms)
  if (x.dtype != dtypes.index and len(combined) == len(terms) and _const_leaves(x) <= 1
      and not (const == 0 and _const_leaves(x))):
    return None
  ret = build_sum(combined, const, x)
  return None if ret is x else ret

def exact_sum(x: UOp) -> bool:
  """True when the sum x, term by term, can't wrap around its dtype: only then is algebra on it exact.
  (Index math never wraps; a uint8 x+200 can.)"""
  terms, const = split_terms(x)
  lo = const + sum(min(t.vmin * k, t.vmax * k) for t, k in terms)
  hi = const + sum(max(t.vmin * k, t.vmax * k) for t, k in terms)
  return dtypes.min(x.dtype) <= lo and hi <= dtypes.max(x.dtype)

def _split_by_gcd(terms: list[Term], const: int, c: int) -> tuple[int, list[Term], list[Term], int] | None:
  """Find g dividing c such that sum = g*big + small with 0 <= small < g: returns (g, big terms, small terms, const)."""
  for g in sorted({math.gcd(k, c) for _, k in terms} | {c}, reverse=True):
    if g <= 1: continue
    big = [(t, k // g) for t, k in terms if k % g == 0]
    small = [(t, k) for t, k in terms if k % g != 0]
    smin = sum(min(t.vmin * k, t.vmax * k) for t, k in small) + const % g
    smax = sum(max(t.vmin * k, t.vmax * k) for t, k in small) + const % g
    if 0 <= smin and smax < g: return g, big, small, const
  return None

def fold_div(x: UOp, d: UOp) -> UOp | None:
  """Integer division of a non-negative sum by a positive constant: (a*8 + b*2 + 1) // 4 -> a*2 + (b*2+1)//4."""
  c = d.arg
  if c <= 0 or x.vmin < 0 or not exact_sum(x): return None
  if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0 and x.src[0].vmin >= 0:
    return x.src[0] // (x.src[1].arg * c)  # (y//a)//b -> y//(a*b)
  terms, const = split_terms(x)
  # x = g*big + small with 0 <= small < g and g dividing c: x//c -> big//(c/g)
  if (split := _split_by_gcd(terms, const, c)) is not None:
    g, big, _, _ = split
    inner = build_sum(big, const // g, x)
    return inner if c == g else inner // (c // g)
  quotient = [(t, k // c) for t, k in terms if k % c == 0]
  rest = [(t, k) for t, k in terms if k % c != 0]
  if not quotient and 0 <= const < c: return None
  rest_sum = build_sum(rest, const % c, x)
  if rest_sum.vmin < 0: return None
  return build_sum(quotient, const // c, x) + rest_sum // c  # (a*c + r)//c -> a + r//c

def fold_mod(x: UOp, d: UOp) -> UOp | None:
  """Remainder of a non-negative sum by a positive constant: (a*8 + b) % 4 -> b % 4, (a*4 + b) % 8 -> (a%2)*4 + b."""
  c = d.arg
  if c <= 0 or x.vmin < 0 or not exact_sum(x): return None
  if x.vmax < c: return x  # x%c -> x when 0 <= x < c
  if x.op is Ops.MOD and x.src[1].op is Ops.CONST and x.src[1].arg % c == 0 and x.src[0].vmin >= 0:
    return x.src[0] % c  # (y%(c*k))%c -> y%c
  terms, const = split_terms(x)
  # x = g*big + small with 0 <= small < g and g dividing c: x%c -> (big%(c/g))*g + small
  if (split := _split_by_gcd(terms, const, c)) is not None:
    g, big, small, _ = split
    return (build_sum(big, const // g, x) % (c // g)) * g + build_sum(small, const % g, x)
  reduced = [(t, k % c) for t, k in terms if k % c != 0]
  if len(reduced) == len(terms) and all(k1 == k2 for (_, k1), (_, k2) in zip(reduced, terms)) and 0 <= const < c:
    return None
  rest = build_sum(reduced, const % c, x)
  return rest % c if rest.vmin >= 0 else None  # (a*c + r)%c -> r%c

def fold_lt(x: UOp, d: UOp) -> UOp | None:
  """A bound on a sum moves its constants and common factor to the right: (a*4 + b + 2) < 10 with 0<=b<4 -> a < 2."""
  if not exact_sum(x): return None
  terms, const = split_terms(x)
  if const != 0: return build_sum(terms, 0, x) < (d.arg - const)  # x+c1 < c2 -> x < c2-c1
  if not terms: return None
  g = math.gcd(*(k for _, k in terms))
  if g > 1:  # g*big < c -> big < ceil(c/g)
    return build_sum([(t, k // g) for t, k in terms], 0, x) < -((-d.arg) // g)
  if (split := _split_by_gcd(terms, 0, d.arg)) is not None and split[2] and split[1] and d.arg % split[0] == 0:
    g, big, _, _ = split
    return build_sum(big, 0, x) < d.arg // g
  return None

def const_fold(u: UOp) -> UOp | None:
  """An ALU op on constants -> its value."""
  if not all(s.op is Ops.CONST for s in u.src): return None
  return UOp.const(u.dtype, exec_alu(u.op, u.dtype, [s.arg for s in u.src]))

def bound_fold(u: UOp) -> UOp | None:
  """An integer or bool op whose bounds pin it to one value -> that value."""
  return UOp.const(u.dtype, u.vmin) if u.vmin == u.vmax and not isinstance(u.vmin, float) else None

def distribute(x: UOp, y: UOp, c: UOp) -> UOp | None:
  """(x+y)*c -> x*c+y*c, for integer index math only."""; return x * c + y * c

def exact_reciprocal(x: UOp, c: UOp) -> UOp | None:
  """x/c -> x*(1/c) where exact: c a power of two (1/c in range), 0 (x*inf: WGSL's x/0.0 may be 0), inf or nan."""
  if not isinstance(v := c.arg, float) or math.isfinite(v) and v != 0 and abs(math.frexp(v)[0]) != 0.5: return None
  r = x.const_like(inv := math.copysign(math.inf, v) if v == 0 else 1.0 / v)
  return x * r if r.arg == inv or math.isnan(inv) else None

def swap_const(u: UOp, c: UOp, x: UOp) -> UOp | None:
  """Constants go on the right of commutative ops: 2+x -> x+2."""
  return None if x.op is Ops.CONST else u.replace(src=(x, c))

def cast_const(c: UOp, u: UOp) -> UOp:
  """cast of a constant -> the converted constant (UOp.const truncates, wraps and rounds to the dtype)."""
  return UOp.const(u.dtype, c.arg)

symbolic = PatternMatcher([(UPat(GroupOp.ALU, name="u"), const_fold),  # op(const, const) -> const
  (UPat(GroupOp.Commutative, src=(UPat.cvar("c"), UPat.var("x")), name="u"), swap_const),  # c+x -> x+c
  (UPat(GroupOp.ALU, dtype=INTS + (dtypes.bool,), name="u"), bound_fold),  # x -> c when vmin == vmax
  (UPat.var("x", INTS) + 0, lambda x: x),  # x+0 -> x (ints only: for floats -0.0+0.0 is +0.0)
  (UPat.var("x") * 1, lambda x: x),  # x*1 -> x
  (UPat.var("x", INTS) * 0, lambda x: x.const_like(0)),  # x*0 -> 0 (ints only: nan*0 is nan)
  (UPat.var("x", INTS) // 1, lambda x: x),  # x//1 -> x
  (UPat(Ops.FDIV, src=(UPat.var("x"), UPat.cvar("c"))), exact_reciprocal),  # x/4 -> x*0.25 (exact reciprocals only)
  (UPat.var("x", INTS) % 1, lambda x: x.const_like(0)),  # x%1 -> 0
  # (x*c1)*c2 -> x*(c1*c2)
  ((UPat.var("x", INTS) * UPat.cvar("c1")) * UPat.cvar("c2"), lambda x, c1, c2: x * (c1.arg * c2.arg)),
  ((UPat.var("x", INTS) + UPat.var("y")) * UPat.cvar("c"), distribute),  # (x+y)*c -> x*c+y*c
  (UPat(Ops.ADD, INTS, name="x"), fold_add),  # a+b+a*2+1 -> a*3+b+1
  (UPat.var("x", INTS) // UPat.cvar("d"), fold_div),  # (a*8+b)//4 -> a*2 + b//4
  (UPat.var("x", INTS) % UPat.cvar("d"), fold_mod),  # (a*8+b)%4 -> b%4
  (UPat.var("x", INTS) < UPat.cvar("d"), fold_lt),  # a*4+b+2 < 10 -> a < 2
  (UPat.var("x", INTS) // UPat.var("x"), lambda x: x.const_like(1) if x.vmin > 0 else None),  # x//x -> 1
  # max(x,y) -> x if x >= y always
  (UPat.var("x", INTS).maximum(UPat.var("y")), lambda x, y: x if x.vmin >= y.vmax else y if y.vmin >= x.vmax else None),
  # booleans
  (UPat.var("x", dtypes.bool) & True, lambda x: x),  # x&True -> x
  (UPat.var("x", dtypes.bool) & False, lambda x: x.const_like(False)),  # x&False -> False
  (UPat.var("x", dtypes.bool) | True, lambda x: x.const_like(True)),  # x|True -> True
  (UPat.var("x", dtypes.bool) | False, lambda x: x),  # x|False -> x
  (UPat.var("x", dtypes.bool) & UPat.var("x"), lambda x: x),  # x&x -> x
  (UPat.var("x", dtypes.bool) | UPat.var("x"), lambda x: x),  # x|x -> x
  (UPat.var("x", dtypes.bool).ne(True).ne(True), lambda x: x),  # !!x -> x
  (UPat.var("x", dtypes.bool).ne(False), lambda x: x),  # x!=False -> x
  (UPat.var("x", INTS).ne(UPat.var("x")), lambda x: UOp.const(dtypes.bool, False)),  # x!=x -> False (ints)
  # where
  (UPat.const(True).where(UPat.var("a"), UPat.var()), lambda a: a),  # True ? a : b -> a
  (UPat.const(False).where(UPat.var(), UPat.var("b")), lambda b: b),  # False ? a : b -> b
  (UPat.var().where(UPat.var("a"), UPat.var("a")), lambda a: a),  # c ? a : a -> a
  # !c ? a : b -> c ? b : a
  (UPat.var("c").ne(True).where(UPat.var("a"), UPat.var("b")), lambda c, a, b: c.where(b, a)),
  # casts
  (UPat(Ops.CAST, src=(UPat.cvar("c"),), name="u"), cast_const),  # cast(const) -> const
  # cast to own dtype -> x
  (UPat(Ops.CAST, name="u", src=(UPat.var("x"),)), lambda u, x: x if x.dtype == u.dtype else None)])

def simplify(u: UOp) -> UOp:
  """u with the symbolic rules applied to a fixed point. The rules read nothing but the nodes, so each node keeps its
  simplified form: passes that simplify again after changing part of a kernel only walk the new nodes."""
  return graph_rewrite(u, symbolic, memo="simplified")
