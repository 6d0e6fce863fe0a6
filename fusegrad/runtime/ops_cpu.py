"""The CPU device: C source compiled by clang (or gcc, or $CC) into a shared library, loaded with ctypes."""
from __future__ import annotations
import ctypes, ctypes.util, functools, hashlib, mmap, os, pathlib, platform, queue, re, shlex, shutil, struct
import subprocess, sys, tempfile, threading, time, weakref
from typing import Any, Callable
from fusegrad.device import Compiled, Allocator, Compiler, CompileError, NoCompilerError, RUN_LOCK
from fusegrad.helpers import CC, CPU_ISA, CPU_SPIN, CPU_THREADS, diskcache_get, diskcache_put, dprint
from fusegrad.renderer import MachineModel
from fusegrad.renderer.cstyle import ClangRenderer

class CPUBuffer:
  """Host memory aligned to 64 bytes; `addr` is what kernels get."""
  __slots__ = ("raw", "addr", "nbytes", "reuses")
  def __init__(self, raw: Any, addr: int, nbytes: int, reuses: int = 0):
    self.raw, self.addr, self.nbytes, self.reuses = raw, addr, nbytes, reuses  # reuses: times handed out of the pool

HUGE_PAGES_FROM = 1 << 26  # bytes: buffers this big, read or written again and again, in huge pages (_huge_pages)

def _big_mapping(nbytes: int) -> mmap.mmap:
  """Private anonymous memory, zeroed by the OS page by page as it is touched."""
  return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) if hasattr(mmap, "MAP_ANONYMOUS") else \
    mmap.mmap(-1, nbytes)

def _huge_pages(handle: CPUBuffer) -> None:
  """Ask for 2 MB pages (transparent huge pages) for a big buffer read or written again and again, before it is
  touched: one the host fills, or one the pool hands out a second time (why only these: docs/speed.md, "huge pages")."""
  if isinstance(handle.raw, mmap.mmap) and handle.nbytes >= HUGE_PAGES_FROM and hasattr(mmap, "MADV_HUGEPAGE"):
    handle.raw.madvise(mmap.MADV_HUGEPAGE)

