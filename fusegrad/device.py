"""Devices: the registry (Device["CPU"], Device.DEFAULT), Buffer, and the four pieces each backend provides (a
`<Name>Device(Compiled)` in runtime/ops_<name>.py: docs/developer/runtime.md)."""
from __future__ import annotations
import atexit, contextlib, errno, functools, hashlib, importlib, inspect, os, pkgutil, re, threading, warnings, weakref
from typing import Any, Callable
from fusegrad.dtype import DType
from fusegrad.helpers import DEV, GlobalCounters, diskcache_get, diskcache_put, dprint
from fusegrad.renderer import Renderer

# *** the device registry *** One thread at a time opens a backend, realizes or copies (PoCL crashes when two threads
# open it; engine/state.py is one per process). Reentrant: a realize opens devices. docs/developer/threads.md.
RUN_LOCK = threading.RLock()

class _Device:
  """Device["CPU"] opens (once) and returns a backend; Device.DEFAULT names the one new tensors use (DEV, or the best
  that works here; `with Context(DEV=...)` changes it for the tensors made inside)."""
  def __init__(self) -> None:
    self._opened: dict[str, Compiled] = {}
    self._canonical: dict[str, str] = {}  # names canonicalize() accepted before
    self._defaults: dict[str, str] = {}  # DEV's value -> the device it selects
    self._lost_in_fork: set[str] = set()  # devices opened before os.fork() whose driver doesn't survive it
  @functools.cached_property
  def _names(self) -> list[str]:
    import fusegrad.runtime
    return [m.name[4:].upper() for m in pkgutil.iter_modules(fusegrad.runtime.__path__) if m.name.startswith("ops_")]
  def canonicalize(self, device: str | None) -> str:
    """'cpu' -> 'CPU', 'cl:0' -> 'CL', 'cl:01' -> 'CL:1', 'disk:/a/file' -> 'DISK:/a/file', None -> Device.DEFAULT, a
    tuple or list name by name (a tuple). ValueError for anything not NAME or NAME:index of a known backend."""
    if device is None: return self.DEFAULT
    if isinstance(device, (tuple, list)): return tuple(self.canonicalize(d) for d in device)  # type: ignore[return-value]
    if isinstance(device, str) and (known := self._canonical.get(device)) is not None: return known
    if isinstance(device, str) and device[:5].upper() == "DISK:" and device[5:]: return f"DISK:{device[5:]}"
    if not isinstance(device, str) or not (m := re.fullmatch(r"([A-Za-z_]+)(?::([0-9]+))?", device)):
      raise ValueError(f"bad device {device!r}: expected NAME or NAME:index, NAME one of {', '.join(self._names)}")
    name, num = m[1].upper(), int(m[2] or 0)
    if name not in self._names: raise ValueError(f"unknown device {name!r}; devices: {', '.join(sorted(self._names))}")
    return self._canonical.setdefault(device, name if num == 0 else f"{name}:{num}")
  def __getitem__(self, device: str) -> Compiled:
    if (ret := self._opened.get(device)) is not None: return ret  # canonical names only are keys
    with RUN_LOCK:  # opened once, by one thread
      device = self.canonicalize(device)
      if device in self._lost_in_fork:
        raise RuntimeError(f"{device} was opened before os.fork(), and its driver doesn't work in a forked child: "
                           f"use {device} in the child only, or start the child with 'spawn'")
      if device not in self._opened: self._opened[device] = self._open(device)
      return self._opened[device]
  def _open(self, device: str) -> Compiled:
    base = device.split(":")[0].lower()
    module = importlib.import_module(f"fusegrad.runtime.ops_{base}")
    cls: type[Any] = next(c for n, c in inspect.getmembers(module, inspect.isclass) if n.lower() == f"{base}device")
    ret: Compiled = cls(device)
    dprint(1, f"opened device {device} ({type(ret).__name__})")
    return ret
  def _try_open(self, device: str) -> Exception | None:
    try: self[device]
    except Exception as e: return e  # a backend that fails to initialise is skipped, with the reason
    return None
  def get_available_devices(self) -> list[str]:
    """The backends that open on this machine: ['CL', 'CPU', 'PYTHON'] ..."""
    return [name for name in sorted(self._names) if self._try_open(name) is None]
  @property
  def default(self) -> Compiled:
    """The default device's backend: Device[Device.DEFAULT]."""; return self[self.DEFAULT]
  def get_available(self, device: str) -> tuple[bool, str]:
    """(works, why not) for a device name, without raising."""
    e = self._try_open(device)
    return e is None, "" if e is None else f"{type(e).__name__}: {e}"
  @property
  def DEFAULT(self) -> str:
    if (ret := self._defaults.get(DEV.value)) is not None: return ret
    with RUN_LOCK:  # picked once, by one thread (picking opens backends)
      if DEV.value not in self._defaults: self._defaults[DEV.value] = self._pick_default()
      return self._defaults[DEV.value]
  def _pick_default(self) -> str:
    if DEV.value:
      try: dev = self.canonicalize(DEV.value)
      except ValueError as e: raise RuntimeError(f"DEV={DEV.value} can't be opened: {e}") from None
      ok, why = self.get_available(dev)
      if not ok: raise RuntimeError(f"DEV={DEV.value} can't be opened: {why}")
      return dev
    # a real accelerator first, then the native CPU backend, then the interpreter (only when no C compiler is installed)
    for dev in ("CUDA", "CL", "CPU"):
      e = self._try_open(dev)
      if e is None and (dev == "CPU" or self[dev].is_accelerator): return dev
      if dev == "CPU" and isinstance(e, NoCompilerError):
        warnings.warn(f"fusegrad: {e}; using the PYTHON interpreter, which is much slower (set DEV=PYTHON to silence)")
        return "PYTHON"
      if dev == "CPU": raise RuntimeError(f"the CPU backend doesn't work: {type(e).__name__}: {e}") from e
      dprint(1, f"device {dev} skipped: {f'{type(e).__name__}: {e}' if e else 'not an accelerator'}")
    raise AssertionError("unreachable")
  def set_default(self, device: str) -> None:
    """Make device the default from now on (as DEV=device would)."""
    DEV.value = self.canonicalize(device)
