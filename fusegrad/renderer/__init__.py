"""Renderers turn a flat kernel program into source text. A renderer declares what the device can do;
codegen reads these capabilities and never the device's name."""
from __future__ import annotations
from dataclasses import dataclass
from fusegrad.uop.ops import UOp

@dataclass(frozen=True)
class Renderer:
  """The capabilities codegen reads, and render(), which turns a flat program into source."""
  device: str = ""
  has_local: bool = False          # workgroups (local ids) exist
  has_shared: bool = False         # workgroup-shared memory and barriers exist
  global_max: tuple[int, ...] | None = None  # max size of each launch dimension; None: launch dims become loops
  local_max: tuple[int, ...] | None = None   # max size of each workgroup dimension
  max_workgroup: int = 0           # max threads in a workgroup
  shared_max: int = 0              # bytes of shared memory per workgroup
  upcast_max: int = 16             # largest number of unrolled elements per thread
  max_buffers: int = 64            # buffers one kernel may take
  threads: int = 0                 # CPU threads that split the outermost loop (0: none)
  vector_widths: tuple[int, ...] = ()  # lengths of float vectors the renderer can write (others are split up)
  simd_width: int = 16             # bytes in one SIMD register (16 SSE, 32 AVX2, 64 AVX-512): sizes upcasts
  supports_float16: bool = True
  supports_bfloat16: bool = False
  supports_float64: bool = True
  native_threefry: bool = False    # False: THREEFRY is expanded into integer ALU ops
  compilers: tuple[str, ...] = ()  # the device's compilers, default first; OptOps.COMPILER picks another for a kernel
  def render(self, name: str, uops: list[UOp]) -> str:
    raise NotImplementedError(f"{type(self).__name__} renders nothing")
