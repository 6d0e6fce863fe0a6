"""Export for the web: `webgpu(fn, example_inputs, out_dir)` writes the kernels a function launches on the WEBGPU
device (WGSL files, the weights as safetensors and a plain ES module `model.js`), so that a page runs them with no
Python behind it. The files, the browser limits the kernels keep and what can't be exported: docs/webgpu.md."""
from __future__ import annotations
import contextlib, json, pathlib
from typing import Any, Callable, Iterator, Sequence
from fusegrad.device import Buffer, Device, Compiled
from fusegrad.engine import state
from fusegrad.engine.state import STATE
from fusegrad.engine.runner import CompiledRunner
from fusegrad.jit import TinyJit
from fusegrad.nn.state import safe_save, _from_bytes, _SAFE_NAMES
from fusegrad.renderer.wgsl import WGSLRenderer
from fusegrad.tensor import Tensor, _assign_watchers

MAX_BINDING = 128 << 20  # maxStorageBufferBindingSize every WebGPU adapter grants
OFFSET_ALIGN = 256  # minStorageBufferOffsetAlignment in browsers
# SwiftShader (Chrome's CPU adapter) took minutes and GBs for a 16-element register tile; with 4, under a second
BROWSER_UPCAST = 4

# the rest of model.js, after its MODEL: load(baseUrl) and run(...inputs), in JavaScript
RUNTIME_JS_PATH = pathlib.Path(__file__).parent / "export_model.js"

class ExportError(ValueError):
  """A function that can't be exported: what it does that a page can't replay."""

@contextlib.contextmanager
def browser_kernels(dev: Compiled) -> Iterator[None]:
  """Kernels compiled for WebGPU's default limits and register tiles of at most BROWSER_UPCAST elements while inside
  (the programs compiled for the adapter's own limits are set aside meanwhile)."""
  renderer, programs = dev.renderer, STATE.programs.copy()
  dev.renderer = WGSLRenderer(device=renderer.device, upcast_max=BROWSER_UPCAST)
  STATE.programs.clear()
  try: yield
  finally:
    dev.renderer = renderer
    STATE.programs.clear()
    STATE.programs.update(programs)

def _pure(fn: Callable[..., Any]) -> Callable[..., tuple[Tensor, ...]]:
  """fn, its results checked to be Tensors (each in a buffer of its own), refusing writes to inputs and weights."""
  def call(*args: Tensor) -> tuple[Tensor, ...]:
    _assign_watchers.append(_refuse_lasting)
    try: ret = fn(*args)
    finally: _assign_watchers.pop()
    outs = list(ret) if isinstance(ret, (tuple, list)) else [ret]
    if not outs or not all(isinstance(t, Tensor) for t in outs):
      raise ExportError(f"export: the function must return a Tensor or a tuple of Tensors, not {ret!r:.80}")
    return tuple(t.contiguous() for t in outs)
  return call

def _refuse_lasting(t: Tensor) -> None:
  if state.is_realized(t.uop): raise ExportError("export: the function writes into an input or into a tensor that "
                                                 "outlives the call (an assign, e.g. BatchNorm's running statistics)")

def _capture(fn: Callable[..., Any], inputs: list[Tensor], dev: Compiled) -> TinyJit:
  """fn captured by a TinyJit of its own on dev, with the browser's limits; ExportError for what a page can't replay."""
  jit = TinyJit(_pure(fn.fxn if isinstance(fn, TinyJit) else fn))
  with browser_kernels(dev):
    while jit.captured is None: jit(*inputs)
  if jit.rng_draws: raise ExportError("export: the function draws random numbers (dropout in training mode?)")
  for ei in jit.jit_cache:
    if not isinstance(ei.runner, CompiledRunner) and ei.bufs[1].device != ei.bufs[0].device:
      raise ExportError(f"export: the function copies from {ei.bufs[1].device} to {ei.bufs[0].device}: put its "
                        f"weights on {dev.device} (t.to_({dev.device!r}))")
    if isinstance(ei.runner, CompiledRunner) and ei.runner.p.vars:
      raise ExportError(f"export: kernel {ei.runner.p.function_name} takes symbolic variables")
  return jit

