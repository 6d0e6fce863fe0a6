"""Untrusted input never becomes code: Variable names, dtype names and the compile cache (issue 8, sections 1-2)."""
import contextlib, pathlib, pickle, sqlite3
import numpy as np
import pytest
from fusegrad import Tensor, Variable, Device
from fusegrad.codegen import get_program
from fusegrad.dtype import DType, dtypes
from fusegrad.uop.ops import UOp, Ops
from fusegrad.renderer.cstyle import ClangRenderer, OpenCLRenderer, CUDARenderer

ROOT = pathlib.Path(__file__).resolve().parents[1]
INJECTION = 'a\n#define a ({ extern int system(const char*); system("touch /tmp/x"); 3; })\n'

# *** 1. no code injection ***
@pytest.mark.parametrize("name", [INJECTION, "a b", "1a", "", "a;", "a-b", "é", "_valid0", "_x", "ridx0", "gidx1",
                                  "lidx0", "data0", "val3", "alu0", "acc1", "cast0", "var0", 3, None])
def test_bad_variable_names_are_refused(name):
  with pytest.raises(ValueError, match="Variable name"): Variable(name, 1, 10)

@pytest.mark.parametrize("name", ["i", "n", "batch_size", "ridx", "data", "idx0", "I", "x1"])
def test_good_variable_names(name):
  assert Variable(name, 1, 10).arg == (name, 1, 10)

def test_variable_bounds_must_be_ints():
  with pytest.raises(ValueError, match="must be ints"): Variable("i", 1, "10")

def _kernel_with_variable(name: str = "n") -> UOp:
  """The AST of `arange(8) + v` with a DEFINE_VAR named `name`, made without Variable()'s checks (as an attacker
  building UOps by hand would)."""
  v = Variable("n", 1, 10)
  ast = (Tensor.arange(8) + v.bind(3)).schedule()[-1].ast
  return ast.substitute({v: UOp(Ops.DEFINE_VAR, v.dtype, (), (name, 1, 10))}) if name != "n" else ast

@pytest.mark.parametrize("ren", [ClangRenderer(), OpenCLRenderer(), CUDARenderer()], ids=["C", "CL", "CUDA"])
def test_variable_names_never_reach_the_source(ren):
  src = get_program(_kernel_with_variable(INJECTION), ren).src
  assert "system" not in src and "#define" not in src
  src = get_program(_kernel_with_variable("ridx0"), ren).src
  assert "const int ridx0" not in src and "int var0" in src

def test_clashing_name_gives_the_right_result():
  # a variable named like a loop counter used to be the loop counter in C: its value was ignored
  if Device.DEFAULT == "PYTHON": pytest.skip("needs a compiled backend")
  from fusegrad.engine.runner import CompiledRunner
  ast = _kernel_with_variable("ridx0")
  p = get_program(ast, Device[Device.DEFAULT].renderer)
  out = np.zeros(8, np.int32)
  from fusegrad.device import Buffer
  buf = Buffer(Device.DEFAULT, 8, dtypes.int32).allocate()
  CompiledRunner(p)([buf], {p.vars[0]: 3})
  buf.copyout(memoryview(out))
  np.testing.assert_equal(out, np.arange(8) + 3)

@pytest.mark.parametrize("ren", [ClangRenderer(), OpenCLRenderer(), CUDARenderer()], ids=["C", "CL", "CUDA"])
def test_unknown_dtype_names_never_reach_the_source(ren):
  evil = DType(5, 4, 'int; system("touch /tmp/x");', "i")
  with pytest.raises(ValueError, match="unknown dtype"): ren.render_dtype(evil)
  with pytest.raises(ValueError, match="unknown dtype"): ren.render_dtype(evil.ptr())
  assert ren.render_dtype(dtypes.int32) in ("int",)

def test_kernel_names_are_identifiers():
  from fusegrad.helpers import to_function_name
  assert to_function_name('E_4\x1b[31m"; system(x);') .isidentifier()

# *** 2. the compile cache: bytes with a checksum, never unpickled, never destroys a file that isn't the cache ***
from test.test_device import CACHE_SCRIPT, cached_run, compiles, run_python, needs_cpu  # noqa: E402

def _rewrite_rows(db: pathlib.Path, fn) -> None:
  """Replace each cached value by fn(value); with_digest rows keep a valid checksum (as a careful attacker would)."""
  from fusegrad.helpers import _digest
  with sqlite3.connect(db) as conn:
    for tbl, key, val in conn.execute("SELECT tbl, key, val FROM fusegrad_cache").fetchall():
      new, keep_digest = fn(val)
      conn.execute("UPDATE fusegrad_cache SET val=?, sha256=? WHERE tbl=? AND key=?",
                   (new, _digest(tbl, key, new) if keep_digest else "0" * 64, tbl, key))

