"""The ONNX ops: OPS maps an op name to a small function of the node's inputs (positional, None for an absent optional
input) and attributes (keywords, with the defaults of the ONNX operator docs). An attribute that later opsets turned
into an input has one parameter name for both (Squeeze's axes, Clip's min/max, Pad's pads). A function may also ask
for `opset`, `n_outputs` or `run_graph` (for subgraphs) by naming them as parameters. Returns a Tensor or a tuple.
A function defined under a capitalized name in an ops module is the op of that name (`register_ops`)."""
from __future__ import annotations
import functools, inspect, math
from typing import Any, Callable, Sequence
import numpy as np
from fusegrad.tensor import Tensor
from fusegrad.dtype import DType, dtypes

OPS: dict[str, Callable[..., Any]] = {}

class Seq(list):
  """An ONNX sequence value (a list of tensors)."""

def register_ops(namespace: dict[str, Any]) -> None:
  """Registers each function a module defines under a capitalized name as the ONNX op of that name (called last)."""
  for name, fn in namespace.items():
    if name[0].isupper() and inspect.isfunction(fn) and fn.__module__ == namespace["__name__"]: OPS[name] = fn

# *** helpers ***
def _ints(v: Any) -> list[int]:
  """An int list from an attribute list, a Tensor or None (-> [])."""
  if v is None: return []
  if isinstance(v, Tensor): v = v.tolist()
  return [int(x) for x in v] if isinstance(v, (list, tuple)) else [int(v)]

def _scalar(v: Any) -> Any: return v.reshape(-1)[0].item() if isinstance(v, Tensor) else v

def _axis(a: int, ndim: int) -> int: return a + ndim if a < 0 else a

# ONNX TensorProto.DataType -> fusegrad dtype (the types fusegrad has; strings, float8 and int4 are not supported)
ONNX_DTYPES: dict[int, DType] = {1: dtypes.float32, 2: dtypes.uint8, 3: dtypes.int8, 4: dtypes.uint16, 5: dtypes.int16,
                                 6: dtypes.int32, 7: dtypes.int64, 9: dtypes.bool, 10: dtypes.float16,
                                 11: dtypes.float64, 12: dtypes.uint32, 13: dtypes.uint64, 16: dtypes.bfloat16}

def onnx_dtype(code: int) -> DType:
  """The fusegrad dtype of an ONNX element type code; a clear error for the ones fusegrad lacks."""
  if code not in ONNX_DTYPES:
    import onnx
    name = onnx.TensorProto.DataType.Name(code) if code in onnx.TensorProto.DataType.values() else str(code)
    raise NotImplementedError(f"ONNX element type {name} is not supported by fusegrad")
  return ONNX_DTYPES[code]

def _per_axis(v: Tensor, axis: int, ndim: int) -> Tensor:
  """A 1-d per-channel tensor shaped to broadcast along axis of an ndim-d tensor (a scalar stays as it is)."""
  return v if v.ndim == 0 or v.numel() == 1 and ndim == 0 else v.reshape([-1 if i == axis else 1 for i in range(ndim)])

# *** elementwise ***
_UNARY: dict[str, Callable[[Tensor], Tensor]] = {
  "Abs": Tensor.abs, "Acos": Tensor.acos, "Acosh": Tensor.acosh, "Asin": Tensor.asin, "Asinh": Tensor.asinh,
  "Atan": Tensor.atan, "Atanh": Tensor.atanh, "Ceil": Tensor.ceil, "Cos": Tensor.cos, "Cosh": Tensor.cosh,
  "Erf": Tensor.erf, "Exp": Tensor.exp, "Floor": Tensor.floor, "Log": Tensor.log, "Neg": Tensor.neg,
  "Reciprocal": Tensor.reciprocal, "Relu": Tensor.relu, "Round": Tensor.round, "Sigmoid": Tensor.sigmoid,
  "Sign": Tensor.sign, "Sin": Tensor.sin, "Sinh": Tensor.sinh, "Sqrt": Tensor.sqrt, "Tan": Tensor.tan,
  "Tanh": Tensor.tanh, "Softplus": Tensor.softplus, "Softsign": Tensor.softsign, "Not": Tensor.logical_not,
  "IsNaN": Tensor.isnan, "Mish": Tensor.mish, "BitwiseNot": Tensor.bitwise_not, "HardSwish": Tensor.hardswish}