class Worker:
  """A CPU device's kernel launches, run in order by a thread of its own (two devices' kernels run at once); those
  queued in a row in one call of C without the GIL (worker_run.c, fg_run). A launch holds its buffers and library.
  sync() waits for every launch queued so far: before the host touches the device's memory, and before os.fork()."""
  def __init__(self, device: str, compiler: Compiler) -> None:
    self.device, self.lib = device, _worker_lib(compiler)  # (kept loaded while the worker lives)
    self.start()
  def start(self) -> None:
    """A new queue and thread (also in a forked child, where the parent's thread doesn't exist)."""
    _workers.add(self)
    self.queue: queue.SimpleQueue = queue.SimpleQueue()
    self.error: BaseException | None = None
    threading.Thread(target=self._loop, name=f"fusegrad {self.device}", daemon=True).start()
  def _loop(self) -> None:
    while True:
      launches = [self.queue.get()]  # the C launches (with words) queued in a row, and the launch after them if any
      while launches[-1][3] and not self.queue.empty(): launches.append(self.queue.get())
      try:
        if (words := b"".join(launch[3] for launch in launches)): self.lib.dll.fg_run(words, len(words) // 8)
        if not launches[-1][3]: launches[-1][0](*launches[-1][1])
      except BaseException as e: self.error = self.error or e
      del launches  # the buffers are free to go before the next launch comes
  def launch(self, fxn: Callable, args: tuple, keep: tuple, words: bytes = b"") -> None:
    while _held: _held.pop(0)[3]()  # the copies held back go first
    self.queue.put((fxn, args, keep, words))
  def sync(self) -> None:
    (done := threading.Lock()).acquire()  # (the queue and the locks launches wait on are C code, as SimpleQueue)
    with RUN_LOCK: self.launch(done.release, (), ())  # (it queues the copies a realize held back: under its lock)
    done.acquire()  # released by the worker once it ran every launch before
    if self.error is not None:
      error, self.error = self.error, None
      raise RuntimeError(f"{self.device}: a kernel run by its worker thread failed: {error}") from error

_workers: weakref.WeakSet[Worker] = weakref.WeakSet()
_held: list[tuple[Worker, int, int, Callable]] = []  # CopyBetweenWorkers.held: copies held back behind snapshots

class CopyBetweenWorkers:
  """A copy between two devices' workers, queued on both: src's copies to a staging buffer once dest's read the last
  (from 1 MB dest's copies src itself); in an exchange both send before they wait. worker_run.c's fg_send/fg_receive
  are the halves; bind() points it at other buffers."""
  def __init__(self, src_worker: Worker, dest_worker: Worker, staging: CPUBuffer | None) -> None:
    self.workers, self.staging, self.pair = (src_worker, dest_worker), staging, ctypes.create_string_buffer(
      src_worker.lib.dll.fg_size())
    src_worker.lib.dll.fg_init(self.pair)  # nothing sent yet, nothing to read
  def bind(self, dest: CPUBuffer, src: CPUBuffer, nbytes: int) -> CopyBetweenWorkers:
    staging, pair = self.staging or src, ctypes.addressof(self.pair)
    send = (self.workers[0].lib.dll.fg_send, (pair, 0 if staging is src else staging.addr, src.addr, nbytes))
    receive = (self.workers[1].lib.dll.fg_receive, (pair, dest.addr, staging.addr, nbytes))
    self.snapshot, self.copy = (*send, (src, staging, self), _words(*send)), (*receive, (dest, staging, self),
                                                                              _words(*receive))
    self.held = (self.workers[1], dest.addr, nbytes, functools.partial(self.workers[1].queue.put, self.copy))
    return self
  def __call__(self) -> None:  # (launches queued before keep the buffers they were bound to)
    worker, (src, n) = self.workers[0], self.snapshot[1][2:]
    while _held and (not self.staging or any(w is worker and a < src + n and src < a + k for w, a, k, _ in _held)):
      _held.pop(0)[3]()  # (not before a snapshot that reads what it writes, nor a rendezvous: it waits for its copy)
    worker.queue.put(self.snapshot)
    _held.append(self.held)
    if not self.staging: _held.pop()[3]()

def _worker_lib(compiler: Compiler) -> SharedLibrary:
  """worker_run.c, built by a CPU device's compiler (cached on disk as its kernels are), loaded for its worker (its
  copies' halves run inside fg_run only: their arguments, 64-bit addresses, have no ctypes types declared)."""
  with open(os.path.join(os.path.dirname(__file__), "worker_run.c")) as f: src = f.read()
  return SharedLibrary(compiler.compile_cached(src))

def _words(fxn: Any, args: tuple[int, ...]) -> bytes:
  """A launch of C function fxn (of at most 16 integer or pointer arguments) as fg_run (worker_run.c) reads it."""
  return struct.pack(f"{len(args) + 2}q", ctypes.cast(fxn, ctypes.c_void_p).value or 0, len(args), *args)

_small_array = functools.lru_cache(256)(lambda n: ctypes.c_uint8 * n)

class CPUAllocator(Allocator):
  """Small buffers come zeroed; big ones (1 MB and more) are anonymous mappings, kept when freed (up to POOL_BYTES)
  and handed out again for the same size, contents as they were (docs/speed.md, "Fresh outputs")."""
  POOL_BYTES = 1 << 30
  def __init__(self, worker: Worker | None = None) -> None:
    self.worker = worker  # the device's kernels run there: the host waits for them before it touches memory
    self.pool, self.pooled = dict[int, list[CPUBuffer]](), 0
  def alloc(self, nbytes: int) -> CPUBuffer:
    if nbytes < 2 ** 20:  # zeroed ctypes memory (array types made once per size); only big buffers are pooled (free)
      addr = ctypes.addressof(raw := _small_array(nbytes + 64)())
      return CPUBuffer(raw, addr + (-addr % 64), nbytes)
    reuses = 0
    if (free := self.pool.get(nbytes)):
      self.pooled -= nbytes
      (old := free.pop()).reuses += 1
      # handed out a second time (a TinyJit replay's fresh output): hot, worth mapping again in huge pages
      if old.reuses != 2 or nbytes < HUGE_PAGES_FROM: return old
      reuses = old.reuses
    addr = ctypes.addressof(ctypes.c_char.from_buffer(raw := _big_mapping(nbytes + 64)))
    ret = CPUBuffer(raw, addr + (-addr % 64), nbytes, reuses)
    if reuses: _huge_pages(ret)
    return ret
  def free(self, handle: CPUBuffer, nbytes: int) -> None:
    if nbytes < 2 ** 20 or self.pooled + nbytes > self.POOL_BYTES: return
    self.pool.setdefault(nbytes, []).append(handle)
    self.pooled += nbytes
  def copyin(self, dest: CPUBuffer, src: memoryview) -> None:
    if self.worker is not None: self.worker.sync()
    if dest.nbytes >= HUGE_PAGES_FROM: _huge_pages(dest)  # (a call saved for small ones: hot)
    if type(src.obj) is bytes and src.nbytes == len(src.obj): ctypes.memmove(dest.addr, src.obj, src.nbytes)  # as is
    elif src.nbytes: ctypes.memmove(dest.addr, (ctypes.c_char * src.nbytes).from_buffer_copy(src) if src.readonly else
                                  (ctypes.c_char * src.nbytes).from_buffer(src), src.nbytes)
  def copy_launcher(self, dest: CPUBuffer, src_allocator: Allocator, src: CPUBuffer, nbytes: int,
                    old: Any = None) -> Callable[[], None] | None:
    """Queues the copy of src (this CPU device's or another's) into dest, in order with both devices' kernels, at each
    call (a TinyJit replay binds it once, and again on old for swapped buffers: old keeps its staging buffer)."""
    mine, other = self.worker, getattr(src_allocator, "worker", None)
    if mine is None or not isinstance(other, Worker): return None
    if other is mine:
      args = (dest.addr, src.addr, nbytes)
      return functools.partial(mine.launch, ctypes.memmove, args, (dest, src), _words(ctypes.memmove, args))
    if not isinstance(old, CopyBetweenWorkers):
      old = CopyBetweenWorkers(other, mine, self.alloc(nbytes) if nbytes < 2 ** 20 else None)
    return old.bind(dest, src, nbytes)
  def copyout(self, dest: memoryview, src: CPUBuffer) -> None:
    if self.worker is not None: self.worker.sync()
    if dest.nbytes <= 4096: dest[:] = ctypes.string_at(src.addr, dest.nbytes)  # small: 2 copies beat a ctypes view
    else: ctypes.memmove((ctypes.c_char * dest.nbytes).from_buffer(dest), src.addr, dest.nbytes)
  def offset(self, handle: CPUBuffer, offset: int, nbytes: int) -> CPUBuffer:
    return CPUBuffer(handle.raw, handle.addr + offset, nbytes)
  def from_pointer(self, ptr: int, nbytes: int) -> CPUBuffer: return CPUBuffer(None, ptr, nbytes)
  def as_memoryview(self, handle: CPUBuffer) -> memoryview:
    """The buffer's memory itself (no copy), once the kernels queued before are done with it."""
    if self.worker is not None: self.worker.sync()
    return memoryview((ctypes.c_uint8 * handle.nbytes).from_address(handle.addr)).cast("B")

def find_c_compiler() -> list[str]:
  """The compiler command: $CC split like a shell would ("ccache gcc" works) if set, else clang, gcc or cc if installed.
  A CC that doesn't run is a RuntimeError naming it; no compiler installed at all is a NoCompilerError."""
  if CC.value:
    cmd = shlex.split(CC.value)
    if not cmd or shutil.which(cmd[0]) is None:
      raise RuntimeError(f"CC={CC.value!r}: {cmd[0] if cmd else 'it'!r} is not an installed program")
    if subprocess.run([*cmd, "--version"], capture_output=True).returncode != 0:
      raise RuntimeError(f"CC={CC.value!r}: `{CC.value} --version` failed: it is not a working C compiler")
    return cmd
  for cc in ("clang", "gcc", "cc"):
    if shutil.which(cc): return [cc]
  raise NoCompilerError("no C compiler installed (clang, gcc or cc); install one, or set CC")

# the x86 ISAs CPU_ISA names, best first: the /proc/cpuinfo flag each needs, its SIMD register (bytes, count), and the
# flags that limit -march=native to it (gcc, clang: no AVX-512 subset without avx512f, no AVX2 or FMA without avx)
ISAS = {"avx512": ("avx512f", 64, 32, ["-mprefer-vector-width=512"]), "avx2": ("avx2", 32, 16, ["-mno-avx512f"]),
        "sse4": ("sse4_2", 16, 16, ["-mno-avx"])}

def _cpuinfo(field: str) -> str:
  """The first /proc/cpuinfo line starting with field, after its colon ('' where there is none)."""
  if not os.path.exists("/proc/cpuinfo"): return ""
  with open("/proc/cpuinfo") as f: line = next((ln for ln in f if ln.startswith(field)), "")
  return line.partition(":")[2].strip()

def host_isas() -> list[str]:
  """The instruction sets of ISAS this CPU runs, best first (none on a CPU that isn't x86)."""
  flags = set(_cpuinfo("flags").split())
  return [isa for isa, (flag, *_) in ISAS.items() if flag in flags and (isa != "avx2" or "fma" in flags)]

def cpu_isa() -> str:
  """CPU_ISA, checked against the host (ValueError for a name it doesn't know or a set the CPU can't run), or the
  host's best ('' on a CPU outside ISAS: its compiler's -march=native then decides alone)."""
  have = host_isas()
  if not CPU_ISA.value: return have[0] if have else ""
  if CPU_ISA.value not in ISAS: raise ValueError(f"CPU_ISA={CPU_ISA.value!r} is invalid: it takes one of {list(ISAS)}")
  if CPU_ISA.value not in have:
    raise ValueError(f"CPU_ISA={CPU_ISA.value}: this CPU ({_cpuinfo('model name') or platform.machine()}) can't run it;"
                     f" it runs {', '.join(have) or 'none of ' + str(list(ISAS))}")
  return CPU_ISA.value

def _caches() -> dict[int, tuple[int, int]]:
  """(bytes, ways) of the data (or unified) cache of each level of cpu0, from /sys ({} where it can't be read)."""
  out, root = {}, "/sys/devices/system/cpu/cpu0/cache"
  for d in (os.listdir(root) if os.path.isdir(root) else []):
    try:
      level, kind, size = (pathlib.Path(root, d, n).read_text().strip() for n in ("level", "type", "size"))
      ways = pathlib.Path(root, d, "ways_of_associativity")  # (0 where unknown)
      if kind in ("Data", "Unified") and size[:-1].isdigit():
        out[int(level)] = (int(size[:-1]) << {"K": 10, "M": 20, "G": 30}.get(size[-1], 0),
                           int(ways.read_text()) if ways.exists() else 0)
    except (OSError, ValueError): continue
  return out

def cpu_machine(isa: str) -> MachineModel:
  """The machine model of this CPU running isa: SIMD registers from ISAS (NEON's 32 x 16 bytes on arm64), caches from
  /sys (defaults where unreadable), two FMA units where the ISA has FMA, one for AVX-512 on Zen 4 (AMD family 25),
  which runs a 512-bit FMA on both halves of its two 256-bit units (docs/developer/codegen.md)."""
  _, vbytes, regs, _ = ISAS.get(isa, ("", 16, 32 if platform.machine() in ("aarch64", "arm64") else 16, []))
  caches, default = _caches(), MachineModel()
  (l1d, ways), (l2, _) = caches.get(1, (default.l1d, default.l1_ways)), caches.get(2, (default.l2, 0))
  halves = isa == "avx512" and _cpuinfo("vendor_id") == "AuthenticAMD" and _cpuinfo("cpu family") == "25"
  return MachineModel(isa=isa or platform.machine(), vector_bytes=vbytes, vector_registers=regs,
                      fma_units=(1 if halves else 2) if isa in ("avx2", "avx512") else 0, l1d=l1d,
                      l1_ways=ways or default.l1_ways, l2=l2, panel_bytes=default.cache_line)

@functools.cache
def compiler_version(cc: tuple[str, ...]) -> str:
  """What `cc --version` prints (asked once per process: starting the compiler takes a while)."""
  return subprocess.run([*cc, "--version"], capture_output=True, text=True).stdout

def openmp_works(cc: list[str]) -> bool:
  """True when cc builds and loads a program with an OpenMP loop (a probe of about half a second, cached on disk)."""
  key = hashlib.sha256(f"{' '.join(cc)}|{compiler_version(tuple(cc))}|{_find_libomp()}".encode()).hexdigest()
  if (known := diskcache_get("openmp_works", key)) in (b"0", b"1"): return known == b"1"  # (libomp added: a new key)
  return diskcache_put("openmp_works", key, b"1" if _probe_openmp(cc) else b"0") == b"1"

def _probe_openmp(cc: list[str]) -> bool:
  src = "int f(int n){int s=0;\n#pragma omp parallel for reduction(+:s)\nfor(int i=0;i<n;i++) s+=i;\nreturn s;}\n"
  try: return (lib := _build(cc, ["-fopenmp"], src)) is not None and _load(lib).f(10) == 45
  except OSError: return False

def _build(cc: list[str], flags: list[str], src: str) -> bytes | None:
  """A shared library built from src by cc with flags (not a kernel: no cache); None where cc fails."""
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "lib.so")
    if subprocess.run([*cc, "-shared", "-fPIC", *flags, "-x", "c", "-", "-o", out], input=src.encode(),
                      capture_output=True).returncode: return None
    with open(out, "rb") as f: return f.read()

