"""The CUDA backend.

Without a GPU: every kernel that a representative set of Tensor ops schedules is rendered as CUDA C and compiled for
sm_90 by each CUDA compiler found here (nvcc and/or NVRTC); skipped, with the reason, when there is none.
With a GPU (Device["CUDA"] opens): results against numpy and against the PYTHON reference, copies between CPU and
CUDA, launches over the grid limits, timing. test/cuda_gpu_check.sh runs these and the op suite on a GPU machine.
"""
from __future__ import annotations
import os, shutil, subprocess, sys
from typing import Callable
import numpy as np
import pytest
from fusegrad import Tensor, Device, dtypes
from fusegrad.device import CompileError, Compiler
from fusegrad.codegen import ProgramSpec, get_program, Opt, OptOps
from fusegrad.engine.schedule import create_schedule
from fusegrad.renderer.cstyle import CUDARenderer
from fusegrad.runtime.ops_cuda import NVCCCompiler, NVRTCCompiler, CUDAError, find_nvcc, find_nvrtc

ARCH = "sm_90"

def _compilers() -> list:
  found = []
  if (nvcc := find_nvcc()) is not None: found.append(pytest.param(lambda: NVCCCompiler(ARCH, nvcc), id="nvcc"))
  if (nvrtc := find_nvrtc()) is not None: found.append(pytest.param(lambda: NVRTCCompiler(ARCH, nvrtc), id="nvrtc"))
  no_compiler = pytest.mark.skip(reason="no CUDA compiler here (neither nvcc nor libnvrtc.so)")
  return found or [pytest.param(None, id="none", marks=no_compiler)]

@pytest.fixture(scope="module", params=_compilers())
def compiler(request) -> Compiler: return request.param()

def _rand(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)

def f32(*shape: int, seed: int = 0) -> Tensor: return Tensor(_rand(*shape, seed=seed))

def ints(*shape: int, seed: int = 0, low: int = -50, high: int = 50, dtype=np.int32) -> Tensor:
  return Tensor(np.random.default_rng(seed).integers(low, high, shape).astype(dtype))

def idx(*values: int) -> Tensor: return Tensor(np.array(values, dtype=np.int32))

