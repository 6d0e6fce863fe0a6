"""The one node type of every stage: UOp(op, dtype, src, arg), immutable and hash-consed (docs/developer/README.md)."""
from __future__ import annotations
import atexit, gc, itertools, math, re, struct, weakref
from enum import Enum, auto
from typing import Any, Callable, Sequence
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import prod, argsort

class Ops(Enum):
  # the lazy graph's leaves and buffer ops
  SINK = auto(); DEVICE = auto(); BUFFER = auto(); CONST = auto(); DEFINE_VAR = auto(); BIND = auto()  # noqa: E702
  COPY = auto(); CONTIGUOUS = auto(); ASSIGN = auto(); DETACH = auto()  # noqa: E702
  MULTI = auto()  # a tensor on several devices (engine/multi.py): src one node per device, arg the split axis
  # movement: zero-copy views, never kernels
  RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()  # noqa: E702
  # reduce over axes of a tensor (arg: (ALU op, axes))
  REDUCE_AXIS = auto()
  # unary ALU
  EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto(); RECIPROCAL = auto(); TRUNC = auto()  # noqa: E702
  # binary ALU
  ADD = auto(); MUL = auto(); FDIV = auto(); IDIV = auto(); MOD = auto(); MAX = auto()  # noqa: E702
  CMPLT = auto(); CMPNE = auto(); AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto(); THREEFRY = auto()  # noqa: E702
  # ternary ALU
  WHERE = auto(); MULACC = auto()  # noqa: E702
  # type changes
  CAST = auto(); BITCAST = auto()  # noqa: E702
  # kernel level: the scheduler's ASTs and codegen's flat programs
  DEFINE_GLOBAL = auto(); DEFINE_LOCAL = auto(); DEFINE_ACC = auto(); RANGE = auto(); SPECIAL = auto()  # noqa: E702
  LOAD = auto(); STORE = auto(); REDUCE = auto(); ENDRANGE = auto()  # noqa: E702
  BARRIER = auto(); VECTORIZE = auto(); GEP = auto(); NOOP = auto()  # noqa: E702
  def __repr__(self) -> str: return f"Ops.{self.name}"
  __hash__ = object.__hash__  # members are singletons: identity is equality (and hashing is on every node built)

class GroupOp:
  Unary = {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.TRUNC}
  Binary = {Ops.ADD, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR,
            Ops.SHL, Ops.SHR, Ops.THREEFRY}
  Ternary = {Ops.WHERE, Ops.MULACC}
  ALU = Unary | Binary | Ternary
  Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
  Movement = {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP}
  Commutative = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR}
  Comparison = {Ops.CMPLT, Ops.CMPNE}
  # math functions: costly per element, so the heuristic gives them whole SIMD registers (codegen/heuristic.py)
  Math = {Ops.EXP2, Ops.LOG2, Ops.SQRT, Ops.SIN, Ops.RECIPROCAL, Ops.FDIV}
  # ops a vector renderer computes on whole vectors (codegen/vectorize.py): SIN has no vector form, it goes lane by lane
  Vector = {Ops.ADD, Ops.MUL, Ops.MULACC, Ops.MAX} | (Math - {Ops.SIN})

class AxisType(Enum):
  """What a kernel RANGE becomes in the generated code."""
  GLOBAL = auto()   # a launch dimension (gidx on GPUs, an outer loop on the CPU)
  LOCAL = auto()    # a workgroup dimension (lidx)
  LOOP = auto()     # a plain loop over output elements
  REDUCE = auto()   # a loop that accumulates
  GROUP = auto()    # a reduce split across a workgroup with shared memory
  UPCAST = auto()   # unrolled output elements (each gets its own registers)
  UNROLL = auto()   # an unrolled reduce axis (one accumulator)
  LANES = auto()    # an unrolled reduce axis with one accumulator per value (partial sums, added after the loop)
  THREAD = auto()   # a CPU thread index
  def __repr__(self) -> str: return f"AxisType.{self.name}"

_pack_d = struct.Struct("<d").pack

def _arg_key(arg: Any) -> Any:
  # floats are keyed by their bits so that 0.0 and -0.0 (and each nan) stay distinct constants
  if type(arg) is float: return ("f", _pack_d(arg))
  return arg

class _Ref(weakref.ref):  # the intern table's reference to a node, with its key (KeyedRef: 2 Python calls, slower)
  __slots__ = ("key",)
  key: tuple

def _uninterned(ref: _Ref) -> None:  # (UOp is None at interpreter shutdown: the globals are gone, the table too)
  if UOp is not None and UOp._interned.get(ref.key) is ref: del UOp._interned[ref.key]

