"""exp2, log2 and max on vectors (renderer/cstyle.py: vector_exp2, vector_log2, the bitwise-select MAX): within a
couple of ulp of NumPy in float64 over the whole float range and its special values, at every vector width; on other
devices the same tests check their exp2, log2 and max."""
import re
import numpy as np
import pytest
from fusegrad import Tensor
from fusegrad.helpers import Context
from fusegrad.codegen import get_program
from fusegrad.engine.schedule import create_schedule
from fusegrad.renderer import MachineModel
from fusegrad.renderer.cstyle import ClangRenderer
AVX512 = MachineModel(isa="avx512", vector_bytes=64, vector_registers=32)
from test.helpers import device_is

SPECIALS = [0.0, -0.0, 1e-45, -1e-45, 1e-38, -1e-38, 0.5, -0.5, 1.0, -1.0, 127.99999, 128.0, 128.0001, 1000.0, -126.0,
            -126.5, -149.0, -149.5, -150.0, -150.0001, -1000.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38]

def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
  """Distance in units of the last place between float32 arrays of the same signs (nan where either is nan)."""
  g, w = got.astype(np.float32).view(np.int32).astype(np.int64), want.astype(np.float32).view(np.int32).astype(np.int64)
  return np.abs(g - w)

def _inputs() -> np.ndarray:
  rng = np.random.default_rng(0)
  parts = [rng.uniform(-160, 135, 1 << 15), rng.uniform(-1, 1, 1 << 13), rng.uniform(-151, -125, 1 << 13),
           np.array(SPECIALS * 2)]
  x = np.concatenate(parts).astype(np.float32)
  return x[:len(x) // 64 * 64]

def _exact_exp2(x: np.ndarray) -> np.ndarray:
  with np.errstate(over="ignore"): return np.exp2(x.astype(np.float64)).astype(np.float32)

MAX_ULP = 2 if device_is("CPU") else 3  # OpenCL allows exp2 3 ulp; PYTHON rounds the double result (exact)

def test_exp2_elementwise():
  x = _inputs()
  got, want = Tensor(x).exp2().numpy(), _exact_exp2(x)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  ok = ~np.isnan(want)
  assert ulps(got[ok], want[ok]).max() <= MAX_ULP
  np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])  # overflow is inf, never a large finite
  np.testing.assert_array_equal(got[want == 0], 0)  # below the smallest denormal: 0

LOG2_SPECIALS = [0.0, -0.0, 1e-45, 3e-45, 1e-40, 1.1754942e-38, 1.1754944e-38, 3.4028235e38, 1.0, 2.0, 0.5, 1.0000001,
                 0.99999994, 1.4142135, 1.4142137, 0.70710677, np.inf, -np.inf, np.nan, -1.0, -1e-45]

def test_log2_elementwise():
  rng = np.random.default_rng(3)
  parts = [np.exp2(rng.uniform(-149, 128, 1 << 15)), rng.uniform(0.5, 2, 1 << 13), rng.uniform(0.99, 1.01, 1 << 13),
           rng.uniform(0, 1.2e-38, 1 << 12), np.array(LOG2_SPECIALS * 4)]
  x = np.concatenate(parts).astype(np.float32)
  x = x[:len(x) // 64 * 64]
  got = Tensor(x).log2().numpy()
  with np.errstate(divide="ignore", invalid="ignore"): want = np.log2(x.astype(np.float64)).astype(np.float32)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  ok = ~np.isnan(want)
  assert ulps(got[ok], want[ok]).max() <= MAX_ULP
  np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])  # log2(0) = -inf, log2(inf) = inf

@pytest.mark.parametrize("width", [16, 8, 4, 2])
def test_exp2_in_vector_reduce(width):
  """exp2 inside a reduce whose lanes are a vector (row max of exp2: exact, as exp2 is monotonic)."""
  x = _inputs().reshape(-1, width)
  got = Tensor(x).exp2().max(1).numpy()
  want = np.nanmax(_exact_exp2(x), axis=1)
  has_nan = np.isnan(x).any(1)
  assert np.isnan(got[has_nan]).all()
  assert ulps(got[~has_nan], want[~has_nan]).max() <= MAX_ULP

def test_exp_softmax_values():
  x = np.random.default_rng(1).standard_normal((64, 512)).astype(np.float32) * 10
  x[3, 5], x[4, :] = np.inf, -np.inf
  with np.errstate(invalid="ignore"):
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    want = e / e.sum(1, keepdims=True)
  np.testing.assert_allclose(Tensor(x).softmax(-1).numpy(), want, rtol=2e-6, atol=1e-7)