for _name, _fn in _UNARY.items(): OPS[_name] = (lambda f: lambda x: f(x))(_fn)

_BINARY: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"Add": Tensor.add, "Sub": Tensor.sub, "Mul": Tensor.mul,
  "And": Tensor.logical_and, "Or": Tensor.logical_or, "Xor": Tensor.logical_xor, "Equal": Tensor.eq,
  "Greater": Tensor.gt, "GreaterOrEqual": Tensor.ge, "Less": Tensor.lt, "LessOrEqual": Tensor.le,
  "BitwiseAnd": Tensor.bitwise_and, "BitwiseOr": Tensor.bitwise_or, "BitwiseXor": Tensor.bitwise_xor}
for _name, _fn2 in _BINARY.items(): OPS[_name] = (lambda f: lambda a, b: f(a, b))(_fn2)

def Identity(x: Any) -> Any: return x
def Div(a: Tensor, b: Tensor) -> Tensor: return a / b if dtypes.is_float(a.dtype) else a.idiv(b)
def Pow(a: Tensor, b: Tensor) -> Tensor:
  if b.dtype != a.dtype and not dtypes.is_float(a.dtype):  # int ** float: in float64, then back to the int type
    return a.cast(dtypes.float64).pow(b.cast(dtypes.float64)).round().cast(a.dtype)
  return a.pow(b).cast(a.dtype)
def Mod(a: Tensor, b: Tensor, fmod: int = 0) -> Tensor: return a.fmod(b) if fmod else a.mod(b)
def BitShift(a: Tensor, b: Tensor, direction: str = "") -> Tensor:
  ok = (b >= 0) & (b < a.dtype.itemsize * 8)  # a shift by a negative amount or by the width or more gives 0
  safe = ok.where(b, 0).cast(a.dtype)
  if direction == "LEFT": return ok.where(a.lshift(safe), 0).cast(a.dtype)
  return ok.where(a.rshift(safe), (a < 0).where(-1, 0)).cast(a.dtype)  # a signed right shift fills with the sign
def Max(*xs: Tensor) -> Tensor: return functools.reduce(Tensor.maximum, xs)
def Min(*xs: Tensor) -> Tensor: return functools.reduce(Tensor.minimum, xs)
def Sum(*xs: Tensor) -> Tensor: return functools.reduce(Tensor.add, xs)
def Mean(*xs: Tensor) -> Tensor: return functools.reduce(Tensor.add, xs) / len(xs)
def Where(c: Tensor, x: Tensor, y: Tensor) -> Tensor: return c.where(x, y)
def IsInf(x: Tensor, detect_negative: int = 1, detect_positive: int = 1) -> Tensor:
  return x.isinf(bool(detect_positive), bool(detect_negative))
def Clip(x: Tensor, min: Any = None, max: Any = None) -> Tensor:
  if min is not None: x = x.maximum(min.cast(x.dtype) if isinstance(min, Tensor) else min)
  return x if max is None else x.minimum(max.cast(x.dtype) if isinstance(max, Tensor) else max)
def Elu(x: Tensor, alpha: float = 1.0) -> Tensor: return (x > 0).where(x, alpha * (x.exp() - 1))
def Celu(x: Tensor, alpha: float = 1.0) -> Tensor: return x.relu() + (alpha * ((x / alpha).exp() - 1)).minimum(0)
def Selu(x: Tensor, alpha: float = 1.67326319217681884765625, gamma: float = 1.05070102214813232421875) -> Tensor:
  return gamma * (x > 0).where(x, alpha * (x.exp() - 1))
def LeakyRelu(x: Tensor, alpha: float = 0.01) -> Tensor: return (x < 0).where(x * alpha, x)
def PRelu(x: Tensor, slope: Tensor) -> Tensor: return (x < 0).where(x * slope, x)
def ThresholdedRelu(x: Tensor, alpha: float = 1.0) -> Tensor: return (x > alpha).where(x, 0)
def HardSigmoid(x: Tensor, alpha: float = 0.2, beta: float = 0.5) -> Tensor:
  return (x * alpha + beta).maximum(0).minimum(1)