# each case builds fresh tensors (scheduling marks them as computed) and returns the outputs to schedule
CASES: dict[str, Callable[[], list[Tensor]]] = {
  "float32_math": lambda: [(f32(4, 33) * 1.5 + 2).exp2().log2().sin().sqrt() / f32(4, 33, seed=1)],
  "float32_trunc_recip_max": lambda: [f32(5, 7).trunc().reciprocal().maximum(f32(5, 7, seed=2))],
  "float16": lambda: [(f32(8, 16).half() * f32(8, 16, seed=1).half() + 1).exp().log().maximum(0.5)],
  "float16_reduce": lambda: [f32(6, 32).half().sum(axis=1), f32(6, 32).half().max(axis=0)],
  "bfloat16": lambda: [(f32(8, 16).cast(dtypes.bfloat16) * 3 - 1).sqrt().cast(dtypes.float32)],
  "float64": lambda: [(f32(3, 9).double() * 1e-300).exp().sin().sqrt().trunc() + f32(3, 9).double().log()],
  "bool_logic": lambda: [((f32(6, 6) > 0) & (f32(6, 6, seed=3) < 0.5)).logical_not() | (f32(6, 6) == 1),
                         (f32(6, 6) > 0).where(f32(6, 6), -1.0)],
  "int64": lambda: [(ints(5, 8, dtype=np.int64) * 3_000_000_000 + 7) // ints(5, 8, seed=4, dtype=np.int64)
                    % ints(5, 8, seed=5, dtype=np.int64)],
  "int32_divmod": lambda: [ints(4, 10) // ints(4, 10, seed=1), ints(4, 10) % ints(4, 10, seed=2)],
  "small_ints": lambda: [ints(16, dtype=np.int8) * ints(16, seed=1, dtype=np.int8),
                         ints(16, low=0, high=250, dtype=np.uint8) + 100, ints(16, dtype=np.int16).abs()],
  "bitwise_shifts": lambda: [ints(12, low=0, high=1000).lshift(3).rshift(1) ^ ints(12, seed=1),
                             ints(12, low=0, high=1000, dtype=np.uint32) | 0xF0F0],
  "inf_nan_consts": lambda: [(f32(10) > 0).where(f32(10), float("-inf")),
                             (f32(10) > 0).where(float("nan"), float("inf")),
                             (f32(10).double() > 0).where(f32(10).double(), float("nan")).maximum(float("-inf")),
                             (f32(10).half() > 0).where(float("inf"), float("nan"))],
  "sum_max_mean": lambda: [f32(16, 24).sum(axis=0), f32(16, 24).max(axis=1), f32(4, 5, 6).mean()],
  "argmax_softmax": lambda: [f32(8, 20).argmax(axis=1), f32(8, 20).softmax(-1)],
  "cumsum": lambda: [f32(5, 17).cumsum(axis=1)],
  "matmul": lambda: [f32(32, 24) @ f32(24, 16, seed=1)],
  "matmul_half": lambda: [f32(16, 8).half() @ f32(8, 12, seed=1).half()],
  "movement_pad": lambda: [f32(3, 4, 5).permute(2, 0, 1).pad(((1, 0), (0, 2), (1, 1))).flip(0)[1:, ::2] + 1,
                           f32(4, 4).cat(f32(2, 4), dim=0).T.contiguous()],
  "transpose_big_grid": lambda: [f32(3, 70000).T.contiguous() + 1],  # an axis of 70000 can't be gridDim.y
  "indexing": lambda: [f32(10, 6)[idx(3, 0, 9, 3)], f32(10, 6)[2:8:3, idx(1, 5, 0, 2).reshape(2, 2)]],
  "random": lambda: [Tensor.rand(7, 9), Tensor.randn(33), Tensor.randint(6, low=-3, high=9)],
  "casts": lambda: [(f32(20) * 100).cast(dtypes.int8), ints(20).cast(dtypes.float16),
                    ints(20, dtype=np.int64).cast(dtypes.bfloat16), f32(20).half().cast(dtypes.bfloat16),
                    f32(20).cast(dtypes.bfloat16).cast(dtypes.int32), f32(20).half().cast(dtypes.bool),
                    (f32(20) > 0).cast(dtypes.float16), f32(20).half().cast(dtypes.int64), f32(20).cast(dtypes.uint64)],
  "bitcasts": lambda: [f32(20).bitcast(dtypes.int32) + 1, (f32(20).half() + 1).bitcast(dtypes.int16),
                       ints(20, low=0, high=2 ** 20, dtype=np.uint32).bitcast(dtypes.float32) * 2,
                       (f32(20).double() * 2).bitcast(dtypes.int64)],
}

def _backward() -> list[Tensor]:
  x, w = Tensor(_rand(4, 8), requires_grad=True), Tensor(_rand(8, 6, seed=1), requires_grad=True)
  ((x @ w).relu().softmax(-1) * f32(4, 6, seed=2)).sum().backward()
  h = Tensor(_rand(5, 3), requires_grad=True)
  h.half().exp().max(axis=1).float().sum().backward()
  return [x.grad, w.grad, h.grad]

CASES["backward"] = _backward

def _programs(case: str, opts: list[Opt] | None = None) -> list[ProgramSpec]:
  """The ProgramSpecs (CUDA C) of every kernel the case schedules."""
  schedule = create_schedule([t.uop for t in CASES[case]()]).items
  kernels = [si.ast for si in schedule if si.ast.op.name == "SINK"]
  assert kernels, f"{case}: no kernel was scheduled"
  return [get_program(ast, CUDARenderer(), opts) for ast in kernels]

# *** rendering: needs nothing but Python ***

def test_render_signature_and_launch_indices():
  p = _programs("float32_math", [Opt(OptOps.LOCAL, 0, 4)])[0]
  assert 'extern "C" __global__ void __launch_bounds__(4) ' in p.src
  assert "blockIdx.x" in p.src and "threadIdx.x" in p.src and " __restrict__ " in p.src
  assert p.local_size == (4, 1, 1) and p.global_size[0] * 4 == 4 * 33

def test_render_types_and_headers():
  src = "".join(p.src for p in _programs("float16") + _programs("bfloat16") + _programs("bitcasts"))
  assert "#include <cuda_fp16.h>" in src and "#include <cuda_bf16.h>" in src and "__nv_bfloat16" in src
  assert "fg_bitcast<short, half>" in src and "fg_bitcast<int, float>" in src and "__builtin" not in src
  assert "long long" in "".join(p.src for p in _programs("int64"))
  consts = "".join(p.src for p in _programs("inf_nan_consts"))
  assert "__int_as_float(0x7fc00000)" in consts and "(-__int_as_float(0x7f800000))" in consts
  assert "__longlong_as_double(0x7ff8000000000000ll)" in consts

def test_launch_dims_within_capabilities():
  ren = CUDARenderer()
  for case in CASES:
    for p in _programs(case):
      assert all(g <= m for g, m in zip(p.global_size, ren.global_max)), f"{case}: grid {p.global_size}"
      assert all(s <= m for s, m in zip(p.local_size, ren.local_max)), f"{case}: block {p.local_size}"
      assert np.prod(p.local_size) <= ren.max_workgroup

# *** compiling for sm_90: needs nvcc or NVRTC, no GPU ***

@pytest.mark.parametrize("case", list(CASES))
def test_compile(compiler: Compiler, case: str):
  for p in _programs(case):
    assert compiler.compile(p.src)[:4] == b"\x7fELF", f"{case}: {p.name} did not compile to a cubin"

OPTS = {"noopt": [], "local": [Opt(OptOps.LOCAL, 0, 8)], "local2d": [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.LOCAL, 1, 2)],
        "upcast_local_unroll": [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.UNROLL, 0, 4)]}

