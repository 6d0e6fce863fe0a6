"""Small helpers shared by every stage: flags, counters, printing, caching, downloads, progress bars. Every setting
fusegrad reads from the environment is declared here ("Flags" below); nothing else reads os.environ."""
from __future__ import annotations
import atexit, cProfile, contextlib, functools, gzip, hashlib, importlib, itertools, math, os, pathlib, pstats, re
import sqlite3, sys, tempfile, threading, time, urllib.request, warnings, weakref
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

T = TypeVar("T")
OSX, WIN = sys.platform == "darwin", sys.platform == "win32"

# *** small pure functions ***
def prod(x: Iterable[Any], start: Any = 1) -> Any:
  """Product of an iterable (works on ints and on symbolic UOps)."""; return math.prod(x, start=start)

def dedup(x: Iterable[T]) -> list[T]: return list(dict.fromkeys(x))
def all_same(items: Sequence[Any]) -> bool: return all(x == items[0] for x in items)
def all_int(t: Sequence[Any]) -> bool: return all(isinstance(s, int) for s in t)
def flatten(lists: Iterable[Iterable[T]]) -> list[T]: return [x for xs in lists for x in xs]
def ceildiv(num: int, amt: int) -> int: return -(-num // amt)
def round_up(num: int, amt: int) -> int: return ceildiv(num, amt) * amt
def argsort(x: Sequence[Any]) -> list[int]: return sorted(range(len(x)), key=x.__getitem__)
def round_down(num: int, amt: int) -> int: return num // amt * amt
def next_power2(x: int) -> int: return 1 if x <= 1 else 1 << (x - 1).bit_length()
def cdiv(a: int, b: int) -> int:
  """Integer division rounding toward zero (C's a / b): cdiv(-7, 2) is -3; by zero it is 0 (C traps)."""
  return abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1) if b != 0 else 0
def cmod(a: int, b: int) -> int: return a - cdiv(a, b) * b  # C's a % b: the sign of a
def fully_flatten(x: Any) -> list:
  """Nested lists and tuples (and numpy arrays) as one flat list: fully_flatten([[1, [2]], 3]) is [1, 2, 3]."""
  if hasattr(x, "shape") and hasattr(x, "flatten"): return list(x.flatten())
  return [y for e in x for y in fully_flatten(e)] if isinstance(x, (list, tuple)) else [x]
def get_single_element(x: Sequence[T]) -> T:
  if len(x) != 1: raise ValueError(f"expected a single element, got {len(x)} in {x!r}"[:200])
  return x[0]
def merge_dicts(ds: Iterable[dict]) -> dict:
  """The union of the dicts; a key with two different values is a RuntimeError."""
  ret: dict = {}
  for d in ds:
    for k, v in d.items():
      if ret.setdefault(k, v) != v: raise RuntimeError(f"merge_dicts: key {k!r} has the values {ret[k]!r} and {v!r}")
  return ret
def get_child(obj: Any, key: str) -> Any:
  """The object at a dotted path of attributes, dict keys and list indices: get_child(model, "layers.0.weight")."""
  for k in key.split("."): obj = obj[int(k)] if k.isnumeric() else obj[k] if isinstance(obj, dict) else getattr(obj, k)
  return obj
def pluralize(st: str, cnt: int) -> str:
  """pluralize("kernel", 2) is '2 kernels'."""; return f"{cnt} {st}s" if cnt != 1 else f"1 {st}"
def partition(items: Iterable[T], fn: Callable[[T], bool]) -> tuple[list[T], list[T]]:
  marked = [(fn(x), x) for x in items]
  return [x for yes, x in marked if yes], [x for yes, x in marked if not yes]
def argfix(*x: Any) -> tuple:
  """Accept both f(1, 2, 3) and f((1, 2, 3)): the tuple, numpy integers as ints (sizes from np.prod: as torch)."""
  if x and isinstance(x[0], (tuple, list)):
    if len(x) != 1: raise ValueError(f"pass either one sequence or several values, got {x}")
    x = tuple(x[0])
  return x if all(type(v) is int for v in x) else tuple(v.__index__() if _numpy_scalar(v) and hasattr(v, "__index__")
                                                        else v for v in x)