Device = _Device()

def _after_fork_in_child() -> None:
  RUN_LOCK.release()
  Device._lost_in_fork |= {name for name, dev in Device._opened.items() if not dev.fork_safe}
  Device._opened = {name: dev for name, dev in Device._opened.items() if dev.fork_safe}
def _wait_for_devices() -> None:  # every opened device's queued work (one that failed before: the others still wait)
  for dev in list(Device._opened.values()):
    with contextlib.suppress(Exception): dev.synchronize()
def _before_fork() -> None:  # a fork waits for a realize in another thread (the child's lock is free), then for the
  RUN_LOCK.acquire()         # devices' queued work (the child's memory holds every result)
  _wait_for_devices()
if hasattr(os, "register_at_fork"):
  os.register_at_fork(before=_before_fork, after_in_parent=RUN_LOCK.release, after_in_child=_after_fork_in_child)
atexit.register(_wait_for_devices)  # (a process ending with kernels running on CL or WEBGPU crashed in their LLVM)

# *** buffers ***
class OutOfMemoryError(MemoryError, RuntimeError):
  """A buffer that can't be allocated (torch's RuntimeError, Python's MemoryError): names device, bytes, dtype."""

class Buffer:
  """size elements of dtype on a device. Memory is allocated on first use; a Buffer with a base is a view into it."""
  _pending: bytes | None = None  # the contents to copy in when it is allocated (copyin_later)
  _buf: Any = None  # the allocator's handle, once allocated (class defaults: a Buffer whose __init__ failed dies too)
  _allocator: Allocator = None  # type: ignore[assignment]  # the device's, once allocated (no lookup per use)
  _external = False  # _buf is memory the caller owns (use_pointer): never freed here
  def __init__(self, device: str, size: int, dtype: DType, base: Buffer | None = None, offset: int = 0):
    if size < 0: raise ValueError(f"buffer size must be >= 0, got {size}")
    # (plain ints: a length from a Variable, a SymInt, would carry its expression into every sum made with it)
    self.device, self.size, self.dtype, self.offset, self._base = device, int(size), dtype, int(offset), base
    # realization state, set by engine/state.py through the methods below: the write id of the newest version of the
    # contents (None: never written), and the tensor whose storage this is (a weak reference; None: none yet)
    self.newest_write: int | None = None
    self.owner: Callable[[], Any] | None = None
    if base is not None:
      if base._base is not None: raise ValueError("a buffer view can't have a view as its base")
      if offset + self.nbytes > base.nbytes:
        raise ValueError(f"view of {self.nbytes} bytes at {offset} is outside a {base.nbytes}-byte buffer")
  def written(self, write_id: int) -> None: self.newest_write = write_id
  def claim(self, t: Any) -> None: self.owner = weakref.ref(t)
  @property
  def base(self) -> Buffer: return self._base if self._base is not None else self
  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  def is_allocated(self) -> bool: return self._buf is not None
  def allocate(self) -> Buffer:
    if self._buf is not None: return self
    self._allocator = allocator = Device[self.device].allocator
    if self._base is not None:
      self._base.allocate()
      self._buf = allocator.offset(self._base._buf, self.offset, self.nbytes)
    else:
      try: self._buf = allocator.alloc(max(nbytes := self.size * self.dtype.itemsize, 1))
      except (MemoryError, OSError) as e:
        if isinstance(e, OSError) and e.errno != errno.ENOMEM: raise
        raise OutOfMemoryError(f"{self.device}: out of memory: tried to allocate {self.nbytes} bytes "
                               f"({self.nbytes / 2**30:.2f} GiB) for {self.size} elements of {self.dtype} ({e})") from e
      GlobalCounters.mem_used += nbytes
      if self._pending is not None: allocator.copyin(self._buf, memoryview(self._pending))
      self._pending = None
    return self
  def share(self, base: Buffer, offset: int) -> None:
    """Use base's memory from byte offset instead of allocating (engine/memory.py): for a buffer never allocated."""
    assert self._buf is None and self._base is None and base._base is None and offset + self.nbytes <= base.nbytes
    self._base, self.offset = base, offset
  def copyin_later(self, data: bytes) -> Buffer:
    """copyin when first used: until then nothing is allocated (a tensor of data never used holds no device memory)."""
    self._pending = data
    return self
  def use_pointer(self, ptr: int) -> Buffer:
    """Use the memory at address ptr (nbytes on this device, owned by the caller, who keeps it alive) instead of
    allocating: nothing is copied and nothing is freed."""
    if self._buf is not None or self._base is not None: raise RuntimeError("use_pointer: the buffer has memory already")
    self._allocator = Device[self.device].allocator
    self._buf, self._external = self._allocator.from_pointer(ptr, self.nbytes), True
    return self
  def deallocate(self) -> None:
    """Free the memory now (the next use allocates again); a view's is its base's, the caller's is left alone."""
    if self._buf is None or self._base is not None or self._external: return
    GlobalCounters.mem_used -= (nbytes := self.size * self.dtype.itemsize)
    self._allocator.free(self._buf, max(nbytes, 1))
    self._buf = None
  def __del__(self) -> None:
    if self._buf is None: return
    try: self.deallocate()
    except Exception: pass  # interpreter shutdown
  def copyin(self, data: memoryview | bytes | bytearray) -> Buffer:
    mv = memoryview(data).cast("B")
    if mv.nbytes != self.nbytes: raise ValueError(f"copyin of {mv.nbytes} bytes into a {self.nbytes}-byte buffer")
    with RUN_LOCK: self.allocate()._allocator.copyin(self._buf, mv)
    return self
  def copyout(self, dest: memoryview) -> memoryview:
    dest = dest.cast("B")
    if dest.nbytes != self.nbytes: raise ValueError(f"copyout of a {self.nbytes}-byte buffer into {dest.nbytes} bytes")
    with RUN_LOCK: self.allocate()._allocator.copyout(dest, self._buf)
    return dest
  def as_bytes(self) -> bytes: return bytes(self.copyout(memoryview(bytearray(self.nbytes))))
  def as_buffer(self) -> memoryview: return memoryview(self.as_bytes())  # (tinygrad's name) a copy of the contents
  def __reduce__(self) -> tuple:  # pickle (a TinyJit's buffers): a view keeps its base, the contents go along
    if self._base is not None: return Buffer, (self.device, self.size, self.dtype, self._base, self.offset)
    data = self.as_bytes() if self._buf is not None else self._pending  # (copied in when first used)
    return Buffer, (self.device, self.size, self.dtype), {"_pending": data}
  def view(self, size: int, dtype: DType, offset: int) -> Buffer:
    """A buffer sharing this one's memory from byte offset."""
    return Buffer(self.device, size, dtype, base=self.base, offset=self.offset + offset)
  def __repr__(self) -> str:
    return (f"<buf {self.device} {self.size} {self.dtype}{' view' if self._base is not None else ''}"
            f"{'' if self._buf is not None else ' unalloc'}>")

