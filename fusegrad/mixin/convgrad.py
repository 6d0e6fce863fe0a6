"""conv2d's derivative rule: both gradients of a convolution written as convolution-shaped reduces (why:
docs/developer/tensor.md, "Numerics")."""
from __future__ import annotations
from typing import TYPE_CHECKING, NamedTuple
from fusegrad.helpers import flatten, prod
from fusegrad.device import Device
if TYPE_CHECKING: from fusegrad.tensor import Tensor
if TYPE_CHECKING: from fusegrad.renderer import MachineModel

# what conv2d resolved: groups, stride, dilation and (before, after) padding per spatial axis
ConvArgs = NamedTuple("ConvArgs", [("groups", int), ("stride", tuple[int, ...]), ("dilation", tuple[int, ...]),
                                   ("pads", list[tuple[int, int]])])

def _dilate(g: Tensor, stride: tuple[int, ...]) -> Tensor:
  """s - 1 zeros between neighbours along each spatial axis: (..., o) -> (..., (o - 1) * s + 1)."""
  n = len(stride)
  if all(s == 1 for s in stride): return g
  pre, o_ = g.shape[:-n], g.shape[-n:]
  x = g.reshape(*pre, *flatten((o, 1) for o in o_))
  x = x.pad(((0, 0),) * len(pre) + tuple(flatten(((0, 0), (0, s - 1)) for s in stride)))
  x = x.reshape(*pre, *(o * s for o, s in zip(o_, stride)))
  return x.shrink(tuple((0, p) for p in pre) + tuple((0, (o - 1) * s + 1) for o, s in zip(o_, stride)))

def input_grad(gp: Tensor, w: Tensor, a: ConvArgs) -> Tensor:
  """d conv / d x: gp, the output gradient dilated by the stride and padded (_grad_pads), convolved with w transposed
  per group and flipped."""
  n, k_, cout, cin_g, groups = len(a.stride), w.shape[2:], w.shape[0], w.shape[1], a.groups
  # (cout, cin_g, *k) -> (groups, rcout, cin_g, *k) -> (groups * cin_g, rcout, *k), kernel flipped
  wt = w.reshape(groups, cout // groups, cin_g, *k_).transpose(1, 2).reshape(groups * cin_g, cout // groups, *k_)
  return gp.conv2d(wt.flip(*range(2, 2 + n)), groups=groups, dilation=a.dilation)

def _grad_pads(a: ConvArgs, k_: tuple[int, ...], i_: tuple[int, ...], o_: tuple[int, ...]) -> list[tuple[int, int]]:
  return [(0, 0), (0, 0)] + [(d * (k - 1) - pb, i + pb - (o - 1) * s - 1)
                             for (pb, _), d, k, s, i, o in zip(a.pads, a.dilation, k_, a.stride, i_, o_)]

def _channel_last(t: Tensor) -> Tensor:
  """t (bs, c, *spatial) as the same values, read from a copy laid out (bs, *spatial, c)."""
  n = t.ndim - 2
  return t.permute(0, *range(2, 2 + n), 1).contiguous().permute(0, n + 1, *range(1, n + 1))

def _batch_chunk(bs: int, image_bytes: int, weight_bytes: int, l2: int) -> int:
  """Images per partial sum of the weight gradient: the most whose input and output gradient fit in half the device's
  L2 (so the kernel's many passes over them hit the cache, not the L3 or memory, and the other half holds the rest:
  padding, partial sums, conflicts), while all the partial sums stay within 16 MB (docs/developer/codegen.md)."""
  divisors = [c for c in range(1, bs + 1) if bs % c == 0 and bs // c * weight_bytes <= 1 << 24]
  return max((c for c in divisors if c * image_bytes <= l2 // 2), default=min(divisors, default=bs))

def weight_grad(g: Tensor, x: Tensor, w_shape: tuple[int, ...], a: ConvArgs, cl: bool, m: MachineModel) -> Tensor:
  """d conv / d w: dw[cout, c, k] = sum over (b, o) of g[b, cout, o] * x_padded[b, group's c, o*s + k*d], a big batch
  summed in chunks first (one kernel), then over the chunks (a small second kernel)."""
  n, k_ = len(a.stride), w_shape[2:]
  bs, cout, o_ = g.shape[0], g.shape[1], g.shape[2:]
  groups, cin_g = a.groups, w_shape[1]
  if cl: x = _channel_last(x)
  xw = x.pad(((0, 0), (0, 0), *a.pads))._pool(k_, a.stride, a.dilation)  # (bs, cin, *o, *k)
  # (a GPU wants the most partial sums, for parallel work: on an H200, its 60 MB L2's chunk made the step 60 -> 74 ms)
  chunk = _batch_chunk(bs, (x.numel() + g.numel()) // bs * g.dtype.itemsize, prod(w_shape) * g.dtype.itemsize,
                       m.l2 if m.warp_size == 1 else 0)
  xw = xw.reshape(bs // chunk, chunk, groups, 1, cin_g, *o_, *k_)
  gw = g.reshape(bs // chunk, chunk, groups, cout // groups, 1, *o_, *[1] * n)
  dw = (xw * gw).sum((1, *range(5, 5 + n)))  # (chunks, groups, rcout, cin_g, *k)
  return (dw.contiguous().sum(0) if bs // chunk > 1 else dw.reshape(dw.shape[1:])).reshape(cout, cin_g, *k_)

def conv_rule(a: ConvArgs, tensor: type[Tensor]):
  """The derivative rule of a conv2d result (before the bias) for gradient.with_rule: the output gradient goes once
  into a buffer both gradients read (channel-last where both channel counts fill vectors)."""
  def rule(g, n, xu, wu):
    gt, xt, wt = tensor(g), tensor(xu), tensor(wu)
    cl = wt.shape[1] % 8 == 0 and (wt.shape[0] // a.groups) % 8 == 0
    layout, pads = _channel_last if cl else tensor.contiguous, _grad_pads(a, wt.shape[2:], xt.shape[2:], gt.shape[2:])
    # one copy serves both (not for a first layer's few channels, whose input needs no gradient)
    ren = Device[gt.device if isinstance(gt.device, str) else gt.device[0]].renderer
    if cl and all(s == 1 for s in a.stride) and all(p >= 0 for pp in pads for p in pp):
      # all pads views where images take the tile (heuristic._window_gated; more registers: pads >= 1/4 of the row)
      images = not ren.global_max and min(xt.shape[:2]) >= max(xt.shape[2:]) and \
        (ren.tiles_images() or 4 * sum(pads[-1]) >= gt.shape[-1] + sum(pads[-1]))
      last = [(0, 0)] * (len(pads) - 1) + [(0, 0) if images else pads[-1]]
      buf = layout(gt.pad(last))
      gp = buf.pad(pads[:-1] + [pads[-1] if images else (0, 0)])
      gt = buf.shrink(tuple((p, p + size) for (p, _), size in zip(last, gt.shape)))
    else:
      gt = layout(gt)
      gp = layout(_dilate(gt, a.stride).pad(pads))
    return input_grad(gp, wt, a).uop, weight_grad(gt, xt, wt.shape, a, cl, ren.machine).uop
  return rule