def _is_numpy(x: Any) -> bool: return type(x).__module__ == "numpy" and hasattr(x, "__array_interface__")
def _numpy_scalar(x: Any) -> bool: return _is_numpy(x) and x.ndim == 0
def make_tuple(x: int | Sequence[int], cnt: int) -> tuple[int, ...]:
  return (x,) * cnt if isinstance(x, int) else tuple(x)
def unwrap(x: T | None) -> T:
  assert x is not None
  return x
def to_function_name(s: str) -> str:
  """A string made safe for use as a C identifier (ANSI colors stripped)."""
  return "".join(c if c.isalnum() or c == "_" else f"{ord(c):02X}" for c in ansistrip(s))

# *** flags ***
def _convert(key: str, val: Any, default: Any) -> Any:
  """val (from the environment or Context) as the type of default; ValueError naming key and what it takes otherwise."""
  if isinstance(default, bool): return val not in ("", "0", "false", "False") if isinstance(val, str) else bool(val)
  kind = type(default)
  if isinstance(val, bool) and kind in (int, float): return kind(val)  # Context(TRAINING=True) is TRAINING=1
  if isinstance(val, kind): return val
  what = {int: "an integer", float: "a number", str: "a string"}.get(kind, kind.__name__)
  if isinstance(val, str) or (kind is float and isinstance(val, int)):
    try: return kind(val.strip() if isinstance(val, str) else val)
    except ValueError: pass
  raise ValueError(f"{key}={val!r} is invalid: {key} takes {what}")

def getenv(key: str, default: Any = 0) -> Any:
  """Read an environment variable, converted to the type of `default` (the one place os.environ is read)."""
  val = os.environ.get(key)
  return default if val is None else _convert(key, val, default)

@functools.total_ordering
class ContextVar:
  """A flag read once from the environment, overridable with `with Context(NAME=value)`; numeric flags are >= 0. The
  module that owns a flag's meaning may set `parse` (value -> value, ValueError on garbage), as dtype.py does."""
  _cache: dict[str, ContextVar] = {}
  def __new__(cls, key: str, *args: Any, **kwargs: Any) -> ContextVar:  # declared again: the first (as tinygrad's)
    return ContextVar._cache[key] if key in ContextVar._cache else super().__new__(cls)
  def __init__(self, key: str, default: Any, doc: str = ""):
    if key in ContextVar._cache: return
    self.key, self.default, self.doc = key, default, doc
    self.parse: Callable[[Any], Any] | None = None
    self.value = self.check(getenv(key, default))
    ContextVar._cache[key] = self
  def check(self, val: Any) -> Any:
    """val converted to this flag's type; ValueError naming the flag and what it accepts otherwise."""
    if self.parse is not None: return self.parse(val)
    val = _convert(self.key, val, self.default)
    if isinstance(val, (int, float)) and not isinstance(val, bool) and val < 0:
      raise ValueError(f"{self.key}={val} is invalid: {self.key} takes a value >= 0 ({self.doc})")
    return val
  def __bool__(self) -> bool: return bool(self.value)
  def __int__(self) -> int: return int(self.value)
  def __index__(self) -> int: return int(self.value)
  def __lt__(self, x: int) -> bool: return self.value < x
  def __eq__(self, x: object) -> bool: return self.value == x
  def __hash__(self) -> int: return hash(self.key)
  def __repr__(self) -> str: return f"{self.key}={self.value!r}"
  def __reduce__(self) -> Any: return _flag_copy, (self.key, self.default, self.doc, self.value)

def _flag_copy(key: str, default: Any, doc: str, value: Any) -> ContextVar:  # unpickled: the value it had (tinygrad's)
  (flag := object.__new__(ContextVar)).__dict__.update(key=key, default=default, doc=doc, parse=None, value=value)
  return flag

