"""More ONNX ops, registered in the same OPS table: quantized products, cropping, rotary embeddings, the DFT, affine
grids, the training-preview optimizers (Adagrad, Momentum, Adam) and a few ai.onnx.ml ops."""
from __future__ import annotations
import functools, itertools, math
from typing import Any
import numpy as np
from fusegrad.tensor import Tensor
from fusegrad.dtype import dtypes
from fusegrad.nn.onnx_ops import register_ops, _ints, _scalar, _axis, _per_axis
from fusegrad.nn.onnx_ops_nn import Conv, QuantizeLinear, _dequant, _minus_zp

# *** quantized products ***
def QLinearMatMul(a: Tensor, a_scale: Tensor, a_zero_point: Tensor, b: Tensor, b_scale: Tensor, b_zero_point: Tensor,
                  y_scale: Tensor, y_zero_point: Tensor) -> Tensor:
  y = _dequant(a, a_scale, a_zero_point, -2).matmul(_dequant(b, b_scale, b_zero_point, -1))
  return QuantizeLinear(y, y_scale.cast(dtypes.float32), y_zero_point)

def ConvInteger(x: Tensor, w: Tensor, x_zero_point: Tensor | None = None, w_zero_point: Tensor | None = None,
                **attrs: Any) -> Tensor:
  wzp = _per_axis(w_zero_point, 0, w.ndim) if w_zero_point is not None else None  # one per output channel
  return Conv(_minus_zp(x, x_zero_point), _minus_zp(w, wzp), **attrs)

def QLinearConv(x: Tensor, x_scale: Tensor, x_zero_point: Tensor, w: Tensor, w_scale: Tensor, w_zero_point: Tensor,
                y_scale: Tensor, y_zero_point: Tensor, b: Tensor | None = None, **attrs: Any) -> Tensor:
  xf, wf = _dequant(x, x_scale, x_zero_point, 1), _dequant(w, w_scale, w_zero_point, 0)
  bias = None if b is None else b.cast(dtypes.float32) * (x_scale.cast(dtypes.float32) * w_scale.cast(dtypes.float32))
  return QuantizeLinear(Conv(xf, wf, bias, **attrs), y_scale.cast(dtypes.float32), y_zero_point)

