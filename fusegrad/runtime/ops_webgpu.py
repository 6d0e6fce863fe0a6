"""The WEBGPU device: WGSL compute shaders through `wgpu` (wgpu-native), on whatever adapter it finds. Never the
default device: select it with DEV=WEBGPU. See docs/webgpu.md."""
from __future__ import annotations
import functools, os, struct
from typing import Any
from fusegrad.device import Compiled, Allocator, Compiler, CompileError
from fusegrad.renderer.wgsl import WGSLRenderer

def _round4(n: int) -> int: return max(4, (n + 3) // 4 * 4)  # WebGPU copies and bindings come in 4-byte words

class WebGPUBuffer:
  """A storage buffer, or a view of one from a byte offset (views must start at the binding alignment)."""
  def __init__(self, buffer: Any, offset: int, nbytes: int):
    self.buffer, self.offset, self.nbytes = buffer, offset, nbytes

class WebGPUAllocator(Allocator):
  def __init__(self, dev: WebGPUDevice): self.dev = dev
  def alloc(self, nbytes: int) -> WebGPUBuffer:
    if nbytes > self.dev.max_binding:
      raise MemoryError(f"a {nbytes}-byte buffer exceeds {self.dev.device}'s largest binding ({self.dev.max_binding})")
    usage = self.dev.wgpu.BufferUsage
    return WebGPUBuffer(self.dev.gpu.create_buffer(size=_round4(nbytes), usage=usage.STORAGE | usage.COPY_SRC |
                                                   usage.COPY_DST), 0, nbytes)
  def free(self, handle: WebGPUBuffer, nbytes: int) -> None: handle.buffer.destroy()
  def copyin(self, dest: WebGPUBuffer, src: memoryview) -> None:
    if not src.nbytes: return
    data = bytes(src)
    if src.nbytes % 4:  # the word holding the tail keeps the bytes after it (another view's)
      data += self.copy_out_words(dest, src.nbytes // 4 * 4, 4)[src.nbytes % 4:]
    self.dev.gpu.queue.write_buffer(dest.buffer, dest.offset, data)  # (in queue order with the kernels submitted)
  def copyout(self, dest: memoryview, src: WebGPUBuffer) -> None:
    if dest.nbytes: dest[:] = self.copy_out_words(src, 0, _round4(dest.nbytes))[:dest.nbytes]
  def copy_out_words(self, src: WebGPUBuffer, offset: int, nbytes: int) -> bytes:
    """nbytes (a multiple of 4) of src from offset, through a staging buffer mapped for reading."""
    usage = self.dev.wgpu.BufferUsage
    staging = self.dev.gpu.create_buffer(size=nbytes, usage=usage.COPY_DST | usage.MAP_READ)
    encoder = self.dev.gpu.create_command_encoder()
    encoder.copy_buffer_to_buffer(src.buffer, src.offset + offset, staging, 0, nbytes)
    self.dev.gpu.queue.submit([encoder.finish()])
    staging.map_sync(self.dev.wgpu.MapMode.READ)
    try: return bytes(staging.read_mapped())
    finally:
      staging.unmap()
      staging.destroy()
  def offset(self, handle: WebGPUBuffer, offset: int, nbytes: int) -> WebGPUBuffer:
    if (handle.offset + offset) % self.dev.offset_align:
      raise NotImplementedError(f"a WEBGPU buffer view must start at a multiple of {self.dev.offset_align} bytes, "
                                f"not at {offset}")
    return WebGPUBuffer(handle.buffer, handle.offset + offset, nbytes)

class WebGPUCompiler(Compiler):
  """WGSL -> the same WGSL, once the adapter's shader compiler accepted it (a module is cheap to make again)."""
  def __init__(self, dev: WebGPUDevice):
    self.dev = dev
    super().__init__(None)
  def compile(self, src: str) -> bytes:
    try: self.dev.gpu.create_shader_module(code=src)
    except Exception as e: raise CompileError(f"WGSL rejected by {self.dev.adapter_name}: {e}\n--- source ---\n{src}")
    return src.encode()

class WebGPUProgram:
  """A compute pipeline for one kernel; its bind group layout (buffers, then int variables) is made on the first call,
  when the number of each is known."""
  def __init__(self, dev: WebGPUDevice, name: str, lib: bytes):
    self.dev, self.name, self.module = dev, name, dev.gpu.create_shader_module(code=lib.decode())
    self.pipeline: Any = None
  def _make_pipeline(self, nbufs: int, nvals: int) -> None:
    wgpu = self.dev.wgpu
    kinds = [wgpu.BufferBindingType.storage] * nbufs + [wgpu.BufferBindingType.uniform] * nvals
    self.layout = self.dev.gpu.create_bind_group_layout(entries=[
      {"binding": i, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": k}} for i, k in enumerate(kinds)])
    self.pipeline = self.dev.gpu.create_compute_pipeline(
      layout=self.dev.gpu.create_pipeline_layout(bind_group_layouts=[self.layout]),
      compute={"module": self.module, "entry_point": self.name})
  def __call__(self, *bufs: WebGPUBuffer, global_size: tuple[int, ...] = (1, 1, 1),
               local_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = (),
               wait: bool = False) -> float | None:
    if 0 in global_size: return 0.0 if wait else None
    gpu, usage = self.dev.gpu, self.dev.wgpu.BufferUsage
    if self.pipeline is None: self._make_pipeline(len(bufs), len(vals))
    entries = [{"binding": i, "resource": {"buffer": b.buffer, "offset": b.offset, "size": _round4(b.nbytes)}}
               for i, b in enumerate(bufs)]
    for i, v in enumerate(vals, start=len(bufs)):  # each variable a 16-byte uniform buffer
      uniform = gpu.create_buffer_with_data(data=struct.pack("<i12x", v), usage=usage.UNIFORM)
      entries.append({"binding": i, "resource": {"buffer": uniform, "offset": 0, "size": 16}})
    encoder = gpu.create_command_encoder()
    timed = wait and self.dev.query_set is not None
    writes = {"query_set": self.dev.query_set, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}
    compute = encoder.begin_compute_pass(timestamp_writes=writes if timed else None)
    compute.set_pipeline(self.pipeline)
    compute.set_bind_group(0, gpu.create_bind_group(layout=self.layout, entries=entries))
    compute.dispatch_workgroups(*global_size)
    compute.end()
    if timed: encoder.resolve_query_set(self.dev.query_set, 0, 2, self.dev.query_buf, 0)
    gpu.queue.submit([encoder.finish()])
    if not wait: return None
    if not timed:
      self.dev.synchronize()
      return 0.0
    start, end = struct.unpack("<QQ", self.dev.allocator.copy_out_words(WebGPUBuffer(self.dev.query_buf, 0, 16), 0, 16))
    return (end - start) * 1e-9

class WebGPUDevice(Compiled):
  """The first adapter wgpu finds (high-performance preferred), with shader-f16 and timestamp queries when offered and
  the adapter's own limits (not WebGPU's defaults) for workgroups, bindings and buffer counts."""
  def __init__(self, device: str):
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")  # Mesa warns on every start without one
    try: import wgpu
    except ImportError as e: raise RuntimeError("the WEBGPU device needs the wgpu package (pip install wgpu)") from e
    self.wgpu = wgpu
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    if adapter is None: raise RuntimeError("no WebGPU adapter found (on Linux: apt install mesa-vulkan-drivers)")
    features = [f for f in ("shader-f16", "timestamp-query") if f in adapter.features]
    names = ("max-storage-buffers-per-shader-stage", "max-storage-buffer-binding-size", "max-buffer-size",
             "max-compute-invocations-per-workgroup", "max-compute-workgroup-size-x", "max-compute-workgroup-size-y",
             "max-compute-workgroup-size-z", "max-compute-workgroup-storage-size", "max-bindings-per-bind-group")
    limits = {n: adapter.limits[n] for n in names if n in adapter.limits}
    self.gpu = adapter.request_device_sync(required_features=features, required_limits=limits)
    self.adapter_name, self.adapter_type = adapter.info["device"], adapter.info.get("adapter_type", "")
    lim = self.gpu.limits
    self.max_binding = lim["max-storage-buffer-binding-size"]
    self.offset_align = lim["min-storage-buffer-offset-alignment"]
    self.query_set, self.query_buf = None, None
    if "timestamp-query" in features:
      self.query_set = self.gpu.create_query_set(type=wgpu.QueryType.timestamp, count=2)
      self.query_buf = self.gpu.create_buffer(size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
    local_max = tuple(lim[f"max-compute-workgroup-size-{axis}"] for axis in "xyz")
    renderer = WGSLRenderer(device=device, global_max=(lim["max-compute-workgroups-per-dimension"],) * 3,
                            local_max=local_max, max_workgroup=lim["max-compute-invocations-per-workgroup"],
                            shared_max=lim["max-compute-workgroup-storage-size"],
                            max_buffers=lim["max-storage-buffers-per-shader-stage"],
                            supports_float16="shader-f16" in features)
    self.sync_buf = self.gpu.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_SRC)
    self.allocator: WebGPUAllocator = WebGPUAllocator(self)
    super().__init__(device, self.allocator, renderer, WebGPUCompiler(self), functools.partial(WebGPUProgram, self))
  @property
  def is_accelerator(self) -> bool: return self.adapter_type not in ("CPU", "cpu")
  def synchronize(self) -> None:
    # reading a word back waits for all submitted before it (on_submitted_work_done_sync raises in wgpu 0.32)
    self.gpu.queue.read_buffer(self.sync_buf, 0, 4)
