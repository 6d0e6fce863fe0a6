"""The CUDA device: CUDA C compiled to a cubin by NVRTC (or the nvcc binary), run through the driver API with ctypes
(libcuda.so.1, no CUDA Python packages). Without a driver or a GPU, CUDADevice() raises and Device.DEFAULT moves on."""
from __future__ import annotations
import ctypes, ctypes.util, dataclasses, functools, glob, os, re, shutil, subprocess, sys, tempfile
from typing import Any
from fusegrad.device import Compiled, Allocator, Compiler, CompileError
from fusegrad.renderer.cstyle import CUDARenderer

class CUDAError(RuntimeError):
  """A CUDA driver call failed; the message names the call and CUDA's error."""

# *** finding the toolkit ***
def _cuda_roots() -> list[str]:
  """Folders that may hold a CUDA toolkit: the one nvcc comes from, /usr/local/cuda, and pip's nvidia packages."""
  roots = [os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))] if (nvcc := shutil.which("nvcc")) else []
  roots += sorted(glob.glob("/usr/local/cuda*"), reverse=True)
  roots += [d for p in sys.path for d in sorted(glob.glob(os.path.join(p, "nvidia", "*")))]
  return [r for r in dict.fromkeys(roots) if os.path.isdir(r)]

def _find(patterns: list[str]) -> str | None:
  """The first existing path matching one of the patterns (relative to a CUDA root)."""
  for root in _cuda_roots():
    for pattern in patterns:
      if hits := sorted(glob.glob(os.path.join(root, pattern))): return hits[-1]
  return None

def find_nvcc() -> str | None: return shutil.which("nvcc") or _find(["bin/nvcc"])
def find_nvrtc() -> str | None:
  return ctypes.util.find_library("nvrtc") or _find(["lib64/libnvrtc.so*", "lib/libnvrtc.so*"])
def find_include() -> str | None:
  """The folder holding cuda_fp16.h (NVRTC needs it for half and bfloat16 kernels)."""
  header = _find(["include/cuda_fp16.h", "targets/*/include/cuda_fp16.h"])
  return os.path.dirname(header) if header else None

