"""DEBUG levels, run in subprocesses: 1 devices, 2 one timing line per kernel, 3 schedule and opts, 4 source, 5 IR."""
import math, os, pathlib, re, subprocess, sys
import pytest
from fusegrad import Device, Tensor, Context
from fusegrad.helpers import ansistrip

ROOT = pathlib.Path(__file__).resolve().parent.parent
README_MATMUL = ("from fusegrad import Tensor; N=1024; a,b=Tensor.empty(N,N),Tensor.empty(N,N); "
                 "(a.reshape(N,1,N)*b.T.reshape(1,N,N)).sum(axis=2).realize()")
SMALL_MATMUL = README_MATMUL.replace("N=1024", "N=16")
TIMING = re.compile(r"^\*\*\* (\S+)\s+(\d+) (\S+)\s+arg\s+(\d+) .*GFLOPS .*GB/s\)$")

@pytest.fixture(scope="module")
def cache_home(tmp_path_factory) -> str: return str(tmp_path_factory.mktemp("xdg_cache"))

def run(code: str, debug: int, cache_home: str, dev: str | None = "inherit", timeout: float = 120,
        noopt: bool = False) -> list[str]:
  """Run code in a fresh interpreter with DEBUG=debug; its stdout lines, colors stripped."""
  env = {**os.environ, "DEBUG": str(debug), "XDG_CACHE_HOME": cache_home, "PYTHONPATH": str(ROOT),
         "NOOPT": str(int(noopt))}
  if dev is None: env.pop("DEV", None)
  elif dev != "inherit": env["DEV"] = dev
  proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout,
                        cwd=ROOT)
  assert proc.returncode == 0, f"DEBUG={debug} failed:\n{proc.stdout}\n{proc.stderr}"
  return [ansistrip(line) for line in proc.stdout.splitlines()]

def timing_lines(lines: list[str]) -> list[str]: return [line for line in lines if TIMING.match(line)]
def opts_lines(lines: list[str]) -> list[str]:
  return [line for line in lines if re.match(r"^[Er](_\d+)*: opts \[", line)]

def cpu_works() -> bool: return Device.get_available("CPU")[0]

@pytest.mark.skipif(not cpu_works(), reason="needs the CPU backend (a C compiler): N=1024 is too slow to interpret")
def test_readme_command_debug3(cache_home):
  """tinygrad's README command: one reduce kernel (after the copy of b into cache-line panels where the device's
  machine model asks for them: the CPU's), its optimizations, and its timing line."""
  lines = run(README_MATMUL, 3, cache_home, dev=None, timeout=300)
  device = TIMING.match(timing_lines(lines)[-1]).group(1)  # the subprocess's default device
  packs = int(bool(Device[device].renderer.machine.panel_bytes))
  assert any(line.startswith(f"scheduled {1 + packs} kernels/copies for 1 outputs") for line in lines), lines
  assert len(opts_lines(lines)) == 1 + packs, lines
  name, opts = opts_lines(lines)[-1].split(": opts ")
  assert name.startswith("r_")  # a reduce kernel
  # its loops cover N*N outputs times N terms, or a little more where a register tile that doesn't divide N pads an
  # axis (PADTO: Zen 5's 48 KB L1d gives 6-row tiles, 1024 rows padded to 1032)
  assert 1024 ** 3 <= math.prod(int(s) for s in name.split("_")[1:]) <= 1024 ** 3 * 1.01
  assert "Opt(op=OptOps." in opts
  assert len(timing_lines(lines)) == 1 + packs, lines
  assert TIMING.match(timing_lines(lines)[-1]).group(3) == name
  assert not any(line.startswith("void ") for line in lines)  # source is DEBUG=4

def test_debug3_schedule_and_opts(cache_home):
  lines = run(SMALL_MATMUL, 3, cache_home)
  assert any(line.startswith("scheduled 1 kernels/copies") for line in lines), lines
  assert len(opts_lines(lines)) == 1 and len(timing_lines(lines)) == 1, lines
  assert any(line.startswith("ran 1 schedule items") for line in lines), lines

@pytest.mark.skipif(not cpu_works(), reason="needs the CPU backend (a C compiler)")
def test_debug4_prints_c_source(cache_home):
  lines = run(SMALL_MATMUL, 4, cache_home, dev="CPU")
  functions = [line for line in lines if line.startswith("void ")]
  assert len(functions) == 1, lines
  name = opts_lines(lines)[0].split(": opts ")[0]
  params = "float* restrict data0, const float* restrict data1, const float* restrict data2"
  assert re.match(rf"void {name}_[0-9a-f]{{8}}\({re.escape(params)}\)", functions[0])  # the name, a hash of the source
  assert any("for (int ridx" in line for line in lines)
  assert any(re.search(r"(data0\[.*\]|\(data0\+.*\)\)) = ", line) for line in lines)  # the store (scalar or vector)
  assert len(timing_lines(lines)) == 1

def test_debug5_prints_the_ir(cache_home):
  # NOOPT keeps the flat program small enough to be printed node by node
  lines = run("from fusegrad import Tensor; Tensor.empty(4, 8).sum(axis=1).realize()", 5, cache_home, noopt=True)
  ir = [line for line in lines if re.match(r"^%\d+\s+= [A-Z_]+ ", line)]
  ops = {line.split()[2] for line in ir}
  # the kernel AST (REDUCE, STORE into a SINK) and the flat program (loops closed by ENDRANGE) are both printed
  assert {"DEFINE_GLOBAL", "LOAD", "STORE", "SINK", "REDUCE", "RANGE"} <= ops, ops
  assert {"ENDRANGE", "DEFINE_ACC", "ASSIGN"} <= ops, ops

def test_debug2_one_timing_line_per_kernel(cache_home):
  code = ("from fusegrad import Tensor, GlobalCounters; x = Tensor.empty(8, 8); y = (x + 1).contiguous()\n"
          "z = (y.softmax(-1) @ y).realize(); print('kernels', GlobalCounters.kernel_count)")
  lines = run(code, 2, cache_home)
  n = int(next(line for line in lines if line.startswith("kernels ")).split()[1])
  assert n >= 3
  got = timing_lines(lines)
  assert len(got) == n, lines
  assert [int(TIMING.match(line).group(2)) for line in got] == list(range(1, n + 1))  # numbered in run order
  assert not opts_lines(lines) and not any(line.startswith("scheduled ") for line in lines)  # that is DEBUG=3

def test_debug1_shows_the_device(cache_home):
  code = "from fusegrad import Tensor, Device; (Tensor([1.0, 2.0]) * 2).realize(); print('default', Device.DEFAULT)"
  lines = run(code, 1, cache_home)
  default = lines[-1].split()[1]
  assert any(line.startswith(f"opened device {default} ") for line in lines), lines
  assert not timing_lines(lines)

def test_debug0_is_quiet(cache_home):
  lines = run("from fusegrad import Tensor; print((Tensor([1.0, 2.0]) * 2).tolist())", 0, cache_home)
  assert lines == ["[2.0, 4.0]"]

def test_context_sets_debug_in_process(capsys):
  x = Tensor([1.0, 2.0, 3.0])
  with Context(DEBUG=2): (x * 5 + 1).realize()
  out = [ansistrip(line) for line in capsys.readouterr().out.splitlines()]
  assert len(timing_lines(out)) == 1, out
  (x * 7).realize()
  assert capsys.readouterr().out == ""