_BOOL_ARITH = {Ops.ADD: Ops.OR, Ops.MUL: Ops.AND}
_consts: dict[tuple, UOp] = {}  # (dtype, value type, value key, shape, device) -> the constant made (UOp.const)
atexit.register(gc.freeze)  # the exit's collections don't walk every node (0.3 s after the README's job; docs/speed.md)

def postorder(roots: Sequence[UOp], below: Callable[[UOp], Sequence[UOp]]) -> dict[UOp, None]:
  """The nodes reachable from roots through below(node), each after the nodes below it (iterative: deep graphs are
  fine; a graph has no cycles)."""
  visited: dict[UOp, None] = {}
  for root in roots:
    stack = [(root, iter(below(root)))] if root not in visited else []
    while stack:
      node, srcs = stack[-1]
      for s in srcs:  # the first source not visited yet goes on the stack (none of the stack's nodes can be)
        if s not in visited:
          stack.append((s, iter(below(s))))
          break
      else:
        stack.pop()
        visited[node] = None
  return visited
def _sources(n: UOp) -> tuple[UOp, ...]: return n.src

def size_one(s: int) -> bool: return s == 1 and type(s) is not SymInt  # 1 at every value (a Variable's 1 isn't)
def symbolic(shape: tuple) -> bool: return any(type(s) is SymInt for s in shape)  # a length from a Variable in it
def same_shape(a: tuple, b: tuple) -> bool:  # equal sizes, symbolic in the same places (a SymInt == its value, but
  return a == b and hash(a) == hash(b)  # it hashes with its expression: fast, and a collision only loses symbolism)

