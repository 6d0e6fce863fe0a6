"""Compiling the kernels of a schedule together (Compiler.compile_batch): one translation unit per core on the CPU, each
kernel cached by itself, errors naming their kernel."""
import hashlib
import numpy as np
import pytest
from fusegrad import Tensor, Device, Context
from fusegrad.device import CompileError
from fusegrad.helpers import cache_reset, diskcache_get, to_function_name
from fusegrad.engine.runner import CompiledRunner, compile_runners
from fusegrad.engine.realize import lower_schedule
from fusegrad.engine.state import STATE

needs_cpu = pytest.mark.skipif(not Device.get_available("CPU")[0], reason="needs the CPU backend (a C compiler)")

@pytest.fixture
def fresh_cache(tmp_path):
  """A new, empty disk cache for the test, and no program compiled in this process before (as a new process)."""
  cache_reset()
  STATE.reset()
  with Context(CACHEDB=str(tmp_path / "cache.db"), DISABLE_COMPILER_CACHE=0): yield tmp_path
  cache_reset()

def kernel_src(name: str, body: str) -> str:
  return f"void {name}(float* restrict data0) {{\n  {body}\n}}\n"

def run_kernel(name: str, lib: bytes) -> float:
  buf = Device["CPU"].allocator.alloc(4)
  Device["CPU"].runtime(name, lib)(buf)
  out = memoryview(bytearray(4))
  Device["CPU"].allocator.copyout(out, buf)
  return float(np.frombuffer(out, np.float32)[0])

@needs_cpu
def _chunked(monkeypatch, start_batch, get_runner):
  """Every kernel's source starts a compile batch of its own (COMPILE_CHUNK 1), with nothing compiled yet in this
  process; start_batch and get_runner wrap the real ones to watch them."""
  from fusegrad.engine import realize
  monkeypatch.setattr(type(Device["CPU"].compiler), "start_batch", start_batch)
  monkeypatch.setattr(realize, "get_runner", get_runner)
  monkeypatch.setattr(realize, "COMPILE_CHUNK", 1)
  monkeypatch.setattr(STATE, "programs", type(STATE.programs)())

