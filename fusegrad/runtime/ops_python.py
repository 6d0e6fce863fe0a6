"""The PYTHON device: runs the flat program directly, with no compiler. It is the reference other backends are
checked against (see docs/developer/runtime.md)."""
from __future__ import annotations
import array, base64, ctypes, pickle, struct, time
from typing import Any
from fusegrad.dtype import DType, dtypes, PtrDType
from fusegrad.device import Compiled, Allocator, Compiler
from fusegrad.helpers import prod
from fusegrad.renderer import Renderer
from fusegrad.uop.ops import UOp, Ops, GroupOp
from fusegrad.uop.alu import python_alu, truncate, exec_alu

class PythonRenderer(Renderer):
  """The 'source' is the pickled flat program."""
  def render(self, name: str, uops: list[UOp]) -> str: return base64.b64encode(pickle.dumps(uops)).decode()

class _HalfView:
  """float16 elements of a buffer (memoryview can't cast to 'e' before Python 3.12): converted one at a time."""
  def __init__(self, mv: memoryview): self.mv = mv.cast("H")
  def __getitem__(self, i: int) -> float: return struct.unpack("<e", struct.pack("<H", self.mv[i]))[0]
  def __setitem__(self, i: int, v: float) -> None: self.mv[i] = struct.unpack("<H", struct.pack("<e", v))[0]

Value = Any  # a scalar (uniform across threads) or a list with one entry per thread

def _truncate_list(vals: list, dtype: DType) -> list:
  """Round/wrap a list of results to dtype, in bulk where the array module can."""
  if dtype == dtypes.float32:
    try: return array.array("f", vals).tolist()
    except OverflowError: pass
  elif dtype == dtypes.float64 or dtype == dtypes.bool: return vals
  elif dtypes.is_int(dtype) and vals and dtypes.min(dtype) <= min(vals) and max(vals) <= dtypes.max(dtype): return vals
  return [truncate(v, dtype) for v in vals]

def _columns(*vals: Value) -> list[list]:
  """The values as lists of one entry per thread (a scalar repeated); at least one of them is a list."""
  n = next(len(v) for v in vals if isinstance(v, list))
  return [v if isinstance(v, list) else [v] * n for v in vals]

def _alu(op: Ops, dtype: DType, args: list[Value]) -> Value:
  if not any(isinstance(a, list) for a in args): return exec_alu(op, dtype, args)
  cols = _columns(*args)
  if op is Ops.SHL and dtypes.is_int(dtype): cols[1] = [b % (dtype.itemsize * 8) for b in cols[1]]
  return _truncate_list(list(map(python_alu[op], *cols)), dtype)

def _cast(x: Any, dtype: DType) -> Any:
  if dtype == dtypes.bool: return bool(x)
  if dtypes.is_float(dtype): return truncate(float(x), dtype)
  if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
    return dtypes.min(dtype) if not dtypes.is_unsigned(dtype) else 0
  return truncate(int(x), dtype)

def _bitcast(x: Any, dtype: DType, from_dtype: DType) -> Any:
  return struct.unpack(f"<{dtype.fmt}", struct.pack(f"<{from_dtype.fmt}", x))[0]

def _typed_view(mv: memoryview, dtype: DType) -> Any:
  """mv as an indexable sequence of dtype elements (bfloat16 stays raw 16-bit words: lowering converts them)."""
  mv = mv[:len(mv) - len(mv) % dtype.itemsize]  # an empty buffer is 1 byte: no elements
  if dtype == dtypes.float16: return _HalfView(mv)
  return mv.cast(dtype.fmt if dtype.fmt is not None else "H")

def _map(fn: Any, x: Value, *args: Any) -> Value:
  return [fn(v, *args) for v in x] if isinstance(x, list) else fn(x, *args)

