"""The device registry, the on-disk compile cache, flags (Context, getenv), GlobalCounters and the progress bar."""
import os, pathlib, re, sqlite3, subprocess, sys
import numpy as np
import pytest
from fusegrad import Tensor, Device, Context, GlobalCounters, getenv, dtypes
from fusegrad.device import Compiled
from fusegrad.helpers import DEBUG, BEAM, DEV, tqdm, trange

ROOT = pathlib.Path(__file__).resolve().parent.parent

def cpu_works() -> bool: return Device.get_available("CPU")[0]
needs_cpu = pytest.mark.skipif(not cpu_works(), reason="needs the CPU backend (a C compiler)")

def run_python(code: str, timeout: float = 120, **env_overrides: str | None) -> subprocess.CompletedProcess:
  """code in a fresh interpreter; env_overrides set (or, with None, remove) environment variables."""
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  for k, v in env_overrides.items():
    if v is None: env.pop(k, None)
    else: env[k] = v
  return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout,
                        cwd=ROOT)

# *** the registry ***
class TestRegistry:
  def test_default(self):
    assert isinstance(Device.DEFAULT, str)
    assert Device.get_available(Device.DEFAULT) == (True, "")
    if DEV.value: assert Device.DEFAULT == Device.canonicalize(DEV.value)
    assert Tensor([1.0]).device == Device.DEFAULT

  def test_python_always_works(self):
    dev = Device["PYTHON"]
    assert isinstance(dev, Compiled) and dev.renderer.device == "PYTHON"
    assert Tensor([1.0, 2.0], device="PYTHON").add(1).tolist() == [2.0, 3.0]

  @needs_cpu
  def test_cpu(self):
    dev = Device["CPU"]
    assert dev is Device["cpu"] is Device["CPU:0"]  # opened once, whatever the spelling
    assert isinstance(dev, Compiled)
    assert dev.renderer.device == "CPU"
    assert dev.allocator is not None and dev.compiler is not None and dev.runtime is not None
    assert (Tensor([1.0, 2.0], device="cpu") * 3).tolist() == [3.0, 6.0]

  def test_canonicalize(self):
    assert Device.canonicalize("cpu") == "CPU"
    assert Device.canonicalize("CPU:0") == "CPU"
    assert Device.canonicalize("cpu:1") == "CPU:1"
    assert Device.canonicalize("python") == "PYTHON"
    assert Device.canonicalize(None) == Device.DEFAULT

  def test_unknown_device(self):
    with pytest.raises(ValueError, match=r"unknown device 'NOPE'.*PYTHON"): Device["nope"]
    with pytest.raises(ValueError, match="unknown device 'NOPE'"): Tensor([1.0], device="nope")
    with pytest.raises(ValueError, match="unknown device 'NOPE'"): Tensor([1.0]).to("nope").realize()
    ok, why = Device.get_available("nope")
    assert not ok and "unknown device" in why

  def test_tensors_on_two_devices_dont_mix(self):
    other = "PYTHON" if Device.DEFAULT != "PYTHON" else ("CPU" if cpu_works() else None)
    if other is None: pytest.skip("only one device works here")
    with pytest.raises(ValueError, match="different devices"): Tensor([1.0]) + Tensor([1.0], device=other)
    assert (Tensor([1.0]) + Tensor([2.0], device=other).to(Device.DEFAULT)).tolist() == [3.0]

class TestDevEnv:
  def test_dev_python(self):
    proc = run_python("from fusegrad import Tensor, Device; print(Device.DEFAULT, Tensor([1]).device)", DEV="PYTHON")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["PYTHON", "PYTHON"]

  def test_dev_lowercase(self):
    proc = run_python("from fusegrad import Device; print(Device.DEFAULT)", DEV="python")
    assert proc.stdout.strip() == "PYTHON", proc.stderr

  @needs_cpu
  def test_dev_cpu(self):
    proc = run_python("from fusegrad import Tensor, Device; print(Device.DEFAULT, (Tensor([1.0]) + 1).tolist())",
                      DEV="CPU")
    assert proc.stdout.split() == ["CPU", "[2.0]"], proc.stderr

  def test_dev_unknown_is_a_clear_error(self):
    proc = run_python("from fusegrad import Tensor; Tensor([1.0]).realize()", DEV="NOPE")
    assert proc.returncode != 0
    assert "DEV=NOPE can't be opened" in proc.stderr and "unknown device" in proc.stderr

  def test_no_dev_picks_a_working_backend(self):
    proc = run_python("from fusegrad import Device; print(Device.DEFAULT)", DEV=None)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ("CPU" if cpu_works() else "PYTHON")