class TestBatch:
  def test_batch_then_each_alone_from_the_cache(self, fresh_cache, monkeypatch):
    compiler = Device["CPU"].compiler
    srcs = [kernel_src(f"k{i}", f"data0[0] = {i}.5f;") for i in range(5)]
    libs = compiler.compile_cached_batch(srcs)
    assert all(isinstance(lib, bytes) for lib in libs)
    assert [run_kernel(f"k{i}", lib) for i, lib in enumerate(libs)] == [i + 0.5 for i in range(5)]  # type: ignore
    def no_compile(*args): raise AssertionError("compiled again")
    monkeypatch.setattr(type(compiler), "compile", no_compile)
    monkeypatch.setattr(type(compiler), "start_batch", no_compile)
    for i, src in enumerate(srcs): assert run_kernel(f"k{i}", compiler.compile_cached(src)) == i + 0.5

  def test_kernels_sharing_a_vector_helper_make_one_unit(self):
    """Kernels that call the same vector exp2 helper (softmax's) can share a translation unit: it is defined once."""
    from fusegrad.codegen import get_program
    ren = Device["CPU"].renderer
    width = ren.machine.vector(4)  # floats in a SIMD register: the exp2 helper's vectors
    if width not in ren.vector_widths: pytest.skip(f"no vectors of {width} floats")
    outs = [Tensor.empty(64, 64).exp().contiguous(), Tensor.empty(32, 64).exp().contiguous()]
    srcs = [get_program(t.schedule()[-1].ast, ren).src for t in outs]
    assert all(f"fg_exp2_float{width}(" in s for s in srcs) and len({s.split("void ")[-1].split("(")[0] for s in srcs}) == 2
    assert isinstance(Device["CPU"].compiler.compile("\n".join(srcs)), bytes)

  def test_same_function_names_go_to_different_units(self, fresh_cache):
    srcs = [kernel_src("same", f"data0[0] = {i}.0f;") for i in range(4)]
    libs = Device["CPU"].compiler.compile_batch(srcs)
    assert [run_kernel("same", lib) for lib in libs] == [0.0, 1.0, 2.0, 3.0]  # type: ignore[arg-type]

  def test_a_bad_kernel_fails_alone(self, fresh_cache):
    srcs = [kernel_src("good0", "data0[0] = 1.0f;"), kernel_src("bad", "data0[0] = undefined_name;"),
            kernel_src("good1", "data0[0] = 2.0f;")]
    libs = Device["CPU"].compiler.compile_cached_batch(srcs)
    assert isinstance(libs[1], CompileError) and "undefined_name" in str(libs[1])
    assert run_kernel("good0", libs[0]) == 1.0 and run_kernel("good1", libs[2]) == 2.0  # type: ignore[arg-type]
    assert diskcache_get(Device["CPU"].compiler.cachekey, hashlib.sha256(srcs[1].encode()).hexdigest()) is None

  def test_compile_error_names_the_kernel(self, fresh_cache):
    si = Tensor.ones(4, device="CPU").add(1).contiguous().schedule()[-1]
    p = lower_schedule([si])[0].runner.p  # type: ignore[attr-defined]
    broken = CompiledRunner(type(p)(p.name, p.src.replace("{", "{ syntax error here;", 1), p.device, p.uops))
    with pytest.raises(CompileError, match=f"kernel {to_function_name(p.name)}:"): compile_runners([broken])

  def test_schedule_compiles_in_one_batch(self, fresh_cache, monkeypatch):
    compiler, batches = Device["CPU"].compiler, []
    start = type(compiler).start_batch
    def counting(self, srcs, units=0):
      batches.append(len(srcs))
      return start(self, srcs, units)
    monkeypatch.setattr(type(compiler), "start_batch", counting)
    x = Tensor(np.arange(8, dtype=np.float32), device="CPU")
    outs = [(x + 1).contiguous(), (x * 3).contiguous(), x.sum(), (x - 2).max()]
    Tensor.realize(*outs)
    assert batches == [4]
    np.testing.assert_equal([o.numpy() for o in outs], [np.arange(8) + 1, np.arange(8) * 3, 28, 5])

  def test_compiling_starts_while_codegen_goes_on(self, fresh_cache, monkeypatch):
    """With COMPILE_CHUNK bytes of new source waiting, a batch starts (in one compiler process) before the next
    kernel's codegen; what is left at the end is one batch over the cores. Every kernel gets its own library's
    function."""
    from fusegrad.engine import realize
    compiler, events = Device["CPU"].compiler, []
    start, get_runner = type(compiler).start_batch, realize.get_runner
    def counting(self, srcs, units=0):
      events.append(("compile", len(srcs), units))
      return start(self, srcs, units)
    def codegen(*args):
      events.append(("codegen",))
      return get_runner(*args)
    _chunked(monkeypatch, counting, codegen)
    x = Tensor(np.arange(8, dtype=np.float32), device="CPU")
    outs = [(x + 5).contiguous(), (x * 7).contiguous(), x.maximum(3).contiguous()]
    items = lower_schedule(Tensor.schedule(*outs))
    assert events == [("codegen",), ("compile", 1, 1)] * len(items)
    realize.run_exec_items(items)
    want = [np.arange(8) + 5, np.arange(8) * 7, np.maximum(np.arange(8), 3)]
    np.testing.assert_equal([o.numpy() for o in outs], want)

  def test_a_realize_compiles_kernels_while_the_scheduler_builds_the_rest(self, fresh_cache, monkeypatch):
    """realize hands each kernel to its Lowering as the scheduler builds it: the first batch compiles beside the
    schedule (the cold MNIST step: gcc started at 0.33 s instead of 0.55), and a kernel lowered then isn't again."""
    from fusegrad.engine import realize, cache
    compiler, events = Device["CPU"].compiler, []
    start, get_runner, plan = type(compiler).start_batch, realize.get_runner, cache.plan_schedule
    def counting(self, srcs, units=0):
      events.append("compile")
      return start(self, srcs, units)
    def codegen(*args):
      events.append("codegen")
      return get_runner(*args)
    def scheduling(*args, **kwargs):
      events.append("schedule")
      ret = plan(*args, **kwargs)
      events.append("scheduled")
      return ret
    _chunked(monkeypatch, counting, codegen)
    monkeypatch.setattr(cache, "plan_schedule", scheduling)
    x = Tensor(np.arange(8, dtype=np.float32), device="CPU").realize()
    outs = [(x + 17).contiguous(), (x * 19).contiguous(), (x - 23).contiguous()]
    events.clear()
    Tensor.realize(*outs)
    assert events[:7] == ["schedule"] + ["codegen", "compile"] * 3
    assert events[7] == "scheduled" and events[8:].count("compile") == 0
    np.testing.assert_equal([o.numpy() for o in outs], [np.arange(8) + 17, np.arange(8) * 19, np.arange(8) - 23])

  def test_codegen_error_waits_for_the_compiler(self, fresh_cache, monkeypatch):
    """An error in codegen after a batch started: the error comes out, the compiler processes are waited for."""
    from fusegrad.engine import realize
    compiler, waited = Device["CPU"].compiler, []
    start, get_runner = type(compiler).start_batch, realize.get_runner
    def tracking(self, srcs, units=0):
      wait = start(self, srcs, units)
      return lambda: waited.append(len(srcs)) or wait()
    calls: list[int] = []
    def failing(*args):
      calls.append(1)
      if len(calls) > 1: raise ValueError("codegen broke")
      return get_runner(*args)
    _chunked(monkeypatch, tracking, failing)
    x = Tensor(np.arange(8, dtype=np.float32), device="CPU")
    with pytest.raises(ValueError, match="codegen broke"):
      lower_schedule(Tensor.schedule((x + 11).contiguous(), (x * 13).contiguous()))
    assert waited == [1]

