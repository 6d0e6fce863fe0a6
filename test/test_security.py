"""Untrusted input never becomes code: Variable names, dtype names and the compile cache (issue 8, sections 1-2)."""
import pathlib
import numpy as np
import pytest
from fusegrad import Tensor, Variable, Device
from fusegrad.codegen import get_program
from fusegrad.dtype import DType, dtypes
from fusegrad.uop.ops import UOp, Ops
from fusegrad.renderer.cstyle import ClangRenderer, OpenCLRenderer, CUDARenderer

ROOT = pathlib.Path(__file__).resolve().parents[1]
INJECTION = 'a\n#define a ({ extern int system(const char*); system("touch /tmp/x"); 3; })\n'

# *** 1. no code injection ***
@pytest.mark.parametrize("name", [INJECTION, "a b", "1a", "", "a;", "a-b", "é", "_valid0", "_x", "ridx0", "gidx1",
                                  "lidx0", "data0", "val3", "alu0", "acc1", "cast0", "var0", 3, None])
def test_bad_variable_names_are_refused(name):
  with pytest.raises(ValueError, match="Variable name"): Variable(name, 1, 10)

@pytest.mark.parametrize("name", ["i", "n", "batch_size", "ridx", "data", "idx0", "I", "x1"])
def test_good_variable_names(name):
  assert Variable(name, 1, 10).arg == (name, 1, 10)

def test_variable_bounds_must_be_ints():
  with pytest.raises(ValueError, match="must be ints"): Variable("i", 1, "10")

def _kernel_with_variable(name: str = "n") -> UOp:
  """The AST of `arange(8) + v` with a DEFINE_VAR named `name`, made without Variable()'s checks (as an attacker
  building UOps by hand would)."""
  v = Variable("n", 1, 10)
  ast = (Tensor.arange(8) + v.bind(3)).schedule()[-1].ast
  return ast.substitute({v: UOp(Ops.DEFINE_VAR, v.dtype, (), (name, 1, 10))}) if name != "n" else ast

@pytest.mark.parametrize("ren", [ClangRenderer(), OpenCLRenderer(), CUDARenderer()], ids=["C", "CL", "CUDA"])
def test_variable_names_never_reach_the_source(ren):
  src = get_program(_kernel_with_variable(INJECTION), ren).src
  assert "system" not in src and "#define" not in src
  src = get_program(_kernel_with_variable("ridx0"), ren).src
  assert "const int ridx0" not in src and "int var0" in src

def test_clashing_name_gives_the_right_result():
  # a variable named like a loop counter used to be the loop counter in C: its value was ignored
  if Device.DEFAULT == "PYTHON": pytest.skip("needs a compiled backend")
  from fusegrad.engine.realize import CompiledRunner
  ast = _kernel_with_variable("ridx0")
  p = get_program(ast, Device[Device.DEFAULT].renderer)
  out = np.zeros(8, np.int32)
  from fusegrad.device import Buffer
  buf = Buffer(Device.DEFAULT, 8, dtypes.int32).allocate()
  CompiledRunner(p)([buf], {p.vars[0]: 3})
  buf.copyout(memoryview(out))
  np.testing.assert_equal(out, np.arange(8) + 3)

@pytest.mark.parametrize("ren", [ClangRenderer(), OpenCLRenderer(), CUDARenderer()], ids=["C", "CL", "CUDA"])
def test_unknown_dtype_names_never_reach_the_source(ren):
  evil = DType(5, 4, 'int; system("touch /tmp/x");', "i")
  with pytest.raises(ValueError, match="unknown dtype"): ren.render_dtype(evil)
  with pytest.raises(ValueError, match="unknown dtype"): ren.render_dtype(evil.ptr())
  assert ren.render_dtype(dtypes.int32) in ("int",)

def test_kernel_names_are_identifiers():
  from fusegrad.helpers import to_function_name
  assert to_function_name('E_4\x1b[31m"; system(x);') .isidentifier()
