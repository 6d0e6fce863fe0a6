"""Linearize: a lowered kernel AST -> a flat program with explicit loops (docs/developer/codegen.md)."""
from __future__ import annotations
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops, AxisType
from fusegrad.codegen.kernel import range_kind, reduce_parts
from fusegrad.codegen.expand import tree_reduce

def reduce_identity(op: Ops, dtype) -> object:
  if op is Ops.ADD: return 0
  if op is Ops.MUL: return 1
  if op is Ops.MAX: return dtypes.min(dtype)
  raise ValueError(f"no identity for reduce op {op}")

class _Linearizer:
  out: list[UOp]
  done: dict[UOp, UOp]
  def __init__(self, sink: UOp):
    self.sink, self.out, self.done = sink, [], {}
    self.open: set[UOp] = set()  # loops open at the current position
    self.nodes = sink.toposort()
    self.reduces = [u for u in self.nodes if u.op is Ops.REDUCE]
    self.deps: dict[UOp, frozenset[UOp]] = {}
    self.inner: dict[UOp, frozenset[UOp]] = {}  # the reduces each node's value uses (itself not included)
    for u in self.nodes:
      self.track(u)
      self.inner[u] = frozenset().union(*(self.inner[s] | ({s} if s.op is Ops.REDUCE else set()) for s in u.src))

  def track(self, u: UOp) -> None:  # the loops u depends on (a REDUCE does not depend on the loops it closes)
    d = frozenset([u]) if u.op is Ops.RANGE else frozenset().union(*(self.deps[s] for s in u.src))
    self.deps[u] = d - frozenset(reduce_parts(u)[1]) if u.op is Ops.REDUCE else d

  def run(self) -> list[UOp]:
    # buffers, variables, launch indices and shared memory (declared at kernel scope) first, each kind in arg order
    for op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.DEFINE_LOCAL):
      for u in sorted((u for u in self.nodes if u.op is op), key=lambda u: u.arg): self.add(u)
    # threaded loops go outermost (one parallel region per kernel), then the rest in axis order
    outer = sorted(self.deps[self.sink], key=lambda r: (range_kind(r) is not AxisType.THREAD, r.arg[0]))
    for r in outer: self.open_loop(r)
    for store in self.sink.src: self.emit(store)
    for r in reversed(outer): self.out.append(UOp(Ops.ENDRANGE, dtypes.void, (r,)))
    return self.out

  def open_loop(self, r: UOp) -> None:
    self.emit(r.src[0])
    self.add(r)
    self.open.add(r)

  def add(self, u: UOp) -> UOp:
    self.out.append(u)
    self.done[u] = u
    return u

  def emit(self, u: UOp) -> UOp:
    """Emit u (and what it needs) at the current position, once: sources first, left to right (iteratively)."""
    stack = [u]
    while stack:
      n = stack[-1]
      if n in self.done: stack.pop()
      elif n.op is Ops.REDUCE: self.emit_reduce_group(n)
      elif n.op is Ops.RANGE: raise RuntimeError(f"range {n.arg} used outside its loop")
      elif missing := [s for s in n.src if s not in self.done]: stack.extend(reversed(missing))
      else:
        src = tuple(self.done[s] for s in n.src)
        new = n if src == n.src else n.replace(src=src)
        self.out.append(new)
        self.done[n] = new
        stack.pop()
    return self.done[u]

  def emit_reduce_group(self, red: UOp) -> None:
    ranges = reduce_parts(red)[1]
    group = [x for x in self.reduces if reduce_parts(x)[1] == ranges and x not in self.done]
    group = [x for x in group if x is red or not self.inner[x] & set(group)]
    # hoist: what the values need that depends only on loops already open is computed before these loops open
    rset = frozenset(ranges)
    def hoistable(n: UOp) -> bool: return n.op is not Ops.RANGE and self.deps[n] <= self.open
    for x in group:
      for v in reduce_parts(x)[0]:
        for n in v.toposort(gate=lambda n: n not in self.done and not hoistable(n)):
          if n not in self.done and hoistable(n): self.emit(n)
    accs = [UOp(Ops.DEFINE_ACC, x.dtype, (UOp.const(x.dtype, reduce_identity(x.arg, x.dtype)),), len(self.out) + i)
            for i, x in enumerate(group)]
    for acc in accs: self.emit(acc)
    for r in ranges: self.open_loop(r)
    # step by step across the accumulators: a value loaded for a step dies at once (gcc spilled the tile otherwise)
    values = [self.copies(x) for x in group]
    updates = list(accs)
    for step in range(max(map(len, values))):
      for i, x in enumerate(group):
        if step < len(vals := values[i]): updates[i] = self.accumulate(x.arg, updates[i], vals[step])
    for x, acc, update in zip(group, accs, updates): self.out.append(UOp(Ops.ASSIGN, x.dtype, (acc, update)))
    for r in reversed(ranges):
      self.out.append(UOp(Ops.ENDRANGE, dtypes.void, (r,)))
      del self.done[r]
      self.open.discard(r)
    for x, acc in zip(group, accs): self.done[x] = acc
    # values computed inside the loops are out of scope now
    for n in list(self.done):
      if self.deps.get(n, frozenset()) & rset: del self.done[n]

  def copies(self, red: UOp) -> list[UOp]:
    """What red adds into its accumulator an iteration: products one by one (multiply-adds), other copies combined
    pairwise first (the accumulator then waits for one add, not one per copy); new nodes get their loops as others."""
    vs = reduce_parts(red)[0]
    if red.arg is Ops.ADD and any(v.op is Ops.MUL and dtypes.is_float(v.dtype) for v in vs): return list(vs)
    for n in (tree := tree_reduce(red.arg, list(vs))).toposort():
      if n not in self.deps: self.track(n)
    return [tree]

  def accumulate(self, op: Ops, acc: UOp, v: UOp) -> UOp:
    """acc <op> v; a sum of products becomes multiply-accumulates (one fused multiply-add where the device has it)."""
    if op is Ops.ADD and v.op is Ops.MUL and dtypes.is_float(v.dtype):
      update = UOp(Ops.MULACC, v.dtype, (self.emit(v.src[0]), self.emit(v.src[1]), acc))
    else: update = UOp(op, acc.dtype, (acc, self.emit(v)))
    self.out.append(update)
    return update

def linearize(sink: UOp) -> list[UOp]:
  """The flat program for a lowered kernel AST."""; return _Linearizer(sink).run()
