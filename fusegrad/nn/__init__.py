"""Neural-network layers with tinygrad's names and PyTorch's initialization and semantics, plus the optimizers
(fusegrad.nn.optim), saving/loading state (fusegrad.nn.state) and datasets (fusegrad.nn.datasets). See docs/nn.md."""
from __future__ import annotations
import math
from typing import Any
from fusegrad.tensor import Tensor, _is_training
from fusegrad.dtype import dtypes, least_upper_float
from fusegrad.helpers import prod, make_tuple
from fusegrad.gradient import with_rule
from fusegrad.uop.ops import UOp
from fusegrad.mixin.indexing import check_indices
from fusegrad.nn import optim, state, datasets
from fusegrad.nn.optim import _fresh

__all__ = ["optim", "state", "datasets", "Linear", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d",
           "BatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "LayerNorm2d", "GroupNorm",
           "InstanceNorm", "RMSNorm", "Embedding", "LSTMCell"]

def _param(value: Tensor) -> Tensor:
  """A trainable parameter: value in a buffer of its own (two equal constants must not share one), requiring grad."""
  return _fresh(value).requires_grad_(True)

def _uniform_param(shape: tuple[int, ...], fan_in: int) -> Tensor:
  """A parameter initialized as torch's weights and biases: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
  bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
  return _param(Tensor.uniform(*shape, low=-bound, high=bound))

def _channel_view(t: Tensor, ndim: int) -> Tensor:
  """A per-channel (C,) tensor shaped to broadcast against (N, C, *spatial) with ndim axes."""
  return t.reshape(1, t.shape[0], *[1] * (ndim - 2))

# *** linear and embedding ***
class Linear:
  """y = x @ weight.T + bias (torch.nn.Linear); weight is (out_features, in_features)."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    self.in_features, self.out_features = in_features, out_features
    self.weight = _uniform_param((out_features, in_features), in_features)
    self.bias = _uniform_param((out_features,), in_features) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim == 0 or x.shape[-1] != self.in_features:
      raise ValueError(f"Linear: input of shape {x.shape} doesn't end in in_features={self.in_features}")
    return x.linear(self.weight.T, self.bias)

class Embedding:
  """A lookup table (torch.nn.Embedding): integer indices of any shape -> their rows of weight (vocab_size, embed_size),
  initialized from a standard normal; realizing the result of an index outside [0, vocab_size) raises IndexError."""
  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_sz, self.embed_sz = vocab_size, embed_size
    self.weight = _param(Tensor.randn(vocab_size, embed_size))

  def __call__(self, idx: Tensor) -> Tensor:
    if not isinstance(idx, Tensor) or not dtypes.is_int(idx.dtype):
      raise TypeError(f"Embedding: indices must be an integer Tensor, got {getattr(idx, 'dtype', type(idx).__name__)}")
    if idx.numel() == 0:
      return Tensor.zeros(*idx.shape, self.embed_sz, dtype=self.weight.dtype, device=self.weight.device)
    # a one-hot mask against the vocabulary, summed: codegen turns it into one load per output element
    hit = idx.unsqueeze(-1) == Tensor.arange(self.vocab_sz, device=idx.device, dtype=idx.dtype)
    out = hit.unsqueeze(-1).where(self.weight, 0).sum(-2, dtype=self.weight.dtype)
    return check_indices(out, idx, self.vocab_sz, "Embedding", negative=False)