# *** compilers: CUDA C -> cubin for one architecture (sm_90 ...) ***
class NVRTCCompiler(Compiler):
  """NVRTC through ctypes: no process per kernel. The cache key holds the architecture and NVRTC's version."""
  def __init__(self, arch: str, path: str):
    self.arch, self.lib = arch, ctypes.CDLL(path)
    major, minor = ctypes.c_int(), ctypes.c_int()
    self._check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    self.options = [f"--gpu-architecture={arch}"] + ([f"-I{inc}"] if (inc := find_include()) else [])
    super().__init__(f"compile_cuda_{arch}_nvrtc{major.value}.{minor.value}")
  def _check(self, status: int, what: str, log: str = "", src: str = "") -> None:
    if status == 0: return
    self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    error = self.lib.nvrtcGetErrorString(status).decode()
    raise CompileError(f"{what} failed: {error}\n{log}" + (f"--- source ---\n{src}" if src else ""))
  def compile(self, src: str) -> bytes:
    prog, size = ctypes.c_void_p(), ctypes.c_size_t()
    status = self.lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel.cu", 0, None, None)
    self._check(status, "nvrtcCreateProgram")
    try:
      opts = (ctypes.c_char_p * len(self.options))(*[o.encode() for o in self.options])
      status = self.lib.nvrtcCompileProgram(prog, len(self.options), opts)
      self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
      log = ctypes.create_string_buffer(size.value)
      self.lib.nvrtcGetProgramLog(prog, log)
      self._check(status, f"NVRTC ({self.arch})", log.value.decode(errors="replace"), src)
      self._check(self.lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
      cubin = ctypes.create_string_buffer(size.value)
      self._check(self.lib.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
      return cubin.raw
    finally: self.lib.nvrtcDestroyProgram(ctypes.byref(prog))

class NVCCCompiler(Compiler):
  """The nvcc binary, one process per kernel (slower than NVRTC). The cache key holds the arch and nvcc's version."""
  def __init__(self, arch: str, nvcc: str):
    self.arch, self.nvcc = arch, nvcc
    version = re.search(r"V(\d+(\.\d+)*)", subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout)
    super().__init__(f"compile_cuda_{arch}_nvcc{version.group(1) if version else 'unknown'}")
  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
      cu, out = os.path.join(tmp, "kernel.cu"), os.path.join(tmp, "kernel.cubin")
      with open(cu, "w") as f: f.write(src)
      proc = subprocess.run([self.nvcc, f"-arch={self.arch}", "-cubin", "-o", out, cu], capture_output=True, text=True)
      if proc.returncode != 0: raise CompileError(f"nvcc ({self.arch}) failed:\n{proc.stderr}\n--- source ---\n{src}")
      with open(out, "rb") as f: return f.read()

def cuda_compiler(arch: str) -> Compiler:
  """NVRTC if libnvrtc is found, else nvcc; a clear error when neither is."""
  if (nvrtc := find_nvrtc()) is not None: return NVRTCCompiler(arch, nvrtc)
  if (nvcc := find_nvcc()) is not None: return NVCCCompiler(arch, nvcc)
  raise RuntimeError("no CUDA compiler: neither libnvrtc.so nor nvcc was found "
                     "(install the CUDA toolkit, or pip's nvidia-cuda-nvrtc)")

# *** the driver API ***
class _Driver:
  """libcuda.so.1: call(name, *args) runs a driver function and raises CUDAError unless it returns CUDA_SUCCESS."""
  def __init__(self) -> None:
    try: self.lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e: raise CUDAError(f"no CUDA driver: libcuda.so.1 can't be loaded ({e})") from e
    self.call("cuInit", 0)
  def call(self, name: str, *args: Any) -> None:
    if (status := getattr(self.lib, name)(*args)) != 0:
      err = ctypes.c_char_p()
      self.lib.cuGetErrorName(status, ctypes.byref(err))
      raise CUDAError(f"{name} failed: {(err.value or b'unknown error').decode()} ({status})")

class CUDAAllocator(Allocator):
  """Device memory; a handle is the device address as an int, so a view is handle + offset."""
  def __init__(self, dev: CUDADevice): self.dev = dev
  def alloc(self, nbytes: int) -> int:
    self.dev.make_current()
    ptr = ctypes.c_uint64()
    try: self.dev.cu.call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(nbytes))
    except CUDAError as e: raise CUDAError(f"allocating {nbytes} bytes on {self.dev.device}: {e}") from None
    return ptr.value
  def free(self, handle: int, nbytes: int) -> None:
    self.dev.make_current()
    self.dev.cu.call("cuMemFree_v2", ctypes.c_uint64(handle))
  def copyin(self, dest: int, src: memoryview) -> None:
    if src.nbytes == 0: return
    array_type = ctypes.c_char * src.nbytes
    host = array_type.from_buffer_copy(src) if src.readonly else array_type.from_buffer(src)
    self.dev.make_current()
    self.dev.cu.call("cuMemcpyHtoD_v2", ctypes.c_uint64(dest), host, ctypes.c_size_t(src.nbytes))
  def copyout(self, dest: memoryview, src: int) -> None:
    if dest.nbytes == 0: return
    self.dev.make_current()
    host = (ctypes.c_char * dest.nbytes).from_buffer(dest)
    self.dev.cu.call("cuMemcpyDtoH_v2", host, ctypes.c_uint64(src), ctypes.c_size_t(dest.nbytes))
  def offset(self, handle: int, offset: int, nbytes: int) -> int: return handle + offset

class CUDAProgram:
  """A kernel loaded from a cubin; calling it launches it on the default stream (timed with events when wait=True)."""
  def __init__(self, dev: CUDADevice, name: str, lib: bytes):
    self.dev, self.name, self.module, self.fxn = dev, name, ctypes.c_void_p(), ctypes.c_void_p()
    dev.make_current()
    dev.cu.call("cuModuleLoadData", ctypes.byref(self.module), lib)
    dev.cu.call("cuModuleGetFunction", ctypes.byref(self.fxn), self.module, name.encode())
  def __call__(self, *bufs: int, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] | None = None,
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    grid, block = tuple(global_size) + (1,) * (3 - len(global_size)), tuple(local_size or (1, 1, 1))
    args = [ctypes.c_uint64(b) for b in bufs] + [ctypes.c_int32(v) for v in vals]
    params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args])
    cu = self.dev.cu
    self.dev.make_current()
    if wait: cu.call("cuEventRecord", self.dev.events[0], None)
    dims = [ctypes.c_uint(x) for x in grid + block]
    try: cu.call("cuLaunchKernel", self.fxn, *dims, ctypes.c_uint(0), None, params, None)  # no dynamic shared memory
    except CUDAError as e: raise CUDAError(f"launch of {self.name} with grid {grid}, block {block}: {e}") from None
    if not wait: return None
    cu.call("cuEventRecord", self.dev.events[1], None)
    cu.call("cuEventSynchronize", self.dev.events[1])
    ms = ctypes.c_float()
    cu.call("cuEventElapsedTime", ctypes.byref(ms), self.dev.events[0], self.dev.events[1])
    return ms.value * 1e-3
  def __del__(self) -> None:
    try: self.dev.cu.call("cuModuleUnload", self.module)
    except Exception: pass  # interpreter shutdown

class CUDADevice(Compiled):
  """CUDA or CUDA:n, on the device's primary context; kernels are compiled for its architecture."""
  fork_safe = False
  def __init__(self, device: str):
    self.cu = _Driver()
    ordinal, count = int(device.partition(":")[2] or 0), ctypes.c_int()
    self.cu.call("cuDeviceGetCount", ctypes.byref(count))
    if not 0 <= ordinal < count.value: raise CUDAError(f"{device}: this machine has {count.value} CUDA device(s)")
    dev, self.context = ctypes.c_int(), ctypes.c_void_p()
    self.cu.call("cuDeviceGet", ctypes.byref(dev), ordinal)
    self.cu.call("cuDevicePrimaryCtxRetain", ctypes.byref(self.context), dev)
    self.make_current()
    def attr(n: int) -> int:  # a CU_DEVICE_ATTRIBUTE_ value
      self.cu.call("cuDeviceGetAttribute", ctypes.byref(v := ctypes.c_int()), n, dev)
      return v.value
    self.arch = f"sm_{attr(75)}{attr(76)}"  # compute capability major, minor
    # the machine model: shared memory per block (8), warp size (10), the L2 every multiprocessor shares (38)
    ren = CUDARenderer(device=device, shared_max=attr(8), machine=dataclasses.replace(
      CUDARenderer.machine, local_memory=attr(8), warp_size=attr(10), l2=attr(38)))
    self.events = (ctypes.c_void_p(), ctypes.c_void_p())
    for ev in self.events: self.cu.call("cuEventCreate", ctypes.byref(ev), 0)
    super().__init__(device, CUDAAllocator(self), ren, cuda_compiler(self.arch), functools.partial(CUDAProgram, self))
  def make_current(self) -> None: self.cu.call("cuCtxSetCurrent", self.context)
  @property
  def is_accelerator(self) -> bool: return True
  def synchronize(self) -> None:
    self.make_current()
    self.cu.call("cuCtxSynchronize")
