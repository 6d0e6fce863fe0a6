"""Data types: the scalar types, promotion (PyTorch's rules, tinygrad's defaults), and conversions."""
from __future__ import annotations
import builtins, math, struct
from dataclasses import dataclass, field
from typing import Any, Final
from fusegrad.helpers import DEFAULT_FLOAT

@dataclass(frozen=True)
class DType:
  """A scalar type, or a vector of `count` scalars (used inside kernels only)."""
  priority: int   # order used to break ties when printing; not used for promotion
  itemsize: int   # bytes per element
  name: str
  fmt: str | None  # struct / memoryview format character; None for bfloat16 (stored as raw 16 bits)
  count: int = 1
  # equality and hashing run for every node built: the fields' tuple and a hash of ints (the same in every process)
  # are computed once; the tuple (equal exactly when the dtypes are) keys nodes, hashed without a Python call
  _key: tuple = field(init=False, repr=False, compare=False)
  def __post_init__(self) -> None:
    object.__setattr__(self, "_key", self._fields())
    object.__setattr__(self, "_hash", hash((self.priority, self.itemsize, self.count)))
  def __eq__(self, other: object) -> bool:
    return self is other or (type(other) is type(self) and self._key == other._key)  # type: ignore
  def __hash__(self) -> int: return self._hash  # type: ignore
  def _fields(self) -> tuple: return (self.priority, self.itemsize, self.name, self.fmt, self.count)
  def __reduce_ex__(self, protocol: Any) -> Any:  # a scalar unpickles as the module's own object: `is` stays true
    named = type(self) is DType and self.count == 1 and getattr(dtypes, self.name, None) == self
    return (getattr, (dtypes, self.name)) if named else super().__reduce_ex__(protocol)
  def __repr__(self) -> str:
    return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.scalar().name}.vec({self.count})"
  def __lt__(self, other: DType) -> bool:
    return (self.priority, self.itemsize, self.name) < (other.priority, other.itemsize, other.name)
  def vec(self, n: int) -> DType:
    assert self.count == 1, f"can't vectorize {self} again"
    return self if n == 1 else DType(self.priority, self.itemsize * n, self.name, None, n)
  def scalar(self) -> DType: return DTYPES_DICT[self.name] if self.count > 1 else self
  def ptr(self, local: bool = False) -> PtrDType:
    return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, self, local)
  @property
  def bitsize(self) -> int: return self.itemsize * 8
  @property
  def min(self) -> Any:
    """The minimum: -2**(bits-1) or 0 for ints, -inf for floats, False for bool."""; return dtypes.min(self)
  @property
  def max(self) -> Any:
    """The maximum: 2**(bits-1)-1 or 2**bits-1 for ints, inf for floats, True for bool."""; return dtypes.max(self)

@dataclass(frozen=True)
class PtrDType(DType):
  """A pointer to global (or, if local, workgroup-shared) memory holding elements of `base`."""
  base: DType = None  # type: ignore
  local: bool = False
  def _fields(self) -> tuple: return (*super()._fields(), self.base, self.local)
  def __repr__(self) -> str: return f"{self.base!r}.ptr({'local=True' if self.local else ''})"

class _DTypesMeta(type):
  """Gives `dtypes` its one computed name: default_float follows the DEFAULT_FLOAT flag (Context changes it)."""
  @property
  def default_float(cls) -> DType: return DEFAULT_FLOAT.value
  @default_float.setter
  def default_float(cls, dt: DType | str) -> None: DEFAULT_FLOAT.value = DEFAULT_FLOAT.check(dt)

