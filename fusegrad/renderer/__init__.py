"""Renderers turn a flat kernel program into source text. A renderer declares what the device can do;
codegen reads these capabilities and never the device's name."""
from __future__ import annotations
from dataclasses import dataclass
from fusegrad.dtype import DType
from fusegrad.uop.ops import UOp

@dataclass(frozen=True)
class MachineModel:
  """The hardware facts tile shapes derive from (codegen/heuristic.py): the device fills them in from what it can read
  (the CPU: /proc/cpuinfo and /sys/devices/system/cpu; CL and CUDA: their device queries), else these defaults."""
  isa: str = ""                    # the instruction set kernels are compiled for (CPU: sse4, avx2, avx512)
  vector_bytes: int = 16           # bytes in one SIMD register (16 SSE, 32 AVX2, 64 AVX-512)
  vector_registers: int = 16       # SIMD registers one thread can name (16 SSE and AVX2, 32 AVX-512)
  fma_units: int = 2               # vector multiply-adds started per cycle (0: no FMA, a multiply then an add)
  fma_latency: int = 4             # cycles from a multiply-add's start to its result (x86 since Skylake and Zen)
  l1d: int = 32 * 1024             # bytes of L1 data cache per core
  l1_ways: int = 8                 # its associativity: each address maps to one set of this many lines
  l2: int = 1024 * 1024            # bytes of L2 cache per core (a GPU: the one all its multiprocessors share)
  cache_line: int = 64             # bytes
  panel_bytes: int = 0             # a big matmul's right operand is first copied into column panels this wide (0: not)
  warp_size: int = 1               # threads that run in lockstep (CUDA: 32; CPU: 1)
  local_memory: int = 0            # bytes of workgroup-shared memory (0: none)
  def vector(self, itemsize: int) -> int:
    """Elements of itemsize bytes in one SIMD register."""; return max(self.vector_bytes // itemsize, 1)
  def register_tile(self, acc: int) -> bool: return 2 * acc >= self.vector_registers * self.vector_bytes  # bytes

class UnsupportedDTypeError(NotImplementedError):
  """A kernel uses a dtype its device can't compute in or store (float64 on WEBGPU); the message names both."""

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
  max_buffers: int | None = None   # buffers one kernel may bind (None: any number)
  threads: int = 0                 # CPU threads that split the outermost loop (0: none)
  vector_widths: tuple[int, ...] = ()  # lengths of float vectors the renderer can write (others are split up)
  machine: MachineModel = MachineModel()  # registers, vector width and caches: what tiles are sized by
  supports_float16: bool = True
  supports_bfloat16: bool = False
  supports_float64: bool = True
  native_threefry: bool = False    # False: THREEFRY is expanded into integer ALU ops
  index64_ranges: bool = True      # loop counters may be int64 (False: int32, widened where index math is int64)
  compilers: tuple[str, ...] = ()  # the device's compilers, default first; OptOps.COMPILER picks another for a kernel
  def tiles_images(self) -> bool: return not self.global_max and self.machine.vector_registers // 2 <= 4 * 2  # codegen
  def supports_dtype(self, dt: DType) -> bool:
    """Whether kernels may hold values or buffers of dt (a scalar dtype); codegen refuses the others."""; return True
  def render(self, name: str, uops: list[UOp]) -> str:
    raise NotImplementedError(f"{type(self).__name__} renders nothing")