@needs_cpu
class TestCodegenCache:
  def run(self, monkeypatch, **ctx) -> tuple[int, np.ndarray]:
    """(get_program calls, result) of one kernel, with nothing loaded in the process."""
    from fusegrad.engine import realize
    calls, get_program = [0], realize.get_program
    def counting(*args, **kwargs):
      calls[0] += 1
      return get_program(*args, **kwargs)
    monkeypatch.setattr(STATE, "programs", type(STATE.programs)())
    monkeypatch.setattr(realize, "get_program", counting)
    with Context(**ctx):
      x = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8), device="CPU")
      out = ((x * 2).sum(axis=1) + 1).numpy()
    monkeypatch.undo()
    return calls[0], out

  def test_second_process_skips_codegen(self, fresh_cache, monkeypatch):
    expected = (np.arange(64, dtype=np.float32).reshape(8, 8) * 2).sum(axis=1) + 1
    n, out = self.run(monkeypatch, NOOPT=0)
    assert n >= 1
    np.testing.assert_equal(out, expected)
    n, out = self.run(monkeypatch, NOOPT=0)
    assert n == 0
    np.testing.assert_equal(out, expected)
    n, out = self.run(monkeypatch, NOOPT=1)  # other settings: another entry
    assert n >= 1
    np.testing.assert_equal(out, expected)

  def test_damaged_entry_is_generated_again(self, fresh_cache, monkeypatch):
    import sqlite3
    n, _ = self.run(monkeypatch)
    with sqlite3.connect(fresh_cache / "cache.db") as conn:  # valid checksums over JSON that isn't a ProgramSpec
      from fusegrad.helpers import _digest
      for key, in conn.execute("SELECT key FROM fusegrad_cache WHERE tbl='codegen'").fetchall():
        conn.execute("UPDATE fusegrad_cache SET val=?, sha256=? WHERE tbl='codegen' AND key=?",
                     (b'{"name": 1}', _digest("codegen", key, b'{"name": 1}'), key))
    m, out = self.run(monkeypatch)
    assert m == n
    np.testing.assert_equal(out, (np.arange(64, dtype=np.float32).reshape(8, 8) * 2).sum(axis=1) + 1)

@needs_cpu
def test_openmp_probe_is_cached(fresh_cache, monkeypatch):
  from fusegrad.runtime import ops_cpu
  cc = ops_cpu.find_c_compiler()
  first = ops_cpu.openmp_works(cc)
  def no_probe(cc): raise AssertionError("probed again")
  monkeypatch.setattr(ops_cpu, "_probe_openmp", no_probe)
  assert ops_cpu.openmp_works(cc) == first

