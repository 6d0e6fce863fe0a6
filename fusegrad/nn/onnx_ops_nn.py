"""The ONNX ops of neural networks (convolution, pooling, normalization, recurrent layers, resizing, losses,
quantization) and of control flow and sequences, registered in the same OPS table as onnx_ops.py."""
from __future__ import annotations
import functools, math
from typing import Any, Callable
import numpy as np
from fusegrad.tensor import Tensor
from fusegrad.dtype import dtypes
from fusegrad.mixin.conv import _pad_last
from fusegrad.nn.onnx_ops import OPS, Seq, register_ops, _ints, _scalar, _axis, onnx_dtype, _per_axis, Gather, Elu, \
  HardSigmoid, LeakyRelu, ThresholdedRelu

# *** convolution and pooling ***
def _halves(total: int, auto_pad: str) -> tuple[int, int]:
  """total padding as (before, after): the odd one after, or before for SAME_LOWER."""
  return (total - total // 2, total // 2) if auto_pad == "SAME_LOWER" else (total // 2, total - total // 2)

def _pads(x: Tensor, kernel: list[int], strides: list[int], dilations: list[int], pads: Any,
          auto_pad: str) -> list[tuple[int, int]]:
  """(before, after) per spatial axis from ONNX pads [b1, b2, .., e1, e2, ..] or auto_pad."""
  n = len(kernel)
  if auto_pad in ("SAME_UPPER", "SAME_LOWER"):  # as much as makes the output size ceil(input / stride)
    return [_halves(max((-(-i // s) - 1) * s + (k - 1) * d + 1 - i, 0), auto_pad)
            for i, k, s, d in zip(x.shape[2:], kernel, strides, dilations)]
  if auto_pad == "VALID" or pads is None: return [(0, 0)] * n
  p = _ints(pads)
  return [(p[i], p[i + n]) for i in range(n)]

def _conv_args(k: list[int], strides: Any, dilations: Any) -> tuple:
  """(kernel, strides, dilations) per spatial axis, ONNX's defaults filled in."""
  return k, _ints(strides) or [1] * len(k), _ints(dilations) or [1] * len(k)

def Conv(x: Tensor, w: Tensor, b: Tensor | None = None, auto_pad: str = "NOTSET", dilations: Any = None, group: int = 1,
         kernel_shape: Any = None, pads: Any = None, strides: Any = None) -> Tensor:
  k, s, d = _conv_args(_ints(kernel_shape) or list(w.shape[2:]), strides, dilations)
  return x.conv2d(w, b, groups=group, stride=s, dilation=d, padding=_pads(x, k, s, d, pads, auto_pad))

def ConvTranspose(x: Tensor, w: Tensor, b: Tensor | None = None, auto_pad: str = "NOTSET", dilations: Any = None,
                  group: int = 1, kernel_shape: Any = None, output_padding: Any = None, output_shape: Any = None,
                  pads: Any = None, strides: Any = None) -> Tensor:
  k, s, d = _conv_args(_ints(kernel_shape) or list(w.shape[2:]), strides, dilations)
  n, op_ = len(k), _ints(output_padding) or [0] * len(k)
  if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    outs = _ints(output_shape)[-n:] if output_shape is not None else [i * st for i, st in zip(x.shape[2:], s)]
    pairs = []
    for j in range(n):
      total = s[j] * (x.shape[2 + j] - 1) + op_[j] + (k[j] - 1) * d[j] + 1 - outs[j]
      if total < 0: op_[j], total = op_[j] - total, 0
      pairs.append(_halves(total, auto_pad))
  else: pairs = _pads(x, k, s, d, pads, "NOTSET" if auto_pad == "VALID" else auto_pad)
  return x.conv_transpose2d(w, b, groups=group, stride=s, dilation=d, padding=pairs, output_padding=tuple(op_))

def _pool_prep(x: Tensor, kernel_shape: Any, strides: Any, dilations: Any, pads: Any, auto_pad: str) -> tuple:
  k, s, d = _conv_args(_ints(kernel_shape), strides, dilations)
  return k, s, d, _pads(x, k, s, d, pads, auto_pad)

def MaxPool(x: Tensor, auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: Any = None, kernel_shape: Any = None,
            pads: Any = None, storage_order: int = 0, strides: Any = None, n_outputs: int = 1) -> Any:
  k, s, d, p = _pool_prep(x, kernel_shape, strides, dilations, pads, auto_pad)
  if n_outputs == 1:
    if not _pads_fit(p, k, d): return _pad_last(x, p, dtypes.min(x.dtype)).max_pool2d(k, s, d, 0, bool(ceil_mode))
    return x.max_pool2d(k, s, d, p, bool(ceil_mode))
  y, idx = x.max_pool2d(k, s, d, p, bool(ceil_mode), return_indices=True)
  plane = x.shape[2:]
  if storage_order:  # column-major positions within the plane
    pos = np.arange(math.prod(plane)).reshape(plane).T.reshape(-1) if len(plane) == 2 else np.arange(math.prod(plane))
    idx = Tensor(pos.astype(np.int64))[idx.reshape(-1)].reshape(idx.shape)
  base = Tensor.arange(x.shape[0] * x.shape[1], dtype=dtypes.int64).reshape(x.shape[0], x.shape[1], *[1] * len(k))
  return y, idx + base * math.prod(plane)

def AveragePool(x: Tensor, auto_pad: str = "NOTSET", ceil_mode: int = 0, count_include_pad: int = 0,
                dilations: Any = None, kernel_shape: Any = None, pads: Any = None, strides: Any = None) -> Tensor:
  k, s, d, p = _pool_prep(x, kernel_shape, strides, dilations, pads, auto_pad)
  if _pads_fit(p, k, d): return x.avg_pool2d(k, s, d, p, bool(ceil_mode), count_include_pad=bool(count_include_pad))
  # pads wider than half the kernel (fusegrad's pools refuse them): pad first, then divide by the counted cells
  total = _pad_last(x, p, 0).avg_pool2d(k, s, d, 0, bool(ceil_mode))
  if count_include_pad: return total
  inside = _pad_last(Tensor.ones(*x.shape[2:], dtype=x.dtype).reshape(1, 1, *x.shape[2:]), p, 0)
  return total / inside.avg_pool2d(k, s, d, 0, bool(ceil_mode))

def _pads_fit(p: list[tuple[int, int]], k: list[int], d: list[int]) -> bool:
  return all(max(pp) * 2 <= dd * (kk - 1) + 1 for pp, kk, dd in zip(p, k, d))

def LpPool(x: Tensor, auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: Any = None, kernel_shape: Any = None,
           p: int = 2, pads: Any = None, strides: Any = None) -> Tensor:
  k, s, d, pp = _pool_prep(x, kernel_shape, strides, dilations, pads, auto_pad)
  total = _pad_last(x.abs().pow(p), pp, 0).avg_pool2d(k, s, d, 0, bool(ceil_mode), count_include_pad=True)
  return (total * math.prod(k)).pow(1.0 / p)

def MaxUnpool(x: Tensor, indices: Tensor, output_shape: Any = None, kernel_shape: Any = None, pads: Any = None,
              strides: Any = None) -> Tensor:
  k, s, _, p = _pool_prep(x, kernel_shape, strides, None, pads, "NOTSET")
  out = _ints(output_shape)[2:] if output_shape is not None else None
  if out is None: out = [(i - 1) * st - a - b + kk for i, st, (a, b), kk in zip(x.shape[2:], s, p, k)]
  return x.max_unpool2d(indices % math.prod(out), tuple(k), tuple(s), 1, 0, output_size=out)

def GlobalAveragePool(x: Tensor) -> Tensor: return x.mean(tuple(range(2, x.ndim)), keepdim=True)
def GlobalMaxPool(x: Tensor) -> Tensor: return x.max(tuple(range(2, x.ndim)), keepdim=True)

# *** matrix products ***
def MatMul(a: Tensor, b: Tensor) -> Tensor: return a.matmul(b)
def Gemm(a: Tensor, b: Tensor, c: Tensor | None = None, alpha: float = 1.0, beta: float = 1.0, transA: int = 0,
         transB: int = 0) -> Tensor:
  y = (a.T if transA else a).matmul(b.T if transB else b)
  if alpha != 1.0: y = y * alpha
  return y if c is None else y + (c * beta if beta != 1.0 else c)
def _minus_zp(x: Tensor, zp: Tensor | None) -> Tensor:  # x less its zero point (if any), in int32
  return x.cast(dtypes.int32) - (zp.cast(dtypes.int32) if zp is not None else 0)
def MatMulInteger(a: Tensor, b: Tensor, a_zero_point: Tensor | None = None,
                  b_zero_point: Tensor | None = None) -> Tensor:
  return _minus_zp(a, a_zero_point).matmul(_minus_zp(b, b_zero_point))

# *** normalization ***
def BatchNormalization(x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, epsilon: float = 1e-5,
                       momentum: float = 0.9, training_mode: int = 0, spatial: int = 1) -> Any:
  if not training_mode: return x.batchnorm(scale, bias, mean, (var + epsilon).rsqrt())
  axes = tuple(i for i in range(x.ndim) if i != 1)
  bm, bv = x.mean(axes), x.var(axes, correction=0)
  y = x.batchnorm(scale, bias, bm, (bv + epsilon).rsqrt())
  return y, mean * momentum + bm * (1 - momentum), var * momentum + bv * (1 - momentum)
def InstanceNormalization(x: Tensor, scale: Tensor, bias: Tensor, epsilon: float = 1e-5) -> Tensor:
  return x.layernorm(tuple(range(2, x.ndim)), epsilon) * _per_axis(scale, 1, x.ndim) + _per_axis(bias, 1, x.ndim)
def LayerNormalization(x: Tensor, scale: Tensor, bias: Tensor | None = None, axis: int = -1, epsilon: float = 1e-5,
                       stash_type: int = 1) -> tuple:
  axes, xf = tuple(range(_axis(axis, x.ndim), x.ndim)), x.cast(dtypes.float32) if stash_type == 1 else x
  mean = xf.mean(axes, keepdim=True)
  inv = ((xf - mean).square().mean(axes, keepdim=True) + epsilon).rsqrt()
  y = ((xf - mean) * inv).cast(x.dtype) * scale
  return (y if bias is None else y + bias), mean, inv
def GroupNormalization(x: Tensor, scale: Tensor, bias: Tensor, epsilon: float = 1e-5, num_groups: int = 1,
                       stash_type: int = 1) -> Tensor:
  n, c = x.shape[:2]
  y = x.reshape(n, num_groups, -1).layernorm(-1, epsilon).reshape(x.shape)
  if scale.shape[0] != c:  # opset 18: scale and bias per group
    scale, bias = scale.repeat_interleave(c // num_groups), bias.repeat_interleave(c // num_groups)
  return y * _per_axis(scale, 1, x.ndim) + _per_axis(bias, 1, x.ndim)
def RMSNormalization(x: Tensor, scale: Tensor, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1) -> Tensor:
  axes, xf = tuple(range(_axis(axis, x.ndim), x.ndim)), x.cast(dtypes.float32)
  return (xf * (xf.square().mean(axes, keepdim=True) + epsilon).rsqrt()).cast(x.dtype) * scale
def LpNormalization(x: Tensor, axis: int = -1, p: int = 2) -> Tensor:
  norm = x.abs().sum(axis, keepdim=True) if p == 1 else x.square().sum(axis, keepdim=True).sqrt()
  return (norm == 0).where(0, x / norm)  # a zero vector stays zero
def MeanVarianceNormalization(x: Tensor, axes: Any = None) -> Tensor:
  ax = tuple(_axis(a, x.ndim) for a in (_ints(axes) if axes is not None else [0, 2, 3]))
  y = x - x.mean(ax, keepdim=True)
  return y / (y.square().mean(ax, keepdim=True).sqrt() + 1e-9)
def LRN(x: Tensor, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0, size: int = 1) -> Tensor:
  c = x.shape[1]
  sq = x.square().pad([(0, 0), ((size - 1) // 2, size - 1 - (size - 1) // 2)] + [(0, 0)] * (x.ndim - 2))
  total = sq.shrink([None, (0, c)] + [None] * (x.ndim - 2))
  for j in range(1, size): total = total + sq.shrink([None, (j, j + c)] + [None] * (x.ndim - 2))
  return x / (bias + alpha / size * total).pow(beta)

def Dropout(x: Tensor, ratio: Any = None, training_mode: Any = None, seed: int | None = None, is_test: int = 0,
            n_outputs: int = 1) -> Any:
  r = float(_scalar(ratio)) if ratio is not None else 0.5
  if training_mode is not None and bool(_scalar(training_mode)) and r > 0:
    raise NotImplementedError("Dropout in training mode (random masks) is not supported")
  return x if n_outputs == 1 else (x, Tensor.ones(*x.shape, dtype=dtypes.bool))

# *** resizing ***
def _resize_taps(i: int, o: int, scale: float, mode: str, coord: str, nearest: str, cubic_a: float,
                 exclude_outside: int, roi: tuple[float, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """For one axis: (source index per output and tap, weight per output and tap, inside mask per output)."""
  dst = np.arange(o, dtype=np.float64)
  if coord == "half_pixel": src = (dst + 0.5) / scale - 0.5
  elif coord == "half_pixel_symmetric": src = i / 2 * (1 - o / (scale * i)) + (dst + 0.5) / scale - 0.5
  elif coord == "pytorch_half_pixel": src = (dst + 0.5) / scale - 0.5 if o > 1 else np.zeros(o)
  elif coord == "align_corners": src = dst * (i - 1) / (i * scale - 1) if o > 1 else np.zeros(o)
  elif coord == "asymmetric": src = dst / scale
  elif coord == "tf_crop_and_resize":
    src = (roi[0] * (i - 1) + dst * (roi[1] - roi[0]) * (i - 1) / (o - 1)) if o > 1 else \
      np.full(o, 0.5 * (roi[0] + roi[1]) * (i - 1))
  else: raise NotImplementedError(f"Resize: coordinate_transformation_mode {coord!r}")
  inside = (src >= 0) & (src <= i - 1) if coord == "tf_crop_and_resize" else np.ones(o, bool)
  if mode == "nearest":
    rounders: dict[str, Callable[[np.ndarray], np.ndarray]] = {"round_prefer_floor": lambda v: np.ceil(v - 0.5),
      "round_prefer_ceil": lambda v: np.floor(v + 0.5), "floor": np.floor, "ceil": np.ceil}
    idx, w = rounders[nearest](src)[:, None], np.ones((o, 1))
  elif mode == "linear":
    if coord != "tf_crop_and_resize": src = np.clip(src, 0, i - 1)
    lo = np.floor(src)
    idx, w = np.stack([lo, lo + 1], 1), np.stack([1 - (src - lo), src - lo], 1)
  elif mode == "cubic":
    idx = np.floor(src)[:, None] + np.arange(-1, 3)[None, :]
    t, a = np.abs(src[:, None] - idx), cubic_a
    near, far = ((a + 2) * t - (a + 3)) * t * t + 1, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    w = np.where(t <= 1, near, np.where(t < 2, far, 0))
    if exclude_outside:
      w = np.where((idx >= 0) & (idx <= i - 1), w, 0)
      w = w / w.sum(1, keepdims=True)
  else: raise NotImplementedError(f"Resize: mode {mode!r}")
  return np.clip(idx, 0, i - 1).astype(np.int32), w, inside

def Resize(x: Tensor, roi: Any = None, scales: Any = None, sizes: Any = None, antialias: int = 0, axes: Any = None,
           coordinate_transformation_mode: str = "half_pixel", cubic_coeff_a: float = -0.75, exclude_outside: int = 0,
           extrapolation_value: float = 0.0, keep_aspect_ratio_policy: str = "stretch", mode: str = "nearest",
           nearest_mode: str = "round_prefer_floor", opset: int = 13) -> Tensor:
  if antialias: raise NotImplementedError("Resize with antialias is not supported")
  ax = [_axis(a, x.ndim) for a in _ints(axes)] if axes is not None else list(range(x.ndim))
  sc = scales.tolist() if isinstance(scales, Tensor) and scales.numel() else None
  sz = _ints(sizes) if isinstance(sizes, Tensor) and sizes.numel() else None
  r = roi.tolist() if isinstance(roi, Tensor) and roi.numel() else None
  ins = [x.shape[a] for a in ax]
  if sz is not None:
    if keep_aspect_ratio_policy != "stretch":
      s = (min if keep_aspect_ratio_policy == "not_larger" else max)(o / i for o, i in zip(sz, ins))
      sc, sz = [s] * len(ax), [int(math.floor(i * s + 0.5)) for i in ins]
    else: sc = [o / i for o, i in zip(sz, ins)]
  elif sc is not None: sz = [int(math.floor(i * s)) for i, s in zip(ins, sc)]
  else: raise ValueError("Resize: give scales or sizes")
  assert sc is not None and sz is not None
  for j, (a, i, o, s) in enumerate(zip(ax, ins, sz, sc)):
    if i == o and s == 1.0 and coordinate_transformation_mode != "tf_crop_and_resize": continue
    rr = (r[j], r[j + len(ax)]) if r is not None and len(r) == 2 * len(ax) else \
      (r[a], r[a + x.ndim]) if r is not None else (0.0, 1.0)
    idx, w, inside = _resize_taps(i, o, s, mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
                                  exclude_outside, rr)
    along = [o if d == a else 1 for d in range(x.ndim)]
    def tap(t: int) -> Tensor:  # the source values of tap t, weighted
      g = Gather(x, Tensor(idx[:, t]), axis=a)
      return g if mode == "nearest" else g * Tensor(w[:, t].astype(np.float32)).reshape(along).cast(x.dtype)
    acc = functools.reduce(Tensor.add, [tap(t) for t in range(idx.shape[1])])
    x = acc if inside.all() else Tensor(inside).reshape(along).where(acc, extrapolation_value)
  return x

def Upsample(x: Tensor, scales: Any = None, mode: str = "nearest") -> Tensor:
  sc = scales.tolist() if isinstance(scales, Tensor) else scales
  return Resize(x, None, Tensor(sc, dtype=dtypes.float32), None, mode="linear" if mode in ("linear", "bilinear") else
                mode, coordinate_transformation_mode="asymmetric", nearest_mode="floor")

# *** recurrent layers ***
_ACT: dict[str, Callable[[Tensor, float, float], Tensor]] = {  # the ops of these names, with alpha a and beta b
  "Sigmoid": lambda x, a, b: x.sigmoid(), "Tanh": lambda x, a, b: x.tanh(), "Relu": lambda x, a, b: x.relu(),
  "Affine": lambda x, a, b: x * a + b, "LeakyRelu": lambda x, a, b: LeakyRelu(x, a), "HardSigmoid": HardSigmoid,
  "ThresholdedRelu": lambda x, a, b: ThresholdedRelu(x, a), "ScaledTanh": lambda x, a, b: (x * b).tanh() * a,
  "Elu": lambda x, a, b: Elu(x, a), "Softsign": lambda x, a, b: x.softsign(), "Softplus": lambda x, a, b: x.softplus()}
_ACT_DEFAULT_ALPHA = {"LeakyRelu": 0.01, "ThresholdedRelu": 1.0, "HardSigmoid": 0.2, "Elu": 1.0}
_ACT_DEFAULT_BETA = {"HardSigmoid": 0.5}

def _acts(names: list[str] | None, default: list[str], alphas: Any, betas: Any, dirs: int) -> list[Callable]:
  names, al, be = names or default * dirs, list(alphas or []), list(betas or [])
  alpha = [al[j] if j < len(al) else _ACT_DEFAULT_ALPHA.get(n, 1.0) for j, n in enumerate(names)]
  beta = [be[j] if j < len(be) else _ACT_DEFAULT_BETA.get(n, 0.0) for j, n in enumerate(names)]
  return [lambda x, f=_ACT[n], a=a, b=b: f(x, a, b) for n, a, b in zip(names, alpha, beta)]

def _recurrent(x: Tensor, w: Tensor, r: Tensor, b: Tensor | None, seq_lens: Tensor | None, init: list[Tensor | None],
               direction: str, layout: int, gates: int, cell: Callable) -> tuple:
  """The loop shared by RNN, GRU and LSTM: x (seq, batch, in) (layout 1: batch first), w (dirs, gates*h, in),
  r (dirs, gates*h, h), b (dirs, 2*gates*h). cell(d, xw_t, states, r, bias) -> new states (h first)."""
  if layout: x = x.transpose(0, 1)
  (seq, batch), dirs, hid = x.shape[:2], w.shape[0], r.shape[-1]
  if b is None: b = Tensor.zeros(dirs, 2 * gates * hid, dtype=x.dtype)
  if seq_lens is not None and any(v != seq for v in _ints(seq_lens)):
    raise NotImplementedError("RNN/GRU/LSTM with sequence_lens shorter than the sequence")
  ys, finals = [], []
  for d in range(dirs):
    reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
    states = [(s.transpose(0, 1) if layout else s)[d] if s is not None else Tensor.zeros(batch, hid, dtype=x.dtype)
              for s in init]
    xw = x.matmul(w[d].T) + b[d, :gates * hid]  # (seq, batch, gates*hid)
    outs: list[Tensor] = [Tensor.empty(0)] * seq
    for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
      states = cell(d, xw[t], states, r[d], b[d, gates * hid:])
      outs[t] = states[0]
    ys.append(Tensor.stack(*outs) if seq else Tensor.zeros(0, batch, hid, dtype=x.dtype))
    finals.append(states)
  y = Tensor.stack(*ys, dim=1)  # (seq, dirs, batch, hid)
  last = [Tensor.stack(*[f[j] for f in finals]) for j in range(len(init))]  # (dirs, batch, hid)
  if layout: y, last = y.permute(2, 0, 1, 3), [s.transpose(0, 1) for s in last]
  return (y, *last)

def RNN(x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, sequence_lens: Tensor | None = None,
        initial_h: Tensor | None = None, activation_alpha: Any = None, activation_beta: Any = None,
        activations: Any = None, clip: float | None = None, direction: str = "forward", hidden_size: int = 0,
        layout: int = 0) -> tuple:
  f = _acts(activations, ["Tanh"], activation_alpha, activation_beta, w.shape[0])
  def cell(d: int, xw: Tensor, st: list[Tensor], rr: Tensor, rb: Tensor) -> list[Tensor]:
    return [f[d](xw + st[0].matmul(rr.T) + rb)]
  return _recurrent(x, w, r, b, sequence_lens, [initial_h], direction, layout, 1, cell)

def GRU(x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, sequence_lens: Tensor | None = None,
        initial_h: Tensor | None = None, activation_alpha: Any = None, activation_beta: Any = None,
        activations: Any = None, clip: float | None = None, direction: str = "forward", hidden_size: int = 0,
        layout: int = 0, linear_before_reset: int = 0) -> tuple:
  f = _acts(activations, ["Sigmoid", "Tanh"], activation_alpha, activation_beta, w.shape[0])
  def cell(d: int, xw: Tensor, st: list[Tensor], rr: Tensor, rb: Tensor) -> list[Tensor]:
    h = st[0]
    (xz, xr, xh), (rz, rr_, rh), (bz, br, bh) = xw.chunk(3, -1), rr.chunk(3, 0), rb.chunk(3, -1)  # gates z, r, h
    z, rg = f[2 * d](xz + h.matmul(rz.T) + bz), f[2 * d](xr + h.matmul(rr_.T) + br)
    ht = f[2 * d + 1](xh + rg * (h.matmul(rh.T) + bh) if linear_before_reset else xh + (rg * h).matmul(rh.T) + bh)
    return [(1 - z) * ht + z * h]
  return _recurrent(x, w, r, b, sequence_lens, [initial_h], direction, layout, 3, cell)

def LSTM(x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, sequence_lens: Tensor | None = None,
         initial_h: Tensor | None = None, initial_c: Tensor | None = None, P: Tensor | None = None,
         activation_alpha: Any = None, activation_beta: Any = None, activations: Any = None, clip: float | None = None,
         direction: str = "forward", hidden_size: int = 0, input_forget: int = 0, layout: int = 0) -> tuple:
  f = _acts(activations, ["Sigmoid", "Tanh", "Tanh"], activation_alpha, activation_beta, w.shape[0])
  def cell(d: int, xw: Tensor, st: list[Tensor], rr: Tensor, rb: Tensor) -> list[Tensor]:
    h, c = st
    gi, go, gf, gc = (xw + h.matmul(rr.T) + rb).chunk(4, -1)
    if P is not None:
      pi, po, pf = P[d].chunk(3)
      gi, gf = gi + pi * c, gf + pf * c
    i, fg, ct = f[3 * d](gi), f[3 * d](gf), f[3 * d + 1](gc)
    c2 = fg * c + i * ct
    return [f[3 * d]((go + po * c2) if P is not None else go) * f[3 * d + 2](c2), c2]  # o * h(c)
  return _recurrent(x, w, r, b, sequence_lens, [initial_h, initial_c], direction, layout, 4, cell)

# *** losses ***
def NegativeLogLikelihoodLoss(logp: Tensor, target: Tensor, weight: Tensor | None = None,
                              ignore_index: int | None = None, reduction: str = "mean") -> Tensor:
  t = target.cast(dtypes.int32)
  keep = (t != ignore_index) if ignore_index is not None else Tensor.ones(*t.shape, dtype=dtypes.bool)
  safe = keep.where(t, 0)
  picked = -logp.gather(1, safe.unsqueeze(1)).squeeze(1)
  w = weight.gather(0, safe.reshape(-1)).reshape(safe.shape) if weight is not None else Tensor.ones(*t.shape)
  w = keep.where(w.cast(logp.dtype), 0)
  loss = picked * w
  return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.sum() / w.sum()
def SoftmaxCrossEntropyLoss(scores: Tensor, labels: Tensor, weights: Tensor | None = None,
                            ignore_index: int | None = None, reduction: str = "mean", n_outputs: int = 1) -> Any:
  logp = scores.log_softmax(1)
  loss = NegativeLogLikelihoodLoss(logp, labels, weights, ignore_index, reduction)
  return loss if n_outputs == 1 else (loss, logp)

# *** quantization ***
def _along(t: Tensor, axis: int, x: Tensor) -> Tensor:
  """A scale or zero point in float32: laid along axis of x when it has a value per index, else a scalar."""
  return (_per_axis(t, _axis(axis, x.ndim), x.ndim) if t.ndim == 1 and t.numel() > 1 else t.reshape(())).float()
def _dequant(x: Tensor, scale: Tensor, zp: Tensor | None, axis: int) -> Tensor:
  """(x - zp) * scale in float32, with a per-axis scale and zero point laid along axis."""
  return (x.cast(dtypes.float32) - (_along(zp, axis, x) if zp is not None else 0)) * _along(scale, axis, x)
def QuantizeLinear(x: Tensor, y_scale: Tensor, y_zero_point: Tensor | None = None, axis: int = 1, block_size: int = 0,
                   output_dtype: int = 0, saturate: int = 1, precision: int = 0) -> Tensor:
  dt = y_zero_point.dtype if y_zero_point is not None else onnx_dtype(output_dtype) if output_dtype else dtypes.uint8
  if block_size: raise NotImplementedError("QuantizeLinear with block_size")
  zp = 0 if y_zero_point is None else _along(y_zero_point, axis, x)
  q = (x.cast(dtypes.float32) / _along(y_scale, axis, x)).round() + zp
  return q.maximum(dtypes.min(dt)).minimum(dtypes.max(dt)).cast(dt)
def DequantizeLinear(x: Tensor, x_scale: Tensor, x_zero_point: Tensor | None = None, axis: int = 1, block_size: int = 0,
                     output_dtype: int = 0, precision: int = 0) -> Tensor:
  if block_size: raise NotImplementedError("DequantizeLinear with block_size")
  return _dequant(x, x_scale, x_zero_point, axis).cast(x_scale.dtype)
def DynamicQuantizeLinear(x: Tensor) -> tuple:
  lo, hi = x.min().minimum(0), x.max().maximum(0)
  scale = (hi - lo) / 255
  zp = (-lo / scale).round().maximum(0).minimum(255)
  return ((x / scale).round() + zp).maximum(0).minimum(255).cast(dtypes.uint8), scale, zp.cast(dtypes.uint8)

# *** windows ***
def _window(size: Tensor, output_datatype: int = 1, periodic: int = 1, *, coefs: list[float]) -> Tensor:
  """The cosine-sum window sum_j (-1)^j coefs[j] cos(2 pi j k / N) (Hann, Hamming and Blackman below)."""
  n = int(_scalar(size))
  k = Tensor.arange(n, dtype=dtypes.float32) * (2 * math.pi / (n if periodic else n - 1))
  w = sum(((-1) ** j * c * (k * j).cos() for j, c in enumerate(coefs)), Tensor.zeros(n))
  return w.cast(onnx_dtype(output_datatype))
for _name, _coefs in {"Hann": [0.5, 0.5], "Hamming": [25 / 46, 1 - 25 / 46], "Blackman": [0.42, 0.5, 0.08]}.items():
  OPS[_name + "Window"] = functools.partial(_window, coefs=_coefs)

# *** control flow ***
def If(cond: Tensor, else_branch: Any = None, then_branch: Any = None, run_graph: Any = None) -> tuple:
  return tuple(run_graph(then_branch if bool(_scalar(cond)) else else_branch, {}))

def Loop(m: Tensor | None, cond: Tensor | None, *v: Any, body: Any = None, run_graph: Any = None) -> tuple:
  trips = int(_scalar(m)) if m is not None else None
  keep = bool(_scalar(cond)) if cond is not None else True
  names = [i.name for i in body.input]
  state, scans, i = list(v), [], 0
  while keep and (trips is None or i < trips):
    feeds = {names[0]: Tensor(i, dtype=dtypes.int64), names[1]: Tensor(keep), **dict(zip(names[2:], state))}
    outs = run_graph(body, feeds)
    keep, state = bool(_scalar(outs[0])), outs[1:1 + len(v)]
    scans.append(outs[1 + len(v):])
    i += 1
  n_scan = len(body.output) - 1 - len(v)
  return (*state, *[Tensor.stack(*[s[j] for s in scans]) if scans else Tensor.empty(0) for j in range(n_scan)])

def Scan(*args: Any, body: Any = None, num_scan_inputs: int = 0, scan_input_axes: Any = None,
         scan_input_directions: Any = None, scan_output_axes: Any = None, scan_output_directions: Any = None,
         run_graph: Any = None, opset: int = 9) -> tuple:
  if opset < 9: raise NotImplementedError("Scan before opset 9 (with a batch axis and sequence_lens)")
  n_state = len(args) - num_scan_inputs
  state, xs = list(args[:n_state]), args[n_state:]
  in_axes = [_axis(a, x.ndim) for a, x in zip(_ints(scan_input_axes) or [0] * len(xs), xs)]
  in_dirs = _ints(scan_input_directions) or [0] * len(xs)
  names, steps = [i.name for i in body.input], xs[0].shape[in_axes[0]]
  scans: list[list[Tensor]] = []
  for t in range(steps):
    sl = [x.shrink([((steps - 1 - t if d else t), (steps - t if d else t + 1)) if k == a else None
                    for k in range(x.ndim)]).squeeze(a) for x, a, d in zip(xs, in_axes, in_dirs)]
    outs = run_graph(body, dict(zip(names, state + sl)))
    state = list(outs[:n_state])
    scans.append(outs[n_state:])
  n_out = len(body.output) - n_state
  out_axes, out_dirs = _ints(scan_output_axes) or [0] * n_out, _ints(scan_output_directions) or [0] * n_out
  seqs = [[s[j] for s in scans][::-1 if out_dirs[j] else 1] for j in range(n_out)]
  return (*state, *[Tensor.stack(*seq, dim=_axis(out_axes[j], seq[0].ndim + 1)) for j, seq in enumerate(seqs)])

# *** sequences and optionals ***
def SequenceConstruct(*xs: Tensor) -> Seq: return Seq(xs)
def SequenceEmpty(dtype: int = 1) -> Seq: return Seq()
def SequenceLength(s: Seq) -> Tensor: return Tensor(len(s), dtype=dtypes.int64)
def SequenceAt(s: Seq, pos: Tensor) -> Tensor: return s[int(_scalar(pos))]
def SequenceInsert(s: Seq, t: Tensor, pos: Tensor | None = None) -> Seq:
  p = int(_scalar(pos)) if pos is not None else len(s)
  return Seq([*s[:p], t, *s[p:]])  # as list.insert(p, t)
def SequenceErase(s: Seq, pos: Tensor | None = None) -> Seq:
  ret = Seq(s)
  ret.pop(int(_scalar(pos)) if pos is not None else -1)
  return ret
def ConcatFromSequence(s: Seq, axis: int = 0, new_axis: int = 0) -> Tensor:
  return Tensor.stack(*s, dim=axis) if new_axis else s[0].cat(*s[1:], dim=axis)
def SplitToSequence(x: Tensor, split: Tensor | None = None, axis: int = 0, keepdims: int = 1) -> Seq:
  a = _axis(axis, x.ndim)
  if split is None: return Seq(p if keepdims else p.squeeze(a) for p in x.split(1, a))
  return Seq(x.split(_ints(split) if split.ndim else _ints(split)[0], a))
def SequenceMap(*args: Any, body: Any = None, run_graph: Any = None) -> tuple:
  n, names = len(args[0]), [i.name for i in body.input]
  outs = [run_graph(body, {nm: (a[k] if isinstance(a, Seq) else a) for nm, a in zip(names, args)}) for k in range(n)]
  return tuple(Seq(o[j] for o in outs) for j in range(len(body.output)))
def Optional(x: Any = None, type: Any = None) -> Any: return x
def OptionalHasElement(x: Any = None) -> Tensor: return Tensor(x is not None)
def OptionalGetElement(x: Any) -> Any: return x

# *** attention ***
def _heads(x: Tensor, n: int) -> Tensor: return x.reshape(x.shape[0], x.shape[1], n, -1).transpose(1, 2)

def _attention_bias(q: Tensor, skv: int, attn_mask: Tensor | None, offset: Any, nonpad: Tensor | None,
                    is_causal: int, left: int, right: int) -> Tensor:
  """The additive bias (0 where a key may be attended, -inf elsewhere, plus a float mask) for (.., q, kv) scores."""
  sq = q.shape[2]
  bias = Tensor.zeros(sq, skv, dtype=q.dtype)
  if attn_mask is not None:
    m = attn_mask.where(0.0, -math.inf).cast(q.dtype) if attn_mask.dtype == dtypes.bool else attn_mask
    if m.shape[-1] < skv: m = m.pad([(0, 0)] * (m.ndim - 1) + [(0, skv - m.shape[-1])], value=-math.inf)
    bias = bias + m
  diff = Tensor.arange(sq).reshape(sq, 1) + offset - Tensor.arange(skv).reshape(1, skv)
  allowed = Tensor.ones(*diff.shape, dtype=dtypes.bool)
  if is_causal: allowed = allowed & (diff >= 0)
  if left >= 0: allowed = allowed & (diff <= left)
  if right >= 0: allowed = allowed & (-diff <= right)
  if nonpad is not None: allowed = allowed & (Tensor.arange(skv).reshape(1, 1, 1, skv) < nonpad.reshape(-1, 1, 1, 1))
  return allowed.where(bias, -math.inf)

def Attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, past_key: Tensor | None = None,
              past_value: Tensor | None = None, nonpad_kv_seqlen: Tensor | None = None, is_causal: int = 0,
              kv_num_heads: int | None = None, q_num_heads: int | None = None, qk_matmul_output_mode: int = 0,
              scale: float | None = None, softcap: float = 0.0, softmax_precision: int | None = None,
              left_window_size: int = -1, right_window_size: int = -1, n_outputs: int = 1) -> Any:
  three_d = q.ndim == 3
  if three_d:
    assert q_num_heads is not None and kv_num_heads is not None
    q, k, v = _heads(q, q_num_heads), _heads(k, kv_num_heads), _heads(v, kv_num_heads)
  if past_key is not None and past_value is not None: k, v = past_key.cat(k, dim=2), past_value.cat(v, dim=2)
  present_k, present_v = k, v
  if q.shape[1] != k.shape[1]: k, v = k.repeat_interleave(q.shape[1] // k.shape[1], 1), v.repeat_interleave(
    q.shape[1] // v.shape[1], 1)
  offset: Any = past_key.shape[2] if past_key is not None else \
    (nonpad_kv_seqlen.reshape(-1, 1, 1, 1) - q.shape[2]) if nonpad_kv_seqlen is not None else 0
  bias = _attention_bias(q, k.shape[2], attn_mask, offset, nonpad_kv_seqlen, is_causal, left_window_size,
                         right_window_size)
  s = math.sqrt(scale if scale is not None else 1 / math.sqrt(q.shape[3]))
  qk = (q * q._const(s)).matmul((k * k._const(s)).transpose(-1, -2))  # (s in T, as ONNX's attributes: not float32)
  if softcap > 0: qk = (qk / softcap).tanh() * softcap
  scores = qk + bias
  extra = scores if qk_matmul_output_mode == 2 else qk
  x = scores.cast(onnx_dtype(softmax_precision)) if softmax_precision else scores
  top = x.max(-1, keepdim=True)
  e = (x - (top == -math.inf).where(0, top)).exp()
  total = e.sum(-1, keepdim=True)
  p = (bias.max(-1, keepdim=True) == -math.inf).where(0, e / (total == 0).where(1, total)).cast(q.dtype)
  if qk_matmul_output_mode == 3: extra = p
  y = p.matmul(v)
  if three_d: y = y.transpose(1, 2).reshape(y.shape[0], y.shape[2], -1)
  return (y, present_k, present_v, extra.cast(q.dtype))[:n_outputs] if n_outputs > 1 else y

def FlexAttention(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None, score_mod: Any = None,
                  prob_mod: Any = None, softmax_precision: int | None = None, run_graph: Any = None) -> Tensor:
  """Attention over (B, H, L, E) with optional subgraphs that rewrite the scores (score_mod) or the probabilities
  (prob_mod); the softmax runs in float32 (or softmax_precision) for narrower inputs."""
  if q.shape[1] != k.shape[1]: k, v = k.repeat_interleave(q.shape[1] // k.shape[1], 1), v.repeat_interleave(
    q.shape[1] // v.shape[1], 1)
  s = math.sqrt(scale if scale is not None else 1 / math.sqrt(q.shape[3]))
  ct = onnx_dtype(softmax_precision) if softmax_precision else dtypes.float32 if q.dtype.itemsize < 4 else q.dtype
  scores = (q * s).matmul((k * s).transpose(-1, -2)).cast(ct)
  mod = lambda g, t: run_graph(g, {g.input[0].name: t})[0].cast(ct)
  if score_mod is not None: scores = mod(score_mod, scores)
  probs = scores.softmax(-1)
  if prob_mod is not None: probs = mod(prob_mod, probs)
  return probs.matmul(v.cast(ct)).cast(v.dtype)

register_ops(globals())