class Context(contextlib.ContextDecorator):
  """Temporarily set flags: `with Context(DEBUG=2): ...` or as a decorator `@Context(BEAM=2)`."""
  def __init__(self, **kwargs: Any):
    for k in kwargs:
      if k in TINYGRAD_FLAGS: ContextVar(k, 0, "tinygrad's flag; no effect here")  # (declared once)
      if k not in ContextVar._cache: raise KeyError(f"unknown flag {k!r}; known: {sorted(ContextVar._cache)}")
    self.kwargs = {k: ContextVar._cache[k].check(v) for k, v in kwargs.items()}
  def __enter__(self) -> Context:
    self.old = {k: ContextVar._cache[k].value for k in self.kwargs}
    for k, v in self.kwargs.items(): ContextVar._cache[k].value = v
    return self
  def __exit__(self, *exc: Any) -> None:
    for k, v in self.old.items(): ContextVar._cache[k].value = v

# tinygrad's flags for choices its own compiler makes (none here): Context takes them (its tests and scripts set them)
TINYGRAD_FLAGS = set("TRANSCENDENTAL WINO TC TC_OPT AMX NOLOCALS FUSE_ARANGE FUSE_CONV_BW FUSE_OPTIM IMAGE OPT "
                     "DEVECTORIZE NO_MEMORY_PLANNER RING CACHELEVEL PROFILE CHECK_OOB ALLOW_DEVICE_USAGE".split())
# Flags. Each is read once from the environment; `Context(NAME=...)` overrides it.
DEBUG = ContextVar("DEBUG", 0, "1: devices and JIT, 2: one line per kernel, 3: schedule and opts, 4: source, 5: IR")
DEV = ContextVar("DEV", "", "default device (CPU, PYTHON, CL, CUDA); empty picks the best working one")
BEAM = ContextVar("BEAM", 0, "beam width for the kernel optimization search; 0 uses the heuristic")
JITBEAM = ContextVar("JITBEAM", 0, "BEAM for the kernels TinyJit captures (tinygrad's); 0: BEAM's value")
IGNORE_BEAM_CACHE = ContextVar("IGNORE_BEAM_CACHE", 0, "1: BEAM searches again instead of reading the result it stored")
NOOPT = ContextVar("NOOPT", 0, "1: apply no kernel optimizations at all")
SPEC = ContextVar("SPEC", 0, "1: check the kernel IR against codegen/spec.py after every lowering pass")
JIT = ContextVar("JIT", 1, "0: TinyJit runs the function every time instead of replaying kernels")
CAPTURING = ContextVar("CAPTURING", 1, "0: kernels run while TinyJit captures are not captured (not replayed)")
DEFAULT_FLOAT = ContextVar("DEFAULT_FLOAT", "", "default float dtype (HALF, BFLOAT16, FLOAT64 ...), read at import into"
                           " dtypes.default_float (which code may set too); empty: float32")
TRAINING = ContextVar("TRAINING", 0, "1: layers such as dropout and batchnorm behave as in training")
CC = ContextVar("CC", "", "C compiler for the CPU backend (default: clang if present, else gcc)")
CPU_ISA = ContextVar("CPU_ISA", "", "instruction set of CPU kernels: sse4, avx2 or avx512 (default: the host's best); "
                     "read when the CPU device opens")
CPU_THREADS = ContextVar("CPU_THREADS", 0, "threads per CPU kernel (0: one per core)")
CPU_SPIN = ContextVar("CPU_SPIN", 1, "ms a CPU kernel's idle OpenMP workers (clang's runtime) spin before they sleep")
DISABLE_COMPILER_CACHE = ContextVar("DISABLE_COMPILER_CACHE", 0, "1: never read or write the on-disk kernel cache")
CACHEDB = ContextVar("CACHEDB", "", "path of the SQLite cache file (default: <user cache dir>/fusegrad/cache.db)")
CACHE_SIZE_MB = ContextVar("CACHE_SIZE_MB", 1024, "bound on the kernel cache file; least recently used entries go")
CACHE_DIR = ContextVar("XDG_CACHE_HOME", "", "user cache directory (default ~/.cache)")
MNIST_DIR = ContextVar("MNIST_DIR", "", "a local folder holding the MNIST .gz files (skips the download)")
FASHION_MNIST_DIR = ContextVar("FASHION_MNIST_DIR", "", "a local folder holding the Fashion-MNIST .gz files")
CHECK_INDEX = ContextVar("CHECK_INDEX", 1, "0: out-of-range tensor indices read 0 instead of raising IndexError")
NO_MEMORY_PLANNER = ContextVar("NO_MEMORY_PLANNER", 0, "1: a schedule's intermediates each get memory of their own, "
                               "none shared (engine/memory.py)")