# *** the compile cache: one SQLite file under $XDG_CACHE_HOME/fusegrad ***
# counts calls to the C compiler in a subprocess, and checks the values it computes
CACHE_SCRIPT = """
import numpy as np
import fusegrad.runtime.ops_cpu as ops_cpu
calls = set()  # the kernel sources compiled, alone or in a batch
compile_source, start_batch = ops_cpu.ClangCompiler.compile, ops_cpu.ClangCompiler.start_batch
def counting_compile(self, src):
  calls.add(src)
  return compile_source(self, src)
def counting_batch(self, srcs, units=0):
  calls.update(srcs)
  return start_batch(self, srcs, units)
ops_cpu.ClangCompiler.compile, ops_cpu.ClangCompiler.start_batch = counting_compile, counting_batch
from fusegrad import Tensor
x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
out = ((x * 2 + 1).sum(axis=1) + x.max()).numpy()
assert out.tolist() == [27.0, 59.0, 91.0], out
print("compiles", len(calls))
"""

def compiles(proc: subprocess.CompletedProcess) -> int:
  assert proc.returncode == 0, proc.stderr
  return int(proc.stdout.split("compiles")[1].split()[0])

def cached_run(cache_home: pathlib.Path, cachedb: str | None = None, disable: str | None = None) -> int:
  """Run CACHE_SCRIPT on the CPU with this cache folder; how many kernels it had to compile."""
  return compiles(run_python(CACHE_SCRIPT, DEV="CPU", XDG_CACHE_HOME=str(cache_home), CACHEDB=cachedb,
                             DISABLE_COMPILER_CACHE=disable))

def cache_rows(db: pathlib.Path) -> int:
  """Compiled kernels stored in the cache file."""
  with sqlite3.connect(db) as conn:
    return conn.execute("SELECT count(*) FROM fusegrad_cache WHERE tbl LIKE 'compile_%'").fetchone()[0]

