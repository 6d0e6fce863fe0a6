"""The CL device: OpenCL through ctypes on libOpenCL.so.1 (tested on PoCL). See docs/developer/adding-a-backend.md."""
from __future__ import annotations
import ctypes, functools, hashlib, struct
from typing import Any
from fusegrad.device import Compiled, Allocator, Compiler, CompileError
from fusegrad.renderer import MachineModel
from fusegrad.renderer.cstyle import OpenCLRenderer

# constants from CL/cl.h
CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_ALL = 1 << 2, 0xFFFFFFFF
CL_DEVICE_TYPE, CL_DEVICE_MAX_WORK_GROUP_SIZE, CL_DEVICE_MAX_WORK_ITEM_SIZES = 0x1000, 0x1004, 0x1005
CL_DEVICE_MEM_BASE_ADDR_ALIGN, CL_DEVICE_LOCAL_MEM_SIZE, CL_DEVICE_DOUBLE_FP_CONFIG = 0x1019, 0x1023, 0x1032
CL_DEVICE_NAME, CL_DRIVER_VERSION, CL_DEVICE_VERSION, CL_DEVICE_EXTENSIONS = 0x102B, 0x102D, 0x102F, 0x1030
CL_QUEUE_PROFILING_ENABLE, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION = 1 << 1, 1 << 0, 0x1220
CL_PROGRAM_BINARY_SIZES, CL_PROGRAM_BINARIES, CL_PROGRAM_BUILD_LOG = 0x1165, 0x1166, 0x1183
CL_PROFILING_COMMAND_START, CL_PROFILING_COMMAND_END = 0x1282, 0x1283
CL_PLATFORM_NOT_FOUND_KHR = -1001
ERRORS = {-1: "CL_DEVICE_NOT_FOUND", -4: "CL_MEM_OBJECT_ALLOCATION_FAILURE", -5: "CL_OUT_OF_RESOURCES",
          -6: "CL_OUT_OF_HOST_MEMORY", -11: "CL_BUILD_PROGRAM_FAILURE", -13: "CL_MISALIGNED_SUB_BUFFER_OFFSET",
          -30: "CL_INVALID_VALUE", -42: "CL_INVALID_BINARY", -46: "CL_INVALID_KERNEL_NAME",
          -52: "CL_INVALID_KERNEL_ARGS", -54: "CL_INVALID_WORK_GROUP_SIZE", -55: "CL_INVALID_WORK_ITEM_SIZE",
          -61: "CL_INVALID_BUFFER_SIZE", CL_PLATFORM_NOT_FOUND_KHR: "CL_PLATFORM_NOT_FOUND_KHR"}

@functools.cache
def libcl() -> ctypes.CDLL:
  """libOpenCL.so.1 with the signatures we use: (return type, argument types); every pointer is a void*."""
  lib = ctypes.CDLL("libOpenCL.so.1")
  vp, u32, u64, sz, i32 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int32
  s = ctypes.c_char_p
  signatures: dict[str, tuple[Any, list[Any]]] = {
    "clGetPlatformIDs": (i32, [u32, vp, vp]), "clGetDeviceIDs": (i32, [vp, u64, u32, vp, vp]),
    "clGetDeviceInfo": (i32, [vp, u32, sz, vp, vp]), "clCreateContext": (vp, [vp, u32, vp, vp, vp, vp]),
    "clCreateCommandQueue": (vp, [vp, vp, u64, vp]), "clFinish": (i32, [vp]),
    "clCreateBuffer": (vp, [vp, u64, sz, vp, vp]), "clCreateSubBuffer": (vp, [vp, u64, u32, vp, vp]),
    "clReleaseMemObject": (i32, [vp]), "clEnqueueWriteBuffer": (i32, [vp, vp, u32, sz, sz, vp, u32, vp, vp]),
    "clEnqueueReadBuffer": (i32, [vp, vp, u32, sz, sz, vp, u32, vp, vp]),
    "clCreateProgramWithSource": (vp, [vp, u32, vp, vp, vp]),
    "clCreateProgramWithBinary": (vp, [vp, u32, vp, vp, vp, vp, vp]), "clBuildProgram": (i32, [vp, u32, vp, s, vp, vp]),
    "clGetProgramBuildInfo": (i32, [vp, vp, u32, sz, vp, vp]), "clGetProgramInfo": (i32, [vp, u32, sz, vp, vp]),
    "clReleaseProgram": (i32, [vp]), "clCreateKernel": (vp, [vp, s, vp]), "clSetKernelArg": (i32, [vp, u32, sz, vp]),
    "clReleaseKernel": (i32, [vp]), "clEnqueueNDRangeKernel": (i32, [vp, vp, u32, vp, vp, vp, u32, vp, vp]),
    "clWaitForEvents": (i32, [u32, vp]), "clGetEventProfilingInfo": (i32, [vp, u32, sz, vp, vp]),
    "clReleaseEvent": (i32, [vp])}
  for name, (restype, argtypes) in signatures.items():
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = restype, argtypes
  return lib