SCHEDULE_CACHE = ContextVar("SCHEDULE_CACHE", 512, "schedules kept for reuse by graphs of the same structure (0: none)")
PROGRAM_CACHE = ContextVar("PROGRAM_CACHE", 256, "compiled kernels kept loaded per process (least recently used go)")
SPLIT_REDUCEOP = ContextVar("SPLIT_REDUCEOP", 1, "1: a reduce of >= 32768 elements into < 64 outputs runs as two "
                            "kernels (partial results of chunks, then their combination) so threads share it; 0: one")
PROCESS_REPLAY = ContextVar("PROCESS_REPLAY", "", "a file: every kernel rendered appends its identity and source "
                            "(test/process_replay.py compares two runs)")
COMPILE_CHUNK = ContextVar("COMPILE_CHUNK", 1 << 16, "bytes of new kernel source that start compiling in the "
                           "background while codegen goes on with the rest (0: compile once codegen is done)")
VIZ = ContextVar("VIZ", 0, "1: record each realize's kernels, codegen passes and timings; at exit, serve them to a "
                 "browser (fusegrad/viz)")
VIZ_PORT = ContextVar("VIZ_PORT", 8000, "the port VIZ serves on, on 127.0.0.1 (the next free one when it is taken)")
VIZ_OUT = ContextVar("VIZ_OUT", "", "VIZ writes its trace to this file at exit instead of serving it (.json: for "
                     "`python -m fusegrad.viz FILE`; .html: a page to share)")

# what VIZ records for the viewer: one dict of plain data per event, in order, kept only while VIZ is set
viz_events: list[dict[str, Any]] = []

def _show_viz() -> None:
  if viz_events: importlib.import_module("fusegrad.viz").show_at_exit(viz_events)  # (none: they were taken)

def viz_record(kind: str, **data: Any) -> None:
  """Keep an event for the viewer when VIZ is set; the first one arranges for fusegrad.viz to show them at exit."""
  if not VIZ: return
  if not viz_events: atexit.register(_show_viz)
  viz_events.append({"kind": kind, **data})

# *** printing ***
def colored(st: str, color: str | None, background: bool = False) -> str:
  """Wrap a string in ANSI color codes: colored("hi", "red")."""
  if color is None: return st
  colors = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"]
  return f"\u001b[{10 * background + 60 * (color.upper() == color) + 30 + colors.index(color.lower())}m{st}\u001b[0m"

def ansistrip(s: str) -> str: return re.sub(r"\x1b\[(K|.*?m)", "", s)
def ansilen(s: str) -> int: return len(ansistrip(s))

def dprint(level: int, *args: Any, **kwargs: Any) -> None:
  """The one debug printer: prints when DEBUG >= level."""
  if DEBUG.value >= level: print(*args, **kwargs)

def time_to_str(t: float, w: int = 8) -> str:
  return next((f"{t * d:{w - 2}.2f}{pr}" for d, pr in [(1, "s "), (1e3, "ms")] if t > 10 / d),
              f"{t * 1e6:{w - 3}.2f}us")

class WeakList:
  """Objects held weakly, in the order added (weak references without callbacks: cheaper than a WeakSet), the dead
  dropped in place past limit (small: before the cycle collector's old generations take them in), one drop at a time:
  an add during one (another thread's, or a finalizer's in a collection inside it) only appends, after what it reads."""
  lock = threading.Lock()  # (one for every list)
  def __init__(self, limit: int = 64) -> None:
    self.refs: list[weakref.ReferenceType] = []
    self.least = self.limit = limit
  def add(self, x: Any) -> None:
    self.refs.append(weakref.ref(x))
    if len(self.refs) > self.limit and WeakList.lock.acquire(blocking=False):
      try:
        n = len(self.refs)
        self.refs[:n] = [r for r in self.refs[:n] if r() is not None]
        self.limit = max(self.least, 2 * len(self.refs))
      finally: WeakList.lock.release()
  def __iter__(self) -> Iterator[Any]: return (x for r in list(self.refs) if (x := r()) is not None)