@pytest.mark.parametrize("opts", list(OPTS))
def test_compile_with_opts(compiler: Compiler, opts: str):
  schedule = create_schedule([(f32(16, 24) @ f32(24, 32, seed=1)).uop]).items
  p = get_program(schedule[-1].ast, CUDARenderer(), OPTS[opts])
  threads = int(np.prod(p.local_size))
  assert f"__launch_bounds__({threads})" in p.src and (threads == 1 or "threadIdx" in p.src)
  assert "threadIdx.y" in p.src if opts == "local2d" else True
  assert compiler.compile(p.src)[:4] == b"\x7fELF"

def _shared_memory_kernel() -> str:
  """A flat program swapping neighbours through shared memory, as grouped reduces will: data0[i] = data0[i^1]."""
  from fusegrad.uop.ops import UOp, Ops
  glob = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0)
  lidx = UOp(Ops.SPECIAL, dtypes.index, (), ("lidx0", 16))
  temp = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(local=True), (), ("temp0", 16))
  load = UOp(Ops.LOAD, dtypes.float32, (glob, lidx))
  store_local = UOp(Ops.STORE, dtypes.void, (temp, lidx, load))
  barrier = UOp(Ops.BARRIER, dtypes.void, ())  # the base renderer names no STORE: a BARRIER can't list its stores yet
  neighbour = UOp(Ops.XOR, dtypes.index, (lidx, UOp.const(dtypes.index, 1)))
  swapped = UOp(Ops.LOAD, dtypes.float32, (temp, neighbour))
  store = UOp(Ops.STORE, dtypes.void, (glob, lidx, swapped))
  uops = [glob, lidx, temp, load, store_local, barrier, neighbour, swapped, store]
  return CUDARenderer().render("swap_16", uops)

def test_compile_shared_memory_and_barrier(compiler: Compiler):
  src = _shared_memory_kernel()
  assert "__shared__ float temp0[16];" in src and "__syncthreads();" in src and "__launch_bounds__(16)" in src
  assert compiler.compile(src)[:4] == b"\x7fELF"