# *** the pieces of a backend ***
class Allocator:
  """Device memory: alloc returns an opaque handle."""
  def alloc(self, nbytes: int) -> Any: raise NotImplementedError
  def free(self, handle: Any, nbytes: int) -> None: pass
  def copyin(self, dest: Any, src: memoryview) -> None: raise NotImplementedError
  def copyout(self, dest: memoryview, src: Any) -> None: raise NotImplementedError
  def offset(self, handle: Any, offset: int, nbytes: int) -> Any:
    raise NotImplementedError(f"{type(self).__name__} has no buffer views")
  def from_pointer(self, ptr: int, nbytes: int) -> Any:
    """A handle for nbytes of memory someone else owns, at address ptr (Tensor.from_blob)."""
    raise NotImplementedError(f"{type(self).__name__} can't use memory at a raw address")

class Compiler:
  """Source -> binary. cachekey names the compiler and its flags; None disables the disk cache (one entry per kernel
  source, or a `ref:` to a batch's binary: docs/developer/runtime.md, "The compile cache")."""
  def __init__(self, cachekey: str | None = None): self.cachekey = cachekey
  def compile(self, src: str) -> bytes: raise NotImplementedError
  def compile_batch(self, srcs: list[str]) -> list[bytes | CompileError]:
    """Each source's binary, or the CompileError it raised. A backend may compile several sources into one binary
    (the same bytes object for each of them) that holds every kernel of the batch."""
    out: list[bytes | CompileError] = []
    for src in srcs:
      try: out.append(self.compile(src))
      except CompileError as e: out.append(e)
    return out
  def start_batch(self, srcs: list[str], units: int = 0) -> Callable[[], list[bytes | CompileError]]:
    """compile_batch started: calling the result waits for it. A backend whose compiler runs in other processes
    returns while they run (in `units` of them: 0 is its default), so codegen can go on meanwhile."""
    return functools.partial(self.compile_batch, srcs)
  def _get(self, key: str) -> bytes | None:
    assert self.cachekey is not None
    if (val := diskcache_get(self.cachekey, key)) is None or not val.startswith(b"ref:"): return val
    lib = diskcache_get(self.cachekey, f"lib:{val[4:].decode(errors='replace')}")
    return lib if lib is not None and hashlib.sha256(lib).hexdigest().encode() == val[4:] else None
  def compile_cached_batch(self, srcs: list[str]) -> list[bytes | CompileError]:
    """compile_batch of the sources the disk cache doesn't hold; every binary is cached per source."""
    return self.start_cached_batch(srcs)()
  def start_cached_batch(self, srcs: list[str], units: int = 0) -> Callable[[], list[bytes | CompileError]]:
    """compile_cached_batch started (see start_batch): the cache is read now, the new binaries stored when waited."""
    if self.cachekey is None: return self.start_batch(srcs, units)
    keys = [hashlib.sha256(src.encode()).hexdigest() for src in srcs]
    found: dict[str, bytes | CompileError] = {k: lib for k in dict.fromkeys(keys) if (lib := self._get(k)) is not None}
    missing = {k: src for k, src in zip(keys, srcs) if k not in found}
    wait = self.start_batch(list(missing.values()), units) if missing else list
    def finish() -> list[bytes | CompileError]:
      libs, shared = wait(), dict[int, str]()  # shared: id of a binary several kernels share -> its sha256, once stored
      assert self.cachekey is not None
      for key, lib in zip(missing, libs):
        if isinstance(lib, bytes) and sum(x is lib for x in libs) > 1:
          if id(lib) not in shared:
            shared[id(lib)] = hashlib.sha256(lib).hexdigest()
            diskcache_put(self.cachekey, f"lib:{shared[id(lib)]}", lib)
          diskcache_put(self.cachekey, key, f"ref:{shared[id(lib)]}".encode())
        elif isinstance(lib, bytes): diskcache_put(self.cachekey, key, lib)
        found[key] = lib
      return [found[k] for k in keys]
    return finish
  def compile_cached(self, src: str, fresh: bool = False) -> bytes:
    """compile(src), from the disk cache when there (fresh=True: compile again and replace the cached entry)."""
    key = hashlib.sha256(src.encode()).hexdigest()
    if self.cachekey is None: return self.compile(src)
    if not fresh and (lib := self._get(key)) is not None: return lib
    return diskcache_put(self.cachekey, key, self.compile(src))