class GlobalCounters:
  """Totals since the last reset(): kernels run, FLOPs, bytes moved, kernel time, device memory in use."""
  global_ops = global_mem = kernel_count = mem_used = 0
  time_sum_s = 0.0
  @staticmethod
  def reset() -> None:
    GlobalCounters.global_ops, GlobalCounters.global_mem = 0, 0
    GlobalCounters.time_sum_s, GlobalCounters.kernel_count = 0.0, 0

class Timing(contextlib.ContextDecorator):
  """`with Timing("load: "): ...` prints how long the block took."""
  def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True):
    self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled
  def __enter__(self) -> Timing:
    self.st = time.perf_counter_ns()
    return self
  def __exit__(self, *exc: Any) -> None:
    self.et = time.perf_counter_ns() - self.st
    if self.enabled: print(f"{self.prefix}{self.et * 1e-6:6.2f} ms" + (self.on_exit(self.et) if self.on_exit else ""))

class Profiling(contextlib.ContextDecorator):
  """`with Profiling():` runs the block under cProfile and prints the top frac of functions by sort (and writes the
  stats to fn if given); ts scales the times printed (ms / ts)."""
  def __init__(self, enabled: bool = True, sort: str = "cumtime", frac: float = 0.2, fn: str | None = None,
               ts: float = 1):
    self.enabled, self.sort, self.frac, self.fn, self.ts, self.profile = enabled, sort, frac, fn, ts, cProfile.Profile()
  def __enter__(self) -> Profiling:
    if self.enabled: self.profile.enable()
    return self
  def __exit__(self, *exc: Any) -> None:
    if not self.enabled: return
    self.profile.disable()
    if self.fn: self.profile.dump_stats(self.fn)
    pstats.Stats(self.profile).strip_dirs().sort_stats(self.sort).print_stats(self.frac)

# *** on-disk cache: one SQLite file of checked bytes, safe with several processes, bounded, never unpickled ***
_CACHE_TABLE = "fusegrad_cache"
_CACHE_SCHEMA = (f"CREATE TABLE IF NOT EXISTS {_CACHE_TABLE} (tbl TEXT, key TEXT, val BLOB, sha256 TEXT, used REAL, "
                 "PRIMARY KEY (tbl, key))")
_db_connection: sqlite3.Connection | None = None
_cache_bytes: list[Any] = [None, 0]  # (the connection, the bytes its entries hold) as diskcache_put last counted them

def cache_dir() -> pathlib.Path: return pathlib.Path(CACHE_DIR.value or pathlib.Path.home() / ".cache") / "fusegrad"

_APPLICATION_ID = 0x66677264  # "fgrd", in the header of every cache file (PRAGMA application_id, byte 68)

def _cache_file_kind(path: pathlib.Path) -> str:
  """'new' (nothing there, or an empty file), 'ours' (a fusegrad cache, maybe damaged) or 'foreign' (anything else)."""
  if not path.exists() or (path.is_file() and path.stat().st_size == 0): return "new"
  if not path.is_file(): return "foreign"
  with open(path, "rb") as f: head = f.read(1 << 16)
  if not head.startswith(b"SQLite format 3\x00") or len(head) < 100: return "foreign"
  page_size = int.from_bytes(head[16:18], "big")
  if int.from_bytes(head[68:72], "big") == _APPLICATION_ID or \
     f"CREATE TABLE {_CACHE_TABLE} (".encode() in head[:65536 if page_size == 1 else page_size]: return "ours"
  try:  # a new cache whose first pages are still in its write-ahead log (NAME-wal)
    with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
      found = conn.execute("SELECT 1 FROM sqlite_master WHERE name=?", (_CACHE_TABLE,)).fetchone() is not None
  except sqlite3.Error: found = False
  return "ours" if found else "foreign"

def _damage(path: pathlib.Path) -> str | None:
  """Why the SQLite file at path is damaged, from its header alone, or None: shorter than the pages its header counts.
  Only for a cache at rest: while a process has it open (NAME-wal exists), a checkpoint writes the header first."""
  if path.with_name(path.name + "-wal").exists(): return None
  with open(path, "rb") as f: head = f.read(100)
  page_size, pages, size = int.from_bytes(head[16:18], "big"), int.from_bytes(head[28:32], "big"), path.stat().st_size
  if head[92:96] == head[24:28] and size < pages * (65536 if page_size == 1 else page_size):
    return f"{size} bytes, its header counts {pages} pages of {page_size}"
  return None