# A kernel library links libm and libgcc (half conversions without F16C) only: not libc, the start files or OpenMP's
# runtime, which the process has (_one_openmp_runtime). About 80 ms of compiler a library here instead of 100.
LINK = ["-nostdlib", "-lm", "-lgcc"]

def link_flags(cc: list[str]) -> list[str]:
  """LINK and the compiler's runtime (clang's compiler-rt) where cc links a probe so (Linux), else the usual link."""
  key = hashlib.sha256(f"{' '.join(cc)}|{compiler_version(tuple(cc))}|{' '.join(LINK)}".encode()).hexdigest()
  def flags(rt: str) -> list[str]: return ["-lm"] if rt == "usual" else LINK + ["-x", "none", rt] * bool(rt)  # (.a)
  def valid(rt: str) -> bool: return rt in ("usual", "") or rt.endswith(".a") and os.path.isfile(rt)  # (as cached)
  if (known := diskcache_get("cpu_link", key)) is not None and valid(rt := known.decode(errors="replace")):
    return flags(rt)
  rt = subprocess.run([*cc, "-print-libgcc-file-name", "-rtlib=compiler-rt"], capture_output=True, text=True).stdout
  rt = rt.strip() if rt.strip().endswith(".a") and os.path.isfile(rt.strip()) else ""
  if sys.platform != "linux" or _build(cc, flags(rt), "int fg_probe(void) { return 0; }\n") is None: rt = "usual"
  return flags(diskcache_put("cpu_link", key, rt.encode()).decode())