def test_max_nan_inf_lanes():
  x = np.random.default_rng(2).standard_normal((32, 256)).astype(np.float32)
  x[1, 0], x[2, 255], x[3, 17] = np.nan, np.nan, np.nan  # first lane, last lane, middle
  x[4, :], x[5, :], x[6, 31] = -np.inf, np.nan, np.inf
  np.testing.assert_array_equal(Tensor(x).max(1).numpy(), x.max(1))
  np.testing.assert_array_equal(Tensor(x).min(1).numpy(), x.min(1))
  np.testing.assert_array_equal(Tensor(x).max().numpy(), x.max())

def test_c_source_is_vector_code():
  """On a C renderer with 64-byte vectors the softmax kernels compute exp2 and max on float16 vectors."""
  ren = ClangRenderer(device="CPU", machine=AVX512, upcast_max=128, vector_widths=(2, 4, 8, 16))
  out = Tensor.empty(256, 256, device="CPU").softmax(-1)
  with Context(NOOPT=0, BEAM=0): srcs = [get_program(si.ast, ren).src for si in create_schedule([out.uop]).items]
  # the row max on float16 vectors (16 of them a row: unrolled whole, a tree of vector maxes), not lane by lane
  assert re.search(r"float16 \w+ = \(\{__typeof__\(\w+ > \w+\) m_", srcs[0])
  assert "fg_exp2_float16(" in srcs[1] and "__builtin_exp2f" not in srcs[1]  # the sum of exp: 16 lanes at once
  assert "__builtin_exp2f" not in srcs[2] and "fg_exp2_float" in srcs[2]
  with Context(NOOPT=0, BEAM=0):
    si = create_schedule([Tensor.empty(256, 256, device="CPU").log2().uop]).items[-1]
    assert "fg_log2_float16(" in get_program(si.ast, ren).src  # log2 is a math function: 16 floats per iteration

_SCRIPT = """
import numpy as np
from fusegrad import Tensor
from fusegrad.helpers import Context
from test.unit.test_vector_math import _inputs, _exact_exp2, ulps
x = _inputs()
got, want = Tensor(x).exp2().numpy(), _exact_exp2(x)
assert (np.isnan(got) == np.isnan(want)).all()
pos = np.abs(x[np.isfinite(x)]) + 1e-30
lg = Tensor(pos).log2().numpy()
assert ulps(lg, np.log2(pos.astype(np.float64)).astype(np.float32)).max() <= 2
y = x.reshape(-1, 64)
assert (np.isnan(Tensor(y).max(1).numpy()) == np.isnan(y).any(1)).all()
print(ulps(got[~np.isnan(want)], want[~np.isnan(want)]).max())
"""

@pytest.mark.skipif(not device_is("CPU"), reason="compiles C")
@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_c_vector_math_with_each_compiler(cc):
  """The vector exp2, log2 and max compile and are exact with gcc and clang alike (CC may pick either)."""
  import os, shutil, subprocess, sys
  if shutil.which(cc) is None: pytest.skip(f"{cc} is not installed")
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  env = {**os.environ, "CC": cc, "DEV": "CPU", "PYTHONPATH": root}
  proc = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, cwd=root)
  assert proc.returncode == 0, proc.stderr
  assert int(proc.stdout.split()[-1]) <= 2

def test_column_reduce():
  """Sums and maxes down the columns (a strided reduce axis): vectors of 16 columns on the C renderer, the same values
  everywhere."""
  x = np.random.default_rng(4).standard_normal((300, 256)).astype(np.float32)
  x[7, 3], x[100, 200] = np.nan, np.inf
  np.testing.assert_allclose(Tensor(x).sum(0).numpy(), x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
  np.testing.assert_array_equal(Tensor(x).max(0).numpy(), x.max(0))
  y = x[:, :100]  # 100 columns: no vector of 16 divides them
  np.testing.assert_allclose(Tensor(y).sum(0).numpy(), y.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
  ren = ClangRenderer(device="CPU", machine=AVX512, upcast_max=128, vector_widths=(2, 4, 8, 16))
  with Context(NOOPT=0, BEAM=0):
    src = get_program(create_schedule([Tensor.empty(300, 256, device="CPU").sum(0).uop]).items[-1].ast, ren).src
  assert "float16 acc0" in src and "float16 acc3" in src  # 4 vector accumulators of 16 columns