def test_compile_error_is_clear(compiler: Compiler):
  with pytest.raises(CompileError, match="undefined|identifier") as e:
    compiler.compile('extern "C" __global__ void broken(float* data0) { data0[0] = not_defined; }')
  assert "not_defined" in str(e.value) and "--- source ---" in str(e.value)

def test_cache_key_names_arch_and_version(compiler: Compiler):
  assert compiler.cachekey is not None and ARCH in compiler.cachekey
  assert any(c.isdigit() for c in compiler.cachekey.split(ARCH)[1]), compiler.cachekey

# *** fixes in the shared C renderer and codegen, checked on the default device ***

def _wrap(x: np.ndarray, dtype) -> np.ndarray:
  """float -> int as fusegrad defines it: truncate, then wrap to the type's width."""
  return x.astype(np.int64).astype(dtype)

GPU_CASES: dict[str, tuple[Callable, Callable, float]] = {  # name: (fusegrad fn, numpy fn, atol); 0 means exact
  "math": (lambda a, b: (a * 1.5).exp() + b.abs().sqrt() - a.sin(),
           lambda a, b: np.exp(a * 1.5) + np.sqrt(np.abs(b)) - np.sin(a), 1e-5),
  "half": (lambda a, b: (a.half() * b.half() + 1).float(),
           lambda a, b: (a.astype(np.float16) * b.astype(np.float16) + np.float16(1)).astype(np.float32), 1e-3),
  "double": (lambda a, b: a.double().exp() / b.double(),
             lambda a, b: np.exp(a.astype(np.float64)) / b.astype(np.float64), 1e-12),
  "where_bool": (lambda a, b: ((a > 0) & (b < 0.5)).where(a, b), lambda a, b: np.where((a > 0) & (b < 0.5), a, b), 0),
  "int64": (lambda a, b: (a * 1000).cast(dtypes.int64) * 4_000_000 // 7,
            lambda a, b: (a * 1000).astype(np.int64) * 4_000_000 // 7, 0),
  "sum": (lambda a, b: a.sum(axis=1) + b.max(axis=1), lambda a, b: a.sum(axis=1) + b.max(axis=1), 1e-5),
  "mean_all": (lambda a, b: a.mean(), lambda a, b: a.mean(), 1e-6),
  "matmul": (lambda a, b: a @ b.T, lambda a, b: a @ b.T, 1e-5),
  "movement": (lambda a, b: a.T.pad(((1, 2), (0, 3))).flip(1)[::2] * 2,
               lambda a, b: np.pad(a.T, ((1, 2), (0, 3)))[:, ::-1][::2] * 2, 0),
  "softmax": (lambda a, b: a.softmax(-1), lambda a, b: np.exp(a) / np.exp(a).sum(-1, keepdims=True), 1e-6),
  "bitcast": (lambda a, b: a.bitcast(dtypes.uint32) >> 3, lambda a, b: a.view(np.uint32) >> 3, 0),
  "cast_trunc": (lambda a, b: (a * 50).cast(dtypes.int8), lambda a, b: (a * 50).astype(np.int8), 0),
  # out-of-range float -> int wraps as in PYTHON (through int64); CUDA's cvt alone would saturate
  "cast_wrap": (lambda a, b: (a * 100).cast(dtypes.int8) + (b * 100).cast(dtypes.uint32),
                lambda a, b: _wrap(a * 100, np.int8) + _wrap(b * 100, np.uint32), 0),
  # uint8 + uint8 wraps before the comparison (C computes it in int)
  "narrow_ints": (lambda a, b: ((a * 50).cast(dtypes.uint8) + (b * 50).cast(dtypes.uint8)) < 50,
                  lambda a, b: (_wrap(a * 50, np.uint8) + _wrap(b * 50, np.uint8)) < 50, 0),
}

def check_case(case: str, device: str) -> None:
  fg_fn, np_fn, atol = GPU_CASES[case]
  a, b = _rand(24, 40), _rand(24, 40, seed=1)
  got, want = fg_fn(Tensor(a, device=device), Tensor(b, device=device)).numpy(), np_fn(a, b)
  assert got.shape == want.shape, f"{case}: shape {got.shape} != {want.shape}"
  if atol == 0: np.testing.assert_equal(got, want, err_msg=case)
  else: np.testing.assert_allclose(got, want, atol=atol, rtol=1e-3 if case == "half" else 1e-5, err_msg=case)

def test_gpu_cases_hold_on_default_device():
  """The numpy references of the GPU cases are what fusegrad computes on the default device (so that a failure on
  the GPU is a CUDA bug); this also checks the narrow-int and float->int fixes of the shared C renderer."""
  for case in GPU_CASES: check_case(case, Device.DEFAULT)

def test_compare_after_wrapping_add():
  x = np.array([181, 25, 60, 251, 95], dtype=np.uint8)
  np.testing.assert_equal(((Tensor(x) + 200) < 50).numpy(), (x + np.uint8(200)) < 50)
  y = np.array([100, -100, 3], dtype=np.int8)
  np.testing.assert_equal(((Tensor(y) * 2) < 0).numpy(), (y * np.int8(2)) < 0)

# *** running: needs a GPU ***

CUDA_OK, CUDA_WHY = Device.get_available("CUDA")
needs_gpu = pytest.mark.skipif(not CUDA_OK, reason=f"no CUDA device opens here: {CUDA_WHY}")

@pytest.mark.skipif(CUDA_OK, reason="a CUDA device opens here")
def test_without_gpu_the_device_fails_clearly():
  with pytest.raises((CUDAError, RuntimeError), match="CUDA|libcuda|nvrtc|nvcc"): Device["CUDA"]
  assert Device.DEFAULT != "CUDA"

@needs_gpu
def test_device_basics():
  dev = Device["CUDA"]
  assert dev.is_accelerator and dev.renderer.device == "CUDA" and dev.arch.startswith("sm_")

@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.bool_, np.int8, np.int64, np.uint64])
def test_copy_roundtrip(dtype):
  data = np.random.default_rng(0).integers(-100, 100, (5, 7)).astype(dtype)
  t = Tensor(data, device="PYTHON").to("CUDA")
  assert t.device == "CUDA"
  np.testing.assert_equal(t.numpy(), data)
  np.testing.assert_equal(t.to("PYTHON").numpy(), data)
  np.testing.assert_equal(Tensor(data, device="CUDA").to("CUDA:0").numpy(), data)