class UOp:
  """An immutable, hash-consed node. Build with UOp(op, dtype, src, arg); equal parts give the same object."""
  __slots__ = ("op", "dtype", "src", "arg", "_cache", "__weakref__")
  _interned: dict[tuple, weakref.ReferenceType] = {}  # key -> the node, weakly (a dead node's entry goes: _uninterned)
  op: Ops
  dtype: DType
  src: tuple[UOp, ...]
  arg: Any
  _cache: dict[str, Any]  # derived facts (shape, device, bounds ...), computed once per node

  def __new__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
    key = (op, dtype._key, src, ("f", _pack_d(arg)) if type(arg) is float else arg)  # _arg_key, inlined (hot)
    if (ref := UOp._interned.get(key)) is not None and (ret := ref()) is not None: return ret
    ret = object.__new__(cls)
    ret.op, ret.dtype, ret.src, ret.arg, ret._cache = op, dtype, src, arg, {}
    new = _Ref(ret, _uninterned)
    new.key = key
    if (ref := UOp._interned.setdefault(key, new)) is not new:  # another thread made it meanwhile: one node stays
      if (other := ref()) is not None: return other
      UOp._interned[key] = new
    return ret
  def __reduce__(self) -> tuple: return UOp, (self.op, self.dtype, self.src, self.arg)
  def replace(self, **kwargs: Any) -> UOp:
    return UOp(kwargs.get("op", self.op), kwargs.get("dtype", self.dtype), kwargs.get("src", self.src),
               kwargs.get("arg", self.arg))

  # *** graph walking ***
  @property
  def is_realized(self) -> bool:
    """True when this node is (a view of) a buffer, its values in memory (tinygrad's name): not lazy, not a const."""
    u = self
    while u.op in GroupOp.Movement or u.op is Ops.DETACH: u = u.src[0]
    return u.op is Ops.BUFFER
  @property
  def buffer(self) -> Any:
    """The Buffer holding a realized node's values (tinygrad's name; a view gives its base's): raises when lazy."""
    u = self
    while u.op in GroupOp.Movement or u.op is Ops.DETACH: u = u.src[0]
    if u.op is not Ops.BUFFER: raise RuntimeError(f"buffer: a {u.op.name} node has no buffer (realize it first)")
    return u.arg
  realized = property(lambda self: self.buffer if self.is_realized else None)  # (tinygrad's name) the Buffer or None
  def has_buffer_identity(self) -> bool:
    """True when this node is a buffer, or a reshape of one: it names memory of its own (tinygrad's name)."""
    return self.src[0].has_buffer_identity() if self.op is Ops.RESHAPE else self.op is Ops.BUFFER
  @property
  def axis(self) -> int | None:
    """The axis a sharded (MULTI) node is split on: None when replicated or not sharded (tinygrad's name)."""
    return self.arg if self.op is Ops.MULTI else None
  def toposort(self, gate: Callable[[UOp], bool] | None = None) -> list[UOp]:
    """All nodes reachable from self, sources before users (iterative: deep graphs are fine).
    With gate, the walk does not descend into the sources of nodes where gate(node) is False."""
    if gate is None and (known := self._cache.get("topo")) is not None: return [*known, self]  # (self: no cycle)
    ret = list(postorder((self,), _sources if gate is None else lambda n: n.src if gate(n) else ()))
    if gate is None and self.op is Ops.SINK: self._cache["topo"] = tuple(ret[:-1])  # a kernel: each pass walks it
    return ret

  # *** shapes of lazy-graph nodes ***
  @property
  def shape(self) -> tuple[int, ...]:
    if (ret := self._cache.get("shape")) is not None: return ret  # (derived's first step, inline: hot)
    return derived(self, "shape", _infer_shape)
  @property
  def size(self) -> int: return prod(self.shape)
  @property
  def base(self) -> UOp:
    """The node below any chain of movement ops."""
    ret = self
    while ret.op in GroupOp.Movement: ret = ret.src[0]
    return ret

  # *** constructors used by Tensor, autograd and the passes ***
  @property
  def device(self) -> str | None:
    """The device a tensor-graph node lives on (None for kernel-level nodes and bare constants)."""
    if (ret := self._cache.get("device", _MISSING)) is not _MISSING: return ret  # (derived's first step, inline: hot)
    return derived(self, "device", _infer_device)
  @staticmethod
  def const(dtype: DType, val: Any, shape: tuple[int, ...] | None = None, device: str | None = None) -> UOp:
    """A constant: bare (for kernels and index math), or on a device and broadcast to shape (for tensors)."""
    # kept for the next use, by the Python number given (converting it is most of the cost; Tensor + 1 makes 4 nodes)
    key = (dtype._key, type(val), _arg_key(val), None if shape is None else tuple(shape), device)
    if type(val) in (int, float, bool) and (ret := _consts.get(key)) is not None: return ret
    if type(val) is SymInt and shape is None and device is None: return val.expr.cast(dtype)  # (a length, in a kernel)
    ret = UOp(Ops.CONST, dtype, () if device is None else (UOp(Ops.DEVICE, arg=device),), dtypes.as_const(val, dtype))
    if shape is not None: ret = ret.reshape((1,) * len(shape)).expand(shape)
    if type(val) in (int, float, bool):
      if len(_consts) >= 4096: _consts.clear()
      _consts[key] = ret
    return ret
  def const_like(self, val: Any) -> UOp:
    """A constant of this node's dtype (and, for tensor-graph nodes, its shape and device)."""
    return UOp.const(self.dtype, val, self.shape or None, self.device)
  def alu(self, op: Ops, *src: UOp) -> UOp:
    if self.dtype == dtypes.bool and op in _BOOL_ARITH: op = _BOOL_ARITH[op]  # bool + is or, bool * is and (torch)
    out_dtype = dtypes.bool if op in GroupOp.Comparison else (src[-1].dtype if op is Ops.WHERE else self.dtype)
    return UOp(op, out_dtype, (self,) + src)
  def cast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))
  def bitcast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.BITCAST, dtype, (self,))
  def where(self, x: UOp | Any, y: UOp | Any) -> UOp:
    """self ? x : y, where one of x, y may be a Python constant (it takes the other's dtype)."""
    if not isinstance(x, UOp): x = y.const_like(x)
    if not isinstance(y, UOp): y = x.const_like(y)
    return UOp(Ops.WHERE, x.dtype, (self, x, y))
  def r(self, op: Ops, axis: tuple[int, ...]) -> UOp:
    """Reduce over axes, keeping them as size 1 (the lazy-graph REDUCE_AXIS)."""
    axis = tuple(sorted(a for a in axis if not size_one(self.shape[a])))
    if not axis: return self
    if any(self.shape[a] == 0 for a in axis):  # nothing to reduce: the identity, never a zero-size loop in a kernel
      identity = {Ops.ADD: 0, Ops.MUL: 1}.get(op, dtypes.min(self.dtype))
      shape = tuple(1 if i in axis else s for i, s in enumerate(self.shape))
      return UOp.const(self.dtype, identity, shape, self.device)
    return UOp(Ops.REDUCE_AXIS, self.dtype, (self,), (op, axis))
  def contiguous(self) -> UOp:
    """The values in a buffer of their own (unless self already reads a whole buffer in order). Each call is a new
    node: Tensor.zeros(3).contiguous() twice gives two buffers, which can be written separately."""
    return UOp(Ops.CONTIGUOUS, self.dtype, (self,), next(_unique_ids))
  def detach(self) -> UOp: return UOp(Ops.DETACH, self.dtype, (self,))
  def assign(self, x: UOp) -> UOp:
    """Write x into self's buffer. Each call is a new node: two identical writes are still two writes."""
    return UOp(Ops.ASSIGN, self.dtype, (self, x), next(_unique_ids))
  def copy_to_device(self, device: str, clone: bool = False) -> UOp:
    """self's values in a buffer on device; with clone, a buffer of its own (arg: (device, unique id or None))."""
    return UOp(Ops.COPY, self.dtype, (self,), (device, next(_unique_ids) if clone else None))
  def sink(self, *srcs: UOp) -> UOp: return UOp(Ops.SINK, dtypes.void, (self,) + srcs)

  # *** movement ops (a movement that changes nothing returns self; chains stay, so each tensor keeps its own node) ***
  def reshape(self, shape: tuple[int, ...]) -> UOp:
    shape = tuple(shape)
    if same_shape(shape, self.shape): return self
    if prod(shape) != self.size:
      raise ValueError(f"reshape: can't reshape {self.shape} ({self.size} elements) to {shape}")
    # to a Variable length: of what was reshaped, so strides follow it (a (3, k) buffer read at r0 * v + r1 for any k)
    if self.op is Ops.RESHAPE and symbolic(shape): return self.src[0].reshape(shape)
    return UOp(Ops.RESHAPE, self.dtype, (self,), shape)
  def permute(self, order: tuple[int, ...]) -> UOp:
    order = tuple(order)
    if sorted(order) != list(range(len(self.shape))):
      raise ValueError(f"permute: {order} is not a permutation of {len(self.shape)} axes")
    if order == tuple(range(len(order))): return self
    return UOp(Ops.PERMUTE, self.dtype, (self,), order)
  def expand(self, shape: tuple[int, ...]) -> UOp:
    shape = tuple(shape)
    if len(shape) != len(self.shape) or any(s != n and s != 1 for s, n in zip(self.shape, shape)):
      raise ValueError(f"expand: can't expand {self.shape} to {shape}")
    if same_shape(shape, self.shape): return self
    return UOp(Ops.EXPAND, self.dtype, (self,), shape)
  def pad(self, arg: tuple[tuple[int, int], ...]) -> UOp:
    arg = tuple((_int(b), _int(a)) for b, a in arg)
    if len(arg) != len(self.shape) or any(b < 0 or a < 0 for b, a in arg):
      raise ValueError(f"pad: bad padding {arg} for {self.shape}")
    if all(b == 0 and a == 0 and type(a) is not SymInt for b, a in arg): return self
    return UOp(Ops.PAD, self.dtype, (self,), arg)
  def shrink(self, arg: tuple[tuple[int, int], ...]) -> UOp:
    arg = tuple((_int(b), _int(e)) for b, e in arg)
    if len(arg) != len(self.shape) or any(not 0 <= b <= e <= s for (b, e), s in zip(arg, self.shape)):
      raise ValueError(f"shrink: bad range {arg} for {self.shape}")
    if all(b == 0 and e == s and type(e) is not SymInt for (b, e), s in zip(arg, self.shape)): return self
    return UOp(Ops.SHRINK, self.dtype, (self,), arg)
  def flip(self, axes: tuple[bool, ...]) -> UOp:
    axes = tuple(bool(a) and s > 1 for a, s in zip(axes, self.shape))
    if not any(axes): return self
    return UOp(Ops.FLIP, self.dtype, (self,), axes)

  # *** integer math, for index expressions (and readable rewrite rules) ***
  def _ufix(self, x: Any) -> UOp: return x if isinstance(x, UOp) else self.const_like(x)
  def __add__(self, x: Any) -> UOp: return self.alu(Ops.ADD, self._ufix(x))
  def __radd__(self, x: Any) -> UOp: return self._ufix(x).alu(Ops.ADD, self)
  def __mul__(self, x: Any) -> UOp: return self.alu(Ops.MUL, self._ufix(x))
  def __rmul__(self, x: Any) -> UOp: return self._ufix(x).alu(Ops.MUL, self)
  def __neg__(self) -> UOp: return self * -1
  def __sub__(self, x: Any) -> UOp: return self + (-self._ufix(x))
  def __rsub__(self, x: Any) -> UOp: return self._ufix(x) + (-self)
  def __floordiv__(self, x: Any) -> UOp: return self.alu(Ops.IDIV, self._ufix(x))
  def __mod__(self, x: Any) -> UOp: return self.alu(Ops.MOD, self._ufix(x))
  def __lt__(self, x: Any) -> UOp: return self.alu(Ops.CMPLT, self._ufix(x))
  def __ge__(self, x: Any) -> UOp: return (self < x).logical_not()
  def __gt__(self, x: Any) -> UOp: return self._ufix(x).alu(Ops.CMPLT, self)
  def __le__(self, x: Any) -> UOp: return (self > x).logical_not()
  def __and__(self, x: Any) -> UOp: return self.alu(Ops.AND, self._ufix(x))
  def __or__(self, x: Any) -> UOp: return self.alu(Ops.OR, self._ufix(x))
  def __xor__(self, x: Any) -> UOp: return self.alu(Ops.XOR, self._ufix(x))
  def ne(self, x: Any) -> UOp: return self.alu(Ops.CMPNE, self._ufix(x))
  def eq(self, x: Any) -> UOp: return self.ne(x).logical_not()
  def logical_not(self) -> UOp: return self.alu(Ops.CMPNE, UOp.const(dtypes.bool, True))
  def maximum(self, x: Any) -> UOp: return self.alu(Ops.MAX, self._ufix(x))
  def minimum(self, x: Any) -> UOp: return -((-self).maximum(-self._ufix(x)))
  __hash__ = object.__hash__  # identity (hash-consing makes it structural)
  __eq__ = object.__eq__

  # *** symbolic integers ***
  @property
  def vmin(self) -> Any: return self._min_max[0]
  @property
  def vmax(self) -> Any: return self._min_max[1]
  @property
  def _min_max(self) -> tuple[Any, Any]:
    if (ret := self._cache.get("mm")) is not None: return ret  # (derived's first step, inline: hot)
    return derived(self, "mm", _min_max)
  def substitute(self, mapping: dict[UOp, UOp], rebuilt: Callable[[UOp, UOp], None] | None = None) -> UOp:
    """This graph with mapping's keys replaced by their values, not simplified; rebuilt(node, new) hears of each."""
    if not mapping: return self
    memo: dict[UOp, UOp] = dict(mapping)
    for node in self.toposort(gate=lambda n: n not in mapping):
      if node in memo: continue
      new_src = tuple(memo[s] for s in node.src)
      memo[node] = new = node if new_src == node.src else node.replace(src=new_src)
      if rebuilt is not None and new is not node: rebuilt(node, new)
    return memo[self]
  def variables(self) -> list[UOp]:
    return sorted([x for x in self.toposort() if x.op is Ops.DEFINE_VAR], key=lambda v: v.arg)
  def expr(self) -> str: return self.arg[0]
  variable = staticmethod(lambda *args, **kwargs: Variable(*args, **kwargs))  # UOp.variable: tinygrad's spelling
  def bind(self, val: int) -> UOp:
    assert self.op is Ops.DEFINE_VAR, "only a Variable can be bound"
    if not self.arg[1] <= val <= self.arg[2]:
      raise ValueError(f"{self.arg[0]}={val} is outside [{self.arg[1]}, {self.arg[2]}]")
    return UOp(Ops.BIND, self.dtype, (self, UOp.const(self.dtype, val)))
  def unbind(self) -> tuple[UOp, int]:
    assert self.op is Ops.BIND, f"can't unbind {self.op}"
    return self.src[0], self.src[1].arg
  @property
  def val(self) -> int:
    """The bound value of a BIND (a Variable with a value)."""; return self.unbind()[1]

  # *** printing ***
  def render(self) -> str:
    """A short infix rendering of an index/ALU expression, e.g. '((r0*4)+r1)'."""; return render_expr(self)
  def __repr__(self) -> str: return pretty_print(self)