class ClangCompiler(Compiler):
  """C -> shared library for the instruction set isa (ISAS; '': the host's). The cache key holds the compiler, its
  flags (the ISA's among them) and the CPU (flags use -march=native)."""
  def __init__(self, cc: list[str], openmp: bool, isa: str = ""):
    self.cc = cc
    # -w: no warnings (many harmless ones); -pipe: no temporary files; -mtune=generic: the same code on every CPU of an
    # ISA (the machine model sizes tiles; Zen 4's scheduling model, znver3 to gcc 12, hoisted loads and spilled a tile)
    self.args = ["-shared", "-O2", "-w", "-pipe", "-fPIC", "-march=native", "-mtune=generic", "-fwrapv",
                 "-fno-math-errno", "-fno-strict-aliasing", "-x", "c"]
    # the ISA's flags: on AVX-512 keep 64-byte vectors whole (clang splits them in halves on some AVX-512 CPUs)
    self.args[:0] = ISAS[isa][3] if isa in ISAS else []
    if openmp: self.args.insert(0, "-fopenmp")
    # register tiles ask gcc to unroll a short loop with a big body whole (ClangRenderer.render), up to this size
    if "Free Software Foundation" in compiler_version(tuple(cc)):
      self.args[:0] = ["--param=max-completely-peeled-insns=1000"]
    version = compiler_version(tuple(cc)).split("\n")[0]
    self.link = link_flags(cc)
    key = f"{version}|{isa}|{' '.join(self.args + self.link)}|{platform.machine()}|{_cpuinfo('model name')}"
    super().__init__(f"compile_cpu_{hashlib.sha256(key.encode()).hexdigest()[:16]}")
  def _start(self, tmp: str, name: str, src: str) -> subprocess.Popen:
    """A compiler process building tmp/name.so from src (its log goes to tmp/name.log)."""
    path = os.path.join(tmp, name)
    with open(f"{path}.c", "w") as f: f.write(src)
    with open(f"{path}.log", "wb") as log:
      return subprocess.Popen([*self.cc, *self.args, f"{path}.c", "-o", f"{path}.so", *self.link],
                              stdin=subprocess.DEVNULL, stdout=log, stderr=log)
  def _finish(self, proc: subprocess.Popen, tmp: str, name: str, src: str) -> bytes:
    path = os.path.join(tmp, name)
    if proc.wait() != 0:
      with open(f"{path}.log", errors="replace") as f: log = f.read()
      raise CompileError(f"{' '.join(self.cc)} failed:\n{log}\n--- source ---\n{src}")
    with open(f"{path}.so", "rb") as f: return f.read()
  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp: return self._finish(self._start(tmp, "kernel", src), tmp, "kernel", src)
  def compile_batch(self, srcs: list[str]) -> list[bytes | CompileError]: return self.start_batch(srcs)()
  def start_batch(self, srcs: list[str], units: int = 0) -> Callable[[], list[bytes | CompileError]]:
    """Several kernels at once: one translation unit (one compiler process, one library) per group, `units` groups (0:
    one per core), all running in parallel while the caller goes on. A group that fails compiles its kernels one by
    one, so each error names its kernel."""
    groups = batch_groups(srcs, min(len(srcs), units or os.cpu_count() or 1)) if srcs else []
    tmp = tempfile.mkdtemp()
    try:
      unit = ["\n".join(srcs[i] for i in g) for g in groups]
      procs = [self._start(tmp, f"unit{j}", src) for j, src in enumerate(unit)]
    except BaseException:
      shutil.rmtree(tmp, ignore_errors=True)
      raise
    def finish() -> list[bytes | CompileError]:
      out: list[bytes | CompileError] = [b""] * len(srcs)
      try:
        for j, (g, proc) in enumerate(zip(groups, procs)):
          try:
            lib = self._finish(proc, tmp, f"unit{j}", unit[j])
            for i in g: out[i] = lib
          except CompileError as e:
            if len(g) == 1: out[g[0]] = e
            else:
              for i, res in zip(g, super(ClangCompiler, self).compile_batch([srcs[i] for i in g])): out[i] = res
      finally:
        for proc in procs: proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
      return out
    return finish

