"""Codegen: a kernel AST from the scheduler -> a program (source, launch sizes) for one device. The passes, their
order and the reasons for it: docs/developer/codegen.md."""
from __future__ import annotations
import hashlib, json, os
from dataclasses import dataclass, field
from typing import Callable
from fusegrad.helpers import DEBUG, NOOPT, SPEC, PROCESS_REPLAY, VIZ, prod, dprint, to_function_name, viz_record
from fusegrad.dtype import dtypes, PtrDType
from fusegrad.renderer import Renderer, UnsupportedDTypeError
from fusegrad.uop.ops import UOp, Ops, GroupOp, pretty_print
from fusegrad.uop.rewrite import graph_rewrite
from fusegrad.uop.symbolic import simplify
from fusegrad.codegen.kernel import Kernel, Opt, OptOps, KernelOptError
from fusegrad.codegen.heuristic import hand_coded_optimizations, pick_compiler
from fusegrad.codegen.expand import expand_unrolled
from fusegrad.codegen.lower import merge_axes, to_launch_dims, decompose_threefry, emulate_bfloat16, pm_lowered
from fusegrad.codegen.lower import lower_group_reduces, resolve_index_dtype, simplify_gated_loads
from fusegrad.codegen.linearize import linearize
from fusegrad.codegen.fold import fold_reduces, bound_gated_reduces
from fusegrad.codegen.vectorize import vectorize_upcasts, devectorize
from fusegrad.codegen.spec import check_stage

__all__ = ["ProgramSpec", "get_program", "Kernel", "Opt", "OptOps", "KernelOptError", "lower_kernel"]

@dataclass
class ProgramSpec:
  """Everything a device needs to compile and launch one kernel."""
  name: str
  src: str
  device: str
  uops: list[UOp]
  global_size: tuple[int, ...] = (1, 1, 1)  # workgroups in each launch dimension
  local_size: tuple[int, ...] | None = None  # threads in a workgroup (None where the device has no workgroups)
  vars: list[UOp] = field(default_factory=list)
  applied_opts: list[Opt] = field(default_factory=list)
  flops: int = 0  # estimated arithmetic ops per launch, for DEBUG=2 and GlobalCounters
  function: str = ""  # the kernel's function in src ("": the name made an identifier)
  @property
  def function_name(self) -> str: return self.function or to_function_name(self.name)
  @property
  def compiler(self) -> int:
    """Which of the device's compilers builds the source (OptOps.COMPILER; 0: the default)."""
    return next((o.arg for o in self.applied_opts if o.op is OptOps.COMPILER), 0)

# Steps 3-6 as a table of passes over one IR (a kernel AST), each taking the AST and the renderer, in this order for
# the reason beside each. codegen/spec.py states what each stage's output may hold (SPEC=1 checks it per pass).
LOWERING: tuple[tuple[str, Callable[[UOp, Renderer], UOp]], ...] = (
  ("bound_gates", lambda ast, ren: ast if ren.global_max else bound_gated_reduces(ast)),  # on whole loads
  ("vectorize", lambda ast, ren: vectorize_upcasts(ast)),  # before expand: the copies of a vector stay vectors
  ("expand", lambda ast, ren: expand_unrolled(ast)),  # while the opts' ranges are still ranges
  ("group_reduce", lambda ast, ren: lower_group_reduces(ast)),  # on final reduces, while LOCAL/GROUP are ranges
  ("launch_dims", to_launch_dims),  # the ranges are final here
  ("threefry", lambda ast, ren: ast if ren.native_threefry else decompose_threefry(ast)),  # on final values
  ("bfloat16", lambda ast, ren: ast if ren.supports_bfloat16 else emulate_bfloat16(ast)),  # every bfloat16 op is made
  ("devectorize", devectorize),  # after every pass that makes vector ops
  ("cleanup", lambda ast, ren: resolve_index_dtype(graph_rewrite(simplify(ast), pm_lowered), ren.index64_ranges)),
)  # cleanup last: types index arithmetic that every pass above may add

# Steps 0-1, in order: folding first, so that merged axes never hide a reduce it could remove
PREPARE: tuple[tuple[str, Callable[[UOp], UOp]], ...] = (
  ("fold_reduces", fold_reduces), ("gated_loads", simplify_gated_loads), ("merge_axes", merge_axes))

Trace = list[tuple[str, UOp]]  # each pass's output, in order, when VIZ records them

def lower_kernel(k: Kernel, trace: Trace | None = None) -> list[UOp]:
  """Steps 3-6: an optimized Kernel -> the flat program."""
  ast, done = k.ast, []
  for name, lowering_pass in LOWERING:
    ast = lowering_pass(ast, k.ren)
    done.append(name)
    if SPEC: check_stage(done, ast, k.ren)
    if trace is not None: trace.append((name, ast))
  return linearize(ast)

def optimize(k: Kernel, opts: list[Opt] | None = None) -> Kernel:
  """Step 2: apply the given opts (BEAM's, from engine/search.py), or none (NOOPT=1), or the heuristic's."""
  if opts is None: opts = [] if NOOPT else hand_coded_optimizations(k) + pick_compiler(k)
  for o in opts: k.apply_opt(o)
  return k

