"""CPU_THREADS sets how many OpenMP threads a big CPU kernel uses; idle, those threads sleep, after spinning CPU_SPIN ms
in clang's runtime."""
import os, pathlib, subprocess, sys
import pytest
from fusegrad import Device

ROOT = pathlib.Path(__file__).resolve().parents[2]
CODE = """
import os, numpy as np
from fusegrad import Tensor, Device
from fusegrad.codegen import get_program
a = np.arange(512 * 256, dtype=np.float32).reshape(512, 256) % 7
out = Tensor(a).sum(1)
src = get_program(out.schedule()[-1].ast, Device['CPU'].renderer).src
assert np.allclose(out.numpy(), a.sum(1)), "wrong sums"
print(Device['CPU'].renderer.threads, 'num_threads(' in src, os.environ.get('OMP_WAIT_POLICY'),
      os.environ.get('KMP_BLOCKTIME'))
"""

@pytest.mark.skipif(Device.DEFAULT != "CPU", reason="the CPU backend's threads")
@pytest.mark.parametrize("threads, spin, want", [("1", "", "0 False None None"), ("2", "", "2 True PASSIVE 1"),
                                                 ("2", "0", "2 True PASSIVE None"), ("2", "3", "2 True PASSIVE 3")])
def test_cpu_threads(threads, spin, want):
  if threads != "1" and os.environ.get("NOOPT", "0") not in ("", "0"): pytest.skip("NOOPT=1 splits no kernel across threads")
  from fusegrad.runtime.ops_cpu import openmp_works, find_c_compiler
  if threads != "1" and not openmp_works(find_c_compiler()): pytest.skip("the C compiler has no OpenMP")
  env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "KMP_BLOCKTIME", "CPU_SPIN")}
  env.update(PYTHONPATH=str(ROOT), CPU_THREADS=threads, DEV="CPU", **({"CPU_SPIN": spin} if spin else {}))
  proc = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.split("\n")[-2] == want

EXIT_CODE = """
import gc, numpy as np
from fusegrad import Tensor, Device
from fusegrad.codegen import get_program
from fusegrad.codegen.kernel import Opt, OptOps
from fusegrad.engine.runner import CompiledRunner
a = np.arange(64 * 512, dtype=np.float32).reshape(64, 512) % 5
si = Tensor(a).realize().sum(1).schedule()[-1]
if si.bufs[0]._buf is None: si.bufs[0].allocate()
ren = Device['CPU'].renderer
for rep in range(3):  # a kernel built by gcc (libgomp), dropped, then one by clang (libomp), each on 2 threads
  for compiler in (ren.compilers.index('gcc'), 0):
    opts = [Opt(OptOps.THREAD, 0, 0)] + ([Opt(OptOps.COMPILER, 0, compiler)] if compiler else [])
    r = CompiledRunner(get_program(si.ast, ren, opts))
    r(si.bufs, {})
    assert np.allclose(np.frombuffer(si.bufs[0].as_bytes(), np.float32), a.sum(1)), "wrong sums"
    del r
    gc.collect()
print("ok")
"""

@pytest.mark.skipif(Device.DEFAULT != "CPU", reason="the CPU backend's threads")
def test_openmp_runtime_outlives_its_kernels():
  """gcc's OpenMP runtime, loaded by a kernel and left with sleeping workers when the kernel is unloaded, stays loaded:
  unloading it crashed the process at exit (in about 2 runs of 3)."""
  from fusegrad.runtime.ops_cpu import openmp_works
  if Device["CPU"].renderer.compilers[1:] != ("gcc",) or not openmp_works(["gcc"]):
    pytest.skip("needs clang as the default compiler and gcc with OpenMP")
  env = dict(os.environ, PYTHONPATH=str(ROOT), CPU_THREADS="2", DEV="CPU")
  for _ in range(3):
    proc = subprocess.run([sys.executable, "-c", EXIT_CODE], env=env, capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-2000:])
