"""What the kernel AST may hold after each lowering pass (codegen/__init__.py LOWERING), checked after every pass
when SPEC=1 (and by test/unit/test_codegen_spec.py).

Every stage: a SINK of STOREs (buffer, index, value[, gate]); LOADs are (buffer, index[, gates...]); indices are
scalar integers; a vector value (dtype.count > 1) is built from ops whose sources have the same length, VECTORIZE
(one scalar per lane) or a LOAD; GEP takes lane `arg` of a vector. Each pass then removes something for good:"""
from __future__ import annotations
from fusegrad.dtype import dtypes
from fusegrad.renderer import Renderer
from fusegrad.uop.ops import UOp, Ops, GroupOp, AxisType
from typing import Sequence

class SpecError(Exception):
  """A lowering stage produced an AST its spec forbids."""

def _check_node(u: UOp) -> None:
  n = u.dtype.count
  if u.op in (Ops.LOAD, Ops.STORE) and (u.src[1].dtype.count != 1 or not dtypes.is_int(u.src[1].dtype)):
    raise SpecError(f"{u.op} with index of {u.src[1].dtype}: indices are scalar integers")
  if u.op is Ops.STORE and u.src[3:] and u.src[3].dtype != dtypes.bool: raise SpecError("STORE gate is not a bool")
  if u.op is Ops.VECTORIZE and (len(u.src) != n or any(s.dtype != u.dtype.scalar() for s in u.src)):
    raise SpecError(f"VECTORIZE of {u.dtype} from {[s.dtype for s in u.src]}")
  if u.op is Ops.GEP and not (n == 1 and 0 <= u.arg < u.src[0].dtype.count):
    raise SpecError(f"GEP {u.arg} of {u.src[0].dtype}")
  if (u.op in GroupOp.ALU and u.op not in GroupOp.Comparison and u.op is not Ops.WHERE) or u.op is Ops.REDUCE:
    vals = [s for s in u.src if s.op is not Ops.RANGE]
    if any(s.dtype.count != n for s in vals): raise SpecError(f"{u.op} of {u.dtype} from {[s.dtype for s in vals]}")

def check_stage(done: Sequence[str], ast: UOp, ren: Renderer) -> None:
  """Raise SpecError if `ast`, the output of the lowering passes named in `done` (in order: the last one made it),
  breaks the spec of that stage."""
  stage = done[-1]
  if ast.op is not Ops.SINK or any(s.op is not Ops.STORE for s in ast.src):
    raise SpecError(f"after {stage}: not a SINK of STOREs")
  gone = {AxisType.UPCAST, AxisType.UNROLL, AxisType.LANES} if "expand" in done else set()  # range roles left behind
  if "launch_dims" in done and ren.global_max is not None: gone |= {AxisType.GLOBAL, AxisType.LOCAL}
  for u in ast.toposort():
    _check_node(u)
    if u.op is Ops.RANGE and u.arg[1] in gone: raise SpecError(f"after {stage}: a {u.arg[1]} range is left")
    if "devectorize" in done and u.dtype.count > 1 and u.dtype.count not in ren.vector_widths:
      raise SpecError(f"after {stage}: {u.dtype} on a renderer with vector widths {ren.vector_widths}")
    if "cleanup" in done and u.dtype == dtypes.index: raise SpecError(f"after {stage}: an untyped index is left")
    if "threefry" in done and not ren.native_threefry and u.op is Ops.THREEFRY:
      raise SpecError(f"after {stage}: THREEFRY is left")