def derived(u: UOp, key: str, fn: Callable[[UOp], Any]) -> Any:
  """fn(u), computed once and kept in u._cache[key]. fn may ask the same of u's sources: those without it get it first,
  sources before users, so a deep graph needs no deep recursion (where fn fails, fn(u) fails or doesn't need it)."""
  if (ret := (cache := u._cache).get(key, _MISSING)) is not _MISSING: return ret
  for s in u.src:  # (a loop, not any(): this runs for every node made)
    if key not in s._cache:
      for n in u.toposort(gate=lambda n: key not in n._cache)[:-1]:
        if key not in n._cache:
          try: n._cache[key] = fn(n)
          except Exception: pass
      break
  ret = cache[key] = fn(u)
  return ret
_MISSING = object()

def bottom_up(root: UOp, fn: Callable[[UOp], Any], where: Callable[[UOp], bool]) -> None:
  """fn(n) for each node n below root with where(n), reached through such nodes, sources first: a memoized recursive
  pass called on root afterwards finds their results and recurses one level, however deep the graph is."""
  for n in root.toposort(gate=lambda n: n is root or where(n))[:-1]:
    if where(n): fn(n)

_KERNEL_OPS = {Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_ACC, Ops.RANGE, Ops.SPECIAL, Ops.LOAD, Ops.STORE,
               Ops.REDUCE, Ops.ENDRANGE, Ops.BARRIER, Ops.VECTORIZE, Ops.GEP, Ops.NOOP}