class _Buffers:
  """The base buffers the kernels use, numbered in order of first use: weights (read before any kernel writes
  them), inputs and the others (intermediates and outputs)."""
  def __init__(self, jit: TinyJit, inputs: list[Buffer]):
    self.index, self.bases, self.weights = dict[int, int](), list[Buffer](), list[int]()
    inputs_at = {id(b.base) for b in inputs}
    for ei in jit.jit_cache:
      for b in ei.bufs[1:]:  # what a kernel reads, before what it writes
        new = id(b.base) not in self.index
        i = self.number(b)
        if new and id(b.base) not in inputs_at: self.weights.append(i)
      self.number(ei.bufs[0])
  def number(self, b: Buffer) -> int:
    base = b.base
    if id(base) not in self.index:
      if base.nbytes > MAX_BINDING:
        raise ExportError(f"export: a buffer of {base.nbytes} bytes is larger than the {MAX_BINDING} bytes a WebGPU "
                          "adapter must bind (maxStorageBufferBindingSize)")
      self.index[id(base)] = len(self.bases)
      self.bases.append(base)
    return self.index[id(base)]
  def binding(self, b: Buffer) -> list[int]:
    """[buffer, byte offset, bytes] of a view (whole 4-byte words, as WebGPU binds)."""
    if b.offset % OFFSET_ALIGN: raise ExportError(f"export: a buffer view at byte {b.offset} (browsers bind views at "
                                                  f"multiples of {OFFSET_ALIGN})")
    return [self.number(b), b.offset, max(4, (b.nbytes + 3) // 4 * 4)]

def _io(bufs: _Buffers, t: Tensor) -> dict[str, Any]:
  buf = state.view_base(t.uop).arg
  return {"buffer": bufs.number(buf), "offset": buf.offset, "nbytes": buf.nbytes, "dtype": _SAFE_NAMES[t.dtype],
          "shape": list(t.shape)}

def webgpu(fn: Callable[..., Any], example_inputs: Sequence[Tensor], out_dir: str | pathlib.Path,
           device: str = "WEBGPU") -> dict[str, Any]:
  """Export fn (a function of Tensors, or a TinyJit) for the browser: kernels/*.wgsl, model.safetensors and model.js
  in out_dir (docs/webgpu.md). example_inputs fix the input shapes and dtypes; returns the manifest model.js holds."""
  if not all(isinstance(t, Tensor) for t in example_inputs):
    raise ExportError("export: example_inputs must be Tensors (one per input of the function)")
  dev = Device[device]
  if not isinstance(dev.renderer, WGSLRenderer): raise ExportError(f"export: {device} is not a WebGPU device")
  inputs = [t.clone(dev.device).contiguous().realize() for t in example_inputs]  # buffers of their own
  jit = _capture(fn, inputs, dev)
  bufs = _Buffers(jit, [state.view_base(t.uop).arg for t in inputs])
  out = pathlib.Path(out_dir)
  (out / "kernels").mkdir(parents=True, exist_ok=True)
  kernels: list[dict[str, Any]] = []
  for ei in jit.jit_cache:
    if not isinstance(ei.runner, CompiledRunner):  # a copy within the device (a clone): [to, from]
      kernels.append({"copy": [bufs.binding(b) for b in ei.bufs]})
      continue
    p = ei.runner.p
    (out / (file := f"kernels/{p.function_name}.wgsl")).write_text(p.src)
    kernels.append({"name": p.function_name, "file": file, "dispatch": list(p.global_size),
                    "bindings": [bufs.binding(b) for b in ei.bufs]})
  manifest = {"kernels": kernels, "buffers": [max(4, (b.nbytes + 3) // 4 * 4) for b in bufs.bases],
              "weights": {f"b{i}": i for i in bufs.weights},
              "inputs": [_io(bufs, t) for t in inputs], "outputs": [_io(bufs, t) for t in jit.ret_tensors]}
  weights = {f"b{i}": _from_bytes(memoryview(bufs.bases[i].as_bytes()), bufs.bases[i].dtype, (bufs.bases[i].size,))
             for i in bufs.weights}
  safe_save(weights, out / "model.safetensors")
  (out / "model.js").write_text(f"// made by fusegrad.export.webgpu: {len(kernels)} kernels\n"
                                f"const MODEL = {json.dumps(manifest)};\n\n{RUNTIME_JS_PATH.read_text()}")
  return manifest
