"""The WEBGPU device (wgpu on lavapipe in CI): copies, packed narrow types, dtype refusals, timing, the WGSL dialect."""
import numpy as np
import pytest
from fusegrad import Tensor, Device, dtypes
from fusegrad.device import Buffer
from fusegrad.codegen import get_program
from fusegrad.renderer import UnsupportedDTypeError
from fusegrad.renderer.wgsl import WGSLRenderer

OK, WHY = Device.get_available("WEBGPU")
needs_device = pytest.mark.skipif(not OK, reason=f"no WEBGPU device here: {WHY}")

@needs_device
@pytest.mark.parametrize("nbytes", [1, 5, 4096 + 3])
def test_copy_roundtrip_odd_sizes(nbytes):  # staging copies of sizes that aren't whole 4-byte words
  data = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
  buf = Buffer("WEBGPU", nbytes, dtypes.uint8).copyin(memoryview(data))
  assert np.array_equal(np.frombuffer(buf.as_bytes(), np.uint8), data)

@needs_device
def test_views():
  align = Device["WEBGPU"].offset_align
  base = Buffer("WEBGPU", 64, dtypes.float32).copyin(memoryview(np.arange(64, dtype=np.float32)))
  view = base.view(8, dtypes.float32, align)
  assert np.frombuffer(view.as_bytes(), np.float32).tolist() == list(range(align // 4, align // 4 + 8))
  view.copyin(memoryview(np.zeros(8, np.float32)))
  assert np.frombuffer(base.as_bytes(), np.float32)[align // 4 - 1: align // 4 + 9].tolist() == \
    [align // 4 - 1] + [0] * 8 + [align // 4 + 8]
  with pytest.raises(NotImplementedError, match="multiple of"): base.view(4, dtypes.float32, 4).allocate()

@needs_device
@pytest.mark.parametrize("dt", [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16])
def test_packed_stores(dt):  # lanes of one word written by different threads, and wrap-around in narrow registers
  a = np.random.default_rng(1).integers(-300, 300, 1001)
  got = (Tensor(a.astype(np.int32), device="WEBGPU").cast(dt) + (1 if dt != dtypes.bool else False)).numpy()
  want = a.astype(np.int32).astype(dt.fmt if dt != dtypes.bool else bool) + (1 if dt != dtypes.bool else False)
  np.testing.assert_equal(got, want.astype(got.dtype))

@needs_device
def test_unsupported_dtype_error():  # float64 and 64-bit division have no WGSL form: a clear error, not a wrong answer
  with pytest.raises(UnsupportedDTypeError, match="dtype double is not supported on device WEBGPU"):
    (Tensor([1, 2, 3], device="WEBGPU", dtype=dtypes.float64) * 2).numpy()
  a, b = (Tensor(v, device="WEBGPU", dtype=dtypes.int64) for v in ([7, 8, 9], [2, 3, 4]))
  with pytest.raises(UnsupportedDTypeError, match="(IDIV|MOD) on dtype long is not supported on device WEBGPU"):
    (a // b).numpy()

@needs_device
def test_int64_emulated():  # vec2<u32> pairs: carries, signs, shifts and casts as numpy computes them in int64
  a = np.array([3, -5, 2 ** 40 + 12345, -2 ** 40 + 7, 2 ** 31, -1], dtype=np.int64)
  x = Tensor(a, device="WEBGPU")
  np.testing.assert_equal((x * 3 + 1).numpy(), a * 3 + 1)
  np.testing.assert_equal((x >> 3).numpy(), a >> 3)
  np.testing.assert_equal((x << 5).numpy(), a << 5)
  np.testing.assert_equal((x < 0).numpy(), a < 0)
  np.testing.assert_equal(x.maximum(4).numpy(), np.maximum(a, 4))
  np.testing.assert_equal(x.int().numpy(), a.astype(np.int32))
  np.testing.assert_allclose(x.float().numpy(), a.astype(np.float32))
  f = Tensor([1.5, -2.7, 3e12], device="WEBGPU")
  np.testing.assert_equal(f.cast(dtypes.int64).numpy(), [1, -2, int(np.float32(3e12))])

@needs_device
def test_timestamp_timing_and_workgroups():
  from fusegrad.engine.realize import lower_schedule
  x = Tensor.rand(64, 300, device="WEBGPU").realize()
  (item,) = lower_schedule(x.sum(axis=1).schedule())
  p, ren = item.runner.p, Device["WEBGPU"].renderer
  assert p.local_size is not None and all(lo <= m for lo, m in zip(p.local_size, ren.local_max or ()))
  assert np.prod(p.local_size) <= ren.max_workgroup and all(g <= 65535 for g in p.global_size)
  t = item.run(wait=True)
  assert t is not None and 0 < t < 1
  np.testing.assert_allclose(np.frombuffer(item.bufs[0].as_bytes(), np.float32), x.numpy().sum(axis=1), rtol=1e-5)

@needs_device
def test_synchronize_and_timed_copy():  # DEBUG=2 times copies: a wait on the queue
  from fusegrad.engine.runner import CopyRunner
  src = Buffer("WEBGPU", 5, dtypes.float32).copyin(memoryview(np.arange(5, dtype=np.float32)))
  dest = Buffer("WEBGPU", 5, dtypes.float32).allocate()
  Device["WEBGPU"].synchronize()
  assert CopyRunner("WEBGPU", "WEBGPU", 20)([dest, src], {}, wait=True) >= 0
  assert np.frombuffer(dest.as_bytes(), np.float32).tolist() == [0, 1, 2, 3, 4]

def test_wgsl_dialect_without_device():  # capabilities, not the device name, decide what is rendered
  ast = (Tensor([1.0, 2.0], device="PYTHON").half() * 2).schedule()[-1].ast
  src = get_program(ast, WGSLRenderer(supports_float16=True)).src
  assert "enable f16;" in src and "array<f16>" in src and "@compute @workgroup_size(" in src
  src = get_program(ast, WGSLRenderer(supports_float16=False)).src  # without shader-f16: f32 in 16-bit lanes
  assert "enable f16" not in src and "array<atomic<u32>>" in src and "fn fg_half" in src

@needs_device
def test_float16_without_shader_f16():  # as in Chrome on SwiftShader: rounded to float16 after each op, as numpy does
  from fusegrad.export import browser_kernels
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal(1001).astype(np.float16), rng.standard_normal(1001).astype(np.float16)
  with browser_kernels(Device["WEBGPU"]), np.errstate(over="ignore"):
    assert not Device["WEBGPU"].renderer.supports_float16
    A, B = Tensor(a, device="WEBGPU"), Tensor(b, device="WEBGPU")
    np.testing.assert_array_equal(((A * B + A) * 1000).numpy(), (a * b + a) * np.float16(1000))
    np.testing.assert_array_equal((A * 60000).numpy(), a * np.float16(60000))  # beyond float16's range: inf
    np.testing.assert_array_equal((Tensor(b.astype(np.float32), device="WEBGPU").half() + A).numpy(), b + a)
    np.testing.assert_allclose(A.float().sum().numpy(), a.astype(np.float32).sum(), rtol=1e-5)

def test_launch_axes_fit_the_limits():  # 490000 workgroups in x split in two by a divisor (WebGPU's x stops at 65535)
  ast = (Tensor.empty(490000, device="PYTHON") * 2).schedule()[-1].ast
  p = get_program(ast, WGSLRenderer(), opts=[])
  assert max(p.global_size) <= 65535 and np.prod(p.global_size) == 490000, p.global_size

@needs_device
def test_a_process_ends_cleanly_with_kernels_queued(tmp_path):  # compiled in it (an empty cache), still running at exit
  import os, subprocess, sys
  script = ("from fusegrad import Tensor, Variable\nx = Tensor.ones(16, 6).contiguous().realize()\n"
            "for k in range(3): (x[Variable('r', 0, 15).bind(k)] * 2).realize()\nTensor.ones(4, 6).contiguous().realize()")
  env = dict(os.environ, DEV="WEBGPU", XDG_CACHE_HOME=str(tmp_path), CACHEDB=str(tmp_path / "cache.db"))
  out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
