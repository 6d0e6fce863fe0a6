"""The symbolic simplifier (fusegrad/uop/symbolic.py): every fold is checked for its shape AND, by evaluating both
sides for every value of the loop variables, for giving the same number."""
import random
import pytest
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops, Variable
from fusegrad.uop.symbolic import simplify
from fusegrad.uop.ops import sym_infer
from test.unit.helpers import rng, evaluate, assignments, leaves_of

r0, r1, r2 = rng(0, 5), rng(1, 3), rng(2, 4)

def c(v: int) -> UOp: return UOp.const(dtypes.index, v)

def assert_same_values(before: UOp, after: UOp) -> None:
  for env in assignments(leaves_of(before, after)):
    assert evaluate(after, env) == evaluate(before, env), f"{before.render()} -> {after.render()} differs at {env}"

def check(expr: UOp, want: str) -> UOp:
  """simplify(expr) renders as want, and has the same value as expr everywhere."""
  got = simplify(expr)
  assert got.render() == want, f"{expr.render()} simplified to {got.render()}, want {want}"
  assert_same_values(expr, got)
  return got

def ops_in(u: UOp) -> set[Ops]: return {n.op for n in u.toposort()}

# *** division and modulo, using the bounds of the loop variables ***
class TestDivMod:
  def test_unflatten_index(self): check(((r0 * 12 + r1 * 4 + r2) // 4) % 3, "r1")
  def test_mod_keeps_low_part(self): check((r0 * 12 + r1 * 4 + r2) % 4, "r2")
  def test_div_keeps_high_part(self): check((r0 * 12 + r1 * 4 + r2) // 12, "r0")
  def test_div_exact(self): check((r1 * 4 + r2) // 4, "r1")
  def test_mod_of_multiple(self): check((r0 * 8 + r2) % 8, "r2")
  def test_mod_partial(self): check((r0 * 4 + r2) % 8, "(((r0%2)*4)+r2)")
  def test_div_common_factor(self): check((r2 * 2 + 1) // 4, "(r2//2)")
  def test_small_value_mod_is_itself(self): check(r2 % 4, "r2")
  def test_small_value_div_is_zero(self): check(r2 // 4, "0")
  def test_div_of_div(self): check((r0 * 6 + r1) // 2 // 3, "r0")
  def test_mod_of_mod(self):
    got = simplify((r0 * 5 + r2) % 8 % 4)
    assert_same_values((r0 * 5 + r2) % 8 % 4, got)
    assert got.render().count("%") == 1, got.render()
  def test_div_mod_recombine(self): check((r0 // 4) * 4 + r0 % 4, "r0")
  def test_flattened_axis_recombines(self):  # a (2,3,3) axis flattened to 18: (r//9)*9 + ((r//3)%3)*3 + r%3 -> r
    r = rng(3, 18)
    check((r // 9) * 9 + ((r // 3) % 3) * 3 + r % 3, "r3")
    check(((r // 3) % 3) * 6 + (r % 3) * 2 + 1, "(((r3%9)*2)+1)")
  def test_div_by_one(self): check(r0 // 1, "r0")
  def test_mod_by_one(self): check(r0 % 1, "0")
  def test_offset_that_may_carry_stays(self):
    # r2+3 crosses a multiple of 4 for some r2: nothing to fold, but the value must stay right
    got = simplify((r2 + 3) // 4)
    assert Ops.IDIV in ops_in(got)
    assert_same_values((r2 + 3) // 4, got)
  def test_negative_values_are_not_folded_wrongly(self):
    # C division truncates toward zero: (r2-2)//2 at r2=0 is -1, at r2=1 is 0
    for e in [(r2 - 2) // 2, (r2 - 2) % 2, (r2 * -3 + 5) // 4, (r2 * -3 + 5) % 4, (r0 - r2) // 3, (r0 - r2) % 3]:
      assert_same_values(e, simplify(e))
  def test_constant_division_is_c_like(self):
    assert simplify(UOp.const(dtypes.int32, 7) // UOp.const(dtypes.int32, -2)).arg == -3
    assert simplify(UOp.const(dtypes.int32, -7) % UOp.const(dtypes.int32, 3)).arg == -1
  def test_x_div_x(self):
    v = Variable("v", 1, 9)
    assert simplify(v // v).arg == 1
    assert Ops.IDIV in ops_in(simplify(r0 // r0))  # r0 may be 0: keep it

  def test_random_div_mod_expressions(self):
    """Random sums of loop variables with constant coefficients, divided and taken modulo: the simplified form
    must agree everywhere."""
    gen = random.Random(1234)
    ranges = [rng(0, 3), rng(1, 4), rng(2, 5), rng(3, 2)]
    for _ in range(250):
      terms = gen.sample(ranges, gen.randint(1, 3))
      e: UOp = c(gen.randint(-4, 9))
      for r in terms: e = e + r * gen.choice([1, 2, 3, 4, 6, 8, 12, -1, -2])
      for _ in range(gen.randint(1, 2)):
        d = gen.choice([2, 3, 4, 6, 8, 12])
        e = e // d if gen.random() < 0.5 else e % d
      assert_same_values(e, simplify(e))

# *** sums in one canonical order ***
class TestSums:
  def test_like_terms(self): check(r0 + r0 * 2 + 1, "((r0*3)+1)")
  def test_like_terms_across_parens(self): check((r0 + 2) + (r0 * 3), "((r0*4)+2)")
  def test_constant_goes_right(self): check(2 + r0, "(r0+2)")
  def test_distribute(self): check((r0 + r1) * 3, "((r0*3)+(r1*3))")
  def test_mul_mul(self): check((r0 * 2) * 3, "(r0*6)")
  def test_cancel(self): check(r1 - r1, "0")
  def test_identities(self):
    check(r0 + 0, "r0")
    check(r0 * 1, "r0")
    check(r0 * 0, "0")
  def test_order_does_not_matter(self):
    # a sum written in any order simplifies to the same node (hash-consing makes that `is`)
    a = simplify(r0 * 3 + r1 + 2 + r2 * 5)
    b = simplify(r2 * 5 + (2 + r1) + r0 * 3)
    d = simplify(r1 + (r2 * 2 + r0) * 1 + r2 * 3 + r0 * 2 + 2)
    assert a is b is d
  def test_constants_fold(self): check(c(3) * 4 + c(2) - 5, "9")
  def test_is_a_fixed_point(self):
    e = simplify(((r0 * 12 + r1 * 4 + r2) // 2) % 6 + r0 * 2)
    assert simplify(e) is e

# *** comparisons ***
class TestComparisons:
  def test_always_true(self): check(r2 < 4, "True")
  def test_always_false(self): check(r2 < 0, "False")
  def test_move_constant_and_drop_small_part(self): check((r0 * 4 + r2 + 2) < 10, "(r0<2)")
  def test_common_factor(self):
    got = simplify(r0 * 4 < 9)
    assert got.render() == "(r0<3)"
    assert_same_values(r0 * 4 < 9, got)
  def test_ne_self(self): check(r0.ne(r0), "False")
  def test_not_not(self):
    b = r0 < 3
    assert simplify(b.logical_not().logical_not()) is simplify(b)
  def test_bool_identities(self):
    b = r0 < 3
    assert simplify(b & True) is b
    assert simplify(b & False).arg is False
    assert simplify(b | True).arg is True
    assert simplify(b | False) is b
    assert simplify(b & b) is b
    assert simplify(b | b) is b
  def test_where(self):
    a, b = r0 * 2, r1 + 7
    assert simplify(UOp.const(dtypes.bool, True).where(a, b)) is a
    assert simplify(UOp.const(dtypes.bool, False).where(a, b)) is simplify(b)
    assert simplify((r0 < 2).where(a, a)) is a
    # a condition the bounds decide is folded first
    assert simplify((r2 < 4).where(a, b)) is a
  def test_random_comparisons(self):
    gen = random.Random(99)
    ranges = [rng(0, 4), rng(1, 3), rng(2, 6)]
    for _ in range(150):
      e: UOp = c(gen.randint(-3, 5))
      for r in gen.sample(ranges, gen.randint(1, 3)): e = e + r * gen.choice([1, 2, 3, 4, -1, -2])
      cmp = e < gen.randint(-6, 20)
      assert_same_values(cmp, simplify(cmp))

# *** float math is only folded where exact ***
class TestFloats:
  def test_x_times_zero_is_not_folded_for_floats(self):
    x = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0), r0))
    assert Ops.MUL in ops_in(simplify(x * 0.0))  # nan*0 is nan, not 0
  def test_x_times_one(self):
    x = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0), r0))
    assert simplify(x * 1.0) is x
  def test_x_plus_zero_keeps_the_sign_of_zero(self):
    # -0.0 + 0.0 is +0.0 in IEEE arithmetic, so x+0.0 can't become x for floats
    x = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0), r0))
    assert Ops.ADD in ops_in(simplify(x + 0.0))
  def test_float_constants_fold(self):
    got = simplify(UOp.const(dtypes.float32, 1.5) * UOp.const(dtypes.float32, 2.0) + UOp.const(dtypes.float32, 0.25))
    assert got.op is Ops.CONST and got.arg == 3.25
  def test_cast_of_const(self):
    assert simplify(UOp.const(dtypes.float32, 2.7).cast(dtypes.int32)).arg == 2
    assert simplify(UOp.const(dtypes.int32, 300).cast(dtypes.uint8)).arg == 44

# *** value bounds ***
class TestBounds:
  def test_range(self): assert (r0.vmin, r0.vmax) == (0, 4)
  def test_const(self): assert (c(7).vmin, c(7).vmax) == (7, 7)
  def test_add_mul(self):
    e = r0 * 3 + r2 - 2
    assert (e.vmin, e.vmax) == (-2, 13)
  def test_negative_mul(self):
    e = r0 * -2
    assert (e.vmin, e.vmax) == (-8, 0)
  def test_mod_div(self):
    assert ((r0 * 7) % 4).vmin == 0 and ((r0 * 7) % 4).vmax == 3
    assert (r0 % 8).vmax == 4
    assert ((r0 * 7) // 4).vmin == 0 and ((r0 * 7) // 4).vmax == 7
  def test_max_where(self):
    assert (r0.maximum(r2 + 1).vmin, r0.maximum(r2 + 1).vmax) == (1, 4)
    w = (r0 < 2).where(r1, r2 + 10)
    assert (w.vmin, w.vmax) == (0, 13)
  def test_comparisons(self):
    assert (r2 < 4).vmin is True and (r2 < 4).vmax is True
    assert (r2 < 2).vmin is False and (r2 < 2).vmax is True
    assert (r2 + 10).ne(3).vmin is True
  def test_overflow_gives_dtype_bounds(self):
    big = Variable("big", 0, 2 ** 30, dtype=dtypes.int32)
    e = big * 8  # int32 arithmetic can wrap: the bounds are the dtype's
    assert (e.vmin, e.vmax) == (dtypes.min(dtypes.int32), dtypes.max(dtypes.int32))
  def test_index_math_does_not_wrap(self):
    big = Variable("big", 0, 2 ** 30)
    e = big * 8  # index arithmetic never wraps: codegen picks int64 when it needs to
    assert (e.vmin, e.vmax) == (0, 2 ** 33)
  def test_bounds_are_sound(self):
    e = ((r0 * 5 + r1 * 2 - r2) % 7) * 3 + (r2 // 3) - r1
    vals = [evaluate(e, env) for env in assignments(leaves_of(e))]
    assert e.vmin <= min(vals) and max(vals) <= e.vmax

# *** symbolic variables ***
class TestVariable:
  def test_bounds(self):
    v = Variable("i", 1, 10)
    assert (v.vmin, v.vmax) == (1, 10)
    assert ((v * 2 + 1).vmin, (v * 2 + 1).vmax) == (3, 21)
    assert v.expr() == "i"
  def test_same_variable_is_same_node(self): assert Variable("i", 1, 10) is Variable("i", 1, 10)
  def test_bad_bounds(self):
    with pytest.raises(ValueError, match="min 5 > max 2"): Variable("j", 5, 2)
  def test_bind(self):
    v = Variable("i", 1, 10)
    b = v.bind(3)
    assert b.op is Ops.BIND and b.val == 3
    assert b.unbind() == (v, 3)
    assert (b.vmin, b.vmax) == (1, 10)  # a bound variable keeps its range: kernels are compiled for all values
  def test_bind_out_of_range(self):
    with pytest.raises(ValueError, match=r"i=11 is outside \[1, 10\]"): Variable("i", 1, 10).bind(11)
  def test_sym_infer(self):
    i, j = Variable("i", 1, 10), Variable("j", 0, 5)
    e = (i * 4 + j) // 3
    for iv in (1, 4, 10):
      for jv in (0, 5):
        assert sym_infer(e, {i: iv, j: jv}) == (iv * 4 + jv) // 3
  def test_sym_infer_unbound(self):
    i, j = Variable("i", 1, 10), Variable("j", 0, 5)
    with pytest.raises(ValueError, match="unbound variables"): sym_infer(i + j, {i: 2})
  def test_variables(self):
    i, j = Variable("i", 1, 10), Variable("j", 0, 5)
    assert (j * 2 + i).variables() == [i, j]
  def test_simplify_with_variable_bounds(self):
    i = Variable("i", 0, 3)
    check(((i * 4 + r2) // 4), "i")
    check(((i * 4 + r2) % 4), "r2")
