"""Helpers for the unit tests of the IR: loop variables, and an evaluator that does not use the simplifier."""
from __future__ import annotations
import itertools
from typing import Iterator
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops, AxisType
from fusegrad.uop.alu import exec_alu

def rng(i: int, n: int, kind: AxisType = AxisType.LOOP) -> UOp:
  """A loop variable r<i> running over 0..n-1."""
  return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n),), (i, kind))

def evaluate(u: UOp, env: dict[UOp, int]) -> object:
  """The value of an integer/bool expression, computed with the ALU reference (uop/alu.py) and nothing else."""
  memo: dict[UOp, object] = {}
  for n in u.toposort():
    if n in env: memo[n] = env[n]
    elif n.op is Ops.CONST: memo[n] = n.arg
    elif n.op is Ops.BIND: memo[n] = n.src[1].arg
    elif n.op is Ops.CAST: memo[n] = dtypes.as_const(memo[n.src[0]], n.dtype)
    else: memo[n] = exec_alu(n.op, n.dtype, [memo[s] for s in n.src])
  return memo[u]

def assignments(leaves: list[UOp]) -> Iterator[dict[UOp, int]]:
  """Every combination of values of the given RANGEs and Variables."""
  spans = [range(leaf.src[0].arg) if leaf.op is Ops.RANGE else range(leaf.arg[1], leaf.arg[2] + 1) for leaf in leaves]
  for vals in itertools.product(*spans): yield dict(zip(leaves, vals))

def leaves_of(*us: UOp) -> list[UOp]:
  found = {n: None for u in us for n in u.toposort() if n.op in (Ops.RANGE, Ops.DEFINE_VAR)}
  return sorted(found, key=lambda n: (n.op.value, repr(n.arg)))