def _set_aside(path: pathlib.Path, why: str) -> None:
  aside = path.with_name(path.name + ".damaged")
  warnings.warn(f"fusegrad: the kernel cache {path} is damaged ({why}): moved it to {aside}, starting a new cache")
  os.replace(path, aside)
  for p in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")): p.unlink(missing_ok=True)

def _connect(path: pathlib.Path | str) -> sqlite3.Connection:
  conn = sqlite3.connect(path, timeout=60, isolation_level=None)
  conn.execute("PRAGMA journal_mode=WAL")
  conn.execute("PRAGMA synchronous=NORMAL")  # WAL commits without an fsync each (a cache read updates its time of use)
  conn.execute(_CACHE_SCHEMA)
  if conn.execute("PRAGMA application_id").fetchone()[0] != _APPLICATION_ID:
    conn.execute(f"PRAGMA application_id={_APPLICATION_ID}")
  return conn

def _db() -> sqlite3.Connection:
  """The cache's connection; what happens to a foreign, damaged or read-only file: docs/developer/runtime.md."""
  global _db_connection
  if _db_connection is not None: return _db_connection
  path = pathlib.Path(CACHEDB.value) if CACHEDB.value else cache_dir() / "cache.db"
  kind = _cache_file_kind(path)
  if CACHEDB.value and kind == "foreign":
    raise RuntimeError(f"CACHEDB={CACHEDB.value} is an existing file that is not a fusegrad cache: refusing to use "
                       "or overwrite it; point CACHEDB at a new file (or unset it)")
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "foreign": _set_aside(path, "not an SQLite file of fusegrad's")
    elif kind == "ours" and (why := _damage(path)) is not None: _set_aside(path, why)
    try: _db_connection = _connect(path)
    except sqlite3.OperationalError: raise
    except sqlite3.DatabaseError as e:  # damaged past what the header shows
      _set_aside(path, str(e))
      _db_connection = _connect(path)
  except (OSError, sqlite3.OperationalError) as e:
    warnings.warn(f"fusegrad: can't use the kernel cache {path} ({e}); caching in memory for this process")
    _db_connection = _connect(":memory:")
  return _db_connection

def cache_reset() -> None:
  """Close the cache (the next use opens it again, with the current CACHEDB): for tests."""
  global _db_connection
  if _db_connection is not None: _db_connection.close()
  _db_connection = None

_inherited: list[sqlite3.Connection | None] = []
def _forget_connection_in_child() -> None:
  """After os.fork(): the child opens its own SQLite connection (one can't cross fork; the old one is never used)."""
  global _db_connection
  _inherited.append(_db_connection)
  _db_connection = None
if hasattr(os, "register_at_fork"): os.register_at_fork(after_in_child=_forget_connection_in_child)

@functools.cache
def code_version(*globs: str) -> str:
  """A hash of the package's files matching globs (under fusegrad/): disk caches key their entries with it."""
  root = pathlib.Path(__file__).resolve().parent
  files = sorted({f.relative_to(root).as_posix(): f for g in globs for f in root.glob(g)}.items())
  return hashlib.sha256(b"".join(name.encode() + b"\0" + f.read_bytes() for name, f in files)).hexdigest()

def _digest(table: str, key: str, val: bytes) -> str:
  return hashlib.sha256(b"%d:%s%d:%s" % (len(table), table.encode(), len(key), key.encode()) + val).hexdigest()

