"""The lowering passes (codegen LOWERING) keep the IR within each stage's spec (codegen/spec.py), on a renderer with
vectors (the CPU's C) and on ones without (PYTHON, OpenCL's here); random valid optimizations never change a result
beyond float reassociation (compared with no optimizations, as NOOPT=1 runs it)."""
import random
import numpy as np
import pytest
from fusegrad import Tensor, Device, dtypes
from fusegrad.codegen import Kernel, LOWERING, KernelOptError, Opt
from fusegrad.codegen.heuristic import hand_coded_optimizations
from fusegrad.codegen.lower import merge_axes, simplify_gated_loads
from fusegrad.codegen.fold import fold_reduces
from fusegrad.codegen.spec import check_stage, SpecError
from fusegrad.codegen.vectorize import broadcast
from fusegrad.engine.search import candidate_opts
from fusegrad.renderer import MachineModel
from fusegrad.renderer.cstyle import ClangRenderer
AVX512 = MachineModel(isa="avx512", vector_bytes=64, vector_registers=32)
from fusegrad.uop.ops import UOp, Ops
from test.unit.test_codegen import kernel_of, run_with

RNG = np.random.default_rng(0)
def rand(*shape: int) -> Tensor: return Tensor(RNG.standard_normal(shape).astype(np.float32))

def conv_grads() -> Tensor:
  x, w = rand(2, 3, 9, 9).requires_grad_(), rand(4, 3, 3, 3).requires_grad_()
  x.conv2d(w).relu().sum().backward()
  assert x.grad is not None and w.grad is not None
  return x.grad + w.grad.sum()
KERNELS = {
  "matmul": lambda: rand(16, 24) @ rand(24, 32),
  "conv": lambda: rand(2, 3, 12, 12).conv2d(rand(8, 3, 3, 3)),
  "conv_grads": conv_grads,
  "sum_rows": lambda: rand(8, 64).sum(1),
  "sum_all": lambda: rand(32, 32).sum(),
  "max_rows": lambda: rand(8, 64).max(1),
  "softmax": lambda: rand(4, 32).softmax(-1),
  "pad_elementwise": lambda: (rand(6, 16).pad(((1, 1), (2, 2))) * 2 + 1).relu(),
  "half_cast": lambda: (rand(8, 16).cast(dtypes.half) * 3).cast(dtypes.float32).sum(0),
}

def lowered_stages(ast: UOp, ren) -> list[tuple[str, UOp]]:
  k = Kernel(merge_axes(simplify_gated_loads(fold_reduces(ast))), ren)
  for o in hand_coded_optimizations(k): k.apply_opt(o)
  out, cur = [], k.ast
  for name, lowering_pass in LOWERING:
    cur = lowering_pass(cur, ren)
    out.append((name, cur))
  return out

def upto(stage: str) -> list[str]:
  """The names of the lowering passes up to stage, in order."""
  names = [name for name, _ in LOWERING]
  return names[:names.index(stage) + 1]

RENDERERS = {"C": ClangRenderer(vector_widths=(2, 4, 8, 16), machine=AVX512, upcast_max=128),
             "scalar C": ClangRenderer(), "PYTHON": lambda: Device["PYTHON"].renderer}

@pytest.mark.parametrize("ren_name", RENDERERS)
@pytest.mark.parametrize("name", KERNELS)
def test_every_stage_meets_its_spec(name, ren_name):
  ren = RENDERERS[ren_name]
  ren = ren() if callable(ren) else ren
  for si in KERNELS[name]().schedule():
    if si.ast.op is not Ops.SINK: continue
    for stage, ast in lowered_stages(si.ast, ren): check_stage(upto(stage), ast, ren)

def test_vectors_appear_and_go():
  """A matmul tile on the vector C renderer keeps float16 vectors to the end; without vector widths none are left."""
  si = (rand(64, 32) @ rand(32, 64)).schedule()[-1]  # 131072 multiply-adds: above SMALL_WORK (codegen/heuristic.py)
  vec_ren = RENDERERS["C"]
  assert isinstance(vec_ren, ClangRenderer)
  final = lowered_stages(si.ast, vec_ren)[-1][1]
  assert any(u.dtype.count == 16 and u.op is Ops.LOAD for u in final.toposort())
  final = lowered_stages(si.ast, ClangRenderer())[-1][1]
  assert all(u.dtype.count == 1 for u in final.toposort())

def test_spec_catches_a_bad_vector():
  x = UOp.const(dtypes.float32, 1.0)
  bad = UOp(Ops.VECTORIZE, dtypes.float32.vec(4), (x, x, x))
  buf = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0)
  sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (buf, UOp.const(dtypes.int32, 0), bad)),))
  with pytest.raises(SpecError, match="VECTORIZE"): check_stage(upto("vectorize"), sink, RENDERERS["C"])
  good = sink.replace(src=(sink.src[0].replace(src=(buf, UOp.const(dtypes.int32, 0), broadcast(x, 4))),))
  check_stage(upto("vectorize"), good, RENDERERS["C"])
  with pytest.raises(SpecError, match="vector widths"): check_stage(upto("devectorize"), good, ClangRenderer())

def random_opts(si, rng: random.Random, n: int) -> list[Opt]:
  """Up to n optimizations picked at random among those that apply, as BEAM search would try them."""
  k = Kernel(merge_axes(simplify_gated_loads(fold_reduces(si.ast))), Device[Device.DEFAULT].renderer)
  opts: list[Opt] = []
  for _ in range(n):
    for opt in rng.sample(candidate_opts(k), len(candidate_opts(k))):
      try: k.apply_opt(opt)
      except KernelOptError: continue
      opts.append(opt)
      break
  return opts

@pytest.mark.parametrize("name", KERNELS)
def test_random_opts_match_noopt(name):
  si = kernel_of(KERNELS[name]())
  want, _ = run_with(si, [])
  rng = random.Random(name)
  for _ in range(4):
    opts = random_opts(si, rng, 4)
    got, _ = run_with(si, opts)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"opts {opts}")
