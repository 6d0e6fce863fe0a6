"""A kernel being optimized: its AST and the Opts applied so far (what each does: docs/developer/codegen.md, "Opts")."""
from __future__ import annotations
import functools
from dataclasses import dataclass
from enum import Enum, auto
from fusegrad.dtype import dtypes
from fusegrad.helpers import prod, colored
from fusegrad.renderer import Renderer
from fusegrad.uop.ops import UOp, Ops, AxisType
from fusegrad.uop.symbolic import simplify, split_terms

class OptOps(Enum):
  UPCAST = auto()   # split an output axis; the inner part is unrolled (each thread computes `arg` outputs)
  UNROLL = auto()   # split a reduce axis; the inner part is unrolled inside the loop
  LOCAL = auto()    # split an output axis; the inner part becomes a workgroup dimension
  GROUP = auto()    # split a reduce axis; the inner part is reduced across a workgroup in shared memory
  THREAD = auto()   # run an output axis's iterations on several CPU threads (the whole axis: arg must be 0)
  LANES = auto()    # split a reduce axis into `arg` partial sums kept in separate accumulators (vectorizable when the
                    # axis is contiguous in memory), added together after the loop
  SWAP = auto()     # exchange the places of output axes `axis` and `arg` in the loop nest (no split)
  SPLIT = auto()    # split an output axis into two loops, the inner one `arg` long (blocks: SWAP can then put another
                    # loop between them, as a matmul's column panels between row blocks and the rows of a block)
  PADTO = auto()    # run an output axis to a multiple of `arg` (a tile that doesn't divide it), its index clamped to
                    # its last element: the extra iterations store that element's value again
  COMPILER = auto() # compile the kernel with another of the device's compilers: arg indexes Renderer.compilers
  def __repr__(self) -> str: return f"OptOps.{self.name}"

@dataclass(frozen=True, order=True)
class Opt:
  """One optimization action: op applied to an axis with amount arg (0: the whole axis). As in tinygrad, UNROLL and
  GROUP count axes from the first reduce axis; the others count the output axes."""
  op: OptOps
  axis: int
  arg: int
  def __repr__(self) -> str: return f"Opt(op={self.op!r}, axis={self.axis}, arg={self.arg})"

class KernelOptError(Exception):
  """An Opt that can't be applied to this kernel (BEAM search skips these)."""

_NEW_KIND = {OptOps.UPCAST: AxisType.UPCAST, OptOps.UNROLL: AxisType.UNROLL, OptOps.LOCAL: AxisType.LOCAL,
             OptOps.GROUP: AxisType.GROUP, OptOps.THREAD: AxisType.THREAD, OptOps.LANES: AxisType.LANES}
_SPLITTABLE = (AxisType.GLOBAL, AxisType.LOOP, AxisType.REDUCE)

def range_kind(r: UOp) -> AxisType: return r.arg[1]
def reduce_parts(red: UOp) -> tuple[tuple[UOp, ...], tuple[UOp, ...]]:
  """A REDUCE's (values, ranges): usually one value; unrolling can leave several, combined one after another."""
  n = next((i for i, s in enumerate(red.src) if s.op is Ops.RANGE), len(red.src))
  return red.src[:n], red.src[n:]
def range_size(r: UOp) -> int: return r.src[0].arg if r.src[0].op is Ops.CONST else r.src[0].vmax  # (at most)
def new_range(size: int, arg: tuple) -> UOp: return UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size),), arg)
def ranges_in(ast: UOp, *kinds: AxisType) -> list[UOp]:
  """The RANGEs under ast (only those of the given kinds, if any), in id order: the order their loops nest in."""
  rs = [u for u in ast.toposort() if u.op is Ops.RANGE and (not kinds or range_kind(u) in kinds)]
  return sorted(rs, key=lambda r: r.arg[0])

def index_stride(idx: UOp, r: UOp) -> int | None:
  """How far idx moves when r grows by one (None: not linear in r)."""
  terms, _ = split_terms(idx)
  coeff = 0
  for t, c in terms:
    if t is r: coeff += c
    elif r in t.toposort(): return None
  return coeff

