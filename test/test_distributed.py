"""fusegrad.distributed over MPI: a 2-rank job's averaged gradients equal the one-process gradients of the whole
batch; a rank that fails ends the job with an error; init() without mpi4py says what to install."""
import os, pathlib, shutil, subprocess, sys
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
try:
  import mpi4py  # noqa: F401
  HAVE_MPI = shutil.which("mpirun") is not None
except ImportError: HAVE_MPI = False
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="needs Open MPI (mpirun) and mpi4py")

def mpirun(n: int, script: str, timeout: float = 240, **env: str) -> subprocess.CompletedProcess:
  cmd = ["mpirun", "--oversubscribe", "-n", str(n), sys.executable, script]
  if os.geteuid() == 0: cmd.insert(1, "--allow-run-as-root")
  full_env = {**os.environ, "PYTHONPATH": str(ROOT), "OMPI_MCA_btl": "self,tcp", **env}
  return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)

@needs_mpi
def test_two_ranks_average_gradients():
  r = mpirun(2, "test/distributed_check.py")
  assert r.returncode == 0, r.stdout + r.stderr
  assert "rank 0: ok" in r.stdout and "rank 1: ok" in r.stdout

@needs_mpi
def test_failed_rank_ends_the_job():
  r = mpirun(2, "test/distributed_check.py", timeout=120, FAIL_RANK="1", DIST_TIMEOUT="20")
  assert r.returncode != 0
  assert "fails on purpose" in r.stderr and "aborting the MPI job" in r.stderr

def test_init_without_mpi():
  code = "import sys; sys.modules['mpi4py'] = None\nfrom fusegrad import distributed\ndistributed.init()"
  r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                     text=True, timeout=120)
  assert r.returncode != 0 and "needs MPI" in r.stderr and "pip install mpi4py" in r.stderr