class dtypes(metaclass=_DTypesMeta):
  """The dtype namespace: dtypes.float32, dtypes.is_float(dt), dtypes.from_py(3.0) ..."""
  void: Final[DType] = DType(-1, 0, "void", None)
  bool: Final[DType] = DType(0, 1, "bool", "?")
  int8: Final[DType] = DType(1, 1, "char", "b")
  uint8: Final[DType] = DType(2, 1, "uchar", "B")
  int16: Final[DType] = DType(3, 2, "short", "h")
  uint16: Final[DType] = DType(4, 2, "ushort", "H")
  int32: Final[DType] = DType(5, 4, "int", "i")
  uint32: Final[DType] = DType(6, 4, "uint", "I")
  int64: Final[DType] = DType(7, 8, "long", "q")
  uint64: Final[DType] = DType(8, 8, "ulong", "Q")
  float16: Final[DType] = DType(9, 2, "half", "e")
  bfloat16: Final[DType] = DType(10, 2, "bfloat16", None)
  float32: Final[DType] = DType(11, 4, "float", "f")
  float64: Final[DType] = DType(12, 8, "double", "d")
  # aliases
  half, float, double = float16, float32, float64
  char, uchar, short, ushort, int, uint, long, ulong = int8, uint8, int16, uint16, int32, uint32, int64, uint64
  # defaults (tinygrad's: Tensor([1, 2]) is int32, Tensor([1.0]) is float32)
  default_int: DType = int32
  # index arithmetic inside kernels: never wraps; int32, or int64 where indices pass 2**31 (codegen/lower.py)
  index: Final[DType] = DType(-2, 8, "index", "q")
  floats: Final = (float16, bfloat16, float32, float64)
  uints: Final = (uint8, uint16, uint32, uint64)
  sints: Final = (int8, int16, int32, int64)
  ints: Final = uints + sints
  int8s, int16s, int32s, int64s = (uint8, int8), (uint16, int16), (uint32, int32), (uint64, int64)  # (unsigned, signed)
  all: Final = (bool,) + ints + floats

  @staticmethod
  def is_float(x: DType) -> builtins.bool: return x.scalar() in _FLOATS
  @staticmethod
  def is_int(x: DType) -> builtins.bool: return x.scalar() in _INTS
  @staticmethod
  def is_unsigned(x: DType) -> builtins.bool: return x.scalar() in _UINTS
  @staticmethod
  def is_bool(x: DType) -> builtins.bool: return x.scalar() == dtypes.bool
  @staticmethod
  def from_py(x: Any) -> DType:
    """The dtype a Python value (or nested list of values) becomes."""
    if isinstance(x, (list, tuple)):
      if any(type(v) is float for v in x) and all(type(v) is float or (type(v) is int and -2 ** 63 <= v < 2 ** 63)
                                                   for v in x):
        return dtypes.default_float  # a float among Python numbers: the default float (the common case, quickly)
      return max((dtypes.from_py(v) for v in x), default=dtypes.default_float, key=_py_rank)
    if isinstance(x, bool): return dtypes.bool
    if isinstance(x, int):  # int32 (tinygrad's default), int64 for what int32 can't hold (torch's), never a wrap
      if -2 ** 31 <= x < 2 ** 31: return dtypes.default_int
      if -2 ** 63 <= x < 2 ** 63: return dtypes.int64
      raise OverflowError(f"the Python int {x} doesn't fit in int64")
    if isinstance(x, float): return dtypes.default_float
    raise TypeError(f"can't make a tensor from a {type(x).__name__}: {x!r}")
  @staticmethod
  def as_const(val: Any, dtype: DType) -> Any:
    """A Python value converted to what a constant of `dtype` holds (bool, wrapped int or float)."""
    if isinstance(val, tuple): return tuple(dtypes.as_const(v, dtype) for v in val)
    if dtypes.is_float(dtype): return truncate_float(float(val), dtype.scalar())
    if dtypes.is_int(dtype):
      if isinstance(val, float):
        if math.isnan(val) or math.isinf(val): return 0
        val = int(val)  # truncates toward zero, like C
      return wrap_int(int(val), dtype)
    return bool(val)
  @staticmethod
  def min(dtype: DType) -> Any:
    if dtypes.is_int(dtype): return 0 if dtypes.is_unsigned(dtype) else -2 ** (dtype.itemsize * 8 - 1)
    return -math.inf if dtypes.is_float(dtype) else False
  @staticmethod
  def max(dtype: DType) -> Any:
    if dtypes.is_int(dtype): return 2 ** (dtype.itemsize * 8 - (0 if dtypes.is_unsigned(dtype) else 1)) - 1
    return math.inf if dtypes.is_float(dtype) else True
  @staticmethod
  def finfo(dtype: DType) -> tuple[builtins.int, builtins.int]:
    """(exponent bits, mantissa bits) of a float dtype."""
    if not dtypes.is_float(dtype): raise TypeError(f"{dtype} is not a float dtype")
    return {dtypes.float16: (5, 10), dtypes.bfloat16: (8, 7), dtypes.float32: (8, 23), dtypes.float64: (11, 52)}[dtype]
  @staticmethod
  def fields() -> dict[str, DType]: return DTYPES_DICT