@needs_gpu
def test_copy_view_and_empty():
  data = _rand(6, 10)
  np.testing.assert_equal(Tensor(data, device="CUDA")[2:5, 1:7:2].to("PYTHON").numpy(), data[2:5, 1:7:2])
  assert Tensor.zeros(0, 3, device="CUDA").numpy().shape == (0, 3)
  np.testing.assert_equal(Tensor(data, device="CUDA").clone().numpy(), data)

@needs_gpu
@pytest.mark.parametrize("case", list(GPU_CASES))
def test_op_vs_numpy(case: str): check_case(case, "CUDA")

REFERENCE_CASES: dict[str, Callable] = {
  # (|a*b| + 1: a*b near -1 would cancel, and one ulp of the product would be most of the result)
  "bfloat16": lambda a, b: ((a.cast(dtypes.bfloat16) * b.cast(dtypes.bfloat16)).abs() + 1).sqrt().float(),
  "half_math": lambda a, b: (a.half().exp() * b.half().sin()).float(),
  "double_log": lambda a, b: a.double().log().float(),
  "bitcast_xor": lambda a, b: (a.bitcast(dtypes.int32) ^ b.bitcast(dtypes.int32)).cast(dtypes.int16),
}

@needs_gpu
@pytest.mark.parametrize("case", list(REFERENCE_CASES))
def test_vs_python_reference(case: str):
  fn = REFERENCE_CASES[case]
  a, b = _rand(16, 20), _rand(16, 20, seed=1)
  got = fn(Tensor(a, device="CUDA"), Tensor(b, device="CUDA")).numpy()
  want = fn(Tensor(a, device="PYTHON"), Tensor(b, device="PYTHON")).numpy()
  # bfloat16: native bf16 arithmetic (fused multiply-adds) may differ from per-op rounding by an ulp or two
  rtol = 2 ** -6 if case == "bfloat16" else 2e-3
  np.testing.assert_allclose(got, want, atol=2e-3 if got.dtype == np.float32 else 0, rtol=rtol, equal_nan=True)