# *** convolutions ***
class _ConvNd:
  """What Conv and ConvTranspose share: the hyperparameters, stored as given (tinygrad's attributes), the parameters."""
  _spatial_dims = 2  # the spatial axes an int kernel_size stands for (a tuple gives its own count)
  def __init__(self, kernel_size: int | tuple[int, ...], stride: Any, padding: Any, dilation: Any, groups: int,
               in_channels: int, out_channels: int, bias: bool, transposed: bool):
    name = type(self).__name__
    if groups <= 0 or in_channels % groups or out_channels % groups:
      raise ValueError(f"{name}: in_channels {in_channels} and out_channels {out_channels} must be divisible by "
                       f"groups {groups}")
    self.kernel_size = make_tuple(kernel_size, self._spatial_dims)
    if any(not isinstance(k, int) or k <= 0 for k in self.kernel_size):
      raise ValueError(f"{name}: kernel_size {kernel_size!r} must be positive ints")
    self.in_channels, self.out_channels = in_channels, out_channels
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    rows, cols = (in_channels, out_channels) if transposed else (out_channels, in_channels)
    fan_in = cols // groups * prod(self.kernel_size)
    self.weight = _uniform_param((rows, cols // groups, *self.kernel_size), fan_in)
    self.bias = _uniform_param((out_channels,), fan_in) if bias else None

class Conv2d(_ConvNd):
  """2-d convolution (torch.nn.Conv2d) over (N, C, H, W) or unbatched (C, H, W) input; weight is
  (out_channels, in_channels // groups, *kernel_size). A kernel_size tuple of another length makes it N-d.
  padding: an int, one int per axis, 'valid' or 'same'; padding_mode 'zeros', 'reflect', 'replicate' or 'circular'."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: Any = 1,
               padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros"):
    super().__init__(kernel_size, stride, padding, dilation, groups, in_channels, out_channels, bias, transposed=False)
    if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
      raise ValueError(f"{type(self).__name__}: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', "
                       f"not {padding_mode!r}")
    if isinstance(padding, str) and padding not in ("valid", "same"):
      raise ValueError(f"{type(self).__name__}: padding {padding!r} must be 'valid' or 'same' (or ints)")
    if padding == "same" and any(s != 1 for s in make_tuple(stride, len(self.kernel_size))):
      raise ValueError(f"{type(self).__name__}: padding='same' needs stride 1, got stride {stride}")
    self.padding_mode = padding_mode

  def __call__(self, x: Tensor) -> Tensor:
    if self.padding_mode == "zeros":
      return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)
    n = len(self.kernel_size)
    pads = _symmetric_pads(self.padding, self.kernel_size, make_tuple(self.dilation, n), type(self).__name__)
    x = x.pad(((0, 0),) * (x.ndim - n) + tuple(pads), mode=self.padding_mode)
    return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, 0)

def _symmetric_pads(padding: Any, kernel: tuple[int, ...], dilation: tuple[int, ...], op: str) -> list[tuple[int, int]]:
  """(before, after) per spatial axis for an int, one int per axis, 'valid' or 'same' padding."""
  if padding == "valid": return [(0, 0)] * len(kernel)
  if padding == "same": return [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(kernel, dilation)]
  pads = make_tuple(padding, len(kernel))
  if len(pads) != len(kernel) or not all(isinstance(p, int) and p >= 0 for p in pads):
    raise ValueError(f"{op}: padding {padding!r} must be a non-negative int, {len(kernel)} of them, 'valid' or 'same'")
  return [(p, p) for p in pads]

class Conv1d(Conv2d):
  """1-d convolution (torch.nn.Conv1d) over (N, C, L) or unbatched (C, L) input; weight is
  (out_channels, in_channels // groups, kernel_size). Same arguments and initialization as Conv2d."""
  _spatial_dims = 1

class ConvTranspose2d(_ConvNd):
  """2-d transposed convolution (torch.nn.ConvTranspose2d); weight is (in_channels, out_channels // groups,
  *kernel_size). Output size per axis: (i-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1, or pass
  output_size to the call to choose among the sizes the stride allows (as torch does)."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: Any = 1,
               padding: Any = 0, output_padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True):
    super().__init__(kernel_size, stride, padding, dilation, groups, in_channels, out_channels, bias, transposed=True)
    self.output_padding = output_padding

  def __call__(self, x: Tensor, output_size: tuple[int, ...] | list[int] | None = None) -> Tensor:
    output_padding = self.output_padding if output_size is None else self._padding_for(x, output_size)
    return x.conv_transpose2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding,
                              output_padding)

  def _padding_for(self, x: Tensor, output_size: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """The output_padding that gives the spatial output_size (its last len(kernel_size) entries)."""
    n, name = len(self.kernel_size), type(self).__name__
    want = tuple(output_size)[-n:]
    s_, d_, p_ = make_tuple(self.stride, n), make_tuple(self.dilation, n), make_tuple(self.padding, n)
    if len(want) != n or x.ndim < n: raise ValueError(f"{name}: output_size {output_size} needs {n} spatial sizes")
    least = tuple((i - 1) * s - 2 * p + d * (k - 1) + 1
                  for i, s, p, d, k in zip(x.shape[-n:], s_, p_, d_, self.kernel_size))
    if any(not lo <= w < lo + s for w, lo, s in zip(want, least, s_)):
      raise ValueError(f"{name}: output_size {tuple(want)} for input {x.shape} must be at least {least} and less "
                       f"than {tuple(lo + s for lo, s in zip(least, s_))}")
    return tuple(w - lo for w, lo in zip(want, least))

class ConvTranspose1d(ConvTranspose2d):
  """1-d transposed convolution (torch.nn.ConvTranspose1d) over (N, C, L); weight is
  (in_channels, out_channels // groups, kernel_size). Same arguments and initialization as ConvTranspose2d."""
  _spatial_dims = 1

# *** normalization ***
class BatchNorm:
  """Batch normalization over axis 1 (the channels) of (N, C, *) input, as torch.nn.BatchNorm1d/2d/3d: the batch's
  statistics in training (updating the running ones by lazy assigns), the running ones in eval (docs/nn.md)."""
  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True,
               momentum: float | None = 0.1):
    self.num_features, self.eps, self.momentum = sz, eps, momentum
    self.affine, self.track_running_stats = affine, track_running_stats
    self.weight = _param(Tensor.ones(sz)) if affine else None
    self.bias = _param(Tensor.zeros(sz)) if affine else None
    # running statistics: non-trainable, each in a buffer of its own (_fresh: requires_grad False), updated by assign()
    self.running_mean = _fresh(Tensor.zeros(sz)) if track_running_stats else None
    self.running_var = _fresh(Tensor.ones(sz)) if track_running_stats else None
    self.num_batches_tracked = _fresh(Tensor.zeros((), dtype=dtypes.int64)) if track_running_stats else None

  def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
    """The batch's per-channel mean and biased variance, over every axis but 1."""
    axes = tuple(a for a in range(x.ndim) if a != 1)
    mean = x.mean(axes)
    return mean, (x - _channel_view(mean, x.ndim)).square().mean(axes)

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_features:
      raise ValueError(f"{type(self).__name__}: input of shape {x.shape} should be (N, {self.num_features}, ...)")
    training, dt = _is_training(), least_upper_float(x.dtype)  # (the output's: a half input's stays half, as torch)
    if not training and self.running_mean is not None and self.running_var is not None:
      return x.batchnorm(self.weight, self.bias, self.running_mean, (self.running_var + self.eps).rsqrt()).cast(dt)
    per_channel = x.numel() // self.num_features
    if training and per_channel <= 1:
      raise ValueError(f"{type(self).__name__}: expected more than 1 value per channel when training, got input "
                       f"of shape {x.shape}")
    mean, var = self.calc_stats(x)
    if training and self.track_running_stats: self._update_running_stats(mean, var, per_channel)
    out = x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())
    return (self._with_rule(x, out) if type(self).calc_stats is BatchNorm.calc_stats else out).cast(dt)

  def _with_rule(self, x: Tensor, out: Tensor) -> Tensor:
    """out (x normalized with its own batch statistics), differentiated as torch does: two per-channel sums of the
    output gradient instead of the primitives' four (docs/developer/autograd.md)."""
    # (the rule lives as long as the graph: it keeps numbers, not x, whose .grad backward fills)
    ndim, n, params = x.ndim, x.numel() // x.shape[1], (self.weight, self.bias)
    axes = tuple(a for a in range(ndim) if a != 1)
    def rule(g: UOp, _: UOp, xu: UOp, *ps: UOp) -> tuple[UOp, ...]:
      dy, xt, weight = Tensor(g), Tensor(xu), Tensor(ps[0]) if self.weight is not None else None
      mean, var = self.calc_stats(xt)
      invstd = _channel_view((var + self.eps).rsqrt(), ndim)
      xhat = (xt - _channel_view(mean, ndim)) * invstd
      s1, s2 = dy.sum(axes), (dy * xhat).sum(axes)
      dx = (dy - (_channel_view(s1, ndim) + xhat * _channel_view(s2, ndim)) * (1 / n)) * invstd
      if weight is not None: dx = dx * _channel_view(weight, ndim)
      return (dx.uop, *([s2.uop] if self.weight is not None else []), *([s1.uop] if self.bias is not None else []))
    return out._new(with_rule(out.uop, (x.uop, *[p.uop for p in params if p is not None]), rule), x)

  def _update_running_stats(self, mean: Tensor, var: Tensor, n: int | Tensor) -> None:
    """running = (1 - m) * running + m * batch, with the unbiased batch variance (n values per channel: a number, or a
    tensor of one per channel; m = 1 / count without momentum)."""
    assert self.running_mean is not None and self.running_var is not None and self.num_batches_tracked is not None
    count = self.num_batches_tracked + 1
    m: Tensor | float = count.cast(self.running_mean.dtype).reciprocal() if self.momentum is None else self.momentum
    batch_mean, batch_var = mean.detach().cast(self.running_mean.dtype), var.detach().cast(self.running_var.dtype)
    self.running_mean.assign(self.running_mean * (1 - m) + batch_mean * m)
    self.running_var.assign(self.running_var * (1 - m) + batch_var * (n / (n - 1)) * m)
    self.num_batches_tracked.assign(count)

BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm

class LayerNorm:
  """Normalization over the last len(normalized_shape) axes (torch.nn.LayerNorm): (x - mean) / sqrt(var + eps),
  biased variance, then * weight + bias (ones and zeros of normalized_shape) when elementwise_affine."""
  def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True,
               bias: bool = True):
    self.normalized_shape: tuple[int, ...] = make_tuple(normalized_shape, 1)
    self.axis = tuple(-1 - i for i in range(len(self.normalized_shape)))
    self.eps, self.elementwise_affine = eps, elementwise_affine
    self.weight = _param(Tensor.ones(*self.normalized_shape)) if elementwise_affine else None
    self.bias = _param(Tensor.zeros(*self.normalized_shape)) if elementwise_affine and bias else None

  def __call__(self, x: Tensor) -> Tensor:
    n = len(self.normalized_shape)
    if x.shape[x.ndim - n:] != self.normalized_shape or x.ndim < n:
      raise ValueError(f"{type(self).__name__}: input of shape {x.shape} doesn't end in {self.normalized_shape}")
    y = x.layernorm(self.axis, self.eps)
    if self.weight is not None: y = y * self.weight
    return (y + self.bias if self.bias is not None else y).cast(least_upper_float(x.dtype))  # (half stays half)

class LayerNorm2d(LayerNorm):
  """LayerNorm over the channels (axis 1) of (N, C, H, W) input, at every position (as in ConvNeXt)."""
  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2: raise ValueError(f"LayerNorm2d: input of shape {x.shape} should be (N, C, ...)")
    last, back = (*range(2, x.ndim), 1), (0, x.ndim - 1, *range(1, x.ndim - 1))
    return super().__call__(x.permute(0, *last)).permute(*back)

class GroupNorm:
  """Group normalization (torch.nn.GroupNorm): the channels of (N, C, *) input split into num_groups groups, each
  normalized over its channels and all positions; then per-channel weight and bias (ones, zeros) when affine."""
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    if num_groups <= 0 or num_channels % num_groups:
      raise ValueError(f"GroupNorm: num_channels {num_channels} must be divisible by num_groups {num_groups}")
    self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
    self.weight = _param(Tensor.ones(num_channels)) if affine else None
    self.bias = _param(Tensor.zeros(num_channels)) if affine else None

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_channels:
      raise ValueError(f"GroupNorm: input of shape {x.shape} should be (N, {self.num_channels}, ...)")
    y = x.reshape(x.shape[0], self.num_groups, -1).layernorm(-1, self.eps).reshape(x.shape)
    if self.weight is not None: y = y * _channel_view(self.weight, x.ndim)
    return (y + _channel_view(self.bias, x.ndim) if self.bias is not None else y).cast(least_upper_float(x.dtype))

class InstanceNorm(GroupNorm):
  """Instance normalization (torch.nn.InstanceNorm1d/2d/3d without running stats): GroupNorm with a group per channel,
  each channel of each sample normalized over its positions."""
  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
    super().__init__(num_features, num_features, eps, affine)
    self.num_features = num_features

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 3 or x.shape[1] != self.num_features:
      raise ValueError(f"InstanceNorm: input of shape {x.shape} should be (N, {self.num_features}, *spatial)")
    return super().__call__(x)

class RMSNorm:
  """Root-mean-square normalization over the last axes (torch.nn.RMSNorm): x / sqrt(mean(x^2) + eps) * weight
  (ones of dim) when elementwise_affine. Half-precision input is normalized in float32."""
  def __init__(self, dim: int | tuple[int, ...], eps: float = 1e-6, elementwise_affine: bool = True):
    self.normalized_shape: tuple[int, ...] = make_tuple(dim, 1)
    self.eps, self.elementwise_affine = eps, elementwise_affine
    self.weight = _param(Tensor.ones(*self.normalized_shape)) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    n = len(self.normalized_shape)
    if x.shape[x.ndim - n:] != self.normalized_shape or x.ndim < n:
      raise ValueError(f"RMSNorm: input of shape {x.shape} doesn't end in {self.normalized_shape}")
    axes, xf = tuple(range(-n, 0)), x._wide()
    y = (xf * (xf.square().mean(axes, keepdim=True) + self.eps).rsqrt()).cast(dt := least_upper_float(x.dtype))
    return (y * self.weight).cast(dt) if self.weight is not None else y

# *** recurrent ***
class LSTMCell:
  """One LSTM step (torch.nn.LSTMCell): `h, c = cell(x, (h, c))` with x (N, input_size) or (input_size,); the
  state defaults to zeros. Gates i, f, g, o in that order along the 4*hidden_size rows of weight_ih
  (4h, input_size) and weight_hh (4h, h)."""
  def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
    self.input_size, self.hidden_size = input_size, hidden_size
    self.weight_ih = _uniform_param((4 * hidden_size, input_size), hidden_size)
    self.weight_hh = _uniform_param((4 * hidden_size, hidden_size), hidden_size)
    self.bias_ih = _uniform_param((4 * hidden_size,), hidden_size) if bias else None
    self.bias_hh = _uniform_param((4 * hidden_size,), hidden_size) if bias else None

  def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
      raise ValueError(f"LSTMCell: input of shape {x.shape} should be (N, {self.input_size}) or ({self.input_size},)")
    if x.ndim == 1:
      h, c = self(x.unsqueeze(0), None if hc is None else (hc[0].unsqueeze(0), hc[1].unsqueeze(0)))
      return h.squeeze(0), c.squeeze(0)
    want = (x.shape[0], self.hidden_size)
    if hc is None: hc = (Tensor.zeros(*want, dtype=x.dtype, device=x.device),) * 2
    if len(hc) != 2 or hc[0].shape != want or hc[1].shape != want:
      raise ValueError(f"LSTMCell: state shapes {tuple(t.shape for t in hc)} should both be {want}")
    gates = x.linear(self.weight_ih.T, self.bias_ih) + hc[0].linear(self.weight_hh.T, self.bias_hh)
    i, f, g, o = gates.chunk(4, dim=1)
    c = f.sigmoid() * hc[1] + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c