@needs_cpu
class TestCacheSecurity:
  def test_pickles_in_the_cache_never_run(self, tmp_path):
    n = cached_run(tmp_path)
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Pwn(str(marker)))
    _rewrite_rows(tmp_path / "fusegrad" / "cache.db", lambda val: (payload, True))
    assert cached_run(tmp_path) == n  # the rows aren't shared libraries: everything is compiled again
    assert not marker.exists()

  @pytest.mark.parametrize("keep_digest", [False, True])
  def test_truncated_library_is_recompiled(self, tmp_path, keep_digest):
    n = cached_run(tmp_path)
    _rewrite_rows(tmp_path / "fusegrad" / "cache.db", lambda val: (val[:len(val) // 2], keep_digest))
    assert cached_run(tmp_path) == n
    assert cached_run(tmp_path) == 0  # and the cache holds good entries again

  @pytest.mark.parametrize("content", [b"my notes, not a database\n" * 10, "sqlite"])
  def test_cachedb_at_a_user_file_is_refused(self, tmp_path, content):
    user_file = tmp_path / "notes.txt"
    if content == "sqlite":
      with sqlite3.connect(user_file) as conn: conn.execute("CREATE TABLE mine (x)")
    else: user_file.write_bytes(content)
    before = user_file.read_bytes()
    proc = run_python(CACHE_SCRIPT, DEV="CPU", CACHEDB=str(user_file), DISABLE_COMPILER_CACHE=None)
    assert proc.returncode != 0 and "CACHEDB" in proc.stderr and "not a fusegrad cache" in proc.stderr
    assert user_file.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]

  @pytest.mark.parametrize("cachedb,old", [(True, False), (False, False), (True, True)])
  def test_truncated_cache_file_is_set_aside(self, tmp_path, cachedb, old):
    """A fusegrad cache cut to half its size (a full disk, a killed copy) is recognised as ours (by its header, or an
    older one without it by our table's schema on its first page): set aside with a warning and started again, never
    refused; the next run uses the new cache."""
    db = tmp_path / "kernels.db" if cachedb else tmp_path / "fusegrad" / "cache.db"
    n = cached_run(tmp_path, cachedb=str(db) if cachedb else None)
    with contextlib.closing(sqlite3.connect(db)) as conn:
      if old: conn.execute("PRAGMA application_id=0")
      conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # a cache at rest
    data = db.read_bytes()
    db.write_bytes(data[:len(data) // 2])
    proc = run_python(CACHE_SCRIPT, DEV="CPU", XDG_CACHE_HOME=str(tmp_path), CACHEDB=str(db) if cachedb else None,
                      DISABLE_COMPILER_CACHE=None)
    assert compiles(proc) == n and "damaged" in proc.stderr, proc.stderr
    assert db.with_name(db.name + ".damaged").read_bytes() == data[:len(data) // 2]
    assert cached_run(tmp_path, cachedb=str(db) if cachedb else None) == 0

  def test_cache_being_checkpointed_is_not_damaged(self, tmp_path):
    """A checkpoint by another process writes the header (with the new page count) before it grows the file: while
    the cache is open somewhere (NAME-wal exists) a short file is not damage, so a healthy cache in use by another
    process (pytest -n 2) is never set aside; at rest, the same file is."""
    from fusegrad.helpers import _damage
    db = tmp_path / "cache.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
      conn.execute("CREATE TABLE t (x)")
      conn.executemany("INSERT INTO t VALUES (?)", [(b"x" * 1000,)] * 50)
      conn.commit()
    data = bytearray(db.read_bytes())
    data[28:32] = (int.from_bytes(data[28:32], "big") + 5).to_bytes(4, "big")  # the header counts 5 pages more
    db.write_bytes(bytes(data))
    assert _damage(db) is not None
    db.with_name(db.name + "-wal").write_bytes(b"")
    assert _damage(db) is None

  def test_cachedb_at_a_cache_file_is_used(self, tmp_path):
    db = tmp_path / "kernels.db"
    n = cached_run(tmp_path, cachedb=str(db))
    assert n >= 1 and cached_run(tmp_path, cachedb=str(db)) == 0

  def test_unwritable_cache_falls_back_to_memory(self, tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_bytes(b"x")
    proc = run_python(CACHE_SCRIPT, DEV="CPU", XDG_CACHE_HOME=str(not_a_dir), CACHEDB=None, DISABLE_COMPILER_CACHE=None)
    assert compiles(proc) >= 1
    assert proc.stderr.count("Warning: fusegrad: can't use the kernel cache") == 1
    assert not_a_dir.read_bytes() == b"x"

def test_cache_is_bounded_least_recently_used_first(tmp_path):
  from fusegrad.helpers import Context, cache_reset, diskcache_get, diskcache_put
  cache_reset()
  try:
    with Context(CACHEDB=str(tmp_path / "c.db"), CACHE_SIZE_MB=1, DISABLE_COMPILER_CACHE=0):
      blob = {k: bytes([i]) * 400_000 for i, k in enumerate("abcd")}
      diskcache_put("t", "a", blob["a"])
      diskcache_put("t", "b", blob["b"])
      assert diskcache_get("t", "a") == blob["a"]  # a is now the most recently used
      diskcache_put("t", "c", blob["c"])  # 1.2 MB: b goes
      assert diskcache_get("t", "b") is None and diskcache_get("t", "a") == blob["a"]
      diskcache_put("t", "d", blob["d"])  # c goes (a was read after c was written)
      assert diskcache_get("t", "c") is None
      assert diskcache_get("t", "a") == blob["a"] and diskcache_get("t", "d") == blob["d"]
      with pytest.raises(TypeError, match="stores bytes"): diskcache_put("t", "e", ["not", "bytes"])
  finally: cache_reset()

def test_a_full_cache_is_not_counted_and_trimmed_at_every_put(tmp_path):
  """At its bound, every put summed and sorted the whole cache (0.27 s a put at 1 GB, 31 s for a first step's kernels):
  now it is counted once per process, and a trim leaves room (7/8 of the bound) for the puts that follow."""
  from fusegrad.helpers import Context, cache_reset, diskcache_get, diskcache_put, _db
  cache_reset()
  try:
    with Context(CACHEDB=str(tmp_path / "c.db"), CACHE_SIZE_MB=1, DISABLE_COMPILER_CACHE=0):
      for i in range(10): diskcache_put("t", f"fill{i}", bytes([i]) * 100_000)  # 1,000,000 bytes: at the bound
      statements: list[str] = []
      _db().set_trace_callback(statements.append)
      for i in range(10): diskcache_put("t", f"new{i}", bytes([i]) * 20_000)
      assert sum("ORDER BY used" in q for q in statements) == 1 and sum("SUM(LENGTH" in q for q in statements) <= 2
      assert diskcache_get("t", "fill0") is None and diskcache_get("t", "new9") == bytes([9]) * 20_000
  finally: cache_reset()

def test_beam_cache_entry_is_json_and_checked(tmp_path):
  from fusegrad.helpers import Context, cache_reset, diskcache_put
  from fusegrad.engine import search
  cache_reset()
  try:
    with Context(CACHEDB=str(tmp_path / "c.db"), DISABLE_COMPILER_CACHE=0):
      diskcache_put("beam_search", "k1", b'[["UPCAST", 0, 4]]')
      diskcache_put("beam_search", "k2", pickle.dumps([1, 2]))
      diskcache_put("beam_search", "k3", b'[["os.system", 0, 4]]')
      assert search._cached_opts("k1") == [search.Opt(search.OptOps.UPCAST, 0, 4)]
      assert search._cached_opts("k2") is None and search._cached_opts("k3") is None
  finally: cache_reset()

class _Pwn:
  def __init__(self, path: str): self.path = path
  def __reduce__(self): return (open, (self.path, "w"))

def test_damaged_cl_binary_is_recompiled(tmp_path):
  if not Device.get_available("CL")[0]: pytest.skip("no OpenCL")
  script = CACHE_SCRIPT.replace("ops_cpu.ClangCompiler", "ops_cl.CLCompiler").replace("ops_cpu", "ops_cl")
  def run() -> int: return compiles(run_python(script, DEV="CL", XDG_CACHE_HOME=str(tmp_path), CACHEDB=None,
                                               DISABLE_COMPILER_CACHE=None))
  n = run()
  # damaged after it was stored: the checksum catches it (a binary damaged *before* its checksum was taken can crash
  # the OpenCL driver itself: nothing short of compiling again could tell)
  _rewrite_rows(tmp_path / "fusegrad" / "cache.db", lambda val: (val[:len(val) // 3], False))
  assert n >= 1 and run() == n and run() == 0