# names codegen gives its own values (loop counters, launch indices, buffers, temporaries): a Variable can't take them
_GENERATED_NAME = re.compile(r"(ridx|gidx|lidx|data|val|alu|acc|cast|var|temp|smem)[0-9]+")

def Variable(name: str, min_val: int, max_val: int, dtype: DType = dtypes.index) -> UOp:
  """A symbolic integer in [min_val, max_val]; `Variable("i", 1, 10).bind(3)` gives it a value.
  name is an ASCII identifier not starting with '_' (those are fusegrad's own) and not a name codegen generates."""
  if not isinstance(name, str) or not name.isascii() or not name.isidentifier() or name.startswith("_"):
    raise ValueError(f"Variable name {name!r} must be an ASCII identifier not starting with '_'")
  if _GENERATED_NAME.fullmatch(name): raise ValueError(f"Variable name {name!r} clashes with a name codegen generates")
  if not isinstance(min_val, int) or not isinstance(max_val, int):
    raise ValueError(f"Variable {name}: min and max must be ints, got {min_val!r} and {max_val!r}")
  if min_val > max_val: raise ValueError(f"Variable {name}: min {min_val} > max {max_val}")
  if min_val < -2 ** 31 or max_val >= 2 ** 31:  # (a wider value would be cut, silently)
    raise ValueError(f"Variable {name}: [{min_val}, {max_val}] doesn't fit in int32, which kernels take Variables as")
  return UOp(Ops.DEFINE_VAR, dtype, (), (name, min_val, max_val))