@needs_gpu
def test_random_matches_reference():
  Tensor.manual_seed(5)
  gpu = Tensor.rand(500, device="CUDA").numpy()
  Tensor.manual_seed(5)
  np.testing.assert_equal(gpu, Tensor.rand(500, device="PYTHON").numpy())

@needs_gpu
def test_big_grid_and_timing():
  from fusegrad.engine.realize import lower_schedule_item
  x = _rand(3, 70000)
  np.testing.assert_equal((Tensor(x, device="CUDA").T + 1).contiguous().numpy(), x.T + 1)
  schedule = create_schedule([(Tensor(_rand(256, 256), device="CUDA") * 2).uop]).items
  t = lower_schedule_item(schedule[-1]).run(wait=True)
  assert t is not None and 0 < t < 1

# *** the driver calls, against a fake libcuda.so.1 (host memory, launches recorded): runs without a GPU ***

FAKE_LIBCUDA = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef unsigned long long u64;
static char names[8][64];
static int nerr = 0;
static unsigned last_launch[6];
static u64 last_arg0;
int launches = 0;
int cuInit(unsigned flags) { return getenv("FAKE_CUDA_INIT_ERROR") ? atoi(getenv("FAKE_CUDA_INIT_ERROR")) : 0; }
int cuGetErrorName(int err, const char **out) {
  snprintf(names[nerr % 8], 64, "CUDA_ERROR_FAKE_%d", err);
  *out = names[nerr++ % 8];
  return 0;
}
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = (void *)0x1234; return 0; }
int cuCtxSetCurrent(void *ctx) { return ctx == (void *)0x1234 ? 0 : 201; }
int cuCtxSynchronize(void) { return 0; }
int cuDeviceGetAttribute(int *v, int attr, int dev) {  /* compute capability 9.0, 48 KB shared, warps of 32, 50 MB L2 */
  *v = attr == 75 ? 9 : attr == 8 ? 49152 : attr == 10 ? 32 : attr == 38 ? 50 << 20 : 0;
  return attr == 75 || attr == 76 || attr == 8 || attr == 10 || attr == 38 ? 0 : 1;
}
int cuMemAlloc_v2(u64 *ptr, size_t n) { *ptr = (u64)calloc(n, 1); return *ptr ? 0 : 2; }
int cuMemFree_v2(u64 ptr) { free((void *)ptr); return 0; }
int cuMemcpyHtoD_v2(u64 dst, const void *src, size_t n) { memcpy((void *)dst, src, n); return 0; }
int cuMemcpyDtoH_v2(void *dst, u64 src, size_t n) { memcpy(dst, (void *)src, n); return 0; }
int cuModuleLoadData(void **mod, const void *image) {
  *mod = (void *)image;
  return memcmp(image, "\x7f" "ELF", 4) ? 200 : 0;
}
int cuModuleGetFunction(void **fn, void *mod, const char *name) { *fn = (void *)0x42; return strlen(name) ? 0 : 500; }
int cuModuleUnload(void *mod) { return 0; }
int cuEventCreate(void **ev, unsigned flags) { *ev = malloc(1); return 0; }
int cuEventRecord(void *ev, void *stream) { return 0; }
int cuEventSynchronize(void *ev) { return 0; }
int cuEventElapsedTime(float *ms, void *a, void *b) { *ms = 0.5f; return 0; }
int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned smem, void *stream, void **params, void **extra) {
  unsigned dims[6] = {gx, gy, gz, bx, by, bz};
  if (fn != (void *)0x42 || params == 0 || extra != 0 || bx * by * bz > 1024 || gy > 65535 || gz > 65535) return 1;
  memcpy(last_launch, dims, sizeof(dims));
  last_arg0 = *(u64 *)params[0];
  launches++;
  return 0;
}
void fake_last_launch(unsigned *dims, u64 *arg0) { memcpy(dims, last_launch, sizeof(last_launch)); *arg0 = last_arg0; }
"""

FAKE_SCRIPT = r"""
import ctypes, numpy as np
from fusegrad import Tensor, Device, dtypes
from fusegrad.engine.schedule import create_schedule
from fusegrad.engine.realize import lower_schedule_item
dev = Device["CUDA"]
assert Device.DEFAULT == "CUDA" and dev.arch == "sm_90" and dev.is_accelerator
m = dev.renderer.machine  # the machine model comes from the device's attributes
assert (m.l2, m.warp_size, m.local_memory, dev.renderer.shared_max) == (50 << 20, 32, 49152, 49152), m
x = np.arange(24, dtype=np.float32).reshape(4, 6)
for dt in (np.float32, np.float16, np.int64, np.bool_, np.uint8):
  np.testing.assert_equal(Tensor(x.astype(dt), device="CUDA").numpy(), x.astype(dt))  # copyin, copyout