def Gelu(x: Tensor, approximate: str = "none") -> Tensor: return x.gelu(approximate)
def Swish(x: Tensor, alpha: float = 1.0) -> Tensor: return x * (x * alpha).sigmoid()
def Shrink(x: Tensor, bias: float = 0.0, lambd: float = 0.5) -> Tensor:
  return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype)
def Cast(x: Tensor, to: int = 1, saturate: int = 1, round_mode: str = "up") -> Tensor: return x.cast(onnx_dtype(to))
def CastLike(x: Tensor, like: Tensor, saturate: int = 1, round_mode: str = "up") -> Tensor: return x.cast(like.dtype)
def BitCast(x: Tensor, to: int = 1) -> Tensor: return x.bitcast(onnx_dtype(to))

# *** constants and shapes ***
def Constant(value: Any = None, value_float: Any = None, value_floats: Any = None, value_int: Any = None,
             value_ints: Any = None, sparse_value: Any = None, value_string: Any = None,
             value_strings: Any = None) -> Tensor:
  if value is not None: return value
  if value_float is not None or value_floats is not None:
    return Tensor(value_float if value_floats is None else value_floats, dtype=dtypes.float32)
  if value_int is not None or value_ints is not None:
    return Tensor(value_int if value_ints is None else value_ints, dtype=dtypes.int64)
  raise NotImplementedError("Constant: only tensor, float and int values are supported (not sparse or string)")
def Shape(x: Tensor, start: int = 0, end: int | None = None) -> Tensor:
  return Tensor(list(x.shape[start:end]), dtype=dtypes.int64).reshape(-1)
def Size(x: Tensor) -> Tensor: return Tensor(x.numel(), dtype=dtypes.int64)
def ConstantOfShape(shape: Tensor, value: Tensor | None = None) -> Tensor:
  dt = value.dtype if value is not None else dtypes.float32
  return Tensor.full(tuple(_ints(shape)), _scalar(value) if value is not None else 0.0, dtype=dt)
def Range(start: Tensor, limit: Tensor, delta: Tensor) -> Tensor:
  return Tensor.arange(_scalar(start), _scalar(limit), _scalar(delta), dtype=start.dtype)
def EyeLike(x: Tensor, dtype: int | None = None, k: int = 0) -> Tensor:
  (n, m), dt = x.shape, onnx_dtype(dtype) if dtype is not None else x.dtype
  return (Tensor.arange(n).reshape(n, 1) + k == Tensor.arange(m).reshape(1, m)).cast(dt)
def Trilu(x: Tensor, k: Tensor | None = None, upper: int = 1) -> Tensor:
  return (x.triu if upper else x.tril)(int(_scalar(k)) if k is not None else 0)
def Reshape(x: Tensor, shape: Tensor, allowzero: int = 0) -> Tensor:
  s = [x.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(_ints(shape))]
  if -1 in s:
    known = math.prod(d for d in s if d != -1)
    s[s.index(-1)] = x.numel() // known if known else 0
  return x.reshape(s)
def Flatten(x: Tensor, axis: int = 1) -> Tensor:
  a = _axis(axis, x.ndim)
  return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))
def Squeeze(x: Tensor, axes: Any = None) -> Tensor:
  ax = [_axis(a, x.ndim) for a in _ints(axes)] if axes is not None else [i for i, s in enumerate(x.shape) if s == 1]
  return x.reshape([s for i, s in enumerate(x.shape) if i not in ax])
def Unsqueeze(x: Tensor, axes: Any = None) -> Tensor:
  shape, n = list(x.shape), x.ndim + len(_ints(axes))
  for a in sorted(_axis(i, n) for i in _ints(axes)): shape.insert(a, 1)
  return x.reshape(shape)
def Transpose(x: Tensor, perm: list[int] | None = None) -> Tensor:
  return x.permute(perm if perm is not None else list(range(x.ndim))[::-1])
