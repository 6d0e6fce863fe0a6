"""The rewrite engine (fusegrad/uop/rewrite.py): UPat matching, PatternMatcher rule order and ctx, graph_rewrite."""
import pytest
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops, GroupOp
from fusegrad.uop.rewrite import UPat, PatternMatcher, graph_rewrite

def var(name: str, dtype=dtypes.int32) -> UOp: return UOp(Ops.DEFINE_VAR, dtype, (), (name, 0, 100))
def const(v, dtype=dtypes.int32) -> UOp: return UOp.const(dtype, v)
x, y, z = var("x"), var("y"), var("z")
fx = var("fx", dtypes.float32)

def match(pat: UPat, u: UOp) -> dict[str, UOp] | None:
  store: dict[str, UOp] = {}
  return store if pat.match(u, store) else None

class TestUPat:
  def test_op(self):
    assert match(UPat(Ops.ADD), x + y) == {}
    assert match(UPat(Ops.MUL), x + y) is None
  def test_op_set(self):
    assert match(UPat((Ops.ADD, Ops.MUL)), x * y) is not None
    assert match(UPat(GroupOp.Comparison), x < y) is not None
    assert match(UPat(GroupOp.Comparison), x + y) is None
  def test_any(self): assert match(UPat(), x) == {}
  def test_names(self):
    got = match(UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b")), name="root"), x + y)
    assert got == {"a": x, "b": y, "root": x + y}
  def test_same_name_must_be_same_node(self):
    pat = UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a")))
    assert match(pat, x + x) == {"a": x}
    assert match(pat, x + y) is None
  def test_dtype(self):
    assert match(UPat.var("a", dtypes.int32), x) is not None
    assert match(UPat.var("a", dtypes.float32), x) is None
  def test_dtype_set(self):
    pat = UPat.var("a", (dtypes.float32, dtypes.float16))
    assert match(pat, fx) is not None
    assert match(pat, x) is None
    assert match(UPat.var("a", dtypes.ints), x) is not None
  def test_arg(self):
    assert match(UPat.const(3), const(3)) is not None
    assert match(UPat.const(3), const(4)) is None
    assert match(UPat(Ops.DEFINE_VAR, arg=("x", 0, 100)), x) is not None
  def test_bool_arg_is_not_int(self):
    # the constant True is not the number 1, nor False the number 0
    assert match(UPat.const(1), UOp.const(dtypes.bool, True)) is None
    assert match(UPat.const(True), UOp.const(dtypes.bool, True)) is not None
    assert match(UPat.const(0), UOp.const(dtypes.bool, False)) is None
  def test_src_length(self):
    pat = UPat(Ops.WHERE, src=(UPat.var("c"), UPat.var("a")))
    assert match(pat, (x < y).where(x, y)) is None  # 3 sources, the pattern lists 2
  def test_allow_any_len(self):
    pat = UPat(Ops.SINK, src=(UPat.var("first"),), allow_any_len=True)
    assert match(pat, UOp(Ops.SINK, dtypes.void, (x, y, z))) == {"first": x}
    assert match(pat, UOp(Ops.SINK, dtypes.void, (x,))) == {"first": x}
    assert match(pat, UOp(Ops.SINK, dtypes.void, ())) is None  # fewer sources than the pattern still fails
  def test_nested(self):
    pat = (UPat.var("a") * UPat.cvar("c1")) + UPat.cvar("c2")
    assert match(pat, x * 3 + 4) == {"a": x, "c1": const(3), "c2": const(4)}
    assert match(pat, x * y + 4) is None
  def test_operator_sugar(self):
    assert match(UPat.var("a") // 2, x // 2) is not None
    assert match(UPat.var("a") % 2, x % 2) is not None
    assert match(UPat.var("a") < 5, x < 5) is not None
    assert match(UPat.var("a").ne(5), x.ne(5)) is not None
    assert match(UPat.var("a").maximum(UPat.var("b")), x.maximum(y)) is not None
    assert match(UPat.var("a").cast(dtypes.float32), x.cast(dtypes.float32)) is not None
    assert match(UPat.var("a").cast(dtypes.float16), x.cast(dtypes.float32)) is None

class TestPatternMatcher:
  def test_first_rule_wins(self):
    pm = PatternMatcher([(UPat(Ops.ADD), lambda: const(1)), (UPat(Ops.ADD), lambda: const(2))])
    assert pm.rewrite(x + y) is const(1)
  def test_none_means_no_match(self):
    pm = PatternMatcher([(UPat(Ops.ADD), lambda: None), (UPat(Ops.ADD), lambda: const(2))])
    assert pm.rewrite(x + y) is const(2)
  def test_returning_the_same_node_means_no_match(self):
    pm = PatternMatcher([(UPat(Ops.ADD, name="u"), lambda u: u), (UPat(Ops.ADD), lambda: const(2))])
    assert pm.rewrite(x + y) is const(2)
  def test_no_rule(self):
    pm = PatternMatcher([(UPat(Ops.ADD), lambda: const(1))])
    assert pm.rewrite(x * y) is None
  def test_order_kept_between_any_op_and_one_op_rules(self):
    # a rule whose root matches any op, listed first, is tried first
    pm = PatternMatcher([(UPat(name="u"), lambda u: const(1) if u.op is Ops.ADD else None),
                         (UPat(Ops.ADD), lambda: const(2))])
    assert pm.rewrite(x + y) is const(1)
    pm = PatternMatcher([(UPat(Ops.ADD), lambda: const(2)), (UPat(name="u"), lambda u: const(1))])
    assert pm.rewrite(x + y) is const(2)
    assert pm.rewrite(x * y) is const(1)  # an op no rule names still gets the any-op rules
  def test_names_become_keyword_arguments(self):
    seen = []
    def fn(b: UOp, a: UOp) -> UOp | None:
      seen.append((a, b))
      return None
    PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b"))), fn)]).rewrite(x + y)
    assert seen == [(x, y)]
  def test_ctx(self):
    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda ctx, v: const(ctx[v.arg[0]]))])
    assert pm.rewrite(x, ctx={"x": 7}) is const(7)
    assert pm.rewrite(y, ctx={"y": 9}) is const(9)
  def test_ctx_only_for_rules_that_take_it(self):
    pm = PatternMatcher([(UPat(Ops.ADD), lambda: const(5))])
    assert pm.rewrite(x + y, ctx=object()) is const(5)
  def test_add_tables(self):
    pm = PatternMatcher([(UPat(Ops.ADD), lambda: None)]) + PatternMatcher([(UPat(Ops.ADD), lambda: const(3))])
    assert pm.rewrite(x + y) is const(3)