# the same sets for membership tests by hash (codegen asks these about every constant it makes)
_FLOATS, _INTS, _UINTS = frozenset(dtypes.floats), frozenset((*dtypes.ints, dtypes.index)), frozenset(dtypes.uints)

DTYPES_DICT: dict[str, DType] = {dt.name: dt for dt in dtypes.all}
# the names users write: "float32", "int8", torch-style aliases too
NAMED_DTYPES: dict[str, DType] = {**{n: getattr(dtypes, n) for n in ("bool", "int8", "uint8", "int16", "uint16",
  "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64")}, **DTYPES_DICT}

def _parse_default_float(val: Any) -> DType:
  """The float dtype a DEFAULT_FLOAT value names: a float DType, its name in any case (HALF), or "" for float32."""
  if isinstance(val, str) and val == "": return dtypes.float32
  dt = val if isinstance(val, DType) else NAMED_DTYPES.get(val.lower()) if isinstance(val, str) else None
  if dt is None or not dtypes.is_float(dt) or isinstance(dt, PtrDType):
    raise ValueError(f"DEFAULT_FLOAT={val!r} is invalid: DEFAULT_FLOAT takes a float dtype or its name (HALF, "
                     "BFLOAT16, FLOAT64 ...)")
  return dt
DEFAULT_FLOAT.parse = _parse_default_float
DEFAULT_FLOAT.value = DEFAULT_FLOAT.check(DEFAULT_FLOAT.value)

class UnknownDTypeError(TypeError, AttributeError):
  """A dtype name that names nothing: torch's TypeError, and the AttributeError of tinygrad's `dtypes.<name>` lookup."""

def to_dtype(x: DType | str) -> DType:
  """A DType from a DType or its name ("float32", "half", "int"); raises on unknown names."""
  if isinstance(x, DType): return x
  if isinstance(x, str) and x in NAMED_DTYPES: return NAMED_DTYPES[x]
  if type(x).__module__.split(".")[0] == "numpy" or isinstance(x, type): return from_numpy(x)  # np.dtype("int64") too
  raise UnknownDTypeError(f"unknown dtype {x!r}")

def _py_rank(dt: DType) -> int:
  return 0 if dt == dtypes.bool else 1 if dt == dtypes.default_int else 2 if dt == dtypes.int64 else 3

class ConversionOverflowError(OverflowError, RuntimeError):
  """A Python value an integer dtype can't hold, at creation: NumPy's OverflowError, torch's RuntimeError."""

class IntegerDivisionByZeroError(ZeroDivisionError, RuntimeError):
  """An integer // or % by zero: a ZeroDivisionError (Python's) and a RuntimeError (torch's)."""

def checked_ints(values: list, dtype: DType) -> None:
  """ConversionOverflowError unless every Python value converts to the integer dtype as torch's creation allows: in its
  range (a float before truncation), or a negative int down to -max into uint8/16/32 (torch's one wrap)."""
  lo, hi = dtypes.min(dtype), dtypes.max(dtype)
  ilo = -hi if dtypes.is_unsigned(dtype) and dtype.itemsize < 8 else lo
  if all(type(v) is int for v in values) and (not values or (ilo <= min(values) and max(values) <= hi)): return
  for v in values:
    if isinstance(v, (float, int)) and not isinstance(v, bool) and not (ilo if isinstance(v, int) else lo) <= v <= hi:
      name = f"{'u' * dtypes.is_unsigned(dtype)}int{8 * dtype.itemsize}"
      raise ConversionOverflowError(f"value {v!r} cannot be converted to type {name} without overflow")

