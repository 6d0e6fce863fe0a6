"""The rewrite engine: patterns (UPat), rule tables (PatternMatcher), graph_rewrite (docs/developer/codegen.md)."""
from __future__ import annotations
import inspect
from typing import Any, Callable, Sequence
from fusegrad.dtype import DType
from fusegrad.helpers import unwrap
from fusegrad.uop.ops import UOp, Ops

class UPat:
  """A pattern over UOps. op/dtype may be one value or a tuple of allowed values; None matches anything."""
  __slots__ = ("ops", "dtypes", "src", "arg", "name", "allow_any_len")
  def __init__(self, op: Ops | tuple[Ops, ...] | set[Ops] | None = None, dtype: DType | tuple[DType, ...] | None = None,
               src: tuple[UPat, ...] | UPat | None = None, arg: Any = None, name: str | None = None,
               allow_any_len: bool = False):
    self.ops = None if op is None else (frozenset((op,)) if isinstance(op, Ops) else frozenset(op))
    self.dtypes = None if dtype is None else (frozenset((dtype,)) if isinstance(dtype, DType) else frozenset(dtype))
    self.src = src if src is None or isinstance(src, tuple) else (src,)
    self.arg, self.name, self.allow_any_len = arg, name, allow_any_len

  @staticmethod
  def var(name: str | None = None, dtype: DType | tuple[DType, ...] | None = None) -> UPat:
    return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype: DType | tuple[DType, ...] | None = None) -> UPat:
    return UPat(Ops.CONST, dtype, name=name)
  @staticmethod
  def const(val: Any, dtype: DType | tuple[DType, ...] | None = None) -> UPat: return UPat(Ops.CONST, dtype, arg=val)

  def match(self, u: UOp, store: dict[str, UOp]) -> bool:
    if self.ops is not None and u.op not in self.ops: return False
    if self.dtypes is not None and u.dtype not in self.dtypes and u.dtype.scalar() not in self.dtypes: return False
    # bool args only match bool patterns: the constant True is not the number 1
    if self.arg is not None and (u.arg != self.arg or isinstance(u.arg, bool) != isinstance(self.arg, bool)):
      return False
    if self.name is not None:
      if self.name in store and store[self.name] is not u: return False
      store[self.name] = u
    if self.src is None: return True
    if len(u.src) < len(self.src) or (not self.allow_any_len and len(u.src) != len(self.src)): return False
    for p, s in zip(self.src, u.src):  # (a loop, not all() of a generator: hot)
      if not p.match(s, store): return False
    return True

  # readable rule tables: UPat.var("x") + 0 builds UPat(Ops.ADD, src=(x, const 0))
  def _bin(self, op: Ops, x: Any) -> UPat: return UPat(op, src=(self, x if isinstance(x, UPat) else UPat.const(x)))
  def __add__(self, x: Any) -> UPat: return self._bin(Ops.ADD, x)
  def __mul__(self, x: Any) -> UPat: return self._bin(Ops.MUL, x)
  def __floordiv__(self, x: Any) -> UPat: return self._bin(Ops.IDIV, x)
  def __mod__(self, x: Any) -> UPat: return self._bin(Ops.MOD, x)
  def __lt__(self, x: Any) -> UPat: return self._bin(Ops.CMPLT, x)
  def __and__(self, x: Any) -> UPat: return self._bin(Ops.AND, x)
  def __or__(self, x: Any) -> UPat: return self._bin(Ops.OR, x)
  def ne(self, x: Any) -> UPat: return self._bin(Ops.CMPNE, x)
  def maximum(self, x: Any) -> UPat: return self._bin(Ops.MAX, x)
  def where(self, x: UPat, y: UPat) -> UPat: return UPat(Ops.WHERE, src=(self, x, y))
  def cast(self, dtype: DType | None = None, name: str | None = None) -> UPat:
    return UPat(Ops.CAST, dtype, (self,), name=name)
  def __repr__(self) -> str:
    return f"UPat({set(self.ops) if self.ops else None}, name={self.name!r}, src={self.src!r}, arg={self.arg!r})"

Rule = tuple[UPat, Callable[..., UOp | None]]

class PatternMatcher:
  """An ordered table of rules, indexed by the op of each rule's root."""
  def __init__(self, rules: Sequence[Rule]):
    self.rules = list(rules)
    self.by_op: dict[Ops, list[tuple[UPat, Callable, bool]]] = {op: [] for op in Ops}
    for pat, fn in self.rules:  # a rule with any op at its root goes into every op's list: the table's order is kept
      for op in (pat.ops if pat.ops is not None else Ops):
        self.by_op[op].append((pat, fn, "ctx" in inspect.signature(fn).parameters))
  def __add__(self, other: PatternMatcher) -> PatternMatcher: return PatternMatcher(self.rules + other.rules)

  def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
    """The first rule's replacement for u, or None if no rule applies."""
    for pat, fn, takes_ctx in self.by_op[u.op]:
      store: dict[str, UOp] = {}
      if pat.match(u, store):
        ret = fn(ctx=ctx, **store) if takes_ctx else fn(**store)
        if ret is not None and ret is not u: return ret
    return None

def graph_rewrite(root: UOp, pm: PatternMatcher, ctx: Any = None, max_steps: int = 1_000_000,
                  memo: str | None = None, once: bool = False) -> UOp:
  """Rewrite bottom-up to a fixed point: sources first, then the node, until no rule matches anywhere.
  once: each node is tried once, its replacement final (not walked again; memo unused).
  memo: a key under which each node keeps its result (its _cache) across calls, for rules that read nothing but the
  node (no ctx): a later walk stops at any node rewritten before (True: the node is its own result, no cycle)."""
  done: dict[UOp, UOp] = {}
  if once:  # one visit per node in order, sources first: no fixed point to reach
    for node in root.toposort():
      rebuilt = node if (src := tuple([done[s] for s in node.src])) == node.src else node.replace(src=src)
      done[node] = (pm.rewrite(rebuilt, ctx) if pm.by_op[rebuilt.op] else None) or rebuilt
    return done[root]
  stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
  steps = 0
  def finish(node: UOp, result: UOp) -> None:
    done[node] = result
    if memo is not None: node._cache[memo] = True if result is node else result
  while stack:
    node, stage, new = stack.pop()
    if node in done: continue
    if stage == 0:  # visit the sources first
      if memo is not None and (known := node._cache.get(memo)) is not None:
        done[node] = node if known is True else known
        continue
      stack.append((node, 1, None))
      stack += [(s, 0, None) for s in reversed(node.src) if s not in done]  # (lists, not generators: hot)
    elif stage == 1:  # rebuild with rewritten sources, then try the rules
      src = tuple([done[s] for s in node.src])
      rebuilt = node if src == node.src else node.replace(src=src)
      if rebuilt is not node and rebuilt not in done and memo is not None and (known := rebuilt._cache.get(memo)):
        done[rebuilt] = rebuilt if known is True else known
      if rebuilt is not node and rebuilt in done:
        finish(node, done[rebuilt])
        continue
      steps += 1
      if steps > max_steps: raise RuntimeError("graph_rewrite did not reach a fixed point (a rule cycle?)")
      replacement = pm.rewrite(rebuilt, ctx) if pm.by_op[rebuilt.op] else None
      if replacement is None:
        finish(rebuilt, rebuilt)
        finish(node, rebuilt)
      else:  # the replacement may hold new nodes: rewrite it fully, then map node to the result
        stack.append((node, 2, replacement))
        stack.append((replacement, 0, None))
    else: finish(node, done[unwrap(new)])
  return done[root]