@needs_cpu
class TestCompileCache:
  def test_created_and_reused(self, tmp_path):
    n = cached_run(tmp_path)
    db = tmp_path / "fusegrad" / "cache.db"
    assert n >= 1 and db.is_file()
    assert cache_rows(db) == n
    assert cached_run(tmp_path) == 0  # every kernel came from the cache
    assert cache_rows(db) == n

  def test_cachedb_path(self, tmp_path):
    db = tmp_path / "elsewhere" / "my.db"
    n = cached_run(tmp_path / "xdg", cachedb=str(db))
    assert n >= 1 and cache_rows(db) == n
    assert not (tmp_path / "xdg" / "fusegrad" / "cache.db").exists()

  def test_disabled(self, tmp_path):
    assert cached_run(tmp_path, disable="1") >= 1
    assert cached_run(tmp_path, disable="1") >= 1  # compiled again
    assert not (tmp_path / "fusegrad" / "cache.db").exists()

  def test_corrupted_file_is_recovered(self, tmp_path):
    db = tmp_path / "fusegrad" / "cache.db"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"this is not an sqlite database " * 200)
    n = cached_run(tmp_path)
    assert n >= 1 and cache_rows(db) == n  # rebuilt as a working cache
    assert cached_run(tmp_path) == 0

  def test_corrupted_entry_is_recompiled(self, tmp_path):
    n = cached_run(tmp_path)
    with sqlite3.connect(tmp_path / "fusegrad" / "cache.db") as conn:
      conn.execute("UPDATE fusegrad_cache SET val=?", (b"\x80garbage",))
    assert cached_run(tmp_path) == n

  def test_two_processes_at_once(self, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DEV": "CPU", "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("CACHEDB", None)
    env.pop("DISABLE_COMPILER_CACHE", None)
    procs = [subprocess.Popen([sys.executable, "-c", CACHE_SCRIPT], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(2)]
    for p in procs:
      out, err = p.communicate(timeout=120)
      assert p.returncode == 0, err
      assert "compiles" in out
    assert cache_rows(tmp_path / "fusegrad" / "cache.db") >= 1
    assert cached_run(tmp_path) == 0

# *** flags ***
class TestContext:
  def test_with_block(self):
    before = DEBUG.value
    with Context(DEBUG=4, BEAM=2):
      assert DEBUG.value == 4 and DEBUG >= 4 and BEAM == 2
    assert DEBUG.value == before and BEAM.value == 0

  def test_nested(self):
    with Context(DEBUG=1):
      with Context(DEBUG=3):
        assert DEBUG.value == 3
      assert DEBUG.value == 1

  def test_restored_after_an_exception(self):
    before = DEBUG.value
    with pytest.raises(ZeroDivisionError):
      with Context(DEBUG=5): _ = 1 / 0
    assert DEBUG.value == before

  def test_decorator(self):
    @Context(DEBUG=3)
    def inside() -> int: return DEBUG.value
    before = DEBUG.value
    assert inside() == 3 and inside() == 3
    assert DEBUG.value == before

  def test_unknown_flag(self):
    with pytest.raises(KeyError, match="unknown flag 'NOT_A_FLAG'"): Context(NOT_A_FLAG=1)

  def test_a_flag_declared_again_is_the_first_as_tinygrad(self):
    from fusegrad.helpers import ContextVar
    first, again = ContextVar("FG_TEST_TWICE", 1, "a test flag"), ContextVar("FG_TEST_TWICE", 2, "a test flag")
    assert again is first and again.value == 1 and ContextVar("DEBUG", 7) is DEBUG
    with Context(FG_TEST_TWICE=3): assert first.value == 3
    assert first.value == 1

  def test_an_unpickled_flag_holds_the_value_it_had_as_tinygrad(self):
    import pickle  # (tinygrad's test_pickle_context_var; loading it changes no flag of this process)
    before = DEBUG.value
    with Context(DEBUG=before + 2): saved = pickle.dumps(DEBUG)
    loaded = pickle.loads(saved)
    assert loaded.value == before + 2 and loaded.key == "DEBUG" and loaded is not DEBUG and DEBUG.value == before

  def test_tinygrad_flags_for_its_compiler_are_taken_and_change_nothing(self):
    x = Tensor([0.5, -3.0, 80.0])
    with Context(TRANSCENDENTAL=2, WINO=1, FUSE_ARANGE=1, TC=0):  # (tinygrad's tests and scripts set them)
      np.testing.assert_allclose(x.exp().numpy(), np.exp(x.numpy()), rtol=1e-6)
    with pytest.raises(KeyError, match="unknown flag 'WINOGRAD'"): Context(WINOGRAD=1)

  def test_flag_compares_like_its_value(self):
    with Context(DEBUG=2):
      assert DEBUG >= 2 and DEBUG > 1 and DEBUG < 3 and DEBUG <= 2 and DEBUG == 2 and bool(DEBUG) and int(DEBUG) == 2
    with Context(DEBUG=0): assert not DEBUG

  def test_flags_read_from_the_environment(self):
    proc = run_python("from fusegrad.helpers import DEBUG, BEAM; print(DEBUG.value, BEAM.value)", DEBUG="2", BEAM="3")
    assert proc.stdout.split() == ["2", "3"], proc.stderr

class TestGetenv:
  def test_types_follow_the_default(self, monkeypatch):
    monkeypatch.setenv("FG_TEST_VALUE", "5")
    assert getenv("FG_TEST_VALUE") == 5 and isinstance(getenv("FG_TEST_VALUE"), int)
    assert getenv("FG_TEST_VALUE", "") == "5"
    assert getenv("FG_TEST_VALUE", 1.5) == 5.0
    monkeypatch.setenv("FG_TEST_VALUE", "2.5")
    assert getenv("FG_TEST_VALUE", 0.0) == 2.5

  def test_missing(self, monkeypatch):
    monkeypatch.delenv("FG_TEST_MISSING", raising=False)
    assert getenv("FG_TEST_MISSING") == 0
    assert getenv("FG_TEST_MISSING", "x") == "x"

  def test_bool(self, monkeypatch):
    for val, want in [("1", True), ("0", False), ("", False), ("false", False), ("yes", True)]:
      monkeypatch.setenv("FG_TEST_BOOL", val)
      assert getenv("FG_TEST_BOOL", False) is want

class TestGlobalCounters:
  def test_counts_and_reset(self):
    GlobalCounters.reset()
    x = Tensor(np.ones((4, 8), dtype=np.float32))
    (x * 2 + 1).realize()
    assert GlobalCounters.kernel_count == 1
    assert GlobalCounters.global_ops >= 32  # at least one op per element
    assert GlobalCounters.global_mem >= 2 * 32 * 4  # read x, wrote the result
    mem = GlobalCounters.mem_used
    GlobalCounters.reset()
    assert GlobalCounters.kernel_count == 0 and GlobalCounters.global_ops == 0
    assert GlobalCounters.global_mem == 0 and GlobalCounters.time_sum_s == 0.0
    assert GlobalCounters.mem_used == mem  # memory in use is not a per-run total

  def test_matmul_flops(self):
    """A matmul is 2*M*N*K operations however it is unrolled or fused (a multiply-add counts two), so GFLOPS is real."""
    a, b = Tensor.rand(32, 48).realize(), Tensor.rand(48, 40).realize()
    GlobalCounters.reset()
    (a @ b).realize()
    assert GlobalCounters.global_ops == 2 * 32 * 48 * 40

  def test_gather_counts_no_address_ops(self):
    """A gather only loads: the row address and the gate that keeps it in range are not operations (as tinygrad's)."""
    w, idx = Tensor.rand(20, 30).realize(), Tensor([[1, 5, 9, 11], [12, 19, 8, 1]]).realize()
    with Context(CHECK_INDEX=0, NOOPT=1):  # (the index check is a kernel of its own, which counts its compares)
      GlobalCounters.reset()
      out = w[idx].realize()
    assert GlobalCounters.kernel_count == 1 and GlobalCounters.global_ops == 0
    np.testing.assert_equal(out.numpy(), w.numpy()[idx.numpy()])

  def test_time_with_debug(self):
    GlobalCounters.reset()
    with Context(DEBUG=2): (Tensor([1.0, 2.0]) * 3).realize()
    assert GlobalCounters.time_sum_s > 0

# *** the progress bar ***
class TestProgressBar:
  def test_trange_with_set_description(self, capsys):
    seen = []
    bar = trange(10)
    for i in bar:
      bar.set_description(f"step {i}")
      seen.append(i)
    assert seen == list(range(10))
    last = capsys.readouterr().err.split("\r")[-1]
    assert last.startswith("step 9: 100%|") and "10/10" in last and last.endswith("\n")

  def test_tqdm_over_an_iterable(self, capsys):
    assert list(tqdm(["a", "b", "c"], desc="letters")) == ["a", "b", "c"]
    last = capsys.readouterr().err.split("\r")[-1]
    assert last.startswith("letters: 100%|") and "3/3" in last

  def test_generator_without_length(self, capsys):
    assert sum(tqdm(i for i in range(7))) == 21
    assert " 7 [" in capsys.readouterr().err.split("\r")[-1]

  def test_manual_updates(self, capsys):
    with tqdm(total=40, desc="bytes") as bar:
      for _ in range(4): bar.update(10)
    last = capsys.readouterr().err.split("\r")[-1]
    assert last.startswith("bytes: 100%|") and "40/40" in last

  def test_disabled_prints_nothing(self, capsys):
    assert list(tqdm(range(3), disable=True)) == [0, 1, 2]
    assert capsys.readouterr().err == ""

  def test_many_fast_iterations(self, capsys):
    bar = trange(20000)
    total = 0
    for i in bar: total += i
    assert total == sum(range(20000))
    err = capsys.readouterr().err
    assert err.count("\r") < 2000  # redrawn at a limited rate, not once per step
    assert "20000/20000" in err.split("\r")[-1]

# *** settings and device strings are validated (issue 8.6) ***
class TestBadSettings:
  @pytest.mark.parametrize("env, message", [({"DEBUG": "abc"}, "DEBUG='abc' is invalid: DEBUG takes an integer"),
                                            ({"BEAM": "-1"}, "BEAM=-1 is invalid: BEAM takes a value >= 0"),
                                            ({"CPU_THREADS": "-3"}, "CPU_THREADS=-3 is invalid"),
                                            ({"JIT": "1.5"}, "JIT='1.5' is invalid: JIT takes an integer")])
  def test_bad_environment_value_names_the_variable(self, env, message):
    proc = run_python("import fusegrad", **env)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert "invalid literal" not in proc.stderr

  def test_bad_context_value(self):
    with pytest.raises(ValueError, match="DEBUG='abc' is invalid: DEBUG takes an integer"): Context(DEBUG="abc")
    with pytest.raises(ValueError, match="BEAM=-1 is invalid"): Context(BEAM=-1)
    with pytest.raises(ValueError, match="DEV=3 is invalid: DEV takes a string"): Context(DEV=3)
    with Context(DEBUG="2"): assert DEBUG.value == 2  # a string from a config file is fine when it is a number

  def test_context_takes_bools_and_dtypes(self):  # what tinygrad's own tests pass
    from fusegrad.helpers import TRAINING
    with Context(TRAINING=True): assert TRAINING.value == 1 and type(TRAINING.value) is int
    with Context(TRAINING=False): assert TRAINING.value == 0 and not TRAINING
    with Context(DEFAULT_FLOAT=dtypes.half):
      assert dtypes.default_float == dtypes.half and Tensor.ones(2).dtype == Tensor([1.5]).dtype == dtypes.half
    with Context(DEFAULT_FLOAT="float64"): assert Tensor([1.5]).dtype == dtypes.float64
    assert dtypes.default_float == dtypes.float32 and Tensor([1.5]).dtype == dtypes.float32

  GARBAGE_FLAGS = [({"TRAINING": "yes"}, "TRAINING='yes' is invalid: TRAINING takes an integer"),
                   ({"TRAINING": 0.5}, "TRAINING=0.5 is invalid: TRAINING takes an integer"),
                   ({"DEV": True}, "DEV=True is invalid: DEV takes a string"),
                   ({"DEFAULT_FLOAT": dtypes.int32}, "DEFAULT_FLOAT=dtypes.int is invalid"),
                   ({"DEFAULT_FLOAT": 3}, "DEFAULT_FLOAT=3 is invalid: DEFAULT_FLOAT takes a float"),
                   ({"DEFAULT_FLOAT": "floot"}, "DEFAULT_FLOAT='floot' is invalid")]
  @pytest.mark.parametrize("flags, message", GARBAGE_FLAGS)
  def test_context_refuses_garbage(self, flags, message):
    with pytest.raises(ValueError, match=re.escape(message)): Context(**flags)

  def test_getenv_names_the_variable(self, monkeypatch):
    monkeypatch.setenv("FG_TEST_VALUE", "lots")
    with pytest.raises(ValueError, match="FG_TEST_VALUE='lots' is invalid: FG_TEST_VALUE takes an integer"):
      getenv("FG_TEST_VALUE", 3)

  @pytest.mark.parametrize("device", ["cpu:x", "cpu:", "cpu:-1", " cpu", "cpu:1:2", "c p u", ""])
  def test_bad_device_strings(self, device):
    with pytest.raises(ValueError, match="bad device"): Device.canonicalize(device)
    with pytest.raises(ValueError, match="bad device"): Tensor([1.0], device=device)

  def test_device_index_forms(self):
    assert Device.canonicalize("cpu:01") == "CPU:1" and Device.canonicalize("python:0") == "PYTHON"

  def test_bad_dev_variable(self):
    proc = run_python("from fusegrad import Tensor; Tensor([1.0]).realize()", DEV="cpu:x")
    assert proc.returncode != 0 and "DEV=cpu:x can't be opened: bad device 'cpu:x'" in proc.stderr, proc.stderr

  def test_context_dev_after_the_first_tensor(self):
    other = "PYTHON" if Device.DEFAULT != "PYTHON" else ("CPU" if cpu_works() else None)
    if other is None: pytest.skip("only one device works here")
    first = Tensor([1.0, 2.0])
    with Context(DEV=other):
      t = Tensor([1.0, 2.0]) * 3
      assert t.device == other and Tensor.zeros(2).device == other and t.tolist() == [3.0, 6.0]
    assert Tensor([1.0]).device == first.device != other

class TestCompilerChoice:
  @pytest.mark.parametrize("cc", ["/no/such/gcc", "ccache-that-isnt-there gcc", "false"])
  def test_broken_cc_is_an_error_not_a_silent_fallback(self, cc):
    proc = run_python("from fusegrad import Device; print(Device.DEFAULT)", CC=cc, DEV=None)
    assert proc.returncode != 0 and "the CPU backend doesn't work" in proc.stderr and f"CC={cc!r}" in proc.stderr
    assert "PYTHON" not in proc.stdout

  @needs_cpu
  def test_cc_with_a_wrapper_command(self):  # as "ccache gcc": the first word runs the rest
    import shutil
    cc = next(c for c in ("clang", "gcc", "cc") if shutil.which(c))
    proc = run_python("from fusegrad import Device, Tensor; print(Device.DEFAULT, (Tensor([1.0]) + 1).tolist())",
                      CC=f"env {cc}", DEV=None)
    assert proc.stdout.split() == ["CPU", "[2.0]"], proc.stderr

  def test_no_compiler_installed_falls_back_to_python_and_says_so(self, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": str(tmp_path)}
    for k in ("CC", "DEV"): env.pop(k, None)
    proc = subprocess.run([sys.executable, "-c", "from fusegrad import Device, Tensor; "
                           "print(Device.DEFAULT, (Tensor([1.0]) + 1).tolist())"], env=env, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.stdout.split() == ["PYTHON", "[2.0]"], proc.stderr
    assert "no C compiler installed" in proc.stderr and "PYTHON interpreter" in proc.stderr

class TestOutOfMemory:
  def check(self, e: BaseException, nbytes: int, device: str, shape: tuple) -> None:
    assert isinstance(e, MemoryError) and isinstance(e, RuntimeError)  # both, as Python's and torch's
    assert f"{nbytes} bytes" in str(e) and device in str(e) and f"shape {shape}" in str(e), str(e)

  def test_allocator_failure(self, monkeypatch):
    """Any backend: an allocator that can't allocate gives an error naming bytes, device and shape; later work goes on."""
    allocator = Device[Device.DEFAULT].allocator
    real_alloc = allocator.alloc
    def alloc(nbytes: int):
      if nbytes >= 10**6: raise MemoryError()
      return real_alloc(nbytes)
    monkeypatch.setattr(allocator, "alloc", alloc)
    with pytest.raises(MemoryError) as e: (Tensor.ones(1000, 1000) + 1).realize()
    self.check(e.value, 4_000_000, Device.DEFAULT, (1000, 1000))
    monkeypatch.undo()
    np.testing.assert_equal((Tensor([1.0, 2.0]) * 2).numpy(), [2.0, 4.0])

  @needs_cpu
  @pytest.mark.skipif(pathlib.Path("/proc/sys/vm/overcommit_memory").exists() and
                      pathlib.Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "1",
                      reason="the OS promises any amount of memory (overcommit_memory=1): 1 TiB would be touched")
  def test_one_tib_on_cpu(self):
    """The issue's example: 2**38 float32 zeros (1 TiB) can't be mapped; later ops still work."""
    with pytest.raises(MemoryError) as e: Tensor.zeros(2**38, device="CPU").contiguous().realize()
    self.check(e.value, 2**40, "CPU", (2**38,))
    assert Tensor([1, 2], device="CPU").sum().item() == 3

def test_data_goes_to_its_device_when_first_used():
  """As tinygrad: a tensor made from data takes device memory when realized or used, not when made (nothing for one
  never used), with the data it was made from."""
  import gc
  gc.collect()
  before, x = GlobalCounters.mem_used, np.arange(1000, dtype=np.float32)
  t = Tensor(x)
  assert GlobalCounters.mem_used == before
  del t
  gc.collect()
  assert GlobalCounters.mem_used == before
  t = Tensor(x)
  x[:] = -1  # taken when made
  assert t.realize() is t and GlobalCounters.mem_used == before + 4000
  np.testing.assert_equal(t.numpy(), np.arange(1000))
  np.testing.assert_equal((Tensor([1.5, 2.0]) * Tensor([2.0, 3.0])).numpy(), [3.0, 6.0])

def test_a_buffer_pickles_with_its_contents_and_a_view_with_its_base():
  import pickle
  t = Tensor.arange(10).contiguous().realize()
  base = t.uop.realized
  view = base.view(3, base.dtype, 4 * base.dtype.itemsize)
  b2, v2 = pickle.loads(pickle.dumps((base, view)))
  assert v2.base is b2 and not b2.is_allocated()  # (contents copied in when first used)
  assert list(b2.as_buffer().cast("i")) == list(range(10)) and list(v2.as_buffer().cast("i")) == [4, 5, 6]
  assert Tensor.ones(3).uop.realized is None and t.uop.realized is t.uop.buffer  # tinygrad's UOp.realized

def test_at_exit_every_device_waits_and_one_that_fails_is_quiet():  # device._wait_for_devices
  code = ("import fusegrad.device as d\nclass Lost:\n  def synchronize(self): raise RuntimeError('lost')\n"
          "class Queued:\n  def synchronize(self): print('waited')\n"
          "d.Device._opened['LOST'], d.Device._opened['QUEUED'] = Lost(), Queued()")
  out = run_python(code)
  assert out.returncode == 0 and out.stdout.strip() == "waited" and "lost" not in out.stderr, out
