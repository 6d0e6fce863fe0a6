"""CPU_THREADS sets how many OpenMP threads a big CPU kernel uses, and those threads wait passively."""
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
print(Device['CPU'].renderer.threads, 'num_threads(' in src, os.environ.get('OMP_WAIT_POLICY'))
"""

@pytest.mark.skipif(Device.DEFAULT != "CPU", reason="the CPU backend's threads")
@pytest.mark.parametrize("threads, want", [("1", "0 False None"), ("2", "2 True PASSIVE")])
def test_cpu_threads(threads, want):
  from fusegrad.runtime.ops_cpu import openmp_works, find_c_compiler
  if threads != "1" and not openmp_works(find_c_compiler()): pytest.skip("the C compiler has no OpenMP")
  env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
  env.update(PYTHONPATH=str(ROOT), CPU_THREADS=threads, DEV="CPU")
  proc = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.split("\n")[-2] == want
