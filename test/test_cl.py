"""The CL (OpenCL) backend: runtime, compiler, renderer dialect and device selection.
Every test skips, with the reason, where no OpenCL device exists."""
import hashlib, os, subprocess, sys
from types import SimpleNamespace
import numpy as np
import pytest
from fusegrad import Tensor, Device, dtypes
from fusegrad.device import Buffer, CompileError
from fusegrad.helpers import DISABLE_COMPILER_CACHE, diskcache_get
from fusegrad.codegen import get_program, Opt, OptOps
from fusegrad.engine.runner import CompiledRunner
from fusegrad.engine.realize import ExecItem
from fusegrad.engine.state import STATE
from fusegrad.uop.ops import UOp, Ops

CL_OK, CL_WHY = Device.get_available("CL")
pytestmark = pytest.mark.skipif(not CL_OK, reason=f"no OpenCL device: {CL_WHY}")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def kernel_items(t: Tensor) -> list:
  """The kernels (not copies) that realizing t would run. Tensor.schedule marks t's graph as computed, so the caller
  runs the items itself or never reads t (nor the same expression built again) afterwards."""
  return [si for si in t.schedule() if si.ast.op is Ops.SINK]

def buffer_values(buf: Buffer) -> np.ndarray: return np.frombuffer(buf.as_bytes(), dtype=np.dtype(buf.dtype.fmt))

# *** runtime: compile, launch, time, copy, free ***

def test_build_error_shows_log():
  src = "__kernel void broken(__global float* a) { a[0] = not_declared_anywhere; }"
  with pytest.raises(CompileError) as e: Device["CL"].compiler.compile(src)
  msg = str(e.value)
  assert "not_declared_anywhere" in msg.split("--- source ---")[0], "the build log should name the bad identifier"
  assert "error" in msg.lower() and src in msg

SCALE_SRC = """__kernel void scale(__global float* restrict out, __global const float* restrict inp, const int n) {
  int i = get_group_id(0) * get_local_size(0) + get_local_id(0);
  if (i < n) out[i] = inp[i] * 2.0f + (float)get_group_id(0);
}
"""