def check(status: int, what: str) -> None:
  if status != 0: raise RuntimeError(f"OpenCL {what} failed: {ERRORS.get(status, f'error {status}')}")

def create(fn: Any, *args: Any, what: str) -> int:
  """Call an OpenCL creator (its last argument is the error code) and return the new handle."""
  err = ctypes.c_int32()
  handle = fn(*args, ctypes.byref(err))
  check(err.value, what)
  return handle

def get_info(fn: Any, *obj: Any) -> bytes:
  """The raw bytes a clGet*Info function returns; obj is the object(s) queried and the parameter."""
  size = ctypes.c_size_t()
  check(fn(*obj, 0, None, ctypes.byref(size)), fn.__name__)
  buf = ctypes.create_string_buffer(size.value)
  check(fn(*obj, size, buf, None), fn.__name__)
  return buf.raw

def list_devices() -> list[int]:
  """Every OpenCL device on every platform, GPUs first."""
  cl, count = libcl(), ctypes.c_uint32()
  status = cl.clGetPlatformIDs(0, None, ctypes.byref(count))
  if status == CL_PLATFORM_NOT_FOUND_KHR or count.value == 0: return []
  check(status, "clGetPlatformIDs")
  platforms = (ctypes.c_void_p * count.value)()
  check(cl.clGetPlatformIDs(count.value, platforms, None), "clGetPlatformIDs")
  devices: list[int] = []
  for p in platforms:
    if cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(count)) != 0 or count.value == 0: continue
    ids = (ctypes.c_void_p * count.value)()
    check(cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, count.value, ids, None), "clGetDeviceIDs")
    devices += [d for d in ids if d is not None]
  def device_type(d: int) -> int: return int.from_bytes(get_info(cl.clGetDeviceInfo, d, CL_DEVICE_TYPE), "little")
  return sorted(devices, key=lambda d: not device_type(d) & CL_DEVICE_TYPE_GPU)

class CLBuffer:
  """A cl_mem handle, released once: by CLAllocator.free, or when dropped (sub-buffers, which are views)."""
  def __init__(self, mem: int): self.mem = mem
  def release(self) -> None:
    if self.mem: libcl().clReleaseMemObject(self.mem)
    self.mem = 0
  def __del__(self) -> None: self.release()

class CLAllocator(Allocator):
  def __init__(self, dev: CLDevice): self.dev = dev
  def alloc(self, nbytes: int) -> CLBuffer:
    what = f"alloc of {nbytes} bytes"
    return CLBuffer(create(self.dev.cl.clCreateBuffer, self.dev.context, CL_MEM_READ_WRITE, nbytes, None, what=what))
  def free(self, handle: CLBuffer, nbytes: int) -> None: handle.release()
  def copyin(self, dest: CLBuffer, src: memoryview) -> None:
    if not src.nbytes: return
    array_type = ctypes.c_char * src.nbytes
    host = array_type.from_buffer_copy(src) if src.readonly else array_type.from_buffer(src)
    check(self.dev.cl.clEnqueueWriteBuffer(self.dev.queue, dest.mem, 1, 0, src.nbytes, host, 0, None, None), "copyin")
  def copyout(self, dest: memoryview, src: CLBuffer) -> None:
    if not dest.nbytes: return
    host = (ctypes.c_char * dest.nbytes).from_buffer(dest)
    check(self.dev.cl.clEnqueueReadBuffer(self.dev.queue, src.mem, 1, 0, dest.nbytes, host, 0, None, None), "copyout")
  def offset(self, handle: CLBuffer, offset: int, nbytes: int) -> CLBuffer:
    align = self.dev.base_align
    if offset % align != 0:
      raise NotImplementedError(f"a CL buffer view must start at a multiple of {align} bytes, not at {offset}")
    region = (ctypes.c_size_t * 2)(offset, nbytes)
    return CLBuffer(create(self.dev.cl.clCreateSubBuffer, handle.mem, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION,
                           region, what=f"view of {nbytes} bytes at {offset}"))