def get_program(ast: UOp, ren: Renderer, opts: list[Opt] | None = None) -> ProgramSpec:
  """A kernel AST -> a ProgramSpec (rendered source and launch sizes) for the renderer's device."""
  if DEBUG >= 5: dprint(5, pretty_print(ast))
  trace: Trace | None = [("kernel AST", ast)] if VIZ else None
  prepared = ast
  for name, prepare in PREPARE:
    prepared = prepare(prepared)
    if trace is not None: trace.append((name, prepared))
  k = optimize(Kernel(prepared, ren), opts)
  dprint(3, f"{k.name}: opts {k.applied_opts}")
  if trace is not None: trace.append(("optimize", k.ast))
  p = program_for(k, trace)
  if PROCESS_REPLAY: record_replay(ast, ren, opts, p)
  return p

def ast_key(ast: UOp) -> str:
  """Every node of a kernel AST in order (op, dtype, arg, sources by number): equal for equal kernels in any process."""
  index: dict[UOp, int] = {}
  lines = []
  for u in ast.toposort():
    index[u] = len(index)
    lines.append(f"{u.op.name} {u.dtype!r} {u.arg!r} {[index[s] for s in u.src]}")
  return "\n".join(lines)

def record_replay(ast: UOp, ren: Renderer, opts: list[Opt] | None, p: ProgramSpec) -> None:
  """PROCESS_REPLAY=path: append one JSON line {id, name, src} for this kernel, at render time (no cache hides it). The
  id is the kernel's identity: the device, the AST and the opts asked for, which a refactor of codegen leaves alone."""
  ident = hashlib.sha256(f"{ren.device}|{type(ren).__name__}|{opts!r}|{ast_key(ast)}".encode()).hexdigest()[:16]
  fd = os.open(PROCESS_REPLAY.value, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
  try: os.write(fd, (json.dumps({"id": ident, "name": p.name, "src": p.src}) + "\n").encode())  # one write: atomic
  finally: os.close(fd)

_UNNAMED = "fg_kernel_name_"  # rendered in place of the function's name, then replaced

def check_capabilities(name: str, uops: list[UOp], ren: Renderer) -> None:
  """A clear error for a kernel the device can't run: more buffers than it binds, or (UnsupportedDTypeError) a value
  or buffer of a dtype it can't hold, naming the dtype and the device."""
  if ren.max_buffers is not None and (n := sum(u.op is Ops.DEFINE_GLOBAL for u in uops)) > ren.max_buffers:
    raise NotImplementedError(f"kernel {name} takes {n} buffers; device {ren.device} binds at most {ren.max_buffers}")
  for u in uops:
    dt = (u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype).scalar()
    if not ren.supports_dtype(dt):
      raise UnsupportedDTypeError(f"dtype {dt.name} is not supported on device {ren.device} (in a {u.op.name})")

def program_for(k: Kernel, trace: Trace | None = None) -> ProgramSpec:
  """Steps 3-7 for an optimized Kernel: lowered, linearized and rendered, with its launch sizes (and recorded for
  VIZ with each pass's output when trace holds those of steps 0-2)."""
  uops = lower_kernel(k, trace)
  check_capabilities(k.name, uops, k.ren)
  if DEBUG >= 5: dprint(5, pretty_print(UOp(Ops.SINK, src=tuple(uops))))
  # named after its loop sizes and a hash of its source, so kernels can share a translation unit (start_batch)
  src = k.ren.render(_UNNAMED, uops)
  function = f"{to_function_name(k.name)}_{hashlib.sha256(src.encode()).hexdigest()[:8]}"
  src = src.replace(_UNNAMED, function)
  if DEBUG >= 4: dprint(4, src)
  if trace is not None:
    viz_record("kernel", name=k.name, function=function, device=k.ren.device, opts=[str(o) for o in k.applied_opts],
               ops=sorted({u.op.name for u in trace[0][1].toposort()
                           if u.op in (*GroupOp.ALU, Ops.REDUCE) and u.dtype != dtypes.index}),  # not index math
               passes=[(n, pretty_print(u)) for n, u in trace + [("linearize", UOp(Ops.SINK, src=tuple(uops)))]],
               src=src)
  specials = {u.arg[0]: u.arg[1] for u in uops if u.op is Ops.SPECIAL}
  gsz = tuple(specials.get(f"gidx{i}", 1) for i in range(3))
  lsz = tuple(specials.get(f"lidx{i}", 1) for i in range(3)) if k.ren.has_local else None
  return ProgramSpec(k.name, src, k.ren.device, uops, gsz, lsz, [u for u in uops if u.op is Ops.DEFINE_VAR],
                     list(k.applied_opts), estimate_flops(uops), function)

def estimate_flops(uops: list[UOp]) -> int:
  """Arithmetic ops on values (not addresses) times the iterations of their loops and grid (a fused multiply-add: 2)."""
  index_nodes: set[UOp] = set()
  for u in uops:
    if u.op in (Ops.LOAD, Ops.STORE):  # the address and the gate (a load's bool source, a store's fourth)
      addr = u.src[1:2] + (u.src[3:] if u.op is Ops.STORE else tuple(s for s in u.src[2:] if s.dtype == dtypes.bool))
      index_nodes.update(x for s in addr for x in s.toposort() if x.op is not Ops.LOAD)
  flops, stack = 0, [prod(u.arg[1] for u in uops if u.op is Ops.SPECIAL)]  # (the launch grid's size)
  for u in uops:
    if u.op is Ops.RANGE: stack.append(stack[-1] * u.src[0].vmax)  # (at most: a bounded loop may run less)
    elif u.op is Ops.ENDRANGE: stack.pop()
    elif u.op in GroupOp.ALU and u not in index_nodes:
      flops += stack[-1] * (2 if u.op is Ops.MULACC else 1) * u.dtype.count
  return flops
