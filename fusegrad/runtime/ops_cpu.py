"""The CPU device: C source compiled by clang (or gcc, or $CC) into a shared library, loaded with ctypes."""
from __future__ import annotations
import ctypes, hashlib, mmap, os, platform, shlex, shutil, struct, subprocess, tempfile, time
from typing import Any
from fusegrad.device import Compiled, Allocator, Compiler, CompileError, NoCompilerError
from fusegrad.helpers import CC, CPU_THREADS
from fusegrad.renderer.cstyle import ClangRenderer

class CPUBuffer:
  """Host memory aligned to 64 bytes; `addr` is what kernels get."""
  __slots__ = ("raw", "addr", "nbytes")
  def __init__(self, raw: Any, addr: int, nbytes: int): self.raw, self.addr, self.nbytes = raw, addr, nbytes

def _big_mapping(nbytes: int) -> mmap.mmap:
  """Private anonymous memory, in 2 MB pages where the OS allows (transparent huge pages): the first write into a fresh
  output then faults once per 2 MB instead of once per 4 KB (64 MB written by softmax: 40 ms of page faults less)."""
  m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) if hasattr(mmap, "MAP_ANONYMOUS") else \
    mmap.mmap(-1, nbytes)
  if hasattr(mmap, "MADV_HUGEPAGE"): m.madvise(mmap.MADV_HUGEPAGE)
  return m

class CPUAllocator(Allocator):
  def alloc(self, nbytes: int) -> CPUBuffer:
    # big buffers are anonymous mappings: the OS hands out zeroed pages as they are touched (no memset of GiBs)
    raw = (ctypes.c_uint8 * (nbytes + 64)).from_buffer(_big_mapping(nbytes + 64)) if nbytes >= 2 ** 20 else \
      (ctypes.c_uint8 * (nbytes + 64))()
    addr = ctypes.addressof(raw)
    return CPUBuffer(raw, addr + (-addr % 64), nbytes)
  def copyin(self, dest: CPUBuffer, src: memoryview) -> None:
    if src.nbytes: ctypes.memmove(dest.addr, (ctypes.c_char * src.nbytes).from_buffer_copy(src) if src.readonly else
                                  (ctypes.c_char * src.nbytes).from_buffer(src), src.nbytes)
  def copyout(self, dest: memoryview, src: CPUBuffer) -> None:
    if dest.nbytes: ctypes.memmove((ctypes.c_char * dest.nbytes).from_buffer(dest), src.addr, dest.nbytes)
  def offset(self, handle: CPUBuffer, offset: int, nbytes: int) -> CPUBuffer:
    return CPUBuffer(handle.raw, handle.addr + offset, nbytes)
  def as_memoryview(self, handle: CPUBuffer) -> memoryview:
    """The buffer's memory itself (no copy)."""
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

def simd_width() -> int:
  """Bytes in a SIMD register of this CPU (64 with AVX-512, 32 with AVX2, else 16)."""
  flags = (next((line for line in open("/proc/cpuinfo") if line.startswith("flags")), "")
           if os.path.exists("/proc/cpuinfo") else "")
  return 64 if " avx512f" in flags else 32 if " avx2" in flags else 16

def openmp_works(cc: list[str]) -> bool:
  """True when cc can build and load a program with an OpenMP parallel loop."""
  src = "int f(int n){int s=0;\n#pragma omp parallel for reduction(+:s)\nfor(int i=0;i<n;i++) s+=i;\nreturn s;}\n"
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "omp.so")
    if subprocess.run([*cc, "-shared", "-fPIC", "-fopenmp", "-x", "c", "-", "-o", out], input=src.encode(),
                      capture_output=True).returncode:
      return False
    try: return ctypes.CDLL(out).f(10) == 45
    except OSError: return False