def sym_infer(e: UOp | int, var_vals: dict) -> int:
  """e (an int, or an expression of Variables) at var_vals' values, by Variable or by name as tinygrad's (a bound
  Variable missing there: at its bound value)."""
  if isinstance(e, int): return e
  bound = {b.src[0]: b.src[1].arg for b in e.toposort() if b.op is Ops.BIND}
  vals = {v: var_vals.get(v, var_vals.get(v.expr(), bound.get(v))) for v in e.variables()}
  if None in vals.values() or (r := e.substitute({v: UOp.const(v.dtype, x) for v, x in vals.items()})).vmin != r.vmax:
    raise ValueError(f"can't evaluate {e.render()}: unbound variables")
  return r.vmin

class SymInt(int):
  """A size made from bound Variables (`x[:v]`, `Tensor.ones(v, 3)`): an int of the bound value that keeps its
  expression, so that kernels built on it loop to the Variable and serve every value of it (docs/jit.md)."""
  expr: UOp
  def __new__(cls, expr: UOp, val: int | None = None) -> SymInt:
    (ret := int.__new__(cls, sym_infer(expr, {}) if val is None else val)).expr = expr
    return ret
  def __hash__(self) -> int: return hash((int(self), self.expr))  # (not the value's: nodes and caches keep it apart)
  @property
  def unbound(self) -> UOp: return self.expr.substitute({b: b.src[0] for b in self.expr.toposort() if b.op is Ops.BIND})
  def at(self, vals: dict[UOp, int]) -> SymInt:
    """This size at other values of its Variables (those in vals)."""
    return SymInt(self.expr.substitute({b: b.src[0].bind(vals[b.src[0]]) for b in self.expr.toposort()
                                        if b.op is Ops.BIND and b.src[0] in vals}))
def _sym_op(f: Callable, swap: bool) -> Callable:
  def op(a: SymInt, b: Any) -> Any:
    if isinstance(b, UOp): return NotImplemented  # (a Variable's expression: UOp's own operator keeps a's)
    if not isinstance(b, int): return f(b, int(a)) if swap else f(int(a), b)
    x, y = (b, a) if swap else (a, b)
    return SymInt(f(_sym_expr(x), _sym_expr(y)), f(int(x), int(y)))
  return op