class NoCompilerError(RuntimeError):
  """The backend needs a compiler and none is installed (the one case Device.DEFAULT falls back to PYTHON)."""

class CompileError(RuntimeError):
  """A kernel failed to compile; the message holds the compiler's log and the source."""

class Compiled:
  """A device: allocator, renderer, compiler and program class. runtime(name, lib) -> a callable program.
  others: makers of the other compilers a kernel may pick (renderer.compilers names them all, the default first)."""
  graph = None  # (tinygrad's graph executor of a device: none here, TinyJit replays its kernels one by one)
  def __init__(self, device: str, allocator: Allocator, renderer: Renderer, compiler: Compiler,
               runtime: Callable[[str, bytes], Any], others: tuple[Callable[[], Compiler], ...] = ()):
    self.device, self.allocator, self.renderer, self.compiler = device, allocator, renderer, compiler
    self.runtime, self._others, self._made = runtime, others, {0: compiler}
  def compiler_for(self, index: int) -> Compiler:
    """The device's compiler number index (0: the default; the others are made when first used)."""
    if index not in self._made:
      if not 0 < index <= len(self._others): raise ValueError(f"{self.device} has no compiler {index}")
      self._made[index] = self._others[index - 1]()
    return self._made[index]
  runs_kernels = True  # False: a device data is only copied to and from (DISK, a file)
  fork_safe = True  # False: the driver doesn't work in a child forked after it opened (Device refuses it there)
  @property
  def is_accelerator(self) -> bool:
    """True for a real GPU (preferred as the default device); the CPU, the interpreter and PoCL are not."""
    return False
  def synchronize(self) -> None: pass