def diskcache_get(table: str, key: str) -> bytes | None:
  """The bytes stored under (table, key), or None. A damaged entry (its checksum doesn't match) is dropped."""
  if DISABLE_COMPILER_CACHE: return None
  conn = _db()
  try:
    row = conn.execute(f"SELECT val, sha256 FROM {_CACHE_TABLE} WHERE tbl=? AND key=?", (table, key)).fetchone()
    if row is None: return None
    if not isinstance(row[0], bytes) or _digest(table, key, row[0]) != row[1]:
      dprint(1, f"cache: dropping a damaged entry {table}/{key}")
      conn.execute(f"DELETE FROM {_CACHE_TABLE} WHERE tbl=? AND key=?", (table, key))
      return None
    conn.execute(f"UPDATE {_CACHE_TABLE} SET used=? WHERE tbl=? AND key=?", (time.time(), table, key))
    return row[0]
  except sqlite3.Error: return None

def diskcache_put(table: str, key: str, val: bytes) -> bytes:
  """Store the bytes val under (table, key) and return them; then trim the cache to CACHE_SIZE_MB, oldest use first."""
  if DISABLE_COMPILER_CACHE: return val
  if not isinstance(val, bytes): raise TypeError(f"the cache stores bytes, not {type(val).__name__}")
  conn = _db()
  try:
    conn.execute(f"INSERT OR REPLACE INTO {_CACHE_TABLE} VALUES (?, ?, ?, ?, ?)",
                 (table, key, val, _digest(table, key, val), time.time()))
    limit, (counted, n) = CACHE_SIZE_MB.value * 2 ** 20, _cache_bytes
    if counted is not conn or (n := n + len(val)) > limit:  # (counted again then: other processes write to it too)
      n = conn.execute(f"SELECT COALESCE(SUM(LENGTH(val)), 0) FROM {_CACHE_TABLE}").fetchone()[0]
    if n > limit:  # trimmed to 7/8 of the bound, so that a full cache isn't trimmed (all its rows sorted) at every put
      rows = conn.execute(f"SELECT rowid, LENGTH(val) FROM {_CACHE_TABLE} ORDER BY used DESC").fetchall()
      sizes = itertools.accumulate(m for _, m in rows)
      old = [(rowid,) for (rowid, _), total in zip(rows, sizes) if total > limit * 7 // 8]
      conn.executemany(f"DELETE FROM {_CACHE_TABLE} WHERE rowid=?", old)
    _cache_bytes[:] = [conn if n <= limit else None, n]  # (after a trim, counted again at the next put)
  except sqlite3.Error: pass
  return val

# *** files ***
def _new_file_mode() -> int:
  """The mode open() gives a new file: 0o666 without the process's umask."""
  mask = os.umask(0o022)
  os.umask(mask)
  return 0o666 & ~mask

def atomic_write(path: str | os.PathLike, data: bytes | bytearray | memoryview | Iterable[bytes]) -> None:
  """Write a file so that a crash never leaves it half written: a temp file in the same folder, then rename. A symlink
  is written through; the file keeps the mode of the one it replaces (a new file gets open()'s)."""
  path = pathlib.Path(os.path.realpath(path))
  try: mode = path.stat().st_mode & 0o7777
  except FileNotFoundError: mode = _new_file_mode()
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      os.fchmod(f.fileno(), mode)
      for chunk in ([data] if isinstance(data, (bytes, bytearray, memoryview)) else data): f.write(chunk)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    pathlib.Path(tmp).unlink(missing_ok=True)
    raise

def fetch(url: str, name: str | pathlib.Path | None = None, subdir: str | None = None, gunzip: bool = False,
          allow_caching: bool = True, headers: dict[str, str] | None = None, sha256: str | None = None,
          timeout: float = 30) -> pathlib.Path:
  """Download url into the user cache (once) and return the local path; verify sha256 (of the download) when given.
  gunzip=True stores the decompressed content; headers are sent with the request."""
  if url.startswith(("/", ".")): return pathlib.Path(url)
  if isinstance(name, pathlib.Path) or (isinstance(name, str) and "/" in name): fp = pathlib.Path(name)
  else:
    default_name = hashlib.md5(url.encode()).hexdigest() + (".gunzip" if gunzip else "")
    fp = cache_dir() / "downloads" / (subdir or "") / (name or default_name)
  if not fp.is_file() or not allow_caching:
    fp.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as r:
      if r.status != 200: raise ConnectionError(f"fetch {url} failed with HTTP status {r.status}")
      total = int(r.headers.get("content-length", 0)) or None
      chunks, bar = [], tqdm(total=total, unit="B", unit_scale=True, desc=f"{url}", disable=not total)
      while chunk := r.read(1 << 20):
        chunks.append(chunk)
        bar.update(len(chunk))
      bar.close()
    data = b"".join(chunks)
    if total is not None and len(data) != total: raise ConnectionError(f"fetch {url}: got {len(data)} of {total} bytes")
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
      raise ValueError(f"fetch {url}: sha256 mismatch (the download is corrupt)")
    if gunzip:
      try: data = gzip.decompress(data)
      except (OSError, EOFError) as e: raise ValueError(f"fetch {url}: gunzip failed, not gzip data ({e})") from e
    atomic_write(fp, data)
  return fp

# *** progress bar (tqdm-compatible in use) ***
class tqdm:
  """A small progress bar: `for i in (t := trange(10)): t.set_description(f"loss {l:.2f}")`."""
  def __init__(self, iterable: Iterable | None = None, desc: str = "", disable: bool = False, unit: str = "it",
               unit_scale: bool = False, total: int | None = None, rate: int = 100, leave: bool = True):
    self.iterable, self.disable, self.unit, self.unit_scale = iterable, disable, unit, unit_scale
    self.rate, self.leave = rate, leave
    self.st, self.i, self.n, self.skip, self.t = time.perf_counter(), -1, 0, 1, total
    if total is None and iterable is not None and hasattr(iterable, "__len__"): self.t = len(iterable)  # type: ignore
    self.desc = f"{desc}: " if desc else ""
    self.update(0)
  def __iter__(self) -> Iterator:
    assert self.iterable is not None, "tqdm without an iterable cannot be iterated"
    for item in self.iterable:
      yield item
      self.update(1)
    self.update(close=True)
  def __enter__(self) -> tqdm: return self
  def __exit__(self, *exc: Any) -> None: self.update(close=True)
  def set_description(self, desc: str) -> None: self.desc = f"{desc}: " if desc else ""
  def close(self) -> None: self.update(close=True)
  def update(self, n: int = 0, close: bool = False) -> None:
    self.n, self.i = self.n + n, self.i + 1
    if self.disable or (not close and self.i % self.skip != 0): return
    elapsed = time.perf_counter() - self.st
    ncols = os.get_terminal_size().columns if sys.stderr.isatty() else 80
    if self.i / max(elapsed, 1e-9) > self.rate and self.i:
      self.skip = max(int(self.i / max(elapsed, 1e-9)) // self.rate, 1)
    def fmt(t: float) -> str:
      return ":".join(f"{x:02d}" if i else str(x)
                      for i, x in enumerate([int(t) // 3600, int(t) % 3600 // 60, int(t) % 60]) if i or x)
    def scale(x: float) -> str:
      if not self.unit_scale: return str(int(x))
      for i, pre in enumerate(("", "k", "M", "G", "T")):
        if x < 1000 ** (i + 1): return f"{x / 1000 ** i:.{2 if x < 10 * 1000 ** i else 1}f}{pre}".replace(".0", "")
      return f"{x:.1e}"
    rate = self.n / elapsed if self.n and elapsed else 0
    left = f"{fmt((self.t - self.n) / rate) if rate and self.t else '?'}" if self.t else ""
    pct = f"{100 * self.n / self.t:3.0f}%|" if self.t else ""
    suf = f" {scale(self.n)}{'/' + scale(self.t) if self.t else ''} [{fmt(elapsed)}<{left}, {rate:.2f}{self.unit}/s]"
    bar_w = max(ncols - len(self.desc) - len(pct) - len(suf) - 2, 1)
    bar = ""
    if self.t:
      filled = bar_w * self.n / self.t
      bar = "█" * int(filled) + (" ▏▎▍▌▋▊▉"[int(8 * (filled - int(filled)))] if filled < bar_w else "")
      bar = bar.ljust(bar_w)[:bar_w] + "|"
    print(f"\r{self.desc}{pct}{bar}{suf}"[: ncols + 1], end="\n" if close and self.leave else "", file=sys.stderr,
          flush=True)

class trange(tqdm):
  def __init__(self, n: int, **kwargs: Any): super().__init__(iterable=range(n), total=n, **kwargs)