# rules for the graph_rewrite tests: plain constant folding of ADD and MUL, and x*1 -> x
def _fold(u: UOp) -> UOp | None:
  if not all(s.op is Ops.CONST for s in u.src): return None
  a, b = u.src[0].arg, u.src[1].arg
  return const(a + b if u.op is Ops.ADD else a * b)
pm_fold = PatternMatcher([(UPat((Ops.ADD, Ops.MUL), name="u"), _fold), (UPat.var("a") * 1, lambda a: a)])

class TestGraphRewrite:
  def test_bottom_up_to_a_fixed_point(self):
    # (2*3 + 4) * 1 + x: needs several rounds, each enabled by the one before
    e = (const(2) * const(3) + const(4)) * const(1) + x
    assert graph_rewrite(e, pm_fold) is const(10) + x
  def test_replacement_is_rewritten_too(self):
    # the rule's output holds new foldable nodes: they are rewritten before the result is used
    pm = pm_fold + PatternMatcher([(UPat(Ops.DEFINE_VAR, arg=("x", 0, 100)), lambda: const(1) + const(2))])
    assert graph_rewrite(x * const(5), pm) is const(15)
  def test_chain_of_rules(self):
    # x -> y -> z, each by a different rule: the fixed point is z
    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, arg=("x", 0, 100)), lambda: y),
                         (UPat(Ops.DEFINE_VAR, arg=("y", 0, 100)), lambda: z)])
    assert graph_rewrite(x + const(1), pm) is z + const(1)
  def test_no_match_returns_same_node(self):
    e = x * y + z
    assert graph_rewrite(e, pm_fold) is e
  def test_shared_nodes_rewritten_once(self):
    calls: list[UOp] = []
    def count(ctx: list, v: UOp) -> UOp:
      ctx.append(v)
      return const(3)
    shared = x * const(2)
    e = (shared + shared) * (shared + y)
    out = graph_rewrite(e, PatternMatcher([(UPat(Ops.DEFINE_VAR, arg=("x", 0, 100), name="v"), count)]), ctx=calls)
    assert calls == [x]
    assert out is (const(3) * const(2) + const(3) * const(2)) * (const(3) * const(2) + y)
    # the rewritten shared node is one node in the result
    assert out.src[0].src[0] is out.src[0].src[1] is out.src[1].src[0]
  def test_nodes_that_become_equal_are_shared(self):
    # x*1 and x are different nodes that rewrite to the same one: their users become one node as well
    e = (x * const(1) + z) * (x + z)
    out = graph_rewrite(e, pm_fold)
    assert out.src[0] is out.src[1]
  def test_deep_graph(self):
    e = x
    for i in range(5000): e = e + const(1) if i % 2 else e * const(1)
    want = x
    for _ in range(2500): want = want + const(1)
    assert graph_rewrite(e, pm_fold) is want  # every *1 gone, no recursion limit hit
  def test_once_takes_a_replacement_as_final(self):
    # x -> y, y -> z: once, x becomes y (not walked again) and the y already there becomes z; the users are rebuilt
    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, arg=("x", 0, 100)), lambda: y),
                         (UPat(Ops.DEFINE_VAR, arg=("y", 0, 100)), lambda: z)])
    assert graph_rewrite(x + y, pm, once=True) is y + z
    assert graph_rewrite(x + y, pm) is z + z
    # a replacement's own foldable nodes stay (without once: 15); its users are tried, on the rebuilt node
    pm = pm_fold + PatternMatcher([(UPat(Ops.DEFINE_VAR, arg=("x", 0, 100)), lambda: const(1) + const(2))])
    assert graph_rewrite(x * const(5), pm, once=True) is (const(1) + const(2)) * const(5)
    assert graph_rewrite(const(2) * const(3) + x, pm, once=True) is const(6) + (const(1) + const(2))
  def test_cycle_is_an_error(self):
    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, arg=("x", 0, 100)), lambda: y),
                         (UPat(Ops.DEFINE_VAR, arg=("y", 0, 100)), lambda: x)])
    with pytest.raises(RuntimeError, match="fixed point"): graph_rewrite(x + z, pm, max_steps=1000)
