"""Tensor: the user API, lazy: ops build graph from the primitives, nothing runs until realize(). The math, movement,
reduce, indexing and network ops are in mixin/*.py; here the rest (docs/developer/tensor.md)."""
from __future__ import annotations
import builtins, math, operator, pathlib, struct, sys
from contextlib import contextmanager
from typing import Any, Callable, ClassVar, Iterator, Sequence
from fusegrad.dtype import DType, dtypes, least_upper_dtype, to_dtype, from_numpy, to_numpy
from fusegrad.dtype import float_to_bf16_bits, checked_ints
from fusegrad.helpers import prod, fetch, TRAINING, WeakList, argsort, _numpy_scalar, _is_numpy
from fusegrad.device import Device, Buffer, OutOfMemoryError, RUN_LOCK
from fusegrad.uop.ops import UOp, Ops, GroupOp, SymInt, same_shape
from fusegrad.gradient import compute_gradient, substitute_keeping_rules
from fusegrad.engine import state, multi, realizer, schedule as engine_schedule
from fusegrad.engine.state import STATE, MAY_FOLLOW
from fusegrad.mixin.elementwise import ElementwiseMixin, ShapeError, ArgumentError, _resolve_axis, broadcast_shape
from fusegrad.mixin.nn import NNMixin
from fusegrad.mixin.conv import ConvMixin
from fusegrad.mixin.gather import GatherMixin
from fusegrad.mixin.loss import LossMixin
from fusegrad.mixin.sort import SortMixin
from fusegrad.mixin.creation import CreationMixin, _shape_arg, _shape_of, _flatten_list
from fusegrad.mixin.movement import MovementMixin
from fusegrad.mixin.reduce import ReduceMixin
from fusegrad.mixin.linalg import LinalgMixin
from fusegrad.mixin.indexing import getitem, assign_window, basic_index, setitem_value

_NUMBERS = {int, float}
_DEVICE, _UOP, _REQUIRES_GRAD = map(operator.attrgetter, ("device", "uop", "_requires_grad"))
_LOOK_CLOSER = MAY_FOLLOW | {Ops.MULTI, Ops.NOOP}  # nodes Tensor.uop may replace
_FLOAT_IDS = {id(d) for d in dtypes.floats}  # (the float dtypes themselves, found without a hash in Python)
def _is_float(dt: DType) -> bool: return id(dt) in _FLOAT_IDS or dtypes.is_float(dt)

def _pack(values: list, dtype: DType, numbers: bool = False) -> bytes:
  """Python scalars packed as dtype, converting like a cast (floats truncated for ints, etc.). numbers: values are
  known to be Python ints and floats only."""
  if dtype.fmt in ("f", "d") and (numbers or all(type(v) is float or type(v) is int for v in values)):
    try: return struct.pack(f"<{len(values)}{dtype.fmt}", *values)  # as a cast: struct rounds (ints as float() does)
    except OverflowError: pass  # beyond float32's range: inf, below
  if dtypes.is_int(dtype): checked_ints(values, dtype)  # no silent wrap-around at creation (DESIGN.md, invariant 12)
  vals = [dtypes.as_const(v, dtype) for v in values]
  if dtype == dtypes.bfloat16: return struct.pack(f"<{len(vals)}H", *(float_to_bf16_bits(v) for v in vals))
  return struct.pack(f"<{len(vals)}{dtype.fmt}", *vals)

def _scalar(value: Any, dtype: DType, shape: tuple[int, ...], device: str | None) -> UOp:
  """A tensor's constant made from a Python value (that an integer dtype can hold: checked_ints)."""
  if dtypes.is_int(dtype): checked_ints([value], dtype)
  return UOp.const(dtype, value, shape, device)

def _unpickle(values: Any, dtype: DType, device: Any, grad: bool | None, axis: int | None) -> Tensor:
  t = Tensor(values, dtype=dtype, device=device[0] if isinstance(device, tuple) else device, requires_grad=grad)
  return t.shard(device, axis) if isinstance(device, tuple) else t

def _computes(t: Tensor) -> bool:
  """False for a tensor on a device that computes nothing (DISK: data is only copied to and from it)."""
  return isinstance(t.device, tuple) or Device[t.device].runs_kernels