class ClangCompiler(Compiler):
  """C -> shared library. The cache key holds the compiler, its flags and the CPU (flags use -march=native)."""
  def __init__(self, cc: list[str], openmp: bool, simd: int = 16):
    self.cc = cc
    self.args = ["-shared", "-O2", "-fPIC", "-march=native", "-fwrapv", "-fno-math-errno", "-fno-strict-aliasing",
                 "-x", "c"]
    # the kernels' vector types are as wide as the SIMD registers: keep them whole (clang splits 64-byte vectors into
    # two 32-byte halves by default on some AVX-512 CPUs)
    if simd >= 64: self.args.insert(0, "-mprefer-vector-width=512")
    if openmp: self.args.insert(0, "-fopenmp")
    version = subprocess.run([*cc, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    cpu = (next((line for line in open("/proc/cpuinfo") if line.startswith("model name")), "")
           if os.path.exists("/proc/cpuinfo") else "")
    ident = hashlib.sha256(f"{version}|{' '.join(self.args)}|{platform.machine()}|{cpu}".encode()).hexdigest()[:16]
    super().__init__(f"compile_cpu_{ident}")
  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
      out = os.path.join(tmp, "kernel.so")
      proc = subprocess.run([*self.cc, *self.args, "-", "-o", out, "-lm"], input=src.encode(), capture_output=True)
      if proc.returncode != 0:
        raise CompileError(f"{' '.join(self.cc)} failed:\n{proc.stderr.decode()}\n--- source ---\n{src}")
      with open(out, "rb") as f: return f.read()

try: from _ctypes import dlclose as _dlclose  # POSIX
except ImportError: _dlclose = None  # type: ignore[assignment]

def check_elf(lib: bytes) -> None:
  """OSError if lib is an ELF file cut short (its section table, written last, is past the end): the loader would
  crash the process (SIGBUS) instead of failing."""
  if lib[:4] != b"\x7fELF" or len(lib) < 64 or lib[4] != 2: return  # only 64-bit ELF is checked
  shoff, = struct.unpack_from("<Q" if lib[5] == 1 else ">Q", lib, 0x28)
  shentsize, shnum = struct.unpack_from("<HH" if lib[5] == 1 else ">HH", lib, 0x3A)
  if shoff + shentsize * shnum > len(lib): raise OSError(f"truncated shared library ({len(lib)} bytes)")

class CPUProgram:
  """A compiled kernel: the shared library is written to a temp file, loaded, and the file removed; it is unloaded
  (dlclose) when the program is garbage collected, so a bounded program cache keeps the process's mappings bounded."""
  def __init__(self, name: str, lib: bytes):
    self.name = name
    check_elf(lib)
    with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as f:
      f.write(lib)
      path = f.name
    try: self.lib = ctypes.CDLL(path)
    finally: os.unlink(path)
    self.fxn = self.lib[name]
    self.fxn.restype = None
  def __del__(self) -> None:
    self.__dict__.pop("fxn", None)
    lib = self.__dict__.pop("lib", None)
    if lib is not None and _dlclose is not None: _dlclose(lib._handle)
  def __call__(self, *bufs: CPUBuffer, global_size: Any = None, local_size: Any = None, vals: tuple[int, ...] = (),
               wait: bool = False) -> float | None:
    args = [ctypes.c_void_p(b.addr) for b in bufs] + [ctypes.c_int(v) for v in vals]
    st = time.perf_counter()
    self.fxn(*args)
    return time.perf_counter() - st if wait else None

class CPUDevice(Compiled):
  def __init__(self, device: str):
    cc = find_c_compiler()
    is_clang = "clang" in subprocess.run([*cc, "--version"], capture_output=True, text=True).stdout.lower()
    openmp = openmp_works(cc)
    threads = (CPU_THREADS.value or os.cpu_count() or 1) if openmp else 1
    # OpenMP's idle threads sleep instead of spinning between kernels (read once, when the first kernel loads the
    # OpenMP runtime): on a shared machine spinning workers take the cores from everyone else
    if threads > 1: os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    renderer = ClangRenderer(device="CPU", half_type="__fp16" if is_clang else "_Float16", supports_bfloat16=False,
                             threads=threads if threads > 1 else 0, simd_width=simd_width(), upcast_max=128,
                             vector_widths=(2, 4, 8, 16))
    super().__init__(device, CPUAllocator(), renderer, ClangCompiler(cc, openmp, simd_width()), CPUProgram)