class PythonProgram:
  def __init__(self, name: str, lib: bytes):
    self.name, self.uops = name, pickle.loads(base64.b64decode(lib))
    self.loop_end: dict[int, int] = {}  # RANGE position -> its ENDRANGE position
    self.loop_start: dict[int, int] = {}  # ENDRANGE position -> its RANGE position
    open_loops: list[int] = []
    for i, u in enumerate(self.uops):
      if u.op is Ops.RANGE: open_loops.append(i)
      elif u.op is Ops.ENDRANGE:
        self.loop_start[i] = open_loops.pop()
        self.loop_end[self.loop_start[i]] = i

  def __call__(self, *bufs: memoryview, global_size: tuple[int, ...] = (1, 1, 1), local_size: Any = None,
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    st = time.perf_counter()
    local_size = local_size or (1, 1, 1)
    group_threads = prod(local_size)
    nthreads = prod(global_size) * group_threads  # every thread of every workgroup, in lockstep (barriers are free)
    values, views, counters = dict[UOp, Value](), dict[UOp, Any](), dict[UOp, int]()
    local_base: dict[UOp, list[int]] = {}  # for shared memory: where each thread's workgroup's copy starts
    var_i, pc, uops = 0, 0, self.uops
    while pc < len(uops):
      u = uops[pc]
      op = u.op
      if op is Ops.DEFINE_GLOBAL:
        base = u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype
        views[u] = _typed_view(bufs[u.arg], base)
      elif op is Ops.DEFINE_VAR:
        values[u] = vals[var_i]
        var_i += 1
      elif op is Ops.SPECIAL:
        dim, size = int(u.arg[0][4:]), u.arg[1]
        if u.arg[0].startswith("l"):
          values[u] = [(t % group_threads // prod(local_size[:dim])) % size for t in range(nthreads)]
        else: values[u] = [(t // group_threads // prod(global_size[:dim])) % size for t in range(nthreads)]
        if nthreads == 1: values[u] = 0
      elif op is Ops.DEFINE_LOCAL:
        size, groups = u.arg[1], nthreads // group_threads
        views[u] = _typed_view(memoryview(bytearray(size * groups * u.dtype.base.itemsize)), u.dtype.base)
        local_base[u] = [t // group_threads * size for t in range(nthreads)]
      elif op is Ops.BARRIER: pass
      elif op is Ops.CONST: values[u] = u.arg
      elif op is Ops.RANGE:
        if values[u.src[0]] == 0:  # (a bound may be a Variable's expression)
          pc = self.loop_end[pc] + 1
          continue
        counters[u] = values[u] = 0
      elif op is Ops.ENDRANGE:
        r = u.src[0]
        counters[r] += 1
        if counters[r] < values[r.src[0]]:
          values[r] = counters[r]
          pc = self.loop_start[pc] + 1
          continue
      elif op is Ops.LOAD or op is Ops.STORE:  # (index, value if a store, gate), the index offset into shared memory
        args = [values[s] for s in u.src[1:] if s.op is not Ops.BARRIER]
        if u.src[0] in local_base: args[0] = _alu(Ops.ADD, dtypes.index, [args[0], local_base[u.src[0]]])
        if op is Ops.LOAD: values[u] = self._load(views[u.src[0]], args, u.dtype)
        else: self._store(views[u.src[0]], args)
      elif op is Ops.DEFINE_ACC: values[u] = values[u.src[0]]
      elif op is Ops.ASSIGN: values[u.src[0]] = values[u] = values[u.src[1]]
      elif op is Ops.CAST: values[u] = _map(_cast, values[u.src[0]], u.dtype)
      elif op is Ops.BITCAST: values[u] = _map(_bitcast, values[u.src[0]], u.dtype, u.src[0].dtype)
      elif op in GroupOp.ALU: values[u] = _alu(op, u.dtype, [values[s] for s in u.src])
      else: raise NotImplementedError(f"PYTHON can't run {op}")
      pc += 1
    return time.perf_counter() - st if wait else None

  @staticmethod
  def _load(mv: Any, args: list[Value], dtype: DType) -> Value:
    idx, gate = args[0], (args[1] if len(args) > 1 else True)  # gate: a bool, or a list of them (one per thread)
    zero = 0.0 if dtypes.is_float(dtype) else (False if dtype == dtypes.bool else 0)
    if not isinstance(idx, list) and not isinstance(gate, list): return mv[idx] if gate else zero
    if gate is True: return [mv[i] for i in idx]
    return [mv[i] if g else zero for i, g in zip(*_columns(idx, gate))]

  @staticmethod
  def _store(mv: Any, args: list[Value]) -> None:
    idx, val, gate = args[0], args[1], (args[2] if len(args) > 2 else True)
    if not any(isinstance(a, list) for a in (idx, val, gate)):
      if gate: mv[idx] = val
      return
    for i, v, g in zip(*_columns(idx, val, gate)):
      if g: mv[i] = v

class PythonAllocator(Allocator):
  def alloc(self, nbytes: int) -> memoryview: return memoryview(bytearray(nbytes))
  def copyin(self, dest: memoryview, src: memoryview) -> None: dest[:] = src
  def copyout(self, dest: memoryview, src: memoryview) -> None: dest[:] = src
  def offset(self, handle: memoryview, offset: int, nbytes: int) -> memoryview: return handle[offset:offset + nbytes]
  def from_pointer(self, ptr: int, nbytes: int) -> memoryview:
    return memoryview((ctypes.c_uint8 * nbytes).from_address(ptr)).cast("B")

class PythonDevice(Compiled):
  def __init__(self, device: str):
    renderer = PythonRenderer(device="PYTHON", global_max=(2 ** 31 - 1,) * 3, local_max=(1024, 1024, 64),
                              has_local=True, has_shared=True, max_workgroup=1024, supports_bfloat16=False)
    super().__init__(device, PythonAllocator(), renderer, _PythonCompiler(), PythonProgram)

class _PythonCompiler(Compiler):
  def compile(self, src: str) -> bytes: return src.encode()