_DEFINES = re.compile(r"^(?:static [^(\n]*)?void (\w+)\(", re.M)  # the functions a kernel's C source defines

def batch_groups(srcs: list[str], n: int) -> list[list[int]]:
  """The indices of srcs in n groups (more where names clash) of about equal source size, no two sources of a group
  defining a function of the same name."""
  sizes, names, members = [0] * n, [set[str]() for _ in range(n)], [list[int]() for _ in range(n)]
  for i in sorted(range(len(srcs)), key=lambda i: -len(srcs[i])):
    defs = set(_DEFINES.findall(srcs[i]))
    if not (fits := [g for g in range(len(members)) if not names[g] & defs]):
      sizes, names, members, fits = sizes + [0], names + [set()], members + [[]], [len(members)]
    g = min(fits, key=sizes.__getitem__)
    sizes[g], names[g], members[g] = sizes[g] + len(srcs[i]), names[g] | defs, members[g] + [i]
  return [m for m in members if m]

try: from _ctypes import dlclose as _dlclose  # POSIX
except ImportError: _dlclose = None  # type: ignore[assignment]

def check_elf(lib: bytes) -> None:
  """OSError if lib is an ELF file cut short (its section table, written last, is past the end): the loader would
  crash the process (SIGBUS) instead of failing."""
  if lib[:4] != b"\x7fELF" or len(lib) < 64 or lib[4] != 2: return  # only 64-bit ELF is checked
  shoff, = struct.unpack_from("<Q" if lib[5] == 1 else ">Q", lib, 0x28)
  shentsize, shnum = struct.unpack_from("<HH" if lib[5] == 1 else ">HH", lib, 0x3A)
  if shoff + shentsize * shnum > len(lib): raise OSError(f"truncated shared library ({len(lib)} bytes)")