def _int(x: Any) -> int: return x if type(x) is SymInt else int(x)  # (numpy ints become ints)
def _sym_expr(x: int) -> UOp: return x.expr if isinstance(x, SymInt) else UOp.const(dtypes.index, x)
for _name, _f in (("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
                  ("floordiv", lambda a, b: a // b)):  # a SymInt with an int or another SymInt stays one
  setattr(SymInt, f"__{_name}__", _sym_op(_f, False))
  setattr(SymInt, f"__r{_name}__", _sym_op(_f, True))

# *** shape inference for the lazy graph ***
def _infer_shape(u: UOp) -> tuple[int, ...]:
  if u.op in GroupOp.ALU: return u.src[0].shape  # (the most common, first)
  if u.op is Ops.BUFFER: return (u.arg.size,)
  if u.op is Ops.NOOP and u.src: return u.arg  # a tensor's stand-in (engine/realizer.py _realize_multi)
  if u.op in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.DEVICE) or u.op in _KERNEL_OPS: return ()  # scalars
  if u.op in (Ops.RESHAPE, Ops.EXPAND): return u.arg
  if u.op is Ops.PERMUTE: return tuple(u.src[0].shape[i] for i in u.arg)
  if u.op is Ops.PAD: return tuple(s + b + a for s, (b, a) in zip(u.src[0].shape, u.arg))
  if u.op is Ops.SHRINK: return tuple(e - b for b, e in u.arg)
  if u.op is Ops.REDUCE_AXIS: return tuple(1 if i in u.arg[1] else s for i, s in enumerate(u.src[0].shape))
  if u.op is Ops.BITCAST and u.src[0].shape and u.dtype.itemsize != u.src[0].dtype.itemsize:
    *rest, last = u.src[0].shape
    return (*rest, last * u.src[0].dtype.itemsize // u.dtype.itemsize)
  if u.op is Ops.SINK: return ()
  if u.op is Ops.MULTI and u.arg is not None:
    return tuple(s * len(u.src) if i == u.arg else s for i, s in enumerate(u.src[0].shape))
  if u.src: return u.src[0].shape
  raise RuntimeError(f"{u.op} has no shape")

_unique_ids = itertools.count()

def _infer_device(u: UOp) -> str | None:
  if u.op is Ops.DEVICE: return u.arg
  if u.op is Ops.COPY: return u.arg[0]
  if u.op is Ops.BUFFER: return u.arg.device
  if u.op is Ops.MULTI: return tuple(s.device for s in u.src)  # type: ignore[return-value]
  if u.op in _KERNEL_OPS: return u.src[0].arg if u.op is Ops.NOOP and u.src else None  # (a tensor's stand-in)
  for s in u.src:
    if (d := s.device) is not None: return d
  return None

# *** value bounds, for the simplifier ***
def _min_max(u: UOp) -> tuple[Any, Any]:
  if u.op is Ops.CONST: return u.arg, u.arg
  if u.op is Ops.DEFINE_VAR: return u.arg[1], u.arg[2]
  if u.op is Ops.BIND: return u.src[0].vmin, u.src[0].vmax
  if u.op is Ops.RANGE: return 0, u.src[0].vmax - 1
  if u.op is Ops.SPECIAL: return 0, u.arg[1] - 1
  if u.dtype == dtypes.bool and u.op is not Ops.CAST: lo, hi = False, True
  else: lo, hi = dtypes.min(u.dtype), dtypes.max(u.dtype)
  if not u.src or u.op not in GroupOp.ALU | {Ops.CAST}: return lo, hi
  s0 = u.src[0]
  s1 = u.src[1] if len(u.src) > 1 else s0
  if u.op is Ops.ADD: return _clip(u, s0.vmin + s1.vmin, s0.vmax + s1.vmax)
  if u.op is Ops.MUL:
    vals = [a * b for a in (s0.vmin, s0.vmax) for b in (s1.vmin, s1.vmax)]
    if any(isinstance(v, float) and math.isnan(v) for v in vals): return lo, hi
    return _clip(u, min(vals), max(vals))
  if u.op is Ops.MAX: return max(s0.vmin, s1.vmin), max(s0.vmax, s1.vmax)
  if u.op is Ops.IDIV and dtypes.is_int(u.dtype) and s1.op is Ops.CONST and s1.arg > 0:
    # monotonic in s0 whether it rounds down or toward zero: the lower bound rounded down, the upper toward zero
    return s0.vmin // s1.arg, (s0.vmax // s1.arg if s0.vmax >= 0 else -(-s0.vmax // s1.arg))
  if u.op is Ops.MOD and dtypes.is_int(u.dtype) and s1.op is Ops.CONST and s1.arg > 0:
    if s0.vmin >= 0: return (s0.vmin, s0.vmax) if s0.vmax < s1.arg else (0, s1.arg - 1)
    return -(s1.arg - 1), s1.arg - 1
  if u.op in (Ops.IDIV, Ops.MOD) and dtypes.is_int(u.dtype) and s1.vmin > 0 and s0.vmin >= 0:  # (by a Variable)
    return (s0.vmin // s1.vmax, s0.vmax // s1.vmin) if u.op is Ops.IDIV else (0, min(s0.vmax, s1.vmax - 1))
  if u.op is Ops.CMPLT:
    if s0.vmax < s1.vmin: return True, True
    if s0.vmin >= s1.vmax: return False, False
    return False, True
  if u.op is Ops.CMPNE:
    if s0.vmax < s1.vmin or s0.vmin > s1.vmax: return True, True
    if s0.vmin == s0.vmax == s1.vmin == s1.vmax: return False, False
    return False, True
  if u.op is Ops.AND and u.dtype == dtypes.bool: return s0.vmin and s1.vmin, s0.vmax and s1.vmax
  if u.op is Ops.OR and u.dtype == dtypes.bool: return s0.vmin or s1.vmin, s0.vmax or s1.vmax
  if u.op is Ops.AND and dtypes.is_int(u.dtype) and s1.op is Ops.CONST and s1.arg >= 0 and s0.vmin >= 0:
    return 0, min(s0.vmax, s1.arg)
  if u.op is Ops.WHERE: return min(u.src[1].vmin, u.src[2].vmin), max(u.src[1].vmax, u.src[2].vmax)
  if u.op is Ops.CAST and dtypes.is_int(u.dtype) and (dtypes.is_int(s0.dtype) or s0.dtype == dtypes.bool):
    if dtypes.min(u.dtype) <= s0.vmin and s0.vmax <= dtypes.max(u.dtype): return int(s0.vmin), int(s0.vmax)
  return lo, hi

def _clip(u: UOp, lo: Any, hi: Any) -> tuple[Any, Any]:
  # integer results that could overflow their dtype have unknown bounds
  if dtypes.is_int(u.dtype) and (lo < dtypes.min(u.dtype) or hi > dtypes.max(u.dtype)):
    return dtypes.min(u.dtype), dtypes.max(u.dtype)
  return lo, hi

# *** printing ***
_INFIX = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.AND: "&",
          Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}

def render_expr(u: UOp) -> str:
  """A compact infix string of an integer/bool expression, for debugging and tests: '((r0*4)+r1)'."""
  if u.op is Ops.CONST: return str(u.arg)
  if u.op is Ops.RANGE: return f"r{u.arg[0]}"
  if u.op in (Ops.SPECIAL, Ops.DEFINE_VAR): return u.arg[0]
  if u.op is Ops.BIND: return render_expr(u.src[0])
  if u.op in _INFIX: return f"({render_expr(u.src[0])}{_INFIX[u.op]}{render_expr(u.src[1])})"
  if u.op is Ops.WHERE: return f"({render_expr(u.src[0])}?{render_expr(u.src[1])}:{render_expr(u.src[2])})"
  if u.op is Ops.MAX: return f"max({render_expr(u.src[0])},{render_expr(u.src[1])})"
  if u.op is Ops.CAST: return f"{u.dtype.name}({render_expr(u.src[0])})"
  if u.op is Ops.LOAD: return f"data{u.src[0].arg}[{render_expr(u.src[1])}]"
  return f"{u.op.name}({','.join(render_expr(s) for s in u.src)})"

def pretty_print(root: UOp, max_nodes: int = 400) -> str:
  """One line per node, sources referenced by number: readable for graphs of any depth."""
  nodes = root.toposort()
  if len(nodes) > max_nodes: return f"<UOp {root.op.name} {root.dtype} with {len(nodes)} nodes>"
  num = {n: i for i, n in enumerate(nodes)}
  lines = []
  for n in nodes:
    arg = n.arg if n.op is not Ops.BUFFER else f"<buf {n.arg.device} {n.arg.size}>"
    srcs = ", ".join(f"%{num[s]}" for s in n.src)
    lines.append(f"%{num[n]:<3d} = {n.op.name:<12s} {str(n.dtype):<16s} ({srcs}) {arg!r}")
  return "\n".join(lines)

def flat_index(idxs: Sequence[UOp], shape: Sequence[int]) -> UOp:
  """The row-major flat index of per-axis indices idxs into a contiguous array of shape."""
  ret: UOp = UOp.const(dtypes.index, 0)
  for idx, st in zip(idxs, strides_for_shape(shape)):
    if st != 0: ret = ret + idx * st
  return ret

def strides_for_shape(shape: Sequence[int]) -> tuple[int, ...]:
  """Row-major strides, 0 for size-1 axes."""
  strides, acc = [], 1
  for s in reversed(shape):
    strides.append(0 if size_one(s) else acc)
    acc *= s
  return tuple(reversed(strides))

def inverse_permutation(order: Sequence[int]) -> tuple[int, ...]: return tuple(argsort(order))