def wrap_int(x: int, dtype: DType) -> int:
  """x reduced to the range of the integer dtype, as C's two's complement wraparound does."""
  bits = dtype.itemsize * 8
  x &= (1 << bits) - 1
  return x - (1 << bits) if not dtypes.is_unsigned(dtype) and x >= 1 << (bits - 1) else x

# *** promotion: a lattice, each type points to the types it promotes to (PyTorch's rules) ***
_promo_lattice: dict[DType, list[DType]] = {
  dtypes.bool: [dtypes.int8, dtypes.uint8], dtypes.int8: [dtypes.int16], dtypes.int16: [dtypes.int32],
  dtypes.int32: [dtypes.int64], dtypes.int64: [dtypes.float16, dtypes.bfloat16],
  dtypes.uint8: [dtypes.int16, dtypes.uint16], dtypes.uint16: [dtypes.int32, dtypes.uint32],
  dtypes.uint32: [dtypes.int64, dtypes.uint64], dtypes.uint64: [dtypes.float16, dtypes.bfloat16],
  dtypes.float16: [dtypes.float32], dtypes.bfloat16: [dtypes.float32], dtypes.float32: [dtypes.float64],
  dtypes.float64: []}

def _upper_set(dt: DType) -> set[DType]: return {dt}.union(*(_upper_set(up) for up in _promo_lattice[dt]))

def least_upper_dtype(*ds: DType) -> DType:
  """The smallest dtype that all of ds promote to: int8+uint8 -> int16, int32+float16 -> float16."""
  common = set.intersection(*(_upper_set(d.scalar()) for d in ds))
  # the lowest in the lattice; float16 before bfloat16 where both are (int64 + uint64), not the set's hash order
  return min(common, key=lambda d: (-len(_upper_set(d)), d.priority))

def least_upper_float(dt: DType) -> DType:
  """dt if it is a float, else the default float (int / int -> float32)."""
  return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.default_float)

def sum_acc_dtype(dt: DType) -> DType:
  """The dtype a sum or product of dt accumulates in: bools, ints int64 as torch (uint64 stays), floats >= float32."""
  if dt == dtypes.uint64: return dt
  return dtypes.int64 if dtypes.is_int(dt) or dt == dtypes.bool else least_upper_dtype(dt, dtypes.float32)

# *** conversions used by the PYTHON device and by Tensor creation ***
def float_to_bf16_bits(x: float) -> int:
  """Round a float to bfloat16 (round to nearest even) and return its 16 bits."""
  if math.isnan(x): return 0x7FC0
  bits = struct.unpack("<I", struct.pack("<f", x if abs(x) < 3.4e38 else math.copysign(math.inf, x)))[0]
  return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF

def bf16_bits_to_float(b: int) -> float: return struct.unpack("<f", struct.pack("<I", (b & 0xFFFF) << 16))[0]

def truncate_float(x: float, dtype: DType) -> float:
  """x rounded to the precision of a float dtype (overflow gives inf)."""
  if dtype == dtypes.float64: return float(x)
  if dtype == dtypes.bfloat16: return bf16_bits_to_float(float_to_bf16_bits(x))
  fmt = "f" if dtype == dtypes.float32 else "e"
  try: return struct.unpack(fmt, struct.pack(fmt, x))[0]
  except OverflowError: return math.copysign(math.inf, x)

def from_numpy(npdtype: Any) -> DType:
  import numpy as np
  npdtype = np.dtype(npdtype)
  if npdtype.kind == "V" and npdtype.itemsize == 2 or str(npdtype) == "bfloat16": return dtypes.bfloat16
  # a dtype's fmt is numpy's type character too (and C's long is 64 bits on the platforms numpy builds for here)
  lookup = {**{dt.fmt: dt for dt in dtypes.all if dt.fmt is not None}, "l": dtypes.int64, "L": dtypes.uint64}
  if npdtype.char not in lookup: raise TypeError(f"numpy dtype {npdtype} has no fusegrad equivalent")
  return lookup[npdtype.char]

def to_numpy(dtype: DType) -> Any:
  import numpy as np
  return np.dtype(np.uint16) if dtype == dtypes.bfloat16 else np.dtype(dtype.fmt)