def _load(lib: bytes, mode: int = ctypes.DEFAULT_MODE) -> ctypes.CDLL:
  with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as f: f.write(lib)
  try: return ctypes.CDLL(f.name, mode=mode)
  finally: os.unlink(f.name)

class SharedLibrary:
  """A shared library loaded from its bytes: written to a temp file, loaded, and the file removed; unloaded (dlclose)
  when garbage collected, so a bounded program cache keeps the process's mappings bounded."""
  def __init__(self, lib: bytes):
    check_elf(lib)
    self.dll = _load(lib)
    _pin_openmp()
  def __del__(self) -> None:
    dll = self.__dict__.pop("dll", None)
    if dll is not None and _dlclose is not None: _dlclose(dll._handle)

# OpenMP runtimes kernels brought in stay loaded: unloading one while its workers sleep crashed (libgomp beside libomp)
_openmp_runtimes: dict[str, ctypes.CDLL] = {}
def _pin_openmp() -> None:
  for name in ("libgomp.so.1", "libomp.so", "libomp.so.5"):
    if name in _openmp_runtimes or not hasattr(os, "RTLD_NOLOAD"): continue
    try: _openmp_runtimes[name] = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # only if already loaded
    except OSError: pass

def _find_libomp() -> str | None: return ctypes.util.find_library("omp")