class Kernel:
  """The AST of one kernel plus the optimizations applied to it."""
  applied_opts: list[Opt]
  def __init__(self, ast: UOp, renderer: Renderer):
    if ast.op is not Ops.SINK: raise ValueError(f"a kernel AST is a SINK, not {ast.op}")
    self.ast, self.ren, self.applied_opts = ast, renderer, []
    self._next_id = max((r.arg[0] for r in self.ranges()), default=-1) + 1

  def copy(self) -> Kernel:
    ret = Kernel.__new__(Kernel)
    ret.ast, ret.ren, ret.applied_opts, ret._next_id = self.ast, self.ren, list(self.applied_opts), self._next_id
    return ret

  def with_opts(self, opts: list[Opt]) -> Kernel | None:
    """A copy of the kernel with opts applied, None where one of them is refused (KernelOptError)."""
    try: return functools.reduce(Kernel.apply_opt, opts, self.copy())
    except KernelOptError: return None

  def ranges(self) -> list[UOp]:
    """Every loop of the kernel, output axes first, each group in creation order."""
    rs = [u for u in self.ast.toposort() if u.op is Ops.RANGE]
    return sorted(rs, key=lambda r: (range_kind(r) is AxisType.REDUCE, range_kind(r).value, r.arg[0]))
  def axes(self) -> list[UOp]:
    """The loops an Opt may still split: output axes (in order), then reduce axes."""
    return [r for r in self.ranges() if range_kind(r) in _SPLITTABLE and r.src[0].op is Ops.CONST]
  def output_axes(self) -> list[UOp]: return [r for r in self.axes() if range_kind(r) is not AxisType.REDUCE]
  def reduce_axes(self) -> list[UOp]: return [r for r in self.axes() if range_kind(r) is AxisType.REDUCE]
  def ranges_of(self, *kinds: AxisType) -> list[UOp]: return [r for r in self.ranges() if range_kind(r) in kinds]
  @property
  def reduce_op(self) -> bool: return any(u.op is Ops.REDUCE for u in self.ast.toposort())
  def upcast_size(self) -> int:
    """Accumulators (or outputs) each thread keeps in registers: the product of UPCAST and LANES sizes."""
    return prod(range_size(r) for r in self.ranges_of(AxisType.UPCAST, AxisType.LANES))
  def unroll_size(self) -> int: return prod(range_size(r) for r in self.ranges_of(AxisType.UNROLL))
  def loads(self) -> list[UOp]: return [u for u in self.ast.toposort() if u.op is Ops.LOAD]
  def stores(self) -> list[UOp]: return [u for u in self.ast.toposort() if u.op is Ops.STORE]

  def stride(self, access: UOp, r: UOp) -> int | None:
    """How far the address of a LOAD/STORE moves when r grows by one (None when not linear in r)."""
    return index_stride(access.src[1], r)

  # *** applying an optimization ***
  def apply_opt(self, opt: Opt) -> Kernel:
    """Split axis opt.axis so that its inner `opt.arg` iterations take the role opt.op asks for (COMPILER: compile
    with the compiler opt.arg; axis 0, once)."""
    if opt.op is OptOps.COMPILER:
      if opt.axis != 0 or not 0 < opt.arg < len(self.ren.compilers) or \
         any(o.op is OptOps.COMPILER for o in self.applied_opts):
        raise KernelOptError(f"{opt}: the device's other compilers are 1..{len(self.ren.compilers) - 1} (axis 0, once)")
      if any(u.dtype.scalar() == dtypes.float16 for u in self.ast.toposort()):  # the C compilers' half types differ
        raise KernelOptError(f"{opt}: a kernel with halves stays on the default compiler")
      self.applied_opts.append(opt)
      return self
    on_reduce = opt.op in (OptOps.UNROLL, OptOps.GROUP, OptOps.LANES)
    axes = self.reduce_axes() if on_reduce else self.output_axes()
    if opt.op is OptOps.SWAP: return self._swap(opt, axes)
    if opt.op is OptOps.PADTO: return self._padto(opt, axes)
    if not 0 <= opt.axis < len(axes):
      raise KernelOptError(f"{opt}: the kernel has {len(axes)} {'reduce' if on_reduce else 'output'} axes "
                           "left to split")
    r = axes[opt.axis]
    size = range_size(r)
    amount = opt.arg or size
    if size % amount != 0 or (amount <= 1 and opt.op is not OptOps.THREAD):
      raise KernelOptError(f"{opt}: can't split an axis of {size} by {amount}")
    if opt.op in (OptOps.LOCAL, OptOps.GROUP) and not self.ren.has_local:
      raise KernelOptError(f"{opt}: the device has no workgroups")
    if opt.op is OptOps.GROUP and not self.ren.has_shared:
      raise KernelOptError(f"{opt}: the device has no shared memory")
    if opt.op is OptOps.THREAD and (not self.ren.threads or opt.arg != 0):
      raise KernelOptError(f"{opt}: the device has no threads" if not self.ren.threads
                           else f"{opt}: THREAD takes the whole axis (arg 0)")
    if opt.op is OptOps.THREAD and (opt.axis != 0 or self.ranges_of(AxisType.THREAD)):  # rendered as the outer loop
      raise KernelOptError(f"{opt}: only the outermost output axis can be split across threads, once")
    if opt.op is OptOps.GROUP and self.ranges_of(AxisType.GROUP):  # lower_group_reduces combines one axis (two gave
      raise KernelOptError(f"{opt}: one grouped reduce axis per kernel")  # wrong sums, found by the random-opts test)
    if opt.op in (OptOps.UPCAST, OptOps.LANES) and self.upcast_size() * amount > self.ren.upcast_max:
      raise KernelOptError(f"{opt}: more than {self.ren.upcast_max} upcast elements")
    if opt.op is OptOps.UNROLL and self.upcast_size() * self.unroll_size() * amount > 8 * self.ren.upcast_max:
      raise KernelOptError(f"{opt}: more than {8 * self.ren.upcast_max} unrolled operations")
    if opt.op in (OptOps.LOCAL, OptOps.GROUP):  # both add threads to the workgroup
      local = prod(range_size(x) for x in self.ranges_of(AxisType.LOCAL, AxisType.GROUP)) * amount
      if local > self.ren.max_workgroup:
        raise KernelOptError(f"{opt}: workgroup of {local} is over {self.ren.max_workgroup}")
    new_ast = self._split(r, amount, range_kind(r) if opt.op is OptOps.SPLIT else _NEW_KIND[opt.op])
    if opt.op in (OptOps.LOCAL, OptOps.GROUP): self._check_local_dims(new_ast, opt)
    self.ast = new_ast
    self.applied_opts.append(opt)
    return self

  def _swap(self, opt: Opt, axes: list[UOp]) -> Kernel:
    """Output axes opt.axis and opt.arg exchange their loop ids, so each takes the other's place in the loop nest
    (loops nest in id order): a matmul's column tiles go outside its row tiles."""
    if not (0 <= opt.axis < len(axes) and 0 <= opt.arg < len(axes)) or opt.axis == opt.arg:
      raise KernelOptError(f"{opt}: needs two different output axes of {len(axes)}")
    r1, r2 = axes[opt.axis], axes[opt.arg]
    self.ast = self.ast.substitute({r1: r1.replace(arg=(r2.arg[0], range_kind(r1))),
                                    r2: r2.replace(arg=(r1.arg[0], range_kind(r2)))})
    self.applied_opts.append(opt)
    return self

  def _padto(self, opt: Opt, axes: list[UOp]) -> Kernel:
    """Output axis opt.axis runs to the next multiple of opt.arg, and every index clamps it to its last element: the
    extra iterations recompute that element and store the same value at the same place (a matmul's 6-row tile over
    2048 rows, AVX2). Not in a kernel that loads a buffer it stores (the repeated store would see the first one)."""
    if not 0 <= opt.axis < len(axes): raise KernelOptError(f"{opt}: the kernel has {len(axes)} output axes to pad")
    r, amt = axes[opt.axis], opt.arg
    if amt < 2 or range_size(r) % amt == 0 or range_size(r) < amt:
      raise KernelOptError(f"{opt}: no padding of an axis of {range_size(r)} to a multiple of {amt}")
    if {st.src[0] for st in self.stores()} & {ld.src[0] for ld in self.loads()}:
      raise KernelOptError(f"{opt}: the kernel loads a buffer it stores")
    new = r.replace(src=(UOp.const(dtypes.index, -(-range_size(r) // amt) * amt),))
    self.ast = simplify(replace_range(self.ast, r, (new < range_size(r)).where(new, range_size(r) - 1), (new,)))
    self.applied_opts.append(opt)
    return self

  def _check_local_dims(self, ast: UOp, opt: Opt) -> None:
    """Workgroup dimensions must fit the device: as many as local_max has, each within its limit (the last local
    axis becomes lidx0, see codegen/lower.py to_launch_dims)."""
    local = ranges_in(ast, AxisType.LOCAL, AxisType.GROUP)
    limits = self.ren.local_max or ()
    if len(local) > len(limits): raise KernelOptError(f"{opt}: more than {len(limits)} workgroup dimensions")
    for dim, r in enumerate(reversed(local)):
      if range_size(r) > limits[dim]:
        raise KernelOptError(f"{opt}: workgroup dimension {dim} of {range_size(r)} is over {limits[dim]}")

  def _split(self, r: UOp, amount: int, kind: AxisType) -> UOp:
    """r -> a*amount + b: the outer part a keeps r's role, the inner part b (amount iterations) gets the new one.
    With amount equal to r's size, r just changes role."""
    ret, self._next_id = split_range(self.ast, r, amount, kind, self._next_id), self._next_id + 1
    return ret

  # *** naming ***
  @property
  def name(self) -> str:
    """E_ for elementwise kernels, r_ for reductions, then the loop sizes colored by role."""
    colors = {AxisType.GLOBAL: "blue", AxisType.LOOP: "blue", AxisType.THREAD: "BLUE", AxisType.LOCAL: "cyan",
              AxisType.GROUP: "green", AxisType.REDUCE: "red", AxisType.UPCAST: "yellow", AxisType.UNROLL: "magenta",
              AxisType.LANES: "MAGENTA"}
    prefix = "r" if self.reduce_op else "E"
    return (prefix + "".join(colored(f"_{range_size(r)}", colors[range_kind(r)]) for r in self.ranges())
            if self.ranges() else prefix)

@functools.lru_cache(maxsize=256)
def split_range(ast: UOp, r: UOp, amount: int, kind: AxisType, next_id: int) -> UOp:
  """Kernel._split's new AST (kept: the heuristic tries an opt on a copy of a kernel before it applies it, and BEAM
  applies the same first opts to many candidates; half the cold MNIST step's splits were made before)."""
  size, old_kind = range_size(r), range_kind(r)
  if amount == size: pieces = [new_range(size, (r.arg[0], kind))]
  else: pieces = [new_range(size // amount, (r.arg[0], old_kind)), new_range(amount, (next_id, kind))]
  expr = pieces[0] if len(pieces) == 1 else pieces[0] * range_size(pieces[1]) + pieces[1]
  return simplify(replace_range(ast, r, expr, tuple(pieces)))

def replace_range(ast: UOp, r: UOp, expr: UOp, pieces: tuple[UOp, ...]) -> UOp:
  """ast with range r replaced by expr in every value, and by the ranges `pieces` in the range lists of REDUCEs."""
  memo: dict[UOp, UOp] = {r: expr}
  for node in ast.toposort():
    if node in memo: continue
    if node.op is Ops.REDUCE:
      values, ranges = reduce_parts(node)
      rs = tuple(p for s in ranges for p in (pieces if s is r else (s,)))
      memo[node] = node.replace(src=tuple(memo[v] for v in values) + rs)
    else: memo[node] = node if (src := tuple(memo[s] for s in node.src)) == node.src else node.replace(src=src)
  return memo[ast]