def Concat(*xs: Tensor, axis: int = 0) -> Tensor: return xs[0].cat(*xs[1:], dim=axis) if len(xs) > 1 else xs[0]
def Split(x: Tensor, split: Any = None, axis: int = 0, num_outputs: int | None = None, n_outputs: int = 1) -> tuple:
  a, n = _axis(axis, x.ndim), num_outputs or n_outputs
  sizes = _ints(split) if split is not None else [-(-x.shape[a] // n)] * (n - 1)
  if split is None: sizes.append(x.shape[a] - sum(sizes))
  return tuple(x.shrink([(sum(sizes[:i]), sum(sizes[:i + 1])) if d == a else None for d in range(x.ndim)])
               for i in range(len(sizes)))
def Slice(x: Tensor, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> Tensor:
  st, en = _ints(starts), _ints(ends)
  ax = [_axis(a, x.ndim) for a in _ints(axes)] if axes is not None else list(range(len(st)))
  sp = _ints(steps) if steps is not None else [1] * len(st)
  index = [slice(None)] * x.ndim
  for a, s, e, p in zip(ax, st, en, sp): index[a] = slice(s, e, p)
  return x[tuple(index)]  # ONNX clamps starts and ends as Python's slices do
def _wrap(idx: Tensor, size: int) -> Tensor: return (idx < 0).where(idx + size, idx)
def Gather(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
  a = _axis(axis, x.ndim)
  flat = _wrap(indices.cast(dtypes.int32), x.shape[a]).reshape(-1)
  out_shape = (*x.shape[:a], *indices.shape, *x.shape[a + 1:])
  if flat.shape[0] == 0: return Tensor.empty(*out_shape, dtype=x.dtype) if math.prod(out_shape) else x.shrink(
    [(0, 0) if d == a else None for d in range(x.ndim)]).reshape(out_shape)
  pick = flat.reshape(*[1] * a, -1, *[1] * (x.ndim - a - 1)).expand(*x.shape[:a], flat.shape[0], *x.shape[a + 1:])
  return x.gather(a, pick).reshape(out_shape)
def GatherElements(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
  a = _axis(axis, x.ndim)
  return x.gather(a, _wrap(indices.cast(dtypes.int32), x.shape[a]))
def _linear_index(shape: Sequence[int], indices: Tensor) -> Tensor:
  """The flat position in shape[:k] of each index tuple in indices (..., k), negatives wrapped."""
  k, lin = indices.shape[-1], Tensor.zeros(indices.shape[:-1], dtype=dtypes.int32)
  for i in range(k): lin = lin + _wrap(indices[..., i].cast(dtypes.int32), shape[i]) * math.prod(shape[i + 1:k])
  return lin
def GatherND(x: Tensor, indices: Tensor, batch_dims: int = 0) -> Tensor:
  b, k = batch_dims, indices.shape[-1]
  nb, rest = math.prod(x.shape[:b]), x.shape[b + k:]
  flat = x.reshape(nb * math.prod(x.shape[b:b + k]), *rest)
  lin = _linear_index(x.shape[b:], indices).reshape(nb, -1)
  lin = lin + Tensor.arange(nb, dtype=dtypes.int32).reshape(nb, 1) * math.prod(x.shape[b:b + k])
  return Gather(flat, lin.reshape(-1)).reshape(*indices.shape[:-1], *rest)
def Expand(x: Tensor, shape: Tensor) -> Tensor:
  s = _ints(shape)
  xs, ss = [1] * (len(s) - x.ndim) + list(x.shape), [1] * (x.ndim - len(s)) + s  # right-aligned as in broadcasting
  return x.reshape(xs).expand([a if b == 1 else b for a, b in zip(xs, ss)])
def Tile(x: Tensor, repeats: Tensor) -> Tensor: return x.repeat(_ints(repeats))
def Pad(x: Tensor, pads: Any = None, constant_value: Any = None, axes: Any = None, mode: str = "constant",
        value: float = 0.0) -> Tensor:
  p, ax = _ints(pads), [_axis(a, x.ndim) for a in _ints(axes)] if axes is not None else list(range(x.ndim))
  pairs = [(0, 0)] * x.ndim
  for i, a in enumerate(ax): pairs[a] = (p[i], p[i + len(ax)])
  m = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}[mode]
  return x.pad(pairs, mode=m, value=_scalar(constant_value) if constant_value is not None else value)
def DepthToSpace(x: Tensor, blocksize: int = 1, mode: str = "DCR") -> Tensor:
  (n, c, h, w), b = x.shape, blocksize
  if mode == "DCR": x = x.reshape(n, b, b, c // b // b, h, w).permute(0, 3, 4, 1, 5, 2)
  else: x = x.reshape(n, c // b // b, b, b, h, w).permute(0, 1, 4, 2, 5, 3)
  return x.reshape(n, c // b // b, h * b, w * b)
def SpaceToDepth(x: Tensor, blocksize: int = 1, mode: str = "DCR") -> Tensor:
  (n, c, h, w), b = x.shape, blocksize
  order = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)  # channels (by, bx, c) or (c, by, bx)
  return x.reshape(n, c, h // b, b, w // b, b).permute(order).reshape(n, c * b * b, h // b, w // b)
def OneHot(indices: Tensor, depth: Tensor, values: Tensor, axis: int = -1) -> Tensor:
  d, a = int(_scalar(depth)), _axis(axis, indices.ndim + 1)
  idx = _wrap(indices.cast(dtypes.int64), d).unsqueeze(a)
  hot = idx == Tensor.arange(d, dtype=dtypes.int64).reshape([-1 if i == a else 1 for i in range(indices.ndim + 1)])
  return hot.where(values[1], values[0])
def Compress(x: Tensor, condition: Tensor, axis: int | None = None) -> Tensor:
  keep = np.nonzero(condition.numpy())[0]
  if axis is None: x, axis = x.reshape(-1), 0
  return Gather(x, Tensor(keep.astype(np.int64)), axis=axis)
def NonZero(x: Tensor) -> Tensor: return Tensor(np.array(np.nonzero(x.numpy()), dtype=np.int64).reshape(x.ndim, -1))
def Unique(x: Tensor, axis: int | None = None, sorted: int = 1) -> tuple:
  u, idx, inv, cnt = np.unique(x.numpy(), return_index=True, return_inverse=True, return_counts=True, axis=axis)
  if not sorted:
    order = np.argsort(idx)
    u, idx, inv, cnt = np.take(u, order, axis=axis or 0), idx[order], np.argsort(order)[inv], cnt[order]
  return Tensor(u), *(Tensor(np.asarray(v, dtype=np.int64).reshape(-1)) for v in (idx, inv, cnt))

# *** sorting and scans ***
def TopK(x: Tensor, k: Any, axis: int = -1, largest: int = 1, sorted: int = 1) -> tuple:
  kk, a = _ints(k)[0], _axis(axis, x.ndim)
  if kk == 0: return x.shrink([(0, 0) if d == a else None for d in range(x.ndim)]), Tensor.empty(
    *[0 if d == a else s for d, s in enumerate(x.shape)], dtype=dtypes.int64)
  v, i = x.topk(kk, a, bool(largest))
  return v, i.cast(dtypes.int64)
def _arg(x: Tensor, axis: int = 0, keepdims: int = 1, select_last_index: int = 0, *, fn: str) -> Tensor:
  a = _axis(axis, x.ndim)
  ret = getattr(x.flip(a) if select_last_index else x, fn)(a, keepdim=bool(keepdims))
  return (x.shape[a] - 1 - ret if select_last_index else ret).cast(dtypes.int64)
OPS["ArgMax"], OPS["ArgMin"] = functools.partial(_arg, fn="argmax"), functools.partial(_arg, fn="argmin")
def _cum(x: Tensor, axis: Tensor, exclusive: int = 0, reverse: int = 0, *, fn: str, identity: int) -> Tensor:
  a = _axis(int(_scalar(axis)), x.ndim)
  if reverse: x = x.flip(a)
  if exclusive: x = x.pad([(1, -1) if d == a else (0, 0) for d in range(x.ndim)], value=identity)
  y = getattr(x, fn)(a)
  return (y.flip(a) if reverse else y).cast(x.dtype)
OPS["CumSum"] = functools.partial(_cum, fn="cumsum", identity=0)
OPS["CumProd"] = functools.partial(_cum, fn="cumprod", identity=1)
def ReverseSequence(x: Tensor, sequence_lens: Tensor, batch_axis: int = 1, time_axis: int = 0) -> Tensor:
  lens, t = sequence_lens.numpy(), x.shape[time_axis]
  src = np.array([[ln - 1 - i if i < ln else i for i in range(t)] for ln in lens], dtype=np.int32)  # (batch, time)
  if time_axis < batch_axis: src = src.T
  shape = [src.shape[0] if d == min(time_axis, batch_axis) else src.shape[1] if d == max(time_axis, batch_axis) else 1
           for d in range(x.ndim)]
  return x.gather(time_axis, Tensor(src).reshape(shape).expand(x.shape))
_REDUCTION = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}
def _scatter(x: Tensor, a: int, idx: Tensor, upd: Tensor, reduction: str) -> Tensor:
  return x.scatter(a, idx, upd) if reduction == "none" else x.scatter_reduce(a, idx, upd, _REDUCTION[reduction])
def ScatterElements(x: Tensor, indices: Tensor, updates: Tensor, axis: int = 0, reduction: str = "none") -> Tensor:
  a = _axis(axis, x.ndim)
  return _scatter(x, a, _wrap(indices.cast(dtypes.int64), x.shape[a]), updates, reduction)
OPS["ScatterElements"] = OPS["Scatter"] = ScatterElements  # Scatter: its name before opset 11
def ScatterND(x: Tensor, indices: Tensor, updates: Tensor, reduction: str = "none") -> Tensor:
  k = indices.shape[-1]
  flat = x.reshape(math.prod(x.shape[:k]), math.prod(x.shape[k:]))
  lin = _linear_index(x.shape, indices).reshape(-1, 1).cast(dtypes.int64).expand(-1, flat.shape[1])
  return _scatter(flat, 0, lin, updates.reshape(-1, flat.shape[1]), reduction).reshape(x.shape)
def Einsum(*xs: Tensor, equation: str = "") -> Tensor: return Tensor.einsum(equation, *xs)

# *** reductions ***
def _reducer(fn: Callable[..., Tensor]) -> Callable:
  """The op of a reduce fn(x, axes, keepdim): all axes when none are given (but none with noop_with_empty_axes)."""
  def reduce(x: Tensor, axes: Any = None, keepdims: int = 1, noop_with_empty_axes: int = 0) -> Tensor:
    ax = _ints(axes)
    if not ax and noop_with_empty_axes: return x
    return fn(x, tuple(_axis(a, x.ndim) for a in ax) if ax else tuple(range(x.ndim)), bool(keepdims)).cast(x.dtype)
  return reduce
for _name in ("Sum", "Mean", "Max", "Min", "Prod"):  # the Tensor method (Max over nothing: lowest value, as ONNX)
  OPS["Reduce" + _name] = _reducer(lambda x, a, k, m=_name.lower(): getattr(x, m)(a, keepdim=k))
OPS["ReduceL1"] = _reducer(lambda x, a, k: x.abs().sum(a, keepdim=k))
OPS["ReduceL2"] = _reducer(lambda x, a, k: x.square().sum(a, keepdim=k).sqrt())
OPS["ReduceSumSquare"] = _reducer(lambda x, a, k: x.square().sum(a, keepdim=k))
OPS["ReduceLogSum"] = _reducer(lambda x, a, k: x.sum(a, keepdim=k).log())
OPS["ReduceLogSumExp"] = _reducer(lambda x, a, k: x.logsumexp(a, keepdim=k))

# *** softmax family ***
def _softmax_like(x: Tensor, axis: int | None = None, opset: int = 13, *, fn: Callable[..., Tensor]) -> Tensor:
  if opset >= 13: return fn(x, -1 if axis is None else axis)
  a = _axis(1 if axis is None else axis, x.ndim)  # before 13: over all axes from axis on, as one flat axis
  return fn(x.reshape(math.prod(x.shape[:a]), -1), -1).reshape(x.shape)
OPS["Softmax"] = functools.partial(_softmax_like, fn=Tensor.softmax)
OPS["LogSoftmax"] = functools.partial(_softmax_like, fn=Tensor.log_softmax)
def Hardmax(x: Tensor, axis: int | None = None, opset: int = 13) -> Tensor:
  def hard(t: Tensor, a: int) -> Tensor: return t.argmax(a, keepdim=True) == Tensor.arange(t.shape[a]).reshape(
    [-1 if i == _axis(a, t.ndim) else 1 for i in range(t.ndim)])
  return _softmax_like(x, axis, opset, fn=hard).cast(x.dtype)

register_ops(globals())
