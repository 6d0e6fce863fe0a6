"""DISK: a file as a device. `disk:/path/to/file` names one; a buffer of n bytes on it is the file's first n bytes,
mapped into memory (the file is made, or grown, to hold them; a read-only file maps read-only). Data moves in and
out only by copies (`t.to("CPU")`, `disk_t.assign(x)`): nothing computes on it, and a kernel on it raises."""
import mmap, os
from typing import Any
from fusegrad.device import Allocator, Compiled, Compiler

class DiskAllocator(Allocator):
  def __init__(self, path: str): self.path = path
  def alloc(self, nbytes: int) -> memoryview:
    try: fd, access = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644), mmap.ACCESS_WRITE
    except PermissionError: fd, access = os.open(self.path, os.O_RDONLY), mmap.ACCESS_READ
    try:
      if (size := os.fstat(fd).st_size) < nbytes and access == mmap.ACCESS_READ:
        raise ValueError(f"{self.path} is read-only and holds {size} bytes: a buffer of {nbytes} bytes doesn't fit")
      if size < nbytes: os.ftruncate(fd, nbytes)
      return memoryview(mmap.mmap(fd, nbytes, access=access))
    finally: os.close(fd)
  def copyin(self, dest: memoryview, src: memoryview) -> None: dest[:] = src
  def copyout(self, dest: memoryview, src: memoryview) -> None: dest[:] = src
  def offset(self, handle: memoryview, offset: int, nbytes: int) -> memoryview: return handle[offset:offset + nbytes]
  def as_memoryview(self, handle: memoryview) -> memoryview: return handle

class _NoKernels:
  """The renderer and runtime of a device that runs no kernels: codegen's first question to it raises."""
  def __init__(self, device: str): self.device = device
  def __getattr__(self, name: str) -> Any: self()
  def __call__(self, *args: Any) -> Any:
    raise RuntimeError(f"{self.device} is a file and computes nothing: copy the tensor to a device first "
                       "(t.to('CPU')); views of its data (slices, permutes, bitcasts) are read, not computed on")

class DiskDevice(Compiled):
  runs_kernels = False
  def __init__(self, device: str):
    if not device.startswith("DISK:"): raise ValueError(f"{device}: the disk device needs a file: 'disk:/path/to/file'")
    none = _NoKernels(device)
    super().__init__(device, DiskAllocator(device[5:]), none, Compiler(None), none)  # type: ignore[arg-type]
