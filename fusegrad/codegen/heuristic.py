"""The default choice of optimizations for a kernel, from its shape and the renderer's capabilities.

In: a Kernel. Out: a list of Opts (the kernel is not changed). BEAM search (engine/search.py) replaces this by
timing candidates; both produce the same kind of list.
"""
from __future__ import annotations
from fusegrad.helpers import prod
from fusegrad.uop.ops import AxisType
from fusegrad.codegen.kernel import Kernel, Opt, OptOps, KernelOptError, range_kind, range_size

def _try(k: Kernel, opt: Opt, opts: list[Opt]) -> bool:
  try: k.apply_opt(opt)
  except KernelOptError: return False
  opts.append(opt)
  return True

def hand_coded_optimizations(kernel: Kernel) -> list[Opt]:
  """Opts for a kernel: workgroups and grouped reduces where the device has them, then register tiling
  (upcast the output axes that some input broadcasts over) and unrolling of the innermost reduce loop."""
  k, opts = kernel.copy(), []
  ren = k.ren
  axes = k.axes()
  out_axes = [i for i, r in enumerate(axes) if range_kind(r) is not AxisType.REDUCE]
  red_axes = [i for i, r in enumerate(axes) if range_kind(r) is AxisType.REDUCE]
  out_size = prod(range_size(axes[i]) for i in out_axes)

  # a big reduce into few outputs on a device with workgroups: reduce across the workgroup in shared memory
  if ren.has_local and ren.has_shared and red_axes and out_size <= 2048:
    last = red_axes[-1]
    for amt in (256, 128, 64, 32, 16):
      if range_size(axes[last]) % amt == 0 and range_size(axes[last]) >= amt * 4 and _try(k, Opt(OptOps.GROUP, last, amt), opts): break

  # register tiling: upcast output axes that an input does not move along (a matmul's i and j), each axis once
  if k.reduce_op:
    upcasted: set[int] = set()
    for _ in range(2):
      axes, best = k.axes(), None
      for i, r in enumerate(axes):
        if range_kind(r) is AxisType.REDUCE or range_size(r) % 4 != 0 or range_size(r) < 8 or r.arg[0] in upcasted: continue
        broadcast = sum(1 for ld in k.loads() if k.stride(ld, r) == 0)
        if broadcast and (best is None or broadcast > best[0]): best = (broadcast, i, r.arg[0])
      if best is None or not _try(k, Opt(OptOps.UPCAST, best[1], 4), opts): break
      upcasted.add(best[2])

  # unroll the innermost reduce loop a little
  axes = k.axes()
  red_axes = [i for i, r in enumerate(axes) if range_kind(r) is AxisType.REDUCE]
  if red_axes:
    last = red_axes[-1]
    size = range_size(axes[last])
    for amt in ((size,) if size <= 8 else ()) + (8, 4, 2):
      if _try(k, Opt(OptOps.UNROLL, last, amt), opts): break

  # workgroups for the output axes
  if ren.has_local:
    axes = k.axes()
    for i in reversed(range(len(axes))):
      r = axes[i]
      if range_kind(r) is AxisType.REDUCE: continue
      for amt in (16, 8, 4, 2):
        if range_size(r) % amt == 0 and _try(k, Opt(OptOps.LOCAL, i, amt), opts): break
      break
  return opts