# *** shapes ***
def CenterCropPad(x: Tensor, shape: Tensor, axes: Any = None) -> Tensor:
  ax = [_axis(a, x.ndim) for a in _ints(axes)] if axes is not None else list(range(x.ndim))
  pairs = [(0, 0)] * x.ndim
  for a, target in zip(ax, _ints(shape)):
    diff = target - x.shape[a]  # > 0 pads, < 0 crops; the extra element goes at the end
    pairs[a] = (diff // 2, diff - diff // 2) if diff >= 0 else (-((-diff) // 2), -(-diff - (-diff) // 2))
  return x.pad(pairs)

def TensorScatter(cache: Tensor, update: Tensor, write_indices: Tensor | None = None, axis: int = -2,
                  mode: str = "linear") -> Tensor:
  a = _axis(axis, cache.ndim)
  start = write_indices.numpy() if write_indices is not None else np.zeros(cache.shape[0], np.int64)
  n, s = cache.shape[a], update.shape[a]
  # the cache slot each slot gets its value from: update position j lands at (start[batch] + j) (mod n in circular)
  src = np.full((cache.shape[0], n), -1)
  for bi, st in enumerate(start):
    for j in range(s): src[bi, (st + j) % n if mode == "circular" else st + j] = j
  shape = [cache.shape[0] if d == 0 else n if d == a else 1 for d in range(cache.ndim)]
  idx = Tensor(np.maximum(src, 0).astype(np.int32)).reshape(shape).expand(
    *[n if d == a else c for d, c in enumerate(cache.shape)])
  picked = update.pad([(0, n - s) if d == a else (0, 0) for d in range(cache.ndim)]).gather(a, idx)
  return Tensor(src >= 0).reshape(shape).where(picked, cache)

# *** transformer pieces ***
def RotaryEmbedding(x: Tensor, cos_cache: Tensor, sin_cache: Tensor, position_ids: Tensor | None = None,
                    interleaved: int = 0, num_heads: int = 0, rotary_embedding_dim: int = 0) -> Tensor:
  h = x.transpose(1, 2) if x.ndim == 4 else x.reshape(x.shape[0], x.shape[1], num_heads, -1)  # (batch, seq, heads, d)
  d = rotary_embedding_dim or h.shape[3]
  rot, rest = h[..., :d], h[..., d:]
  if position_ids is not None: cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
  cos, sin = cos_cache.unsqueeze(2), sin_cache.unsqueeze(2)
  if interleaved:
    pairs = rot.reshape(*rot.shape[:3], d // 2, 2)
    x1, x2 = pairs[..., 0], pairs[..., 1]
  else: x1, x2 = rot[..., :d // 2], rot[..., d // 2:]
  real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
  rot = real.stack(imag, dim=-1).reshape(rot.shape) if interleaved else real.cat(imag, dim=-1)
  out = rot.cat(rest, dim=-1) if rest.shape[-1] else rot
  return out.transpose(1, 2) if x.ndim == 4 else out.reshape(x.shape)

def SwiGLU(a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor: return a * (a * alpha).sigmoid() * b

def AffineGrid(theta: Tensor, size: Tensor, align_corners: int = 0) -> Tensor:
  sz = _ints(size)
  spatial = sz[2:]
  def coords(n: int) -> np.ndarray: return np.linspace(-1, 1, n) if align_corners else (np.arange(n) * 2 + 1) / n - 1
  mesh = np.meshgrid(*[coords(n) for n in spatial], indexing="ij")[::-1]  # x first (the last axis), then y (, z)
  base = np.stack([*mesh, np.ones(spatial)], -1).reshape(-1, len(spatial) + 1).astype(np.float32)
  grid = Tensor(base).cast(theta.dtype).matmul(theta.transpose(1, 2))  # (N, H*W, dims)
  return grid.reshape(sz[0], *spatial, len(spatial))

# *** spectral ***
def DFT(x: Tensor, dft_length: Tensor | None = None, axis: Any = None, inverse: int = 0, onesided: int = 0,
        opset: int = 20) -> Tensor:
  a = _axis(int(_scalar(axis)) if axis is not None else (1 if opset < 20 else -2), x.ndim)
  if x.shape[-1] == 1: x = x.cat(x.zeros_like(), dim=-1)
  n = int(_scalar(dft_length)) if dft_length is not None else x.shape[a]
  if n != x.shape[a]: x = x.pad([(0, n - x.shape[a]) if d == a else (0, 0) for d in range(x.ndim)])
  m = n // 2 + 1 if onesided else n
  ang = 2 * np.pi * np.outer(np.arange(m), np.arange(n)) / n * (1 if inverse else -1)  # (m, n)
  cos, sin = Tensor(np.cos(ang).astype(np.float32)).cast(x.dtype), Tensor(np.sin(ang).astype(np.float32)).cast(x.dtype)
  xm = x.transpose(a, -2)  # (..., n, 2) with the transform axis next to the last
  re, im = xm[..., 0:1], xm[..., 1:2]
  out = (cos.matmul(re) - sin.matmul(im)).cat(sin.matmul(re) + cos.matmul(im), dim=-1)  # (real, imaginary)
  return (out / n if inverse else out).transpose(a, -2)

# *** training (ai.onnx.preview.training) ***
def Adagrad(r: Tensor, t: Tensor, *xs: Tensor, decay_factor: float = 0.0, epsilon: float = 0.0,
            norm_coefficient: float = 0.0) -> tuple:
  n, rate = len(xs) // 3, r / (1 + t.cast(dtypes.float32) * decay_factor)
  gs = [norm_coefficient * x + g for x, g in zip(xs[:n], xs[n:2 * n])]  # xs: the n parameters, gradients, states
  hs = [h + g * g for g, h in zip(gs, xs[2 * n:])]
  return (*[x - rate * g / (h.sqrt() + epsilon) for x, g, h in zip(xs, gs, hs)], *hs)

def Momentum(r: Tensor, t: Tensor, *xs: Tensor, alpha: float = 0.0, beta: float = 0.0, mode: str = "standard",
             norm_coefficient: float = 0.0) -> tuple:
  n, b = len(xs) // 3, (t > 0).where(beta, 1.0)
  gs = [norm_coefficient * x + g for x, g in zip(xs[:n], xs[n:2 * n])]
  vs = [alpha * v + b * g for g, v in zip(gs, xs[2 * n:])]
  return (*[x - r * (v if mode == "standard" else g + alpha * v) for x, g, v in zip(xs, gs, vs)], *vs)

def Adam(r: Tensor, t: Tensor, *xs: Tensor, alpha: float = 0.9, beta: float = 0.999, epsilon: float = 1e-6,
         norm_coefficient: float = 0.0, norm_coefficient_post: float = 0.0) -> tuple:
  n, steps = len(xs) // 4, float(_scalar(t))
  rate = r * math.sqrt(1 - beta ** steps) / (1 - alpha ** steps) if steps > 0 else r
  gs = [norm_coefficient * x + g for x, g in zip(xs[:n], xs[n:2 * n])]
  vs = [alpha * v + (1 - alpha) * g for g, v in zip(gs, xs[2 * n:3 * n])]
  hs = [beta * h + (1 - beta) * g * g for g, h in zip(gs, xs[3 * n:])]
  new = [(1 - norm_coefficient_post) * (x - rate * v / (h.sqrt() + epsilon)) for x, v, h in zip(xs, vs, hs)]
  return (*new, *vs, *hs)

# *** ai.onnx.ml ***
def Binarizer(x: Tensor, threshold: float = 0.0) -> Tensor: return (x > threshold).cast(x.dtype)
def ArrayFeatureExtractor(x: Tensor, y: Tensor) -> Tensor:
  idx = y.reshape(-1).cast(dtypes.int32)
  return x.gather(x.ndim - 1, idx.reshape(*[1] * (x.ndim - 1), -1).expand(*x.shape[:-1], idx.shape[0]))

# *** sampling ***
def _reflect(c: Tensor, lo: float, hi: float) -> Tensor:
  """c reflected into [lo, hi] (as many times as it takes)."""
  span = hi - lo
  if span <= 0: return c * 0 + lo
  d = (c - lo).abs()
  flips = (d / span).floor()
  extra = d - flips * span
  return (flips % 2 == 0).where(lo + extra, hi - extra)

def _cubic(t: Tensor, a: float = -0.75) -> Tensor:
  """The cubic convolution kernel at distance t (0 <= t < 2)."""
  return (t <= 1).where(((a + 2) * t - (a + 3)) * t * t + 1, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a)

def GridSample(x: Tensor, grid: Tensor, align_corners: int = 0, mode: str = "linear",
               padding_mode: str = "zeros") -> Tensor:
  n, c, sizes = x.shape[0], x.shape[1], x.shape[2:]
  r, out, taps_per_axis = len(sizes), grid.shape[1:-1], []
  for j, size in enumerate(sizes):
    g = grid[..., r - 1 - j].cast(dtypes.float32)  # the grid's last component is the last axis (x, then y, ...)
    p = (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2
    if padding_mode == "border": p = p.maximum(0).minimum(size - 1)
    elif padding_mode == "reflection":
      p = _reflect(p, 0, size - 1) if align_corners else _reflect(p, -0.5, size - 0.5).maximum(0).minimum(size - 1)
    lo = p.floor()
    if mode == "nearest": taps = [(p.round(), None)]
    elif mode in ("linear", "bilinear"): taps = [(lo, 1 - (p - lo)), (lo + 1, p - lo)]
    else: taps = [(lo + k, _cubic((p - lo - k).abs())) for k in (-1, 0, 1, 2)]
    if padding_mode != "zeros": taps = [(i.maximum(0).minimum(size - 1), w) for i, w in taps]
    taps_per_axis.append(taps)
  flat, terms = x.reshape(n, c, -1), []
  for combo in np.ndindex(*[len(t) for t in taps_per_axis]):
    lin, weight, valid = None, None, None
    for j, k in enumerate(combo):
      idx, w = taps_per_axis[j][k]
      ok = (idx >= 0) & (idx <= sizes[j] - 1)
      term = idx.maximum(0).minimum(sizes[j] - 1).cast(dtypes.int32) * math.prod(sizes[j + 1:])
      lin, valid = (term, ok) if lin is None else (lin + term, valid & ok)
      if w is not None: weight = w if weight is None else weight * w
    assert lin is not None and valid is not None
    v = flat.gather(2, lin.reshape(n, 1, -1).expand(n, c, lin[0].numel())).reshape(n, c, *out)
    terms.append(valid.unsqueeze(1).where(v, 0) * (weight.unsqueeze(1) if weight is not None else 1))
  return functools.reduce(Tensor.add, terms).cast(x.dtype)

# *** detection ***
def _iou(a: np.ndarray, b: np.ndarray) -> float:
  """Intersection over union of two (y1, x1, y2, x2) boxes whose corners may come in any order."""
  (ay1, ay2), (ax1, ax2), (by1, by2), (bx1, bx2) = (sorted(v[[i, i + 2]]) for v in (a, b) for i in (0, 1))
  inter = max(min(ay2, by2) - max(ay1, by1), 0) * max(min(ax2, bx2) - max(ax1, bx1), 0)
  union = (ay2 - ay1) * (ax2 - ax1) + (by2 - by1) * (bx2 - bx1) - inter
  return inter / union if inter > 0 and union > 0 else 0.0

def NonMaxSuppression(boxes: Tensor, scores: Tensor, max_output_boxes_per_class: Tensor | None = None,
                      iou_threshold: Tensor | None = None, score_threshold: Tensor | None = None,
                      center_point_box: int = 0) -> Tensor:
  """Greedy per batch and class, best score first (ties: lower index): a box is kept unless its IoU with a kept box is
  above iou_threshold. Data-dependent output size, so it runs on the host."""
  bx, sc = boxes.numpy().astype(np.float64), scores.numpy()
  if center_point_box:  # (xc, yc, w, h) -> (y1, x1, y2, x2)
    bx = np.stack([bx[..., 1] - bx[..., 3] / 2, bx[..., 0] - bx[..., 2] / 2, bx[..., 1] + bx[..., 3] / 2,
                   bx[..., 0] + bx[..., 2] / 2], -1)
  limit = int(_scalar(max_output_boxes_per_class)) if max_output_boxes_per_class is not None else 0
  iou_t, picked = float(_scalar(iou_threshold)) if iou_threshold is not None else 0.0, []
  for b, c in np.ndindex(*sc.shape[:2]):
    order = [i for i in sorted(range(sc.shape[2]), key=lambda i: (-sc[b, c, i], i))
             if score_threshold is None or sc[b, c, i] > float(_scalar(score_threshold))]
    kept: list[int] = []
    for i in order:
      if len(kept) >= limit: break
      if all(_iou(bx[b, i], bx[b, k]) <= iou_t for k in kept): kept.append(i)
    picked += [(b, c, i) for i in kept]
  return Tensor(np.array(picked, dtype=np.int64).reshape(-1, 3))

def CausalConvWithState(x: Tensor, weight: Tensor, bias: Tensor | None = None, past_state: Tensor | None = None,
                        activation: str = "none") -> tuple:
  """A depthwise 1-d convolution on (batch, channels, length) after k-1 past steps (or zeros), and the new state."""
  (b, c, _), k = x.shape, weight.shape[2]
  padded = (past_state if past_state is not None else Tensor.zeros(b, c, k - 1, dtype=x.dtype)).cat(x, dim=2)
  y = padded.conv2d(weight, bias, groups=c)
  if activation in ("silu", "swish"): y = (y.cast(dtypes.float32) * y.cast(dtypes.float32).sigmoid()).cast(x.dtype)
  return y, padded[:, :, padded.shape[2] - (k - 1):]

def LinearAttention(q: Tensor, k: Tensor, v: Tensor, past_state: Tensor | None = None, decay: Tensor | None = None,
                    beta: Tensor | None = None, chunk_size: int = 0, kv_num_heads: int = 1, q_num_heads: int = 1,
                    scale: float = 0.0, update_rule: str = "gated_delta") -> tuple:
  """Recurrent linear attention over (B, T, H*D) inputs, one step at a time: state (B, H_kv, d_k, d_v) is decayed
  (gated rules), delta-corrected with beta (delta rules), then gets k v^T; each step reads q . state * scale."""
  b, t = q.shape[:2]
  heads = lambda x, n: x.reshape(b, t, n, -1).transpose(1, 2).cast(dtypes.float32)  # (B, H, T, D)
  q4, k4, v4 = heads(q, q_num_heads), heads(k, kv_num_heads), heads(v, kv_num_heads)
  dk, dv = q4.shape[-1], v4.shape[-1]
  state = past_state.cast(dtypes.float32) if past_state is not None else Tensor.zeros(b, kv_num_heads, dk, dv)
  g4 = None if decay is None else heads(decay, kv_num_heads)  # (B, H, T, 1 or d_k)
  b4 = None if beta is None else beta.reshape(b, t, beta.shape[-1], 1).transpose(1, 2).cast(dtypes.float32)
  s, group, outs = scale or 1 / math.sqrt(dk), q_num_heads // kv_num_heads, []
  for i in range(t):
    kt, vt = k4[:, :, i], v4[:, :, i]
    if g4 is not None and update_rule in ("gated", "gated_delta"): state = state * g4[:, :, i].exp().unsqueeze(-1)
    if b4 is not None and update_rule in ("delta", "gated_delta"):
      vt = b4[:, :, i] * (vt - (state * kt.unsqueeze(-1)).sum(2))
    state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
    read = state.repeat_interleave(group, 1) if group > 1 else state
    outs.append((q4[:, :, i].unsqueeze(-1) * read).sum(2) * s)  # (B, H_q, d_v)
  y = Tensor.stack(*outs, dim=2).transpose(1, 2).reshape(b, t, -1).cast(q.dtype)
  return y, state.cast(past_state.dtype if past_state is not None else q.dtype)

def Col2Im(x: Tensor, image_shape: Tensor, block_shape: Tensor, dilations: Any = None, pads: Any = None,
           strides: Any = None) -> Tensor:
  """The inverse of im2col: x (N, C * prod(block), L) summed into (N, C, *image). The block positions are static, so a
  0/1 matrix built on the host maps every (kernel offset, block) cell to its image cell: one matmul."""
  img, blk = _ints(image_shape), _ints(block_shape)
  r = len(img)
  d, s, p = _ints(dilations) or [1] * r, _ints(strides) or [1] * r, _ints(pads) or [0] * (2 * r)
  counts = [(i + p[j] + p[j + r] - d[j] * (k - 1) - 1) // s[j] + 1 for j, (i, k) in enumerate(zip(img, blk))]
  m = np.zeros((math.prod(blk), math.prod(counts), math.prod(img)), np.float32)
  for ko, bo in itertools.product(np.ndindex(*blk), np.ndindex(*counts)):
    pos = [b * s[j] - p[j] + k * d[j] for j, (k, b) in enumerate(zip(ko, bo))]
    if all(0 <= q < i for q, i in zip(pos, img)):
      m[np.ravel_multi_index(ko, blk), np.ravel_multi_index(bo, counts), np.ravel_multi_index(pos, img)] = 1
  n, c = x.shape[0], x.shape[1] // math.prod(blk)
  return x.reshape(n, c, -1).matmul(Tensor(m.reshape(-1, math.prod(img))).cast(x.dtype)).reshape(n, c, *img)

def STFT(signal: Tensor, frame_step: Tensor, window: Tensor | None = None, frame_length: Tensor | None = None,
         onesided: int = 1) -> Tensor:
  """The DFT of each frame_length frame every frame_step of signal (B, L, 1 or 2), windowed: (B, frames, bins, 2)."""
  step = int(_scalar(frame_step))
  n = int(_scalar(frame_length)) if frame_length is not None else window.shape[0] if window is not None else \
    signal.shape[1]
  frames = (signal.shape[1] - n) // step + 1
  x = Tensor.stack(*[signal[:, f * step:f * step + n] for f in range(frames)], dim=1)  # (B, frames, n, 1 or 2)
  if window is not None: x = x * window.reshape(1, 1, n, 1).cast(x.dtype)
  return DFT(x, None, Tensor(2), onesided=onesided)

register_ops(globals())
