"""The meaning of every ALU primitive, in plain Python: constant folding and the PYTHON device use it (the definition
the other backends are checked against; docs/developer/runtime.md)."""
from __future__ import annotations
import math
from typing import Any, Callable
from fusegrad.dtype import DType, dtypes, wrap_int, truncate_float
from fusegrad.helpers import cdiv, cmod
from fusegrad.uop.ops import Ops

def _exp2(x: float) -> float:
  try: return 2.0 ** x
  except OverflowError: return math.inf

def _log2(x: float) -> float: return math.nan if math.isnan(x) or x < 0 else -math.inf if x == 0 else math.log2(x)
def _sin(x: float) -> float: return math.nan if math.isinf(x) or math.isnan(x) else math.sin(x)
def _sqrt(x: float) -> float: return math.nan if x < 0 or math.isnan(x) else math.sqrt(x)
def _recip(x: float) -> float: return math.copysign(math.inf, x) if x == 0 else 1.0 / x
def _fmod(a: float, b: float) -> float:  # C's fmod: exact, the dividend's sign; nan where Python's raises
  return math.nan if b == 0 or math.isinf(a) or math.isnan(a) or math.isnan(b) else math.fmod(a, b)
def _trunc(x: Any) -> Any: return x if isinstance(x, float) and not math.isfinite(x) else type(x)(math.trunc(x))
def _max(a: Any, b: Any) -> Any: return a if isinstance(a, float) and math.isnan(a) or a > b else b  # nan wins (torch)

def _mul(a: Any, b: Any) -> Any:
  try: return a * b
  except OverflowError: return math.inf if (a > 0) == (b > 0) else -math.inf

def _add(a: Any, b: Any) -> Any:
  try: return a + b
  except OverflowError: return math.inf if a > 0 else -math.inf

def _fdiv(a: float, b: float) -> float: return a / b if b != 0 else _mul(a, _recip(b))  # IEEE: x/0 is x * (1/0)

THREEFRY_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
THREEFRY_PARITY = 0x1BD11BDA

def threefry2x32(x: int, key: int) -> int:
  """Threefry-2x32 with 20 rounds (Random123): a 64-bit counter and 64-bit key give 64 random bits."""
  m = 0xFFFFFFFF
  x0, x1, k0, k1 = x & m, (x >> 32) & m, key & m, (key >> 32) & m
  ks = (k0, k1, THREEFRY_PARITY ^ k0 ^ k1)
  x0, x1 = (x0 + ks[0]) & m, (x1 + ks[1]) & m
  for r in range(20):
    rot = THREEFRY_ROTATIONS[r % 8]
    x0 = (x0 + x1) & m
    x1 = (((x1 << rot) | (x1 >> (32 - rot))) & m) ^ x0
    if r % 4 == 3:
      s = r // 4 + 1
      x0, x1 = (x0 + ks[s % 3]) & m, (x1 + ks[(s + 1) % 3] + s) & m
  return (x1 << 32) | x0

python_alu: dict[Ops, Callable[..., Any]] = {
  Ops.EXP2: _exp2, Ops.LOG2: _log2, Ops.SIN: _sin, Ops.SQRT: _sqrt, Ops.RECIPROCAL: _recip, Ops.TRUNC: _trunc,
  Ops.ADD: _add, Ops.MUL: _mul, Ops.FDIV: _fdiv, Ops.MAX: _max, Ops.THREEFRY: threefry2x32,
  Ops.IDIV: cdiv, Ops.MOD: lambda a, b: _fmod(a, b) if isinstance(a, float) else cmod(a, b),  # C's / % and fmod
  Ops.CMPLT: lambda a, b: a < b, Ops.CMPNE: lambda a, b: a != b,
  Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b, Ops.XOR: lambda a, b: a ^ b, Ops.SHL: lambda a, b: a << b,
  Ops.WHERE: lambda c, a, b: a if c else b, Ops.MULACC: lambda a, b, c: a * b + c, Ops.SHR: lambda a, b: a >> b}

def truncate(x: Any, dtype: DType) -> Any:
  """A Python value forced into dtype's range and precision."""
  if dtypes.is_float(dtype): return truncate_float(x, dtype.scalar())
  if dtypes.is_int(dtype): return wrap_int(int(x), dtype.scalar())
  return bool(x)

def exec_alu(op: Ops, dtype: DType, operands: list[Any]) -> Any:
  """The value of one ALU op on Python scalars, as the result dtype holds it."""
  if op is Ops.SHL and dtypes.is_int(dtype): operands = [operands[0], operands[1] % (dtype.itemsize * 8)]
  return truncate(python_alu[op](*operands), dtype)