_libomp: ctypes.CDLL | None = None
def _one_openmp_runtime(cc: list[str]) -> bool:
  """Load one OpenMP runtime for the process before any kernel: clang's libomp, else gomp_pool.c built by gcc; False
  where neither loads (kernels then run on one thread). Why, and the idle policy: docs/developer/threads.md."""
  global _libomp
  os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # (values already set are kept)
  if CPU_SPIN.value > 0: os.environ.setdefault("KMP_BLOCKTIME", str(CPU_SPIN.value))
  if _libomp is None and (path := _find_libomp()) is not None:
    try: _libomp = _openmp_runtimes["libomp"] = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError: pass
  if _libomp is None and "Free Software Foundation" in compiler_version(tuple(cc)):
    with open(os.path.join(os.path.dirname(__file__), "gomp_pool.c")) as f: src = f.read()
    key = hashlib.sha256(f"{' '.join(cc)}|{compiler_version(tuple(cc))}|{src}".encode()).hexdigest()
    if (lib := diskcache_get("cpu_gomp_pool", key)) is None:
      if (lib := _build(cc, ["-O2", "-pthread"], src)) is None: return False
      diskcache_put("cpu_gomp_pool", key, lib)
    try: _libomp = _openmp_runtimes["pool"] = _load(lib, ctypes.RTLD_GLOBAL)
    except OSError: return False
    ctypes.c_long.in_dll(_libomp, "fg_spin_ns").value = max(CPU_SPIN.value, 0) * 1000000
  return True

def _after_fork_in_child() -> None:
  for worker in _workers: worker.start()
if hasattr(os, "register_at_fork"): os.register_at_fork(after_in_child=_after_fork_in_child)

# the libraries loaded now, by the sha256 of their bytes: the kernels compiled in one batch share their library
_loaded: weakref.WeakValueDictionary[str, SharedLibrary] = weakref.WeakValueDictionary()

