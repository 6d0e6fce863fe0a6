"""One definition per primitive: every Ops member has what its kind needs, so adding an op fails here until each piece
exists. An ALU op needs its Python meaning (uop/alu.py: constant folding and the PYTHON device), a gradient rule
(gradient.py; "not differentiable" is a rule returning None) and a rendering in every C-style renderer (or an entry in
NOT_RENDERED saying why not); a lazy-graph op needs a gradient rule or is a leaf; every other op is a kernel-level op
the lowering and renderers handle (uop/ops.py _KERNEL_OPS)."""
import pytest
from fusegrad import Tensor
from fusegrad.dtype import dtypes, DType
from fusegrad.gradient import grad_rules, _LEAVES as LEAVES
from fusegrad.uop.alu import python_alu
from fusegrad.uop.ops import UOp, Ops, GroupOp, _KERNEL_OPS as KERNEL_OPS
from fusegrad.codegen import get_program
from fusegrad.renderer import MachineModel
from fusegrad.renderer.cstyle import ClangRenderer, OpenCLRenderer, CUDARenderer

RENDERERS = {"C": ClangRenderer(),
             "C vectors": ClangRenderer(vector_widths=(4, 8), machine=MachineModel(vector_bytes=32)),
             "OpenCL": OpenCLRenderer(), "CUDA": CUDARenderer()}
# (renderer, op) pairs a renderer can't write, and why (none today: THREEFRY reaches no renderer here, codegen/lower.py
# decomposes it into integer ops for every renderer without native_threefry)
NOT_RENDERED: dict[tuple[str, Ops], str] = {}
INT_OPS = {Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR}

def test_every_op_has_a_kind():
  """Each op is an ALU op, a lazy-graph op with a gradient rule or a leaf, or a kernel-level op; never two."""
  for op in Ops:
    kinds = [op in GroupOp.ALU, op in grad_rules or op in LEAVES, op in KERNEL_OPS]
    if op in GroupOp.ALU: kinds[1] = False  # ALU ops are in grad_rules too (checked below)
    assert sum(kinds) == 1 or op is Ops.SINK, f"{op}: ALU, graph op or kernel op? {kinds}"

@pytest.mark.parametrize("op", sorted(GroupOp.ALU, key=lambda o: o.name))
def test_alu_op_has_python_semantics_and_gradient(op):
  assert op in python_alu, f"{op} has no Python meaning in uop/alu.py"
  assert op in grad_rules, f"{op} has no gradient rule (or explicit None) in gradient.py"

def _kernel_with(op: Ops) -> UOp:
  """The AST of an elementwise kernel of two or three inputs computing op."""
  dt: DType = dtypes.int32 if op in INT_OPS else dtypes.uint64 if op is Ops.THREEFRY else dtypes.float32
  a, b, c = (Tensor.empty(8, dtype=dt) for _ in range(3))
  ast = ((a + b) * c).schedule()[-1].ast
  add = next(u for u in ast.toposort() if u.op is Ops.ADD and u.dtype == dt)
  x, y = add.src
  if op in GroupOp.Comparison: new = UOp(op, dtypes.bool, (x, y)).cast(dt)
  elif op is Ops.WHERE: new = UOp(op, dt, (UOp(Ops.CMPLT, dtypes.bool, (x, y)), x, y))
  elif op is Ops.MULACC: new = UOp(op, dt, (x, y, x))
  elif op in GroupOp.Unary: new = UOp(op, dt, (x,))
  else: new = UOp(op, dt, (x, y))
  return ast.substitute({add: new})

@pytest.mark.parametrize("ren_name", RENDERERS)
@pytest.mark.parametrize("op", sorted(GroupOp.ALU, key=lambda o: o.name))
def test_alu_op_renders(op, ren_name):
  """Every renderer writes every ALU op (scalar, and as vectors where the renderer has them), or says why not."""
  if (ren_name, op) in NOT_RENDERED: return
  src = get_program(_kernel_with(op), RENDERERS[ren_name]).src
  assert "data0" in src