class Tensor(ElementwiseMixin, MovementMixin, ReduceMixin, NNMixin, ConvMixin, GatherMixin, LossMixin, SortMixin,
             LinalgMixin, CreationMixin):
  """A lazy n-dimensional array with autograd. `Tensor([[1, 2], [3, 4]])`, `Tensor.rand(2, 3)`, `a @ b`."""
  # _view_of: (the tensor a movement op made this one from, its node then): a write through this view reaches it
  # _terms: of a .grad, how many backward calls' graphs it sums lazily (unset: one)
  __slots__ = ("_uop", "_requires_grad", "grad", "_old_uops", "_view_of", "_terms", "__weakref__")
  training: ClassVar[bool] = False
  no_grad: ClassVar[bool] = False
  _seed: ClassVar[int] = 0  # (the random numbers' counter is STATE.rng_counter)
  __hash__ = object.__hash__  # == is elementwise, so hash by identity

  def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
               requires_grad: bool | None = None):
    self.grad: Tensor | None = None
    self._old_uops: WeakList | None = None
    self._requires_grad: bool | None = None
    self._view_of: tuple[Tensor, UOp] | None = None
    dtype = to_dtype(dtype) if dtype is not None else None
    if isinstance(data, pathlib.Path):  # a file: its bytes as dtype (uint8), on the disk device (mapped, not read)
      n, dtype = data.stat().st_size // (dtype or dtypes.uint8).itemsize, dtype or dtypes.uint8
      data = UOp(Ops.BUFFER, dtype, (), Buffer(f"DISK:{data.resolve()}", n, dtype)).reshape((n,))
    device = Device.canonicalize(device) if device is not None or not isinstance(data, UOp) else None
    if isinstance(data, range): data = list(data)
    if type(data) is list and data and (types := set(map(type, data))) <= _NUMBERS:  # flat: the common case, first
      # a float among numbers int64 holds: the default float (dtypes.from_py's rule, without a walk per element)
      quick = float in types and -2 ** 63 <= min(data) and max(data) < 2 ** 63
      dt = dtype or (dtypes.default_float if quick else dtypes.from_py(data))
      uop = _make_buffer(_pack(data, dt, True), (len(data),), dt, device)
    elif isinstance(data, UOp) and data.dtype == dtypes.index: uop = data.cast(dtype or dtypes.default_int)  # Variable
    elif isinstance(data, UOp): uop = data if dtype is None or data.dtype == dtype else data.cast(dtype)
    elif isinstance(data, Tensor): uop = data.uop if dtype is None else data.uop.cast(dtype)
    elif data is None: uop = _make_buffer(b"", (0,), dtype or dtypes.default_float, device)
    elif isinstance(data, (bool, int, float)): uop = _scalar(data, dtype or dtypes.from_py(data), (), device)
    elif isinstance(data, (bytes, bytearray, memoryview)):  # the bytes as values of dtype (default uint8)
      raw, dt = bytes(data), dtype or dtypes.uint8
      if len(raw) % dt.itemsize: raise ValueError(f"Tensor: {len(raw)} bytes are not a whole number of {dt} values")
      uop = _make_buffer(raw, (len(raw) // dt.itemsize,), dt, device)
    elif isinstance(data, (list, tuple)):
      shape, flat = _shape_of(data), _flatten_list(data)
      if any(isinstance(x, Tensor) for x in flat):
        raise TypeError("Tensor: use Tensor.stack to combine a list of Tensors")
      dt = dtype or (dtypes.from_py(flat) if flat else dtypes.default_float)
      uop = _make_buffer(_pack(flat, dt), shape, dt, device)
    elif _is_numpy(data):
      import numpy as np
      arr = np.asarray(data)
      dt = dtype or from_numpy(arr.dtype)
      if dt == dtypes.bfloat16 and arr.dtype != np.uint16:
        arr_bytes = _pack(arr.astype(np.float32).ravel().tolist(), dt)
      else: arr_bytes = np.ascontiguousarray(arr.astype(to_numpy(dt), copy=False)).tobytes()
      uop = _make_buffer(arr_bytes, tuple(arr.shape), dt, device)
    elif type(data).__module__.startswith("torch"):
      raise TypeError("Tensor: convert a torch tensor with .numpy() first")
    else: raise TypeError(f"can't make a Tensor from {type(data).__name__}")
    if isinstance(data, (UOp, Tensor)) and device is not None and uop.device is not None and uop.device != device:
      uop = uop.copy_to_device(device)
    self._uop = uop
    if _is_float(uop.dtype): STATE.float_tensors.add(self)
    if requires_grad is not None: self.requires_grad = requires_grad

  # *** the node this tensor stands for ***
  @property
  def uop(self) -> UOp:
    """The lazy node; a view of a buffer follows the buffer to its newest contents (state.current)."""
    # (what state.current gives them, quickly: a node it can't replace, a buffer's newest version)
    if (u := self._uop).op not in _LOOK_CLOSER: return u
    if u.op is Ops.BUFFER and (u.src[0].arg if u.src else None) == u.arg.newest_write: return u
    if u.op is Ops.NOOP:  # a stand-in while a realize spreads it over devices (realizer._realize_multi): wait for it
      with RUN_LOCK:  # (held by that realize)
        if self._uop.op is Ops.NOOP: raise RuntimeError("a tensor spread over devices was read by its own realize")
        return self.uop
    if u.op is Ops.MULTI:
      if any(state.current(s) is not s for s in u.src): self.uop = multi.multi(tuple(map(state.current, u.src)), u.arg)
    elif (new := state.current(u)) is not u: self.uop = new
    return self._uop
  @uop.setter
  def uop(self, new: UOp) -> None:
    if new is self._uop: return
    if self._requires_grad is not False:  # remember old nodes: graphs built before a realize still refer to them
      if self._old_uops is None: self._old_uops = WeakList(8)
      self._old_uops.add(self._uop)
    self._uop = new
  lazydata = uop  # tinygrad's older name

  @property
  def requires_grad(self) -> bool | None:
    """Whether backward() computes a gradient for this tensor (None: only if something it is used with needs one)."""
    return self._requires_grad
  @requires_grad.setter
  def requires_grad(self, val: bool | None) -> None:
    self._requires_grad = val
    if val:
      STATE.grad_tensors[id(self)] = self
      self._own_node()
    else: STATE.grad_tensors.pop(id(self), None)
  def _own_node(self) -> None:
    """Give a lazy value its own node. Nodes are hash-consed, so Tensor.zeros(3) made twice is one node, and gradients
    for two such tensors would mix: writing the value into a fresh buffer (at realize) makes this node unique."""
    if isinstance(self.device, tuple):  # each device's part gets its own node
      m = multi.lower(self.uop)
      self._uop = multi.multi(tuple(_own(s) for s in m.src), m.arg)
    else: self._uop = _own(self.uop)
  def requires_grad_(self, requires_grad: bool | None = True) -> Tensor:
    """Set requires_grad and return self: `w = Tensor.rand(3).requires_grad_()`."""
    self.requires_grad = requires_grad
    return self
  @property
  def is_param(self) -> bool:
    """tinygrad's name for "an optimizer updates this": True unless requires_grad is False. A tensor that is not a
    parameter (running statistics, a KV cache) is a buffer: optimizers realize it but never update it, and it gets no
    gradient (tinygrad still gives it one)."""
    return self._requires_grad is not False
  @is_param.setter
  def is_param(self, val: bool) -> None:
    if not val: self.requires_grad = False
    elif self._requires_grad is False: self.requires_grad = None
  def is_param_(self, is_param: bool = True) -> Tensor:
    """Set is_param and return self: `self.running_mean = Tensor.zeros(4).is_param_(False)`."""
    self.is_param = is_param
    return self

  def _new(self, uop: UOp, *others: Tensor) -> Tensor:
    """A result tensor; it requires grad if an input does (else None if an input's is None, else False). Inputs on
    different devices are an error here, where the graph is built (a constant is on every device)."""
    if len(uop.src) > 1 and uop.op not in (Ops.ASSIGN, Ops.MULTI) and len(set(map(_DEVICE, uop.src))) > 1:
      devices = {s.device for s in uop.src if s.base.op is not Ops.CONST and s.device is not None}
      if len(devices) > 1:
        names = ", ".join(sorted(map(str, devices)))
        raise ArgumentError(f"{uop.op.name.lower()}: tensors are on different devices ({names}); move one with .to()")
    ret = Tensor._wrap(uop)
    flags = [self._requires_grad, *map(_REQUIRES_GRAD, others)]  # True if any is, False if all are, else None
    ret._requires_grad = True if True in flags else None if None in flags else False
    return ret
  def _view(self, uop: UOp) -> Tensor:
    """A result of a movement op (uop): a view of this tensor, which a write through it reaches (see assign)."""
    ret = self._new(uop)
    ret._view_of = (self, self._uop)
    return ret
  @staticmethod
  def _wrap(uop: UOp, const: bool = False) -> Tensor:
    """Tensor(uop), without looking at what else the argument could be (the many small tensors an op makes). const: a
    broadcast constant, which backward never gives a gradient, so it isn't registered for backward."""
    ret = object.__new__(Tensor)
    ret.grad, ret._old_uops, ret._requires_grad, ret._uop, ret._view_of = None, None, None, uop, None
    if not const and _is_float(uop.dtype): STATE.float_tensors.add(ret)
    return ret

  # *** properties ***
  @property
  def shape(self) -> tuple[int, ...]:
    """The size of each axis: `Tensor.zeros(2, 3).shape` is (2, 3)."""; return self._uop.shape
  @property
  def dtype(self) -> DType:
    """The element type."""; return self._uop.dtype
  @property
  def device(self) -> str:
    """The device the data lives on ("CPU", "PYTHON" ...; a tuple of them for a tensor spread over several)."""
    return self._uop.device or Device.DEFAULT
  @property
  def max_shape(self) -> tuple[int, ...]:
    """The largest shape this tensor can have: each length from a Variable (SymInt) at the Variable's maximum."""
    return tuple(s.expr.vmax if type(s) is SymInt else s for s in self.shape)
  def max_numel(self) -> int: """The most elements this tensor can have (max_shape's)."""; return prod(self.max_shape)
  @property
  def ndim(self) -> int:
    """The number of axes."""; return len(self.shape)
  def numel(self) -> int:
    """The number of elements."""; return prod(self.shape)
  def element_size(self) -> int:
    """Bytes per element."""; return self.dtype.itemsize
  def nbytes(self) -> int:
    """Bytes of all elements."""; return self.numel() * self.element_size()
  def size(self, dim: int | None = None) -> int | tuple[int, ...]:
    """The shape, or the size of axis dim: `x.size(-1)`."""
    return self.shape if dim is None else self.shape[_resolve_axis(dim, self.ndim, "size")]
  def is_floating_point(self) -> bool:
    """True for float dtypes."""; return dtypes.is_float(self.dtype)
  def __len__(self) -> int:
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  def __repr__(self) -> str:
    grad = " requires_grad" if self.requires_grad else ""
    return f"<Tensor shape={self.shape} dtype={self.dtype!r} device={self.device!r}{grad}>"
  def __bool__(self) -> bool:
    if self.numel() != 1:
      raise RuntimeError(f"bool: the truth value of a tensor with {self.numel()} elements is ambiguous")
    return bool(self.item())
  def __contains__(self, x: Any) -> builtins.bool: return builtins.bool((self == x).any().item())  # as torch
  __array_priority__ = 1000  # np.float64(2) * t: numpy defers to t.__rmul__, which makes a Tensor (as torch's)
  def __iter__(self) -> Iterator[Tensor]:
    if not self.shape: raise TypeError("iteration over a 0-d tensor")
    return (self[i] for i in range(self.shape[0]))

  # *** realization and data ***
  def realize(self, *lst: Tensor, do_update_stats: bool = True) -> Tensor:
    """Compute this tensor (and lst) now; returns self."""
    Tensor.realize_all([self, *lst])
    return self
  @staticmethod
  def realize_all(tensors: Sequence[Tensor]) -> None:
    """Compute the given tensors together (one schedule, so shared work is done once)."""
    with RUN_LOCK:
      try:
        realizer.realize_all(tensors)
        for t in tensors:  # memory of their own now, data made on the host in it (Buffer.copyin_later)
          if (b := state.view_base(t._uop)).op is Ops.BUFFER and b.arg.size: b.arg.allocate()
      except OutOfMemoryError as e:
        shapes = ", ".join(f"shape {t.shape} {t.dtype}" for t in tensors)
        raise OutOfMemoryError(f"{e}, realizing {shapes}") from e
  def schedule(self, *lst: Tensor) -> list:
    """The kernels realize() would run, without running them (each device's part of a tensor across devices)."""
    lowered = [multi.lower(t.uop) for t in (self, *lst)]
    return engine_schedule.create_schedule([p for u in lowered for p in (u.src if u.op is Ops.MULTI else (u,))]).items

  def schedule_linear(self, *lst: Tensor) -> list:
    """The schedule's items (see linear_with_vars), for graphs without Variables."""
    items, var_vals = self.linear_with_vars(*lst)
    if var_vals: raise RuntimeError(f"schedule_linear: the graph reads Variables ({', '.join(var_vals)}); use "
                                    "linear_with_vars")
    return items
  def linear_with_vars(self, *lst: Tensor) -> tuple[list, dict[str, builtins.int]]:
    """What realizing this tensor (and lst) runs, and the values of the Variables its kernels read, by name:
    `items, var_vals = x[v.bind(2):v.bind(2) + 3].linear_with_vars()` gives var_vals {"i": 2}. (tinygrad returns its
    LINEAR UOp first, fusegrad the schedule's items.)"""
    items = self.schedule(*lst)
    var_vals: dict[str, builtins.int] = {}
    for si in items:
      for v, val in si.var_vals.items():
        if var_vals.setdefault(v.expr(), val) != val:
          raise RuntimeError(f"linear_with_vars: {v.expr()} is bound to {var_vals[v.expr()]} and to {val}")
    return items, var_vals

  def _buffer(self) -> Buffer:
    """The realized, contiguous buffer holding exactly this tensor's elements, in order."""
    chain, base = state.view_chain(u := self.uop)
    if base.op not in (Ops.BUFFER, Ops.CONST, Ops.ASSIGN) and all(c.op is Ops.RESHAPE for c in chain):
      Tensor.realize_all([self])  # lazy, all of its node's elements: realized, it is in order (else a copy of the part)
      if _is_float(self.dtype): realizer.remember_lazy_def(self, u, read=True)
      chain, base = state.view_chain(u := self.uop)
    if base.op is not Ops.BUFFER and isinstance(self.device, tuple): return self.to(self.device[0])._buffer()  # gather
    if base.op is Ops.BUFFER and (u is base or base.arg.size == u.size and all(c.op is Ops.RESHAPE for c in chain)):
      return base.arg  # already in order
    if base.op is Ops.BUFFER and not _computes(self) and engine_schedule.contiguous_offset(u) is not None:
      return engine_schedule.run_buffer(u)  # a run of a file: a view of it (elsewhere a kernel makes views aligned)
    if not _computes(self): return self._computable()._buffer()  # another view of a file: made after a copy
    base = state.view_base(u := self.contiguous().realize().uop)
    assert base.op is Ops.BUFFER, f"realize left {base.op}"
    return base.arg if base.arg.size == u.size else engine_schedule.run_buffer(u)  # (sized for a Variable's maximum)
  def _computable(self) -> Tensor:
    """This tensor, or on a device that computes nothing (a file) a copy of it on the default device."""
    return self if _computes(self) else self.to(Device.DEFAULT)
  def data(self) -> memoryview:
    """The values as a memoryview with this tensor's shape (bfloat16, and float16 before Python 3.12: float32)."""
    if self.dtype == dtypes.bfloat16 or (self.dtype == dtypes.float16 and not _HALF_MEMORYVIEW):
      return self._computable().cast(dtypes.float32).data()
    state.check_not_capturing("data()/tolist()/item()")
    if 0 in self.shape: return memoryview(b"").cast(self.dtype.fmt or "B")
    with RUN_LOCK: mv = memoryview(bytearray(self._buffer().as_bytes())).cast(self.dtype.fmt)
    return mv.cast("B").cast(self.dtype.fmt, self.shape) if self.shape else mv
  def tolist(self) -> Any:
    """The values as (nested) Python lists; a 0-d tensor gives a scalar.
    >>> Tensor([[1, 2], [3, 4]]).tolist()
    [[1, 2], [3, 4]]
    >>> Tensor(2.5).tolist()
    2.5"""
    if 0 in self.shape: return _empty_nested(self.shape)
    # through float32 (exact): memoryview has no 'e' format before Python 3.12
    if self.dtype == dtypes.float16: return self._computable().cast(dtypes.float32).tolist()
    vals = self.data().tolist()
    return vals[0] if not self.shape and isinstance(vals, list) else vals
  def item(self) -> Any:
    """The value of a one-element tensor as a Python scalar."""
    if self.numel() != 1: raise ShapeError(f"item() needs a tensor with one element, this one has {self.numel()}")
    mv = self.data()  # (of self, not of a reshape: self is realized, so its graph's inputs are free to change)
    return mv[(0,) * mv.ndim]
  def numpy(self) -> Any:
    """The values as a numpy array (a copy; bfloat16 comes out as float32)."""
    np: Any = sys.modules.get("numpy")  # (an import statement costs 1% of a tiny round trip)
    if np is None: import numpy as np
    dtype, shape = self._uop.dtype, self._uop.shape  # (a newer version of a buffer has the same dtype and shape)
    state.check_not_capturing("numpy()")
    if dtype.fmt is None: return self._computable().cast(dtypes.float32).numpy()  # bfloat16: no NumPy dtype
    if 0 in shape: return np.zeros(shape, dtype=dtype.fmt)
    ret = np.empty(shape, dtype=dtype.fmt)  # (to_numpy's answer for the others)
    self._buffer().copyout(ret.data)  # straight into the array: one copy
    return ret
  def __reduce__(self) -> tuple:  # pickle and copy.deepcopy: a copy of the values (as torch's and tinygrad's tensors)
    return _unpickle, (self.numpy(), self.dtype, self.device, self.requires_grad, self.uop.axis)  # (numpy() first)
  def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
    return self.numpy() if dtype is None else self.numpy().astype(dtype)

  def to(self, device: str | tuple[str, ...] | None) -> Tensor:
    """This tensor on another device (a copy, lazily); a tuple of devices: a copy on each (see shard). A tensor spread
    over devices moved to one is gathered there."""
    device = Device.canonicalize(device)  # type: ignore[arg-type]
    if device == self.device: return self
    if isinstance(device, tuple): return self.shard(device)
    if isinstance(self.device, tuple): return self._new(multi.gather_node(self.uop, device))
    chain, src, file = list[UOp](), self.uop, not Device[self.device].runs_kernels
    while file and src.op in GroupOp.Movement and not engine_schedule.copied_as_is(src):  # a file's view: made after
      chain, src = chain + [src], src.src[0]  # the copy of the run under it, on device
    ret = self._new(state.rebuild(src.copy_to_device(device), chain))
    if not Device[device].runs_kernels: return ret.realize()  # into a file: written now (a .grad would overwrite it)
    if self.grad is not None: ret.grad = self.grad.to(device)
    return ret
  def to_(self, device: str | tuple[str, ...] | None) -> Tensor:
    """Move this tensor to another device in place."""
    self.uop = self.to(device).uop
    return self
  def shard(self, devices: tuple[str, ...] | list[str], axis: builtins.int | None = None) -> Tensor:
    """This tensor spread over devices: split along axis in equal parts (part i on devices[i]), or with axis None a
    copy on each. `Tensor.arange(4).shard(("CPU:0", "CPU:1"), axis=0).device` is ('CPU', 'CPU:1') ("CPU:0" is "CPU")."""
    devices = Device.canonicalize(tuple(devices))  # type: ignore[arg-type]
    if len(devices) == 1: return self.to(devices[0])  # one device: a plain tensor there (as tinygrad)
    if axis is not None: axis = _resolve_axis(axis, self.ndim, "shard")
    if self.device == devices: return self._new(multi.reshard(self.uop, axis))  # replicated -> split: no copies
    src = self.to(self.device[0]) if isinstance(self.device, tuple) else self
    return self._new(multi.shard(src.uop, devices, axis))  # type: ignore[arg-type]
  def shard_(self, devices: tuple[str, ...] | list[str], axis: builtins.int | None = None) -> Tensor:
    """shard in place: this tensor now lives on devices."""
    self.uop = self.shard(devices, axis).uop
    return self
  def shard_like(self, y: Tensor) -> Tensor:
    """This tensor on y's device, or on y's devices split along y's axis (tinygrad's)."""
    return self.shard(y.device, y.uop.axis) if isinstance(y.device, tuple) else self.to(y.device)
  def contiguous(self) -> Tensor:
    """The values laid out in order in their own buffer (free when they already are)."""
    return self._new(self.uop.contiguous())
  def contiguous_backward(self) -> Tensor:
    """The same tensor (the gradient is made contiguous by the scheduler when needed)."""; return self
  def clone(self, device: str | None = None) -> Tensor:
    """A copy with its own buffer (on device, if given): later assigns to this tensor don't change it. As in tinygrad
    (not torch), a .grad is cloned along."""
    if device is not None and (device := Device.canonicalize(device)) != self.device:
      ret = self._new(self.uop.copy_to_device(device))
    else: ret = self._new(self.uop.copy_to_device(self.device, clone=True))
    if ret.requires_grad is False: ret.requires_grad = None  # a clone of a detached tensor can get a grad (tinygrad)
    if self.grad is not None: ret.grad = self.grad.clone(device)
    return ret
  def detach(self) -> Tensor:
    """The same values, cut off from autograd."""; return Tensor(self.uop.detach(), requires_grad=False)
  def cast(self, dtype: DType | str) -> Tensor:
    """Convert to another dtype: `Tensor([1.7]).cast(dtypes.int32)` is [1]."""
    dtype = to_dtype(dtype)
    return self if dtype == self.dtype else self._new(self.uop.cast(dtype))
  def bitcast(self, dtype: DType | str) -> Tensor:
    """Reinterpret the bits as another dtype (the last axis rescales if the sizes differ)."""
    dtype = to_dtype(dtype)
    if dtype.itemsize != self.dtype.itemsize or not _computes(self):
      if not self.shape or (self.shape[-1] * self.dtype.itemsize) % dtype.itemsize:
        raise ShapeError(f"bitcast: can't view the last axis of {self.shape} {self.dtype} as {dtype}")
      # the bytes reread as another dtype: a view of the realized buffer (element-wise kernels can't change sizes)
      new_shape = (*self.shape[:-1], self.shape[-1] * self.dtype.itemsize // dtype.itemsize)
      view = self._buffer().view(prod(new_shape), dtype, 0) if self.numel() else Buffer(self.device, 0, dtype)
      return Tensor(UOp(Ops.BUFFER, dtype, (), view).reshape(new_shape))
    return self if dtype == self.dtype else Tensor(self.uop.bitcast(dtype))
  def float(self) -> Tensor: """Cast to float32."""; return self.cast(dtypes.float32)
  def half(self) -> Tensor: """Cast to float16."""; return self.cast(dtypes.float16)
  def double(self) -> Tensor: """Cast to float64."""; return self.cast(dtypes.float64)
  def int(self) -> Tensor: """Cast to int32."""; return self.cast(dtypes.int32)
  def long(self) -> Tensor: """Cast to int64."""; return self.cast(dtypes.int64)
  def bool(self) -> Tensor: """Cast to bool (nonzero is True)."""; return self.cast(dtypes.bool)
  def bfloat16(self) -> Tensor: """Cast to bfloat16."""; return self.cast(dtypes.bfloat16)
  def short(self) -> Tensor: """Cast to int16."""; return self.cast(dtypes.int16)
  def char(self) -> Tensor: """Cast to int8."""; return self.cast(dtypes.int8)
  def byte(self) -> Tensor: """Cast to uint8."""; return self.cast(dtypes.uint8)

  def assign(self, x: Any) -> Tensor:
    """Write x into this tensor's buffer (the one mutation; lazy like everything else). Returns self."""
    if not _computes(self): return self._write_file(x)
    if not isinstance(x, Tensor): x = Tensor(x, device=self.device, dtype=self.dtype)
    if x.device != self.device:
      raise ShapeError(f"assign: value is on device {x.device}, target on device {self.device}")
    if x.shape != self.shape:
      try: x = x.expand(self.shape) if len(x.shape) <= len(self.shape) else x.reshape(self.shape)
      except ValueError:
        raise ShapeError(f"assign: value of shape {x.shape} doesn't fit target of shape {self.shape}") from None
    if x.dtype != self.dtype: x = x.cast(self.dtype)
    if self.numel() == 0: return self  # no elements: nothing to write
    if self.uop.op is Ops.BITCAST:  # a write through a bitcast view goes into what it views, now
      viewed = Tensor(self.uop.src[0])
      return self.replace(viewed.assign(x.bitcast(viewed.dtype)).realize().bitcast(self.dtype))
    for hook in _assign_hooks or _assign_watchers: hook(self)  # (a trace's writes are its own: not a TinyJit's)
    if assign_window(self, x): return self if _assign_hooks else self.realize()  # a window at a Variable: see below
    path, whole = _view_path(self) if self._view_of is not None and self.uop is not x.uop else ([], False)
    if path and (not _writable(self.uop) or (whole or _assign_hooks) and not isinstance(self.device, tuple)):
      # a view (sharing its tensor's memory, as torch's): the whole top tensor written, so every tensor of the chain
      top, new = path[-1][0], _unview(x, path[0][1])
      if not whole: new = _unview(Tensor.full(self.shape, True, device=self.device), path[0][1]).where(new, top)
      _follow(path, top.assign(new))
      return self
    # a view of a buffer or of a pending write (this one follows it): written into; a lazy value or constant: rebound
    if not _writable(self.uop) or self.uop is x.uop:
      self.uop = x.uop
      return self
    part = any(c.op is not Ops.RESHAPE for c in state.view_chain(self.uop)[0])  # a shrink, permute...: not all of it
    # spread over devices: one write per device now, each followed like a one-device write (see uop)
    self.uop = multi.lower(self.uop.assign(x.uop)) if isinstance(self.device, tuple) else self.uop.assign(x.uop)
    return self.realize() if part and not _assign_hooks else self  # now (unless traced): the whole is what is read
  def _write_file(self, x: Any) -> Tensor:
    """assign into a tensor on a device that computes nothing (a file): x, computed where it is (given as a list or an
    array: on the default device), is copied into this tensor's bytes now."""
    x = (x if isinstance(x, Tensor) else Tensor(x)).cast(self.dtype)
    if x.shape != self.shape: x = x.expand(self.shape) if len(x.shape) <= len(self.shape) else x.reshape(self.shape)
    (dest := self._buffer()).copyin(x._buffer().as_bytes())
    state.rewritten([dest])  # (what reads this tensor from now on reads the new bytes)
    return self
  def replace(self, x: Tensor) -> Tensor:
    """Make this tensor stand for x's value (shapes must match); no data moves."""
    if x.shape != self.shape: raise ShapeError(f"replace: shape {x.shape} != {self.shape}")
    self.uop = x.uop
    return self

  # *** creation ***
  @staticmethod
  def from_url(url: str, gunzip: builtins.bool = False, **kwargs: Any) -> Tensor:
    """The bytes at url (downloaded once into the cache, see `fetch`) as a uint8 tensor."""
    return Tensor(fetch(url, gunzip=gunzip), **kwargs)
  @staticmethod
  def empty(*shape: Any, device: str | None = None, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
    """Uninitialized memory of the given shape."""
    shape, dt = _shape_arg(shape, "empty"), to_dtype(dtype or dtypes.default_float)
    if isinstance(device := Device.canonicalize(device), tuple):
      return Tensor(multi.multi(tuple(Tensor.empty(shape, device=d, dtype=dt).uop for d in device), None), **kwargs)
    return Tensor(UOp(Ops.BUFFER, dt, (), Buffer(device, prod(shape), dt)).reshape(shape), **kwargs)
  @staticmethod
  def const(value: Any, dtype: DType | str | None = None) -> Tensor:
    """A 0-d constant: `Tensor.const(2.5)` (dtype from the Python value unless given)."""
    return Tensor.full((), value, dtype=dtype)
  @staticmethod
  def full(shape: Any, fill_value: Any, dtype: DType | str | None = None, device: str | None = None,
           buffer: builtins.bool = False, **kwargs: Any) -> Tensor:
    """Every element fill_value: `Tensor.full((2, 3), 7)`. A constant (no memory; it folds into the kernels reading it,
    and has no gradient) unless buffer=True (tinygrad's keyword, whose default is True): then values in a buffer."""
    shape = _shape_arg((shape,), "full")
    if isinstance(fill_value, (list, tuple)): raise TypeError(f"full: fill_value must be a number, not {fill_value!r}")
    if isinstance(fill_value, (Tensor, UOp)): ret = Tensor(fill_value, dtype=dtype).reshape(()).expand(shape)
    else:
      if _numpy_scalar(fill_value): fill_value = fill_value.item()  # a numpy scalar acts as a Python number (as torch)
      dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
      ret = Tensor(_scalar(fill_value, dt, shape, Device.canonicalize(device)), **kwargs)
    return ret.contiguous() if buffer else ret
  @staticmethod
  def zeros(*shape: Any, **kwargs: Any) -> Tensor:
    """Zeros of the given shape (float32 unless dtype says otherwise): `Tensor.zeros(2, 3)`."""
    return Tensor.full(_shape_arg(shape, "zeros"), 0.0, **{"dtype": dtypes.default_float, **kwargs})
  @staticmethod
  def ones(*shape: Any, **kwargs: Any) -> Tensor:
    """Ones of the given shape (float32 unless dtype says otherwise): `Tensor.ones(2, 3)`."""
    return Tensor.full(_shape_arg(shape, "ones"), 1.0, **{"dtype": dtypes.default_float, **kwargs})
  def full_like(self, fill_value: Any, **kwargs: Any) -> Tensor:
    """fill_value in this tensor's shape, dtype and device, split as it is (dtype= and device= override)."""
    ret = Tensor.full(self.shape, fill_value, **{"dtype": self.dtype, "device": self.device, **kwargs})
    return ret if "device" in kwargs else ret.shard_like(self)  # (on one device: that device, ret itself)
  def const_like(self, value: Any, dtype: DType | str | None = None) -> Tensor:
    """value in this tensor's shape and device, in its dtype unless dtype says otherwise (no gradient link to self):
    `Tensor([1.5, 2.5]).const_like(3).tolist()` is [3.0, 3.0]."""
    return Tensor.full(self.shape, value, dtype=self.dtype if dtype is None else dtype, device=self.device)
  def zeros_like(self, **kwargs: Any) -> Tensor:
    """Zeros in this tensor's shape, dtype and device."""; return self.full_like(0, **kwargs)
  def ones_like(self, **kwargs: Any) -> Tensor:
    """Ones in this tensor's shape, dtype and device."""; return self.full_like(1, **kwargs)
  def empty_like(self, **kwargs: Any) -> Tensor:
    """Uninitialized memory in this tensor's shape, dtype and device."""
    return Tensor.empty(self.shape, **{"dtype": self.dtype, "device": self.device, **kwargs})
  @staticmethod
  def arange(start: Any, stop: Any = None, step: Any = 1, dtype: DType | str | None = None, device: str | None = None,
             requires_grad: builtins.bool | None = None) -> Tensor:
    """start, start+step, ... up to (not including) stop: `Tensor.arange(5)` is [0, 1, 2, 3, 4]. Ints are int32, or
    int64 when a value passes int32's range (torch's int64 where tinygrad's int32 can't hold it)."""
    if stop is None: start, stop = 0, start
    start, stop, step = state.concrete((start, stop, step))  # (bound Variables: their values, as SymInts)
    if step == 0: raise ArgumentError("arange: step must not be 0")
    if not all(math.isfinite(x) for x in (start, stop, step)):
      raise ArgumentError(f"arange: unsupported range {start} -> {stop} (step {step})")
    any_float = any(isinstance(x, float) for x in (start, stop, step))
    n = max(stop - start if step == 1 and isinstance(start, int) and isinstance(stop, int) else  # (a SymInt stays)
            math.ceil((stop - start) / step), 0)
    default = dtypes.default_float if any_float else dtypes.from_py([start, start + (n - 1) * step] if n else 0)
    dt = to_dtype(dtype) if dtype is not None else default
    device = Device.canonicalize(device)
    if n == 0: return Tensor.empty(0, dtype=dt, device=device, requires_grad=requires_grad)
    idx = _count_up(n, device)
    if dtypes.is_float(dt): idx = idx.cast(dtypes.float64 if dt == dtypes.float64 else dtypes.float32)
    elif dt.itemsize == 8: idx = idx.cast(dt)  # int64 steps and starts don't wrap in int32
    return (idx * step + start).cast(dt).requires_grad_(requires_grad)
  # *** the primitives, with broadcasting and dtype promotion ***
  def _apply(self, op: Ops, *others: Tensor) -> Tensor: return self._new(self.uop.alu(op, *map(_UOP, others)), *others)
  def _const(self, val: Any, dtype: DType | None = None) -> Tensor:
    """A constant broadcast to this tensor's shape, on its device."""
    return Tensor(UOp.const(dtype or self.dtype, val, self.shape, self.device))
  def _broadcasted(self, y: Any, reverse: builtins.bool = False, match_dtype: builtins.bool = True,
                   op: str = "op") -> tuple[Tensor, Tensor]:
    """(self, y) as two tensors of one shape (and one dtype, by PyTorch's promotion), swapped if reverse."""
    x: Tensor = self
    if (type(y) is float and dtypes.is_float(x.dtype)) or (type(y) is int and x.dtype != dtypes.bool):
      y = Tensor._wrap(UOp.const(x.dtype, y, x.shape, x.device), True)  # a Python number: x's dtype, shape, device
      return (y, x) if reverse else (x, y)
    if _is_numpy(y): y = y.item() if y.ndim == 0 else Tensor(y, device=x.device)  # numpy scalars act as Python numbers
    if type(y) is SymInt: y = y.expr  # (a size from a Variable: its expression, so replays serve every value)
    if not isinstance(y, Tensor):
      if isinstance(y, UOp) and (y.op in (Ops.BIND, Ops.DEFINE_VAR) or y.dtype == dtypes.index):  # a Variable (or an
        y = Tensor(y.cast(x.dtype if dtypes.is_int(x.dtype) else dtypes.default_int))  # expression): as a Python int
      elif not isinstance(y, (bool, int, float)):
        raise TypeError(f"{op}: can't combine a Tensor with {type(y).__name__}")
      else:
        dt = dtypes.default_float if isinstance(y, float) and not dtypes.is_float(x.dtype) else x.dtype
        if isinstance(y, int) and not isinstance(y, bool) and x.dtype == dtypes.bool:  # (int64 where int32 wraps)
          dt = dtypes.default_int if abs(y) <= dtypes.max(dtypes.default_int) else dtypes.int64
        y = Tensor._wrap(UOp.const(dt, y, x.shape, x.device), True)  # broadcast already (as _broadcast_to makes)
    if x.device != y.device and y.uop.op is not Ops.CONST:
      raise ArgumentError(f"{op}: tensors are on different devices ({x.device} and {y.device}); move one with .to()")
    if match_dtype and x.dtype != y.dtype:
      dt = least_upper_dtype(x.dtype, y.dtype)
      x, y = x.cast(dt), y.cast(dt)
    if reverse: x, y = y, x
    shape = broadcast_shape(x.shape, y.shape, op=op)
    return x._broadcast_to(shape), y._broadcast_to(shape)
  def _broadcast_to(self, shape: tuple[builtins.int, ...]) -> Tensor:
    return self if same_shape(self.shape, shape) else self.expand(shape)

  # *** indexing ***
  def __getitem__(self, indices: Any) -> Tensor:
    """Basic and advanced indexing: ints, slices (any step), None, Ellipsis, lists and integer Tensors.
    >>> Tensor.arange(6).reshape(2, 3)[1, ::2].tolist()
    [3, 5]
    >>> Tensor.arange(6).reshape(2, 3)[Tensor([1, 0])].tolist()
    [[3, 4, 5], [0, 1, 2]]"""
    return getitem(self, indices)
  def __setitem__(self, indices: Any, v: Any) -> None:
    """Write v into the indexed part of this tensor, now: `x[1:, 0] = 5`, `x[0] = Tensor([1, 2])`."""
    if not _computes(self):  # (into a file: a slice of it)
      self[indices]._write_file(v)
      return
    if isinstance(self.device, tuple):  # on several devices: written gathered on the first, then split as it was
      whole = self.to(self.device[0]).contiguous()
      whole[indices] = v.to(whole.device) if isinstance(v, Tensor) else v
      self.assign(whole.shard_like(self)).realize()
      return
    if self._view_of is not None and not _writable(self.uop) and (path := _view_path(self)[0]):
      _follow(path, path[-1][0].replace(path[-1][0].contiguous().realize()))  # the top gets a buffer, written below
    self.realize()
    if state.view_base(self.uop).op is Ops.CONST: self.uop = self.contiguous().realize().uop  # a constant gets a buffer
    if any(u.op is Ops.EXPAND and u.size > u.src[0].size for u in state.view_chain(self.uop)[0]):
      raise RuntimeError(f"setitem: this tensor of shape {self.shape} is an expanded view: its elements share memory")
    if self.requires_grad or getattr(v, "requires_grad", None): raise NotImplementedError(
        f"setitem: writing into or from a tensor that requires grad (target {self.shape}) would lose its graph; detach")
    target, tensor_idx = basic_index(self, indices)
    value = v if isinstance(v, Tensor) else Tensor(v, device=self.device, dtype=self.dtype)
    if tensor_idx: value = setitem_value(target, tensor_idx, value)  # tensor indices: all of it written, a few changed
    if not state.is_realized(target.uop): raise RuntimeError("setitem: a Variable index can't say where to write")
    target = Tensor(target.uop)  # a handle of its own (self's node is put aside during the write), the view let go
    # self's old contents aren't copied aside (state.snapshot_before): a value read from self is computed first
    chain, base = state.view_chain(self.uop)
    if base.arg.base in state.buffers_read(value.uop): value.realize()
    buf, views = base.arg, [(c.op, c.dtype, c.arg) for c in chain]
    del chain, base
    self._uop = UOp.const(self.dtype, 0, self.shape, self.device)
    try: target.assign(value).realize()
    finally:
      self._uop = state.buffer_node(buf)
      for op, dtype, arg in reversed(views): self._uop = UOp(op, dtype, (self._uop,), arg)

  # *** autograd ***
  def gradient(self, *targets: Tensor, gradient: Tensor | None = None,
               materialize_grads: builtins.bool = False) -> list[Tensor]:
    """d self / d target for each target (lazy tensors): `dx, dy = z.gradient(x, y)`. (materialize_grads: accepted
    for torch-style calls; unused targets get zeros either way, as in tinygrad.)"""
    if gradient is None:
      if self.shape != ():
        raise RuntimeError(f"gradient: pass `gradient=` for a non-scalar output of shape {self.shape}")
      gradient = Tensor(1.0, dtype=self.dtype, device=self.device)
    if gradient.shape != self.shape:
      raise ShapeError(f"gradient: shape {gradient.shape} doesn't match output {self.shape}")
    if bad := [t.dtype for t in (self, *targets) if not dtypes.is_float(t.dtype)]:
      raise RuntimeError(f"gradient: only float tensors have gradients, got {bad[0]} (as tinygrad and torch)")
    root = _with_lazy_defs(self.uop)
    target_uops = {t: _node_in(t, root) for t in targets}
    grads = compute_gradient(root, gradient.uop.cast(self.dtype), {u for u in target_uops.values() if u is not None})
    # a target nothing flows back to (not in the graph, or behind sign, argmax ...) gets zeros, as tinygrad's
    return [Tensor(grads[u]) if (u := target_uops[t]) is not None and u in grads else t.zeros_like() for t in targets]
  def backward(self, gradient: Tensor | None = None) -> Tensor:
    """Add d self / d t to t.grad for every floating-point tensor t in self's graph that is not a constant, computed
    ones included (as tinygrad; torch fills leaves only), requires_grad None meaning "if something needs it":
    `z = y.matmul(x).sum(); z.backward()` fills x.grad and y.grad. requires_grad=False opts out. A .grad adds up
    lazily; one that sums 8 calls' graphs unread is computed at the next call, so that memory stays bounded."""
    if gradient is None and self.shape != ():
      raise RuntimeError(f"backward: pass `gradient=` for a non-scalar output of shape {self.shape}")
    root = _with_lazy_defs(self.uop)
    nodes = set(root.toposort())
    wanted = [*STATE.grad_tensors.values(), *(t for t in list(STATE.float_tensors) if t._requires_grad is not False
                                                and state.view_base(t.uop).op is not Ops.CONST)]  # (shared nodes)
    targets = [t for t in dict.fromkeys(wanted) if _node_in(t, root, nodes) is not None]
    if not targets: raise RuntimeError("backward: nothing in the graph can have a gradient (constant, int, or no grad)")
    grads = self.gradient(*targets, gradient=gradient, materialize_grads=True)
    # a .grad summing 8 calls' graphs, unread, is computed first: each keeps its call's weights and activations alive,
    # so a loop over fixed float tensors (X, Y) grew without end (not in a capture: replays never add to it)
    full = [t.grad for t in targets if t.grad is not None and getattr(t.grad, "_terms", 1) >= 8]
    if full and not STATE.capturing: Tensor.realize_all(full)
    for t, g in zip(targets, grads):
      if g.shape != t.shape: raise RuntimeError(f"gradient shape {g.shape} != tensor shape {t.shape}")
      g = g.cast(t.dtype) if g.dtype != t.dtype else g
      if t.grad is None: t.grad = g
      else:  # the same .grad object accumulates (as torch)
        n = 1 if state.is_realized(t.grad.uop) else getattr(t.grad, "_terms", 1)
        t.grad.replace(t.grad + g)._terms = n + 1
    return self

  @staticmethod
  @contextmanager
  def train(mode: builtins.bool = True) -> Iterator[None]:
    """`with Tensor.train():` turns on training behaviour (dropout, batchnorm statistics)."""
    prev, Tensor.training = Tensor.training, mode
    try: yield
    finally: Tensor.training = prev
  @staticmethod
  @contextmanager
  def test() -> Iterator[None]:
    """`with Tensor.test():` turns training behaviour off."""
    with Tensor.train(False): yield

_HALF_MEMORYVIEW = sys.version_info >= (3, 12)  # memoryview knows float16 ("e") from Python 3.12 on

def _count_up(n: int, device: str) -> Tensor:
  """0, 1, ..., n-1 (int32, int64 past 2**31) as a running sum of ones, which codegen folds into index arithmetic:
  one kernel, no loop. (The window view behind the running sum spans about 2n*n positions, so long counts are made
  of short ones; codegen takes int64 index math where it must.)"""
  dt = dtypes.int32 if n <= 2 ** 31 else dtypes.int64
  if n <= 2 ** 24: return Tensor.full((n,), 1, dtype=dt, device=device)._cum_window("sum") - 1
  # a long count as block * 4096 + position in the block, two short counts (index math of (r//4096)*4096 + r%4096 is r)
  m = -(-n // 4096)
  blocks = _count_up(m, device).cast(dt).reshape(m, 1) * 4096
  return (blocks + _count_up(4096, device).cast(dt).reshape(1, 4096)).reshape(m * 4096)[:n]

def _with_lazy_defs(u: UOp) -> UOp:
  """u's graph with realized intermediates replaced by the graphs that made them (STATE.lazy_defs), so gradients
  reach their inputs (the scheduler still reads those nodes from their buffers: nothing is computed twice)."""
  if not (defs := STATE.lazy_defs): return u
  if None in (found := {n: defs.get(n) for n in u.toposort() if n in defs}).values():
    raise RuntimeError("backward: a value it needs was computed from tensors written since (an optimizer step, an "
                       "assign), as torch's 'modified by an inplace operation': call backward before the write")
  mapping = {n: _with_lazy_defs(d[0]) for n, d in found.items()}
  return substitute_keeping_rules(u, mapping) if mapping else u  # pow's gradient rule stays with its node

def _own(u: UOp) -> UOp:
  """u, or a write of its value into a fresh buffer when u is a lazy value or a constant (see Tensor._own_node)."""
  if (state.is_realized(u) and state.view_base(u).op is not Ops.CONST) or u.size == 0: return u
  return Tensor.empty(u.shape, dtype=u.dtype, device=u.device).uop.assign(u)

def _view_path(view: Tensor) -> tuple[list[tuple[Tensor, list[UOp]]], bool]:
  """The tensors view was made from by movement ops (`_view_of`) up to the highest one, the top, that view's node is
  still a view of, each with its ops over the top (outermost first), the top last; and whether view covers the whole
  top (no shrink). Empty if there is none, or view is expanded (its elements share memory)."""
  ups = [view]
  while (link := ups[-1]._view_of) is not None: ups.append(link[0])
  def ops_over(u: UOp, top: UOp) -> list[UOp] | None:
    ops: list[UOp] = []
    while u is not top and u.op in GroupOp.Movement: ops, u = ops + [u], u.src[0]
    return ops if u is top else None
  for k in range(len(ups) - 1, 0, -1):
    old = state.current(ups[k - 1]._view_of[1])  # type: ignore[index]  # (a buffer: its newest version)
    if (chain := ops_over(view.uop, old)) is None or any(c.op is Ops.EXPAND for c in chain): continue
    return [(t, c) for t in ups[:k] if (c := ops_over(t.uop, old)) is not None] + [(ups[k], [])], \
      all(c.op is not Ops.SHRINK for c in chain)
  return [], False

def _follow(path: list[tuple[Tensor, list[UOp]]], top: Tensor) -> None:
  """Each view of the path (see _view_path) rebuilt on its top's new node."""
  for t, chain in path[:-1]: t.uop, t._view_of = state.rebuild(top.uop, chain), (top, top.uop)

def _unview(x: Tensor, chain: list[UOp]) -> Tensor:
  """x in the shape the view chain (outermost first) was made from: zeros where it shrank, its padding dropped."""
  for c in chain:
    if c.op is Ops.RESHAPE: x = x.reshape(c.src[0].shape)
    elif c.op is Ops.PERMUTE: x = x.permute(argsort(c.arg))
    elif c.op is Ops.FLIP: x = x.flip([i for i, f in enumerate(c.arg) if f])
    elif c.op is Ops.PAD: x = x.shrink([(b, b + s) for (b, _), s in zip(c.arg, c.src[0].shape)])
    else: x = x.pad([(b, s - e) for (b, e), s in zip(c.arg, c.src[0].shape)])
  return x

def _writable(u: UOp) -> bool:
  """True when u is a view of a buffer (or of a write into one), or a MULTI of such views: assign writes into it."""
  base = state.view_base(u)
  return all(_writable(s) for s in base.src) if base.op is Ops.MULTI else base.op in (Ops.BUFFER, Ops.ASSIGN)

def _is_training() -> bool: return Tensor.training or bool(TRAINING)

# called with the target of every assign, before it changes (and STATE.realize_hooks with the nodes of every realize
# before it runs): a traced `function` records the writes to repeat on each call, and refuses to realize its inputs
_assign_hooks: list[Callable[[Tensor], None]] = []
_assign_watchers: list[Callable[[Tensor], Any]] = []  # told of every assign, changing nothing (TinyJit's calls)

def _make_buffer(data: bytes | memoryview, shape: tuple[int, ...], dtype: DType, device: str | None) -> UOp:
  """A buffer node holding data (device: a canonical name, or None for the default)."""
  if isinstance(device := Device.DEFAULT if device is None else device, tuple):
    return multi.multi(tuple(_make_buffer(data, shape, dtype, d) for d in device), None)
  buf = Buffer(device, prod(shape), dtype)
  if data: buf.copyin_later(bytes(data))
  ret = UOp(Ops.BUFFER, dtype, (), buf)
  return ret if len(shape) == 1 else ret.reshape(shape)  # (a buffer's node has its shape already)

def _node_in(t: Tensor, root: UOp, nodes: set[UOp] | None = None) -> UOp | None:
  """The node of t (now or before a realize) that appears in root's graph."""
  nodes = set(root.toposort()) if nodes is None else nodes
  if t.uop in nodes: return t.uop
  return next((u for u in (t._old_uops or ()) if u in nodes), None)

def _empty_nested(shape: tuple[int, ...]) -> list:
  """What tolist gives for a zero-size shape: nested lists, empty at the first axis of size 0."""
  return [] if shape[0] == 0 else [_empty_nested(shape[1:])] * shape[0]