class CLCompiler(Compiler):
  """OpenCL C -> the driver's program binary. The cache key holds the device name, driver and OpenCL versions."""
  def __init__(self, dev: CLDevice):
    self.dev = dev
    ident = hashlib.sha256(f"{dev.name}|{dev.driver_version}|{dev.version}".encode()).hexdigest()[:16]
    super().__init__(f"compile_cl_{ident}")
  def compile(self, src: str) -> bytes:
    cl, dev_id, source = self.dev.cl, ctypes.c_void_p(self.dev.device_id), ctypes.c_char_p(src.encode())
    prg = create(cl.clCreateProgramWithSource, self.dev.context, 1, ctypes.byref(source), None, what="new program")
    try:
      status = cl.clBuildProgram(prg, 1, ctypes.byref(dev_id), None, None, None)
      if status != 0:
        log = get_info(cl.clGetProgramBuildInfo, prg, dev_id, CL_PROGRAM_BUILD_LOG).decode(errors="replace")
        log = log.rstrip("\0")
        raise CompileError(f"OpenCL build failed on {self.dev.name} ({ERRORS.get(status, status)}):\n{log}\n"
                           f"--- source ---\n{src}")
      size = struct.unpack_from("N", get_info(cl.clGetProgramInfo, prg, CL_PROGRAM_BINARY_SIZES))[0]
      binary = ctypes.create_string_buffer(size)
      pointers = (ctypes.c_void_p * 1)(ctypes.addressof(binary))
      check(cl.clGetProgramInfo(prg, CL_PROGRAM_BINARIES, ctypes.sizeof(pointers), pointers, None), "clGetProgramInfo")
      return binary.raw
    finally: cl.clReleaseProgram(prg)

class CLProgram:
  """A kernel loaded from its program binary; a call launches global_size workgroups of local_size threads each."""
  def __init__(self, dev: CLDevice, name: str, lib: bytes):
    self.dev, self.name, cl, dev_id = dev, name, dev.cl, ctypes.c_void_p(dev.device_id)
    binary, length = ctypes.c_char_p(lib), ctypes.c_size_t(len(lib))
    self.prg = create(cl.clCreateProgramWithBinary, dev.context, 1, ctypes.byref(dev_id), ctypes.byref(length),
                      ctypes.byref(binary), None, what=f"loading the binary of {name}")
    check(cl.clBuildProgram(self.prg, 1, ctypes.byref(dev_id), None, None, None), f"building the binary of {name}")
    self.kernel = create(cl.clCreateKernel, self.prg, name.encode(), what=f"clCreateKernel({name})")
  def __call__(self, *bufs: CLBuffer, global_size: tuple[int, ...] = (1, 1, 1),
               local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
               wait: bool = False) -> float | None:
    cl = self.dev.cl
    for i, b in enumerate(bufs):
      mem = ctypes.c_void_p(b.mem)
      check(cl.clSetKernelArg(self.kernel, i, ctypes.sizeof(mem), ctypes.byref(mem)), f"{self.name} arg {i}")
    for i, v in enumerate(vals, start=len(bufs)):
      check(cl.clSetKernelArg(self.kernel, i, 4, ctypes.byref(ctypes.c_int32(v))), f"{self.name} arg {i}")
    local = tuple(local_size) if local_size is not None else (1,) * len(global_size)
    if 0 in global_size: return 0.0 if wait else None  # nothing to run (OpenCL 1.2 rejects an empty launch)
    # ProgramSpec counts workgroups; OpenCL's global work size counts threads
    total = (ctypes.c_size_t * len(global_size))(*[g * lo for g, lo in zip(global_size, local)])
    event, group = ctypes.c_void_p(), (ctypes.c_size_t * len(local))(*local)
    status = cl.clEnqueueNDRangeKernel(self.dev.queue, self.kernel, len(global_size), None, total, group, 0, None,
                                       ctypes.byref(event) if wait else None)
    check(status, f"launch of {self.name} with {tuple(global_size)} workgroups of {local} threads")
    if not wait: return None
    try:
      check(cl.clWaitForEvents(1, ctypes.byref(event)), f"waiting for {self.name}")
      start = int.from_bytes(get_info(cl.clGetEventProfilingInfo, event, CL_PROFILING_COMMAND_START), "little")
      end = int.from_bytes(get_info(cl.clGetEventProfilingInfo, event, CL_PROFILING_COMMAND_END), "little")
      return (end - start) * 1e-9
    finally: cl.clReleaseEvent(event)
  def __del__(self) -> None:
    if getattr(self, "kernel", None): self.dev.cl.clReleaseKernel(self.kernel)
    if getattr(self, "prg", None): self.dev.cl.clReleaseProgram(self.prg)