np.testing.assert_equal(Tensor(x, device="PYTHON").to("CUDA").to("PYTHON").numpy(), x)  # copies between devices
out = Tensor(x, device="CUDA") * 2
(si,) = create_schedule([out.uop]).items
ei = lower_schedule_item(si)
assert ei.run(wait=True) == 0.0005  # events time the launch
lib = ctypes.CDLL("libcuda.so.1")
dims, arg0 = (ctypes.c_uint * 6)(), ctypes.c_uint64()
lib.fake_last_launch(dims, ctypes.byref(arg0))
assert tuple(dims) == ei.runner.p.global_size + ei.runner.p.local_size, (tuple(dims), ei.runner.p)
assert arg0.value == si.bufs[0]._buf and ctypes.c_int.in_dll(lib, "launches").value == 1
print("fake driver ok")
"""

def _fake_libcuda(tmp_path, compiler_needed: bool = True) -> str:
  cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
  if cc is None: pytest.skip("no C compiler to build the fake libcuda.so.1")
  if compiler_needed and find_nvcc() is None and find_nvrtc() is None: pytest.skip("no CUDA compiler here")
  (tmp_path / "fake_cuda.c").write_text(FAKE_LIBCUDA)
  lib, c_file = str(tmp_path / "libcuda.so.1"), str(tmp_path / "fake_cuda.c")
  subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", lib, c_file], check=True)
  return str(tmp_path)

def _run_with_fake(libdir: str, script: str, **env: str):
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  full_env = {**os.environ, "LD_LIBRARY_PATH": libdir, "PYTHONPATH": root, "DISABLE_COMPILER_CACHE": "1", **env}
  full_env.pop("DEV", None)
  return subprocess.run([sys.executable, "-c", script], env=full_env, capture_output=True, text=True, timeout=300)

@pytest.mark.skipif(CUDA_OK, reason="a real CUDA device opens here")
def test_fake_driver_copies_and_launch(tmp_path):
  proc = _run_with_fake(_fake_libcuda(tmp_path), FAKE_SCRIPT)
  assert proc.returncode == 0 and "fake driver ok" in proc.stdout, proc.stdout + proc.stderr

@pytest.mark.skipif(CUDA_OK, reason="a real CUDA device opens here")
def test_fake_driver_init_error_is_clear(tmp_path):
  script = "from fusegrad import Device\nprint(Device.get_available('CUDA'))\nprint(Device.DEFAULT)"
  proc = _run_with_fake(_fake_libcuda(tmp_path, compiler_needed=False), script, FAKE_CUDA_INIT_ERROR="100", DEBUG="1")
  assert proc.returncode == 0, proc.stderr
  assert "cuInit failed: CUDA_ERROR_FAKE_100 (100)" in proc.stdout and "device CUDA skipped" in proc.stdout
  assert proc.stdout.strip().splitlines()[-1] in ("CPU", "PYTHON")