def test_handwritten_kernel_workgroups_and_profiling():
  dev = Device["CL"]
  prg = dev.runtime("scale", dev.compiler.compile_cached(SCALE_SRC))
  inp = np.arange(32, dtype=np.float32)
  a = Buffer("CL", 32, dtypes.float32).copyin(np.full(32, -1, np.float32).data)
  b = Buffer("CL", 32, dtypes.float32).copyin(inp.data)
  # global_size counts workgroups: 4 groups of 8 threads cover 32 elements, n=30 leaves the last two untouched
  et = prg(a._buf, b._buf, global_size=(4, 1, 1), local_size=(8, 1, 1), vals=(30,), wait=True)
  want = np.where(np.arange(32) < 30, inp * 2 + np.arange(32) // 8, -1).astype(np.float32)
  np.testing.assert_equal(buffer_values(a), want)
  assert isinstance(et, float) and 0 < et < 10, f"profiling time {et}"
  assert prg(a._buf, b._buf, global_size=(4, 1, 1), local_size=(8, 1, 1), vals=(30,), wait=False) is None

def test_launch_error_is_clear():
  dev = Device["CL"]
  prg = dev.runtime("scale", dev.compiler.compile_cached(SCALE_SRC))
  a = Buffer("CL", 4, dtypes.float32).allocate()
  too_big = dev.renderer.max_workgroup * 2
  with pytest.raises(RuntimeError, match="launch of scale"):
    prg(a._buf, a._buf, global_size=(1, 1, 1), local_size=(too_big, 1, 1), vals=(4,))

def test_compiler_cache_key_has_device_and_driver():
  from fusegrad.runtime.ops_cl import CLCompiler
  dev = Device["CL"]
  pairs = [("a", "1"), ("a", "2"), ("b", "1")]
  fake_devices = [SimpleNamespace(name=n, driver_version=d, version="OpenCL 3.0") for n, d in pairs]
  keys = {CLCompiler(fake).cachekey for fake in fake_devices}
  assert len(keys) == 3
  # what the disk cache keeps is the program binary, which loads without the source
  lib = dev.compiler.compile_cached(SCALE_SRC)
  key = hashlib.sha256(SCALE_SRC.encode()).hexdigest()
  if not DISABLE_COMPILER_CACHE: assert diskcache_get(dev.compiler.cachekey, key) == lib
  assert dev.runtime("scale", lib).kernel

def test_copies_between_cl_and_cpu():
  x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
  cl = Tensor(x, device="CPU").to("CL")
  assert cl.device == "CL"
  back = (cl * 2 + 1).to("CPU")
  assert back.device == "CPU"
  np.testing.assert_allclose(back.numpy(), x * 2 + 1, rtol=1e-6)
  np.testing.assert_allclose((Tensor(x, device="CL").to("CPU").exp() + cl.to("CPU")).numpy(), np.exp(x) + x, rtol=1e-5)

def test_gradient_through_copies():
  x = Tensor([1.0, -2.0, 3.0], device="CPU", requires_grad=True)
  y = (x.to("CL") * x.to("CL")).sum()
  y.backward()
  assert x.grad is not None and x.grad.device == "CPU"
  np.testing.assert_allclose(x.grad.numpy(), [2.0, -4.0, 6.0])

def test_buffers_freed_and_views():
  dev = Device["CL"]
  b = Buffer("CL", 64, dtypes.float32).copyin(np.arange(64, dtype=np.float32).data)
  handle = b._buf
  align = dev.base_align
  if align % 4 == 0 and align <= 128:
    view = b.view(8, dtypes.float32, align).allocate()
    np.testing.assert_equal(buffer_values(view), np.arange(align // 4, align // 4 + 8, dtype=np.float32))
    del view
  if align > 4:
    with pytest.raises(NotImplementedError, match="multiple of"): b.view(1, dtypes.float32, 4).allocate()
  del b
  assert handle.mem == 0, "the cl_mem should be released when its Buffer goes away"

# *** dtypes: bool buffers are uchar, long is int64, half is cl_khr_fp16's or a storage-only format ***

def test_bool_buffers():
  a, b = Tensor([True, False, True, False], device="CL"), Tensor([1.0, 2.0, 3.0, 4.0], device="CL")
  (si,) = kernel_items((b > 2.5) & a)  # inspection only
  src = get_program(si.ast, Device["CL"].renderer).src
  assert "__global uchar*" in src and "bool*" not in src
  np.testing.assert_equal(((b > 1.5) & a).numpy(), [False, False, True, False])
  np.testing.assert_equal(a.where(b, -b).numpy(), [1, -2, 3, -4])
  np.testing.assert_equal(a.logical_not().numpy(), [False, True, False, True])

def test_int64_buffers():
  vals = np.array([2 ** 40, -(2 ** 40) + 3, 5, -7], dtype=np.int64)
  t = Tensor(vals, device="CL")
  assert t.dtype == dtypes.int64
  np.testing.assert_equal((t * 3 + 7).numpy(), vals * 3 + 7)
  np.testing.assert_equal(t.max().numpy(), vals.max())
  lowest = Tensor.full((2,), -2 ** 63, dtype=dtypes.int64, device="CL").contiguous()
  np.testing.assert_equal(lowest.numpy(), [-2 ** 63] * 2)
  np.testing.assert_equal((Tensor([3, 4], dtype=dtypes.uint64, device="CL") + 2 ** 63).numpy(),
                          np.array([2 ** 63 + 3, 2 ** 63 + 4], dtype=np.uint64))

HALF_MODES = [False] + ([True] if CL_OK and Device["CL"].renderer.supports_float16 else [])

@pytest.fixture(params=HALF_MODES, ids=lambda native: "cl_khr_fp16" if native else "storage-only half")
def half_mode(request, monkeypatch):
  """Run a test with half as the device's own type (cl_khr_fp16, where it has it) and as a storage-only format."""
  import dataclasses
  dev = Device["CL"]
  monkeypatch.setattr(dev, "renderer", dataclasses.replace(dev.renderer, supports_float16=request.param))
  monkeypatch.setattr(STATE, "programs", type(STATE.programs)())  # kernels compiled for the other mode: not reused
  return request.param

@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # numpy's, for 65504 * 2
def test_half_buffers(half_mode):
  h = np.array([1.5, -2.0, 0.25, 65504], dtype=np.float16)
  t = Tensor(h, device="CL")
  np.testing.assert_equal(t.numpy(), h)  # copies need no fp16 arithmetic
  np.testing.assert_equal(t.to("CPU").numpy(), h)
  (si,) = kernel_items(t * 3)  # inspection only
  src = get_program(si.ast, Device["CL"].renderer).src
  assert ("cl_khr_fp16" in src) == half_mode and ("vstore_half_rte" in src) != half_mode
  np.testing.assert_equal((t * 2).numpy(), h * 2)  # 65504 * 2 overflows to inf
  np.testing.assert_allclose(t.float().exp().half().numpy().astype(np.float32), np.exp(h.astype(np.float32)), rtol=1e-3)

@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # numpy's, for the inf cases
def test_half_rounds_like_half(half_mode):
  """Every half result rounds to half, as numpy's float16 does, whether or not the device computes in half."""
  a = np.array([2048, 1, 0.1, -3.3, 1e-7, 60000], dtype=np.float16)
  b = np.array([1, 2 ** -11, 0.2, 7.7, 1e-7, 60000], dtype=np.float16)
  ta, tb = Tensor(a, device="CL"), Tensor(b, device="CL")
  np.testing.assert_equal((ta + tb).numpy(), a + b)  # 2048+1 and 1+2^-11 round to even, 60000+60000 is inf
  np.testing.assert_equal((ta * tb).numpy(), a * b)
  np.testing.assert_equal((ta / tb).numpy(), a / b)
  np.testing.assert_equal((ta * 0.1).numpy(), a * np.float16(0.1))  # the constant is a half too
  np.testing.assert_equal(ta.maximum(tb).numpy(), np.maximum(a, b))
  np.testing.assert_equal((ta < tb).where(ta, -tb).numpy(), np.where(a < b, a, -b))
  f = np.array([1.00048828125, 70000.0, -1e-8, 65519.0, 65520.0, 3.14159], dtype=np.float32)
  np.testing.assert_equal(Tensor(f, device="CL").half().numpy(), f.astype(np.float16))
  np.testing.assert_equal(Tensor([7, -40000, 70000, 2049], device="CL").half().numpy(),
                          np.array([7, -40000, 70000, 2049]).astype(np.float16))
  np.testing.assert_equal(ta.int().numpy(), a[:-1].astype(np.int32).tolist() + [60000])
  np.testing.assert_equal(ta.bitcast(dtypes.int16).numpy(), a.view(np.int16))
  np.testing.assert_equal(Tensor(a.view(np.uint16), device="CL").bitcast(dtypes.half).numpy(), a)
  m = np.random.default_rng(0).standard_normal((16, 24)).astype(np.float16)
  tm = Tensor(m, device="CL")
  np.testing.assert_allclose(tm.sum(axis=1).numpy().astype(np.float32), m.astype(np.float32).sum(axis=1), atol=2e-2)
  np.testing.assert_allclose((tm @ tm.T).numpy().astype(np.float32), m.astype(np.float32) @ m.T.astype(np.float32),
                             rtol=1e-2, atol=5e-2)

def test_special_values_and_math():
  x = Tensor([1.5, -2.25, 0.0, 3.0], device="CL")
  np.testing.assert_equal((x / 0).numpy(), [np.inf, -np.inf, np.nan, np.inf])
  np.testing.assert_equal(Tensor.full((2,), float("-inf"), device="CL").contiguous().numpy(), [-np.inf, -np.inf])
  want = np.array([1.5, -2.25, 0.0, 3.0], dtype=np.float32)
  np.testing.assert_allclose(x.exp().numpy(), np.exp(want), rtol=1e-6)
  np.testing.assert_allclose(x.sin().numpy(), np.sin(want), rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(x.abs().sqrt().numpy(), np.sqrt(np.abs(want)), rtol=1e-6)
  np.testing.assert_equal(x.bitcast(dtypes.uint32).numpy(), want.view(np.uint32))
  if Device["CL"].renderer.supports_float64:
    third = Tensor([1.0, 2.0], dtype=dtypes.float64, device="CL") / 3
    np.testing.assert_allclose(third.numpy(), np.array([1.0, 2.0]) / 3, rtol=1e-15)

# *** workgroups ***

def test_local_opt_runs_correctly():
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((8, 12)).astype(np.float32), rng.standard_normal((12, 8)).astype(np.float32)
  out = Tensor(a, device="CL") * Tensor(b, device="CL").T + 1  # the transpose keeps two axes
  (si,) = kernel_items(out)
  p = get_program(si.ast, Device["CL"].renderer, opts=[Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 1, 4)])
  assert p.local_size == (4, 2, 1) and p.global_size == (3, 4, 1), (p.global_size, p.local_size)
  assert "get_local_id(1)" in p.src and "get_group_id(1)" in p.src
  et = ExecItem(CompiledRunner(p), list(si.bufs)).run(wait=True)
  assert et is not None and et > 0
  np.testing.assert_allclose(buffer_values(si.bufs[0]).reshape(8, 12), a * b.T + 1, rtol=1e-6)

def test_heuristic_uses_workgroups():
  x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
  (si,) = kernel_items(Tensor(x, device="CL") * 2)  # inspection only
  p = get_program(si.ast, Device["CL"].renderer)
  assert p.local_size is not None and p.local_size[0] > 1
  np.testing.assert_equal((Tensor(x, device="CL") * 3).numpy(), x * 3)

def test_local_memory_and_barrier_render_and_run():
  """DEFINE_LOCAL and BARRIER already render as __local arrays and barrier(): one workgroup reverses 16 values."""
  def index(v: int) -> UOp: return UOp.const(dtypes.index, v)
  out, inp = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0), UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 1)
  lid = UOp(Ops.SPECIAL, dtypes.index, (), ("lidx0", 16))
  tmp = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(local=True), (), ("temp0", 16))
  to_local = UOp(Ops.STORE, dtypes.void, (tmp, lid, UOp(Ops.LOAD, dtypes.float32, (inp, lid))))
  neg = UOp(Ops.MUL, dtypes.index, (lid, index(-1)))
  rev = UOp(Ops.ADD, dtypes.index, (index(15), neg))
  from_local = UOp(Ops.LOAD, dtypes.float32, (tmp, rev))
  uops = [out, inp, lid, tmp, to_local.src[2], to_local, UOp(Ops.BARRIER), neg, rev, from_local,
          UOp(Ops.STORE, dtypes.void, (out, lid, from_local))]
  dev = Device["CL"]
  src = dev.renderer.render("reverse16", uops)
  assert "__local float temp0[16];" in src and "barrier(CLK_LOCAL_MEM_FENCE);" in src
  prg = dev.runtime("reverse16", dev.compiler.compile(src))
  a = Buffer("CL", 16, dtypes.float32).allocate()
  b = Buffer("CL", 16, dtypes.float32).copyin(np.arange(16, dtype=np.float32).data)
  prg(a._buf, b._buf, global_size=(1, 1, 1), local_size=(16, 1, 1))
  np.testing.assert_equal(buffer_values(a), np.arange(15, -1, -1, dtype=np.float32))

