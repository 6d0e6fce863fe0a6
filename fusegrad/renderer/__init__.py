"""Renderers turn a flat kernel program into source text. A renderer declares what the device can do;
codegen reads these capabilities and never the device's name."""
from __future__ import annotations
from dataclasses import dataclass
from fusegrad.dtype import DType
from fusegrad.uop.ops import UOp, Ops

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
  simd_width: int = 16             # bytes in one SIMD register (16 SSE, 32 AVX2, 64 AVX-512): sizes upcasts
  supports_float16: bool = True
  supports_bfloat16: bool = False
  supports_float64: bool = True
  native_threefry: bool = False    # False: THREEFRY is expanded into integer ALU ops
  index64_ranges: bool = True      # loop counters may be int64 (False: int32, widened where index math is int64)
  compilers: tuple[str, ...] = ()  # the device's compilers, default first; OptOps.COMPILER picks another for a kernel
  def supports_dtype(self, dt: DType) -> bool:
    """Whether kernels may hold values or buffers of dt (a scalar dtype); codegen refuses the others."""
    return True
  def render(self, name: str, uops: list[UOp]) -> str:
    raise NotImplementedError(f"{type(self).__name__} renders nothing")

_INFIX = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.AND: "&",
          Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}

def render_expr(u: UOp) -> str:
  """A compact infix string of an integer/bool expression, for debugging and tests: '((r0*4)+r1)'."""
  if u.op is Ops.CONST: return str(u.arg)
  if u.op is Ops.RANGE: return f"r{u.arg[0]}"
  if u.op is Ops.SPECIAL: return u.arg[0]
  if u.op is Ops.DEFINE_VAR: return u.arg[0]
  if u.op is Ops.BIND: return render_expr(u.src[0])
  if u.op in _INFIX: return f"({render_expr(u.src[0])}{_INFIX[u.op]}{render_expr(u.src[1])})"
  if u.op is Ops.WHERE: return f"({render_expr(u.src[0])}?{render_expr(u.src[1])}:{render_expr(u.src[2])})"
  if u.op is Ops.MAX: return f"max({render_expr(u.src[0])},{render_expr(u.src[1])})"
  if u.op is Ops.CAST: return f"{u.dtype.name}({render_expr(u.src[0])})"
  if u.op is Ops.LOAD: return f"data{u.src[0].arg}[{render_expr(u.src[1])}]"
  return f"{u.op.name}({','.join(render_expr(s) for s in u.src)})"