class CPUProgram:
  """A compiled kernel: a function of a loaded library (which it keeps loaded), run by the device's worker if any."""
  def __init__(self, name: str, lib: bytes, worker: Worker | None = None):
    self.name, self.worker, key = name, worker, hashlib.sha256(lib).hexdigest()
    if (shared := _loaded.get(key)) is None: shared = _loaded[key] = SharedLibrary(lib)
    self.lib, self.fxn = shared, shared.dll[name]
    self.fxn.restype = None
    self.nargs = (-1, -1)  # the argument counts fxn.argtypes was set for
  def __call__(self, *bufs: CPUBuffer, global_size: Any = None, local_size: Any = None, vals: tuple[int, ...] = (),
               wait: bool = False) -> float | None:
    if self.nargs != (len(bufs), len(vals)):  # argument types declared once: ctypes converts plain ints in C
      self.fxn.argtypes = [ctypes.c_void_p] * len(bufs) + [ctypes.c_int] * len(vals)
      self.nargs = (len(bufs), len(vals))
    if wait and self.worker is not None: self.worker.sync()  # timed here, once the worker is done
    args = (*[b.addr for b in bufs], *vals)
    if not wait:
      if self.worker is None: self.fxn(*args)
      else: self.worker.launch(self.fxn, args, (self.lib, *bufs))  # (the library stays loaded till it ran)
      return None
    st = time.perf_counter()
    self.fxn(*args)
    return time.perf_counter() - st
  def launcher(self, *bufs: CPUBuffer) -> Callable[[], Any] | None:
    """Its launch on bufs as a call of nothing (a TinyJit replay binds it once); None where __call__ must check."""
    if self.nargs != (len(bufs), 0): return None
    if self.worker is None: return functools.partial(self.fxn, *[b.addr for b in bufs])
    args = tuple(b.addr for b in bufs)
    words = _words(self.fxn, args) if len(bufs) <= 16 else b""
    return functools.partial(self.worker.launch, self.fxn, args, (self.lib, *bufs), words)

class CPUDevice(Compiled):
  """CPU runs kernels in the calling thread; CPU:1, CPU:2 ... each on a worker thread of its own (Worker), so the
  devices of a `shard` compute at once."""
  def __init__(self, device: str):
    cc, isa = find_c_compiler(), cpu_isa()
    is_clang = "clang" in compiler_version(tuple(cc)).lower()
    openmp = openmp_works(cc)
    threads = (CPU_THREADS.value or os.cpu_count() or 1) if openmp else 1
    if threads > 1 and not _one_openmp_runtime(cc): threads = 1
    # without CC, the other of clang/gcc where installed may be picked per kernel (OptOps.COMPILER); not with halves
    others = [] if CC.value else [c for c in ("clang", "gcc") if c != cc[0] and shutil.which(c)][:1]
    renderer = ClangRenderer(device="CPU", half_type="__fp16" if is_clang else "_Float16", supports_bfloat16=False,
                             threads=threads if threads > 1 else 0, machine=cpu_machine(isa), upcast_max=256,
                             vector_widths=(2, 4, 8, 16), compilers=(cc[0], *others),
                             lane_loop_min=256 if is_clang else 128)
    default = ClangCompiler(cc, openmp, isa)
    def other(name: str) -> ClangCompiler:
      """The other compiler, or the default where it doesn't work (which then builds the kernels that chose it)."""
      try:
        comp = ClangCompiler([name], omp := openmp_works([name]), isa)
        if not omp: comp.compile("void probe(void) {}\n")  # the OpenMP probe didn't show that it compiles at all
        return comp
      except (CompileError, OSError) as e:
        dprint(1, f"CPU: {name} doesn't work ({str(e).splitlines()[0]}); {cc[0]} compiles the kernels that chose it")
        return default
    self.worker = Worker(device, default) if device != "CPU" else None
    super().__init__(device, CPUAllocator(self.worker), renderer, default, functools.partial(CPUProgram,
                     worker=self.worker), tuple(functools.partial(other, c) for c in others))
  def synchronize(self) -> None:
    if self.worker is not None: self.worker.sync()