class CLDevice(Compiled):
  fork_safe = False
  def __init__(self, device: str):
    self.cl, devices, num = libcl(), list_devices(), int(device.partition(":")[2] or 0)
    if not devices: raise RuntimeError("no OpenCL device found (install a driver, e.g. pocl-opencl-icd)")
    if num >= len(devices): raise RuntimeError(f"no OpenCL device {device}: only {len(devices)} found")
    self.device_id = devices[num]
    def info(param: int) -> bytes: return get_info(self.cl.clGetDeviceInfo, self.device_id, param)
    def info_str(param: int) -> str: return info(param).rstrip(b"\0").decode(errors="replace")
    def info_int(param: int) -> int: return int.from_bytes(info(param), "little")
    self.name, self.version = info_str(CL_DEVICE_NAME), info_str(CL_DEVICE_VERSION)
    self.driver_version = info_str(CL_DRIVER_VERSION)
    self.device_type, self.base_align = info_int(CL_DEVICE_TYPE), info_int(CL_DEVICE_MEM_BASE_ADDR_ALIGN) // 8
    item_sizes = info(CL_DEVICE_MAX_WORK_ITEM_SIZES)
    local_max = struct.unpack(f"{len(item_sizes) // struct.calcsize('N')}N", item_sizes)[:3]
    dev_ref = ctypes.byref(ctypes.c_void_p(self.device_id))
    self.context = create(self.cl.clCreateContext, None, 1, dev_ref, None, None, what="clCreateContext")
    self.queue = create(self.cl.clCreateCommandQueue, self.context, self.device_id, CL_QUEUE_PROFILING_ENABLE,
                        what="clCreateCommandQueue")
    renderer = OpenCLRenderer(device=device, global_max=(2 ** 31 - 1,) * 3, local_max=tuple(local_max),
                              max_workgroup=info_int(CL_DEVICE_MAX_WORK_GROUP_SIZE),
                              shared_max=info_int(CL_DEVICE_LOCAL_MEM_SIZE),
                              machine=MachineModel(isa="opencl", local_memory=info_int(CL_DEVICE_LOCAL_MEM_SIZE)),
                              supports_float16="cl_khr_fp16" in info_str(CL_DEVICE_EXTENSIONS).split(),
                              supports_float64=info_int(CL_DEVICE_DOUBLE_FP_CONFIG) != 0)
    super().__init__(device, CLAllocator(self), renderer, CLCompiler(self), functools.partial(CLProgram, self))
  @property
  def is_accelerator(self) -> bool:
    """Only GPUs: PoCL's CPU device never outranks the native CPU backend."""
    return bool(self.device_type & CL_DEVICE_TYPE_GPU)
  def synchronize(self) -> None: check(self.cl.clFinish(self.queue), "clFinish")