@needs_cpu
def test_damaged_batch_library_is_a_miss(fresh_cache):
  import sqlite3
  compiler = Device["CPU"].compiler
  srcs = [kernel_src(f"k{i}", f"data0[0] = {i}.25f;") for i in range(3)]
  compiler.compile_cached_batch(srcs)
  with sqlite3.connect(fresh_cache / "cache.db") as conn:
    n = conn.execute("UPDATE fusegrad_cache SET val=substr(val, 1, 100) WHERE key LIKE 'lib:%'").rowcount
  assert n >= 1
  assert [run_kernel(f"k{i}", compiler.compile_cached(src)) for i, src in enumerate(srcs)] == [0.25, 1.25, 2.25]

@needs_cpu
def test_broken_other_compiler_falls_back(monkeypatch):
  from fusegrad.runtime import ops_cpu
  dev = ops_cpu.CPUDevice("CPU")
  if len(dev.renderer.compilers) < 2: pytest.skip("one C compiler installed: no other to choose")
  other = dev.renderer.compilers[1]
  compile_source = ops_cpu.ClangCompiler.compile
  def broken(self, src):
    if self.cc == [other]: raise CompileError(f"{other} is broken")
    return compile_source(self, src)
  monkeypatch.setattr(ops_cpu.ClangCompiler, "compile", broken)
  monkeypatch.setattr(ops_cpu, "openmp_works", lambda cc: cc != [other])
  assert dev.compiler_for(1) is dev.compiler
  assert run_kernel("fallback", dev.compiler_for(1).compile(kernel_src("fallback", "data0[0] = 4.0f;"))) == 4.0

@needs_cpu
def test_kernel_libraries_link_libm_and_libgcc_only_where_that_links(fresh_cache, monkeypatch):
  """Kernel libraries link no C runtime start files, libc or OpenMP runtime (the process has them: ops_cpu.LINK) where
  the compiler links a library that way, and as usual where it doesn't; libm's functions and halves still work, also
  without F16C (clang: compiler-rt's conversions)."""
  import ctypes, subprocess, sys
  from fusegrad.runtime import ops_cpu
  cc = ops_cpu.find_c_compiler()
  minimal = ops_cpu.link_flags(cc)[:len(ops_cpu.LINK)] == ops_cpu.LINK  # (+ the runtime library, if it has one)
  assert minimal == (sys.platform == "linux")
  src = ("#include <math.h>\n"
         "void fg_math(float *x, int n) { for (int i = 0; i < n; i++) x[i] = expf(x[i]) + sinf(x[i]); }")
  lib = ops_cpu.ClangCompiler(cc, False).compile(src + "\n")
  x = (ctypes.c_float * 3)(0.0, 1.0, 2.0)
  ops_cpu._load(lib).fg_math(x, 3)  # loads (every symbol it needs is in the process) and runs
  np.testing.assert_allclose(list(x), np.exp([0.0, 1.0, 2.0]) + np.sin([0.0, 1.0, 2.0]), rtol=1e-6)
  if minimal:
    with open(fresh_cache / "k.so", "wb") as f: f.write(lib)
    needed = subprocess.run(["readelf", "-d", str(fresh_cache / "k.so")], capture_output=True, text=True).stdout
    assert "Dynamic section" in needed and "libc.so" not in needed
  a = Tensor.rand(4096, 64)
  np.testing.assert_allclose(a.half().float().sum(1).numpy(), a.numpy().astype(np.float16).astype(np.float32).sum(1),
                             rtol=1e-5)
  if "sse4" in ops_cpu.host_isas():  # no F16C: the half conversions are calls into the compiler's runtime library
    half_t = "_Float16" if "Free Software Foundation" in ops_cpu.compiler_version(tuple(cc)) else "__fp16"
    src = f"void fg_half(float *x, unsigned short *y) {{ {half_t} h = ({half_t})*x; *y = *(unsigned short *)&h; }}\n"
    y = ctypes.c_ushort()
    ops_cpu._load(ops_cpu.ClangCompiler(cc, False, "sse4").compile(src)).fg_half(ctypes.byref(ctypes.c_float(1.5)),
                                                                                 ctypes.byref(y))
    assert y.value == np.float16(1.5).view(np.uint16)
  cache_reset()
  monkeypatch.setattr(ops_cpu, "_build", lambda *args: None)  # a compiler that can't link that way
  monkeypatch.setattr(ops_cpu, "compiler_version", lambda cc: "another compiler 1.0")
  assert ops_cpu.link_flags(cc) == ["-lm"]