# *** device selection ***

def _default_device(env: dict[str, str]) -> str:
  env = {k: v for k, v in os.environ.items() if k != "DEV"} | env | {"PYTHONPATH": REPO}
  code = "from fusegrad import Device; print(Device.DEFAULT)"
  proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=120)
  return proc.stdout.strip()

def test_dev_cl_selects_cl():
  assert _default_device({"DEV": "CL"}) == "CL"

def test_default_is_not_a_cpu_opencl():
  if Device["CL"].is_accelerator: pytest.skip("this OpenCL device is a GPU, which may be the default")
  assert _default_device({}) != "CL"

def test_capabilities():
  from fusegrad.runtime.ops_cl import CL_DEVICE_TYPE_GPU
  dev, ren = Device["CL"], Device["CL"].renderer
  assert dev.is_accelerator == bool(dev.device_type & CL_DEVICE_TYPE_GPU)
  assert ren.has_local and ren.has_shared and not ren.supports_bfloat16
  assert ren.max_workgroup >= 1 and ren.local_max is not None and len(ren.local_max) == 3

def test_missing_device_number_is_clear():
  ok, why = Device.get_available("CL:99")
  assert not ok and "CL:99" in why

def test_large_sum_uses_grouped_reduction():
  """A big reduce into one value is split across a workgroup: partial sums in __local memory, a barrier, a final sum."""
  from fusegrad.engine.schedule import create_schedule
  from fusegrad.codegen import get_program, OptOps
  data = np.random.default_rng(0).random(1 << 16, dtype=np.float32)
  x = Tensor(data, device="CL").realize()
  si = create_schedule([x.sum().uop]).items[-1]
  prg = get_program(si.ast, Device["CL"].renderer)
  assert any(o.op is OptOps.GROUP for o in prg.applied_opts), prg.applied_opts
  assert "__local" in prg.src and "barrier(CLK_LOCAL_MEM_FENCE)" in prg.src
  np.testing.assert_allclose(x.sum().numpy(), data.astype(np.float64).sum(), rtol=1e-5)
  np.testing.assert_allclose(x.reshape(16, -1).max(1).numpy(), data.reshape(16, -1).max(1))

def test_a_process_ends_cleanly_with_kernels_queued(tmp_path):  # compiled in it (an empty cache), still running at exit
  script = "from fusegrad import Tensor\n(Tensor([1.0, 2, 3]) + 1).realize()"  # (PoCL crashed in its LLVM as it ended)
  env = dict(os.environ, DEV="CL", XDG_CACHE_HOME=str(tmp_path), CACHEDB=str(tmp_path / "cache.db"))
  out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
