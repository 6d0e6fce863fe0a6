"""Tensor creation beyond the basics: evenly spaced values, the identity, and random numbers (Threefry on a counter,
so a seed gives the same values on every device) with the usual initializers."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING, Any, Callable
from fusegrad.dtype import DType, dtypes, to_dtype, least_upper_dtype
from fusegrad.helpers import prod, argfix, all_int, _is_numpy
from fusegrad.uop.ops import Ops
from fusegrad.mixin.elementwise import ArgumentError, ShapeError, UnsupportedError
from fusegrad.engine import state
from fusegrad.engine.state import STATE

if TYPE_CHECKING: from fusegrad.tensor import Tensor

# called with (state tensor, counter value) for every random draw: TinyJit records the draws it captures
_rng_hooks: list[Callable[[Tensor, int], None]] = []

def _shape_arg(shape: tuple, op: str) -> tuple[int, ...]:
  s = state.concrete(argfix(*shape)) if shape else ()
  if not all_int(s) or any(x < 0 for x in s): raise ShapeError(f"{op}: bad shape {s}: sizes must be non-negative ints")
  return tuple(s)

def _shape_of(data: Any) -> tuple[int, ...]:
  """The shape of a nested list; raises on ragged lists."""
  if _is_numpy(data): data = data.tolist()  # numpy arrays and scalars inside a list
  if not isinstance(data, (list, tuple)): return ()
  if len(data) == 0: return (0,)
  if all(type(x) in _SCALARS for x in data): return (len(data),)  # a flat list of Python numbers
  inner = [_shape_of(x) for x in data]
  if any(s != inner[0] for s in inner): raise ShapeError(f"Tensor: ragged nested list, sub-shapes {sorted(set(inner))}")
  return (len(data),) + inner[0]

def _flatten_list(data: Any) -> list:
  if _is_numpy(data): data = data.tolist()
  if not isinstance(data, (list, tuple)): return [data]
  return list(data) if all(type(x) in _SCALARS for x in data) else [y for x in data for y in _flatten_list(x)]

_SCALARS = (int, float, bool)

class CreationMixin:
  __slots__ = ()
  @classmethod
  def linspace(cls: type[Tensor], start: Any, stop: Any, steps: int, dtype: DType | str | None = None,
               device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """steps evenly spaced values from start to stop inclusive: `Tensor.linspace(0, 1, 3)` is [0.0, 0.5, 1.0]."""
    if not isinstance(steps, int) or steps < 0: raise ArgumentError(f"linspace: steps must be an int >= 0, got {steps}")
    dt = to_dtype(dtype if dtype is not None else dtypes.default_float)
    if dt == dtypes.bool: raise UnsupportedError("linspace: a bool dtype has no evenly spaced values")
    if steps == 1: return cls([start], dtype=dt, device=device, requires_grad=requires_grad)
    i, step = cls.arange(steps, device=device, dtype=least_upper_dtype(dt, dtypes.float32)), (stop - start) / (steps-1)
    ret = (i < steps // 2).where(i * step + start, stop - (steps - 1 - i) * step)  # from both ends: stop exact
    return ret.cast(dt).requires_grad_(requires_grad)
  @classmethod
  def eye(cls: type[Tensor], n: int, m: int | None = None, dtype: DType | str | None = None, device: str | None = None,
          requires_grad: bool | None = None) -> Tensor:
    """The identity matrix (n x m): ones on the diagonal."""
    m = n if m is None else m
    if n < 0 or m < 0: raise ArgumentError(f"eye: negative size {n}x{m}")
    dt, k = to_dtype(dtype if dtype is not None else dtypes.default_float), min(n, m)
    if k == 0: return cls.zeros((n, m), dtype=dt, device=device, requires_grad=requires_grad)
    # k rows of [1, 0 * m] laid end to end and cut into rows of m: the diagonal as a view, no kernel needed to build it
    x = cls.ones((k, 1), dtype=dt, device=device).pad(((0, 0), (0, m))).flatten().shrink(((0, k * m),)).reshape(k, m)
    return x.pad(((0, n - k), (0, 0))).requires_grad_(requires_grad)  # zero rows below the diagonal's end
  @classmethod
  def from_blob(cls: type[Tensor], ptr: int, shape: tuple[int, ...], **kwargs: Any) -> Tensor:
    """A tensor on the memory at address ptr (CPU or PYTHON), without copying or owning it; writes to the tensor write
    into that memory. dtype= and device= as for Tensor.empty: `Tensor.from_blob(arr.ctypes.data, (2, 3))`."""
    ret = cls.empty(*shape, **kwargs)
    state.view_base(ret.uop).arg.use_pointer(ptr)
    return ret

  # *** random numbers: Threefry on a counter, so a seed gives the same values on every device ***
  @classmethod
  def manual_seed(cls: type[Tensor], seed: int = 0) -> None:
    """Seed the generator: the same seed gives the same numbers on every backend."""
    cls._seed, STATE.rng_counter = int(seed), 0
  @classmethod
  def _random_bits(cls: type[Tensor], n: int, device: str | None) -> Tensor:
    """n uint32 random words, fresh on every call: Threefry of (counter + i) under the seed, both read from a small
    buffer (not kernel constants), so every call runs the same kernel and TinyJit can set the counter per replay."""
    state = cls([cls._seed & 0xFFFFFFFFFFFFFFFF, STATE.rng_counter], dtype=dtypes.uint64, device=device)
    for hook in _rng_hooks: hook(state, STATE.rng_counter)
    STATE.rng_counter += int(n)  # (a plain int: a SymInt's expression would grow with every draw after it)
    counter = cls.arange(n, device=device, dtype=dtypes.uint32).cast(dtypes.uint64) + state[1]
    return (cls(counter.uop.alu(Ops.THREEFRY, state[0].expand(n).uop)) & 0xFFFFFFFF).cast(dtypes.uint32)
  @classmethod
  def rand(cls: type[Tensor], *shape: Any, device: str | None = None, dtype: DType | str | None = None,
           requires_grad: bool | None = None) -> Tensor:
    """Uniform random numbers in [0, 1)."""
    shape, dt = _shape_arg(shape, "rand"), to_dtype(dtype or dtypes.default_float)
    if not dtypes.is_float(dt): raise TypeError(f"rand: dtype must be a float, got {dt}")
    n = prod(shape)
    if n == 0: return cls.empty(shape, dtype=dt, device=device, requires_grad=requires_grad)
    mant = {dtypes.float16: 11, dtypes.bfloat16: 8}.get(dt, 24)
    # the top `mant` bits scaled into [0, 1): exact in the target dtype, so never rounds up to 1.0
    vals = (cls._random_bits(n, device) >> (32 - mant)).cast(dtypes.float32) * (2.0 ** -mant)
    return vals.cast(dt).reshape(shape).requires_grad_(requires_grad)
  def rand_like(self: Tensor, **kwargs: Any) -> Tensor:
    """Uniform [0, 1) numbers with this tensor's shape, dtype and device (split as it is)."""
    ret = type(self).rand(self.shape, **{"dtype": self.dtype, "device": self.device, **kwargs})
    return ret if "device" in kwargs else ret.shard_like(self)  # (on one device: that device, ret itself)
  @classmethod
  def randn(cls: type[Tensor], *shape: Any, dtype: DType | str | None = None, requires_grad: bool | None = None,
            **kwargs: Any) -> Tensor:
    """Standard normal random numbers (Box-Muller)."""
    shape, dt = _shape_arg(shape, "randn"), to_dtype(dtype or dtypes.default_float)
    src = cls.rand((2, *shape), dtype=dtypes.float32, **kwargs)
    ret = (1 - src[0]).log().mul(-2).sqrt().mul((src[1] * (2 * math.pi)).cos())
    return ret.cast(dt).requires_grad_(requires_grad)
  def randn_like(self: Tensor, **kwargs: Any) -> Tensor:
    """Standard normal numbers with this tensor's shape, dtype and device."""
    return type(self).randn(self.shape, **{"dtype": self.dtype, "device": self.device, **kwargs})
  @classmethod
  def randint(cls: type[Tensor], *shape: Any, low: int = 0, high: int = 10, dtype: DType | str = dtypes.int32,
              **kwargs: Any) -> Tensor:
    """Random integers in [low, high)."""
    dt = to_dtype(dtype)
    if not (hasattr(low, "__index__") and hasattr(high, "__index__") and dtypes.is_int(dt)):  # as tinygrad
      raise TypeError(f"randint: low, high and dtype must be integers, got {low!r}, {high!r} and {dt}")
    if high <= low: raise ArgumentError(f"randint: high ({high}) must be > low ({low})")
    if low < dtypes.min(dt) or high - 1 > dtypes.max(dt): raise ArgumentError(f"randint: [{low}, {high}) exceeds {dt}")
    if high - low > 2 ** 24:  # a float holds 24 random bits: 48 from two, reduced mod the range (bias < range / 2**48)
      words = (cls.rand(2, *argfix(*shape), **kwargs) * 2 ** 24).cast(dtypes.int64)
      return ((words[0] * 2 ** 24 + words[1]) % (high - low) + low).cast(dt)
    return (cls.rand(*shape, **kwargs) * (high - low)).floor().cast(dt) + low
  @classmethod
  def randperm(cls: type[Tensor], n: int, device: str | None = None, dtype: DType | str = dtypes.int32,
               **kwargs: Any) -> Tensor:
    """A random permutation of 0..n-1 from the seeded generator (the argsort of random words: n * n compares).
    `Tensor.randperm(4).tolist()` is e.g. [2, 0, 3, 1]."""
    if n < 0: raise ArgumentError(f"randperm: n must be >= 0, got {n}")
    if set(kwargs) - {"requires_grad"}: raise TypeError(f"randperm: unexpected arguments {sorted(kwargs)}")
    if n == 0: return cls.empty(0, dtype=dtype, device=device)
    return cls._random_bits(n, device).argsort().cast(to_dtype(dtype)).requires_grad_(kwargs.get("requires_grad"))
  def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """num_samples category indices (int32) drawn per row of weights (1-D or 2-D, non-negative, need not sum to 1),
    as torch.multinomial: with replacement by inverse CDF, without by an exponential race (the k smallest E_i / w_i).
    `Tensor([0.0, 1.0]).multinomial().tolist()` is [1]."""
    if self.ndim not in (1, 2): raise ShapeError(f"multinomial: weights must be 1-D or 2-D, got shape {self.shape}")
    n = self.shape[-1]
    if num_samples < 1: raise ArgumentError(f"multinomial: num_samples must be >= 1, got {num_samples}")
    if not replacement and num_samples > n:
      raise ShapeError(f"multinomial: can't draw {num_samples} samples from {n} categories without replacement")
    w = self.detach().reshape(-1, n).cast(least_upper_dtype(self.dtype, dtypes.float32))
    rows = w.shape[0]
    if replacement:
      cdf = w.cumsum(1).unsqueeze(1)  # (rows, 1, n)
      u = type(self).rand(rows, num_samples, 1, device=self.device) * cdf[:, :, n - 1:]
      idx = (cdf <= u).sum(-1, dtype=dtypes.int32).minimum(n - 1)  # the first category whose cdf passes u
    else:
      race = -(1 - type(self).rand(rows, n, device=self.device)).log()  # Exp(1) arrival times, scaled by 1 / weight
      idx = (w > 0).where(race / w, math.inf).topk(num_samples, largest=False)[1]
    return idx if self.ndim == 2 else idx.reshape(num_samples)
  @classmethod
  def uniform(cls: type[Tensor], *shape: Any, low: float = 0.0, high: float = 1.0, dtype: DType | str | None = None,
              requires_grad: bool | None = None, **kwargs: Any) -> Tensor:
    """Uniform random numbers in [low, high)."""
    dt = to_dtype(dtype or dtypes.default_float)
    return ((high - low) * cls.rand(*shape, **kwargs) + low).cast(dt).requires_grad_(requires_grad)
  @classmethod
  def normal(cls: type[Tensor], *shape: Any, mean: float = 0.0, std: float = 1.0,
             requires_grad: bool | None = None, **kwargs: Any) -> Tensor:
    """Normal random numbers with the given mean and std."""
    return (std * cls.randn(*shape, **kwargs) + mean).requires_grad_(requires_grad)
  @classmethod
  def scaled_uniform(cls: type[Tensor], *shape: Any, **kwargs: Any) -> Tensor:
    """Uniform in [-1, 1) scaled by 1/sqrt(numel)."""
    return cls.uniform(*shape, low=-1.0, high=1.0, **kwargs).mul(prod(_shape_arg(shape, "scaled_uniform")) ** -0.5)
  @classmethod
  def glorot_uniform(cls: type[Tensor], *shape: Any, **kwargs: Any) -> Tensor:
    """Xavier/Glorot uniform init, as torch.nn.init.xavier_uniform_: bound sqrt(6 / (fan_in + fan_out))."""
    shape = _shape_arg(shape, "glorot_uniform")
    fan_in, fan_out = prod(shape[1:]), shape[0] * prod(shape[2:])
    bound = (6 / (fan_in + fan_out)) ** 0.5
    return cls.uniform(*shape, low=-bound, high=bound, **kwargs)
  @classmethod
  def kaiming_uniform(cls: type[Tensor], *shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
    """He-uniform init, as torch.nn.init.kaiming_uniform_ (fan_in, leaky relu slope a)."""
    shape = _shape_arg(shape, "kaiming_uniform")
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
    return cls.uniform(*shape, low=-bound, high=bound, **kwargs)
  @classmethod
  def kaiming_normal(cls: type[Tensor], *shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
    """He-normal init, as torch.nn.init.kaiming_normal_ (fan_in, leaky relu slope a)."""
    shape = _shape_arg(shape, "kaiming_normal")
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
    return cls.normal(*shape, mean=0.0, std=std, **kwargs)

