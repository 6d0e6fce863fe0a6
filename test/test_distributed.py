"""fusegrad.distributed over MPI: a 2-rank job's averaged gradients equal the one-process gradients of the whole
batch, also with the ranks on two "hosts" (network namespaces joined by a veth pair, MPI over TCP); a rank that fails
(raises, is killed, hangs) ends the job with an error; init() without mpi4py says what to install."""
import contextlib, os, pathlib, shutil, subprocess, sys
import pytest
from fusegrad import Tensor, distributed as dist

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

# a rank that raises, is killed (SIGKILL) or hangs in the middle of a step: the job ends with an error that says so
FAILURES = {"raise": "fails on purpose", "kill": "exited on signal 9", "hang": "the other ranks didn't answer in 5s"}

@needs_mpi
@pytest.mark.parametrize("how", FAILURES)
def test_failed_rank_ends_the_job(how):
  r = mpirun(2, "test/distributed_check.py", timeout=120, FAIL_RANK="1", FAIL_HOW=how, DIST_TIMEOUT="5")
  assert r.returncode != 0
  assert FAILURES[how] in r.stdout + r.stderr
  assert how == "kill" or "aborting the MPI job" in r.stderr

def test_init_without_mpi():
  code = "import sys; sys.modules['mpi4py'] = None\nfrom fusegrad import distributed\ndistributed.init()"
  r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                     text=True, timeout=120)
  assert r.returncode != 0 and "needs MPI" in r.stderr and "pip install mpi4py" in r.stderr

def test_all_reduce_refuses_what_it_cant_reduce():
  """Checked before any MPI call, so without mpirun too (differently shaped tensors across ranks: distributed_check)."""
  with pytest.raises(ValueError, match="must be realized"): dist.all_reduce(Tensor.ones(2) + 1)
  spread = Tensor.ones(4).shard(("PYTHON:1", "PYTHON:2"), 0).realize()
  with pytest.raises(ValueError, match="must be realized on one device"): dist.broadcast(spread)
  with pytest.raises(ValueError, match="op must be 'sum' or 'mean'"): dist.all_reduce(Tensor.ones(2).realize(), "max")

# the remote shell Open MPI starts a rank on another host with: here the host is a network namespace
AGENT = """#!/bin/sh
host=$1; shift
exec ip netns exec "$FG_NETNS_PREFIX$(echo $host | tr . _)" /bin/sh -c "$*"
"""

def _ip(*args: str) -> None: subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)

@contextlib.contextmanager
def two_hosts(prefix: str, subnet: str):
  """Two network namespaces named prefix + their address, joined by a veth pair."""
  hosts = [f"{subnet}.1", f"{subnet}.2"]
  names = [prefix + h.replace(".", "_") for h in hosts]
  veths = [f"fg{os.getpid() % 100000}{c}" for c in "ab"]
  try:
    for n in names: _ip("netns", "add", n)
    _ip("link", "add", veths[0], "type", "veth", "peer", "name", veths[1])
    for n, v, h in zip(names, veths, hosts):
      _ip("link", "set", v, "netns", n)
      _ip("-n", n, "addr", "add", f"{h}/24", "dev", v)
      _ip("-n", n, "link", "set", v, "up")
      _ip("-n", n, "link", "set", "lo", "up")
    yield hosts, names
  finally:
    for n in names: subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=30)

def _can_make_namespaces() -> bool:
  if os.geteuid() != 0 or shutil.which("ip") is None: return False
  name = f"fgprobe{os.getpid()}"
  ok = subprocess.run(["ip", "netns", "add", name], capture_output=True, timeout=30).returncode == 0
  subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
  return ok

@needs_mpi
@pytest.mark.skipif(not _can_make_namespaces(), reason="needs root and `ip netns` (network namespaces)")
def test_two_hosts_over_tcp(tmp_path):
  subnet = f"10.{77 + os.getpid() % 100}.{os.getpid() % 250}"
  agent = tmp_path / "agent.sh"
  agent.write_text(AGENT)
  agent.chmod(0o755)
  prefix = f"fg{os.getpid()}_"
  with two_hosts(prefix, subnet) as (hosts, names):
    (hostfile := tmp_path / "hosts").write_text("".join(f"{h} slots=1\n" for h in hosts))
    cmd = ["ip", "netns", "exec", names[0], "mpirun", "--allow-run-as-root", "-n", "2", "--hostfile", str(hostfile),
           "--mca", "plm_rsh_agent", str(agent), "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include",
           f"{subnet}.0/24", "--mca", "oob_tcp_if_include", f"{subnet}.0/24", "-x", f"PYTHONPATH={ROOT}",
           sys.executable, "test/distributed_check.py"]
    r = subprocess.run(cmd, env={**os.environ, "FG_NETNS_PREFIX": prefix}, capture_output=True, text=True,
                       timeout=240, cwd=ROOT)
  assert r.returncode == 0, r.stdout + r.stderr
  assert "rank 0: ok" in r.stdout and "rank 1: ok" in r.stdout
