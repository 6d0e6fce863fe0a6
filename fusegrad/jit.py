"""TinyJit: run a function once, capture the kernels it launches the second time, and replay them after that.
`function` traces the graph a function builds once per input signature and reuses it."""
from __future__ import annotations
import collections, dataclasses, functools, gc, math, struct, sys, warnings, weakref
from dataclasses import dataclass
from typing import Any, Callable, Container, Generic, Iterator, TypeVar
from fusegrad.device import Buffer, RUN_LOCK
from fusegrad.dtype import dtypes
from fusegrad.helpers import JIT, JITBEAM, BEAM, CHECK_INDEX, DEBUG, Context, GlobalCounters, dprint, colored
from fusegrad.uop.ops import UOp, Ops, SymInt
from fusegrad.uop.symbolic import simplify
from fusegrad.engine.runner import CompiledRunner, CopyRunner
from fusegrad.engine.realize import ExecItem, IndexCheck, read_flags, add_index_check, pending_index_checks
from fusegrad.engine import state, multi
from fusegrad.engine.state import STATE, JitError
from fusegrad.gradient import substitute_keeping_rules
from fusegrad.tensor import Tensor, _assign_hooks, _assign_watchers, _is_training
from fusegrad.mixin.creation import _rng_hooks

ReturnType = TypeVar("ReturnType")

def _leaves(x: Any, where: Any) -> Iterator[tuple[Any, Any]]:
  """(where, value) for everything in x that is not a list, tuple or dict, in order; where is a path for _spell."""
  if isinstance(x, (list, tuple)):
    for i, v in enumerate(x): yield from _leaves(v, (where, i, False))
  elif isinstance(x, dict):
    for k, v in x.items(): yield from _leaves(v, (where, k, True))
  else: yield where, x

def _spell(where: Any) -> str:
  """A path of _leaves as text: `args[0]`, `kwargs['b'][1]`."""
  if isinstance(where, str): return where
  parent, key, is_dict = where
  return f"{_spell(parent)}[{key!r}]" if is_dict else f"{_spell(parent)}[{key}]"

def _tensors_in(x: Any) -> list:
  """Every Tensor in x: x itself, or inside lists, tuples and dicts (in order)."""
  return [v for _, v in _leaves(x, "") if isinstance(v, Tensor)]

def _parts(tensors: list) -> list:
  """tensors with each one spread over devices (realized: a MULTI of buffers) replaced by its part on each device: the
  capture and the replays handle those buffers one by one."""
  return [p for t in tensors for p in ([type(t)._wrap(s) for s in t.uop.src] if t.uop.op is Ops.MULTI else [t])]

@dataclass(frozen=True)
class _Spread:
  """In a result's structure: a tensor spread over devices, rebuilt from its parts (n of them, split on axis)."""
  axis: int | None
  n: int

def _split_args(args: tuple, kwargs: dict) -> tuple[list, list[UOp], list[tuple[str, Any]]]:
  """One walk over a call's arguments (keyword arguments in name order, so f(a=x, b=y) and f(b=y, a=x) agree): the
  Tensors, the bound Variables and (where, value) of every other argument: a replay can't change those."""
  tensors, binds, static = [], [], []
  for where, x in _call_leaves(args, kwargs):
    if isinstance(x, Tensor): tensors.append(x)
    elif isinstance(x, UOp) and x.op is Ops.BIND: binds.append(x)
    else: static.append((_spell(where), x))
  return tensors, binds, static

def _call_leaves(args: tuple, kwargs: dict) -> list[tuple[Any, Any]]:
  return [*_leaves(args, "args"), *_leaves({k: kwargs[k] for k in sorted(kwargs)}, "kwargs")]

def _input_names(args: tuple, kwargs: dict) -> list[str]:
  """Where each Tensor of a call is, in the order of _split_args: `args[0]`, `kwargs['b'][1]`..."""
  return [_spell(where) for where, x in _call_leaves(args, kwargs) if isinstance(x, Tensor)]

def _view_structure(u: UOp) -> tuple:
  """The movement ops between a tensor and its buffer (the kernels' view), canonical: of reshapes in a row only the
  outermost (of row-major order), and one reshape of the buffer is the buffer (the shape is compared on its own)."""
  chain: list[tuple] = []
  for v in state.view_chain(u)[0]:
    if v.op is not Ops.DETACH and not (v.op is Ops.RESHAPE and chain and chain[-1][0] is Ops.RESHAPE):
      chain.append((v.op, v.arg))
  return () if len(chain) == 1 and chain[0][0] is Ops.RESHAPE else tuple(chain)

def _input_buffer(t: Any, what: str) -> Buffer:
  if (base := state.view_base(t.uop)).op is not Ops.BUFFER:
    raise JitError(f"TinyJit: {what} (shape {t.shape}) is not realized; call .realize() on inputs before passing them")
  return base.arg

def _input_buffers(inputs: list, args: tuple, kwargs: dict) -> list[Buffer]:
  """The buffer of each input (realized); JitError naming the first that has none."""
  bases = [state.view_base(t.uop) for t in inputs]
  for i, (t, base) in enumerate(zip(inputs, bases)):
    if base.op is not Ops.BUFFER: _input_buffer(t, f"input {i} ({_input_names(args, kwargs)[i]})")  # raises
  return [base.arg for base in bases]

def _sym(x: Any, vals: dict[UOp, int] | None = None) -> Any:
  """x (a shape, a view's arg) with each size from Variables (SymInt) as its expression, unbound (equal at every value),
  or, given vals, at those values."""
  if isinstance(x, tuple): return tuple(_sym(v, vals) for v in x)
  return x if type(x) is not SymInt else simplify(x.unbound).render() if vals is None else x.at(vals)

def _size_vars(tensors: list, binds: list[UOp]) -> dict[UOp, int]:
  """The values of the bound Variables among a call's arguments and in the sizes of its tensors' views (an input
  x[:, :v]); JitError if one Variable has two (a replay has one value for each)."""
  ret: dict[UOp, int] = {}
  for b in binds + [b for t in tensors for v in state.view_chain(t.uop)[0] if isinstance(v.arg, tuple) for a in v.arg
                    for x in (a if isinstance(a, tuple) else (a,)) if type(x) is SymInt
                    for b in x.expr.toposort() if b.op is Ops.BIND]:
    if ret.setdefault(b.src[0], b.src[1].arg) != b.src[1].arg:
      raise JitError(f"TinyJit: {b.src[0].arg[0]} is bound to {ret[b.src[0]]} and to {b.src[1].arg} in one call")
  return ret

def _same_kernels(a: list[ExecItem], b: list[ExecItem], inputs: list[Buffer]) -> bool:
  """Two captures (at other values of the Variables) launch the same kernels with the same variables, on buffers in
  the same roles and sizes, those neither an input nor written by a kernel (constants made per call) with the same
  contents: then the kernels don't depend on the values, and a replay serves them all."""
  ab, ba = dict[int, Buffer](), dict[int, Buffer]()
  ins = {id(x.base) for x in inputs}  # (an input's size may follow a Variable: x.reshape(3, v) of a (3, k) buffer)
  written = {id(ei.bufs[0].base) for ei in b} | ins
  for x, y in zip(a, b):
    if type(x.runner) is not type(y.runner) or (x.runner is not y.runner and isinstance(x.runner, CompiledRunner)) or \
       x.runner.name != y.runner.name or set(x.var_vals) != set(y.var_vals) or len(x.bufs) != len(y.bufs): return False
    for p, q in zip(x.bufs, y.bufs):
      if ab.setdefault(id(p), q) is not q or ba.setdefault(id(q), p) is not p or \
         (p.size != q.size and id(q.base) not in ins) or \
         (p is not q and id(q.base) not in written and p.as_bytes() != q.as_bytes()): return False
  return len(a) == len(b)

_Signature = collections.namedtuple("_Signature", "shapes dtypes devices views")  # of a call's tensor inputs

def _signature(tensors: list) -> _Signature:
  sym = _sym if STATE.value_shapes else lambda x: x  # (no length from a Variable was ever made: no SymInt to look for)
  return _Signature(tuple(sym(t.shape) for t in tensors), tuple(t.dtype for t in tensors),
                    tuple(t.device for t in tensors), tuple(sym(_view_structure(t.uop)) for t in tensors))

def _describe_change(was: _Signature, now: _Signature, names: list[str]) -> str:
  """What differs between the captured inputs and these, in words."""
  if len(was.shapes) != len(now.shapes): return f"{len(was.shapes)} tensor inputs at the capture, {len(now.shapes)} now"
  for i, name in enumerate(names):
    for field in ("shape", "dtype", "device", "view"):
      old, new = getattr(was, field + "s")[i], getattr(now, field + "s")[i]
      if old != new: return f"input {i} ({name}): {field} was {old}, now {new}"
  return f"was {was}, now {now}"

class TinyJit(Generic[ReturnType]):
  """Decorator: `@TinyJit def step(x): ...`. Call 1 runs normally, call 2 captures, later calls replay. Inputs keep
  their shapes, dtypes, devices and views; bound Variables take each call's value; other arguments must stay what
  they were. `JIT=0` turns it off; `reset()` forgets the capture; prune=True drops from the replay the kernels whose
  results can't change from call to call. The rules in full: docs/jit.md."""
  def __init__(self, fxn: Callable[..., ReturnType], prune: bool = False):
    self.fxn, self.cnt, self.prune = fxn, 0, prune
    self.jit_cache: list[ExecItem] = []
    self.input_slots: list[tuple[int, int, int]] = []  # (exec item, buffer position, input index)
    self.written: set[int] = set()  # ids of the buffers the kernels write that are not inputs
    self.rng_draws: list[tuple[Buffer, int]] = []  # random-state buffers captured, with their counter offsets
    self.rng_step, self.ret_tensors = 0, list[Tensor]()  # (ret_tensors: the capture's results)
    self.index_flags: list[tuple[Buffer, IndexCheck]] = []  # out-of-range index flags the kernels write, to read
    self.bounds: list[tuple] = []  # slices to Variable lengths made in the capture, checked at each replay's values
    self.from_inputs: dict[int, tuple[int, UOp]] = {}  # output position -> (input index, the input's base at capture)
    self.static: list[tuple[str, Any]] = []  # the non-Tensor arguments of the capture
    self.sig, self.names = _signature([]), list[str]()  # the capture's inputs: shapes, dtypes, devices, views; places
    self.variables: tuple[UOp, ...] = ()
    self.out_slots: dict[int, list[tuple[int, int]]] = {}  # result position -> where its buffer is in jit_cache
    self._per_instance: dict[int, tuple[Any, TinyJit]] = {}  # id(instance) -> its TinyJit, when used as a method
    self._last: tuple[tuple, list[Buffer]] | None = None  # the last call's inputs and their buffers (_remember_call)
    self._plan_cache: _Plan | None = None
    self.by_value, self.value_shapes = False, 0  # a shape from a Variable's value: every call runs fxn (__call__)
    self.symbolic = False  # sizes from Variables (SymInt) in the inputs or the graph
    self.unchecked: dict[UOp, int] | None = None  # their values at the capture, until one at others agrees (_call)
    functools.update_wrapper(self, fxn)  # type: ignore[arg-type]

  @property
  def captured(self) -> TinyJit | None:
    """The capture once there is one (its kernels are `jit_cache`), else None; as tinygrad's `jit.captured`."""
    return self if self.cnt >= 2 else None

  def free_intermediates(self) -> None:
    """Free the buffers the kernels write that no node holds (intermediates); the next replay allocates them again."""
    with RUN_LOCK:  # (not while another thread replays)
      written = {id(ei.bufs[0]): ei.bufs[0] for ei in self.jit_cache}  # (views: of memory.plan's arena, mostly)
      bases = {id(b.base): b.base for b in written.values()}
      refs = gc.get_referrers(*written.values(), *bases.values())
      # held: a node names the buffer or one of the written views of it, or another view of it exists
      named = {id(r.arg) for r in refs if type(r) is UOp and r.op is Ops.BUFFER}
      held = {id(b.base) for b in written.values() if id(b) in named} | (named & bases.keys()) | \
             {id(r.base) for r in refs if type(r) is Buffer and id(r) not in written}
      for b in (b for b in bases.values() if id(b) not in held): b.deallocate()
      for v in written.values():  # (a view's handle points into its base's old memory)
        if v._base is not None and id(v._base) not in held: v._buf = None
      self._plan_cache = None  # (its launches hold the old memory)

  def __getstate__(self) -> dict:
    """pickle: the capture (kernels as source, buffers with contents), not the function: loaded, it replays (jit.md)."""
    bases = {id(ei.bufs[0].base): ei.bufs[0].base for ei in self.jit_cache}
    return {**self.__dict__, "fxn": None, "__wrapped__": None, "_per_instance": {}, "_last": None, "_plan_cache": None,
            "written": [bases[i] for i in self.written], "ret_tensors": [t.uop for t in self.ret_tensors]}
  def __setstate__(self, st: dict) -> None:
    self.__dict__.update(st, written={id(b) for b in st["written"]},
                         ret_tensors=[Tensor._wrap(u) for u in st["ret_tensors"]])

  def reset(self) -> None:
    """Forget the capture: the next call runs normally again."""
    self.cnt, self.jit_cache, self.input_slots, self.rng_draws, self.index_flags, self.bounds = 0, [], [], [], [], []
    self.from_inputs, self.written, self.static, self.out_slots = {}, set(), [], {}
    self._last, self._plan_cache, self.by_value, self.symbolic, self.unchecked = None, None, False, False, None
    for _, jit in self._per_instance.values(): jit.reset()

  func = property(lambda self: self.__call__)  # (a method TinyJit of tinygrad is a partial of __call__: .func.__self__)
  def __get__(self, obj: Any, objtype: Any = None) -> Callable[..., ReturnType]:
    """As a method: each instance gets a TinyJit of its own (two models must not replay each other's kernels)."""
    if obj is None: return self  # looked up on the class
    if id(obj) not in self._per_instance: self._per_instance[id(obj)] = self._bind(obj)
    return self._per_instance[id(obj)][1]

  def _bind(self, obj: Any) -> tuple[Any, TinyJit]:
    """A TinyJit of the method bound to obj, holding obj weakly (forgotten with it) where obj allows weak references."""
    fxn = self.fxn
    try: ref = weakref.ref(obj)
    except TypeError: return obj, TinyJit(functools.partial(fxn, obj), self.prune)  # held strongly: its id stays
    weakref.finalize(obj, self._per_instance.pop, id(obj), None)
    def bound(*args: Any, **kwargs: Any) -> Any: return fxn(ref(), *args, **kwargs)
    return None, TinyJit(functools.wraps(fxn)(bound), self.prune)

  def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
    with RUN_LOCK: return self._call(*args, **kwargs)  # one call at a time: a call from another thread waits
  def _by_value(self) -> None:
    self.reset()
    self.by_value = True
    warnings.warn(f"TinyJit: {getattr(self.fxn, '__name__', 'the function')} makes kernels that differ with a "
                  "Variable's value (a length taken as its value: x[v:2*v]), so every call runs it and none replays",
                  stacklevel=3)
  def _call(self, *args: Any, **kwargs: Any) -> ReturnType:
    if self.fxn is None and (not JIT or self.by_value or self.cnt < 2):
      raise JitError("TinyJit: this one was unpickled without its function: it can only replay its capture")
    if not JIT or self.by_value: return self.fxn(*args, **kwargs)
    if STATE.captures: raise JitError("TinyJit: having TinyJit inside another TinyJit is not supported (as tinygrad)")
    if self._last is not None and not kwargs and (var_vals := self._same_as_last(args)) is not None:
      # the very inputs of the last call: nothing to check again (as tensors: for results that are views of them)
      inputs = _parts([a for a in args if type(a) is Tensor]) if self.from_inputs else []
      return self._replay(inputs, self._last[1], var_vals)
    inputs, binds, static = _split_args(args, kwargs)
    for t in inputs:  # a constant (Tensor.ones(3)) gets a buffer of its own, as tinygrad's: the capture reads it
      if any(state.view_base(u).op is Ops.CONST for u in (t.uop.src if t.uop.op is Ops.MULTI else (t.uop,))):
        t.replace(t.contiguous())
    Tensor.realize_all([t for t in inputs if not state.is_realized(t.uop)])  # lazy inputs are computed first
    inputs = _parts(inputs)
    bufs = _input_buffers(inputs, args, kwargs)
    nodes = [t.uop for t in inputs]  # what was checked (the call may write into an input: a new node)
    sig = _signature(inputs)
    variables, names = tuple(b.src[0] for b in binds), _input_names(args, kwargs)
    vals = _size_vars(inputs if STATE.value_shapes else [], binds)  # (as _signature: SymInts exist only since one)
    if self.cnt <= 1 or any(j == 0 for _, j, _ in self.input_slots):  # (replays: when a kernel writes an input)
      _check_distinct(bufs, names)
    if self.cnt == 0:
      ret = self._run(args, kwargs)
      self.cnt = 1  # only once it worked (a failed call leaves nothing); a warm-up: the capture's inputs may differ
      return ret
    if self.cnt >= 2 and sig != self.sig and STATE.value_shapes != self.value_shapes and self.fxn is not None and \
       not self.symbolic:  # an
      self._by_value()  # input cut to a Variable's value since, not symbolic (f(x[v:2*v])): fxn runs at every call
      return self.fxn(*args, **kwargs)
    if self.cnt >= 2 and sig != self.sig:
      raise JitError(f"TinyJit: inputs changed since the capture: {_describe_change(self.sig, sig, names)}")
    if self.cnt >= 2 and names != self.names:  # f(x=a, y=b) after f(a, b): x would be fed where y was (as tinygrad)
      raise JitError(f"TinyJit: the tensor arguments were {self.names} at the capture, now {names}")
    if self.cnt >= 2 and variables != self.variables:
      raise JitError(f"TinyJit: bound variables changed since the capture: {[v.arg[0] for v in self.variables]} "
                     f"then, {[v.arg[0] for v in variables]} now")
    if self.cnt == 1 or (self.unchecked is not None and any(vals.get(v, x) != x for v, x in self.unchecked.items())):
      # (capture again at other values: until each Variable was checked at another value than the capture's)
      shapes, old = STATE.value_shapes, self.jit_cache
      ret = self._capture(args, kwargs, inputs, bufs)
      self.static, self.sig, self.variables, self.names = static, sig, variables, names
      self.value_shapes = STATE.value_shapes  # (STATE's count: one made since means an input may be cut to a value)
      if self.unchecked is not None:  # sizes from Variables: the kernels must be those captured at other values
        if _same_kernels(old, self.jit_cache, bufs):
          self.unchecked = {v: x for v, x in self.unchecked.items() if vals.get(v, x) == x} or None
        else: self._by_value()
      elif len(vals) > len(binds) or STATE.value_shapes != shapes:  # sizes from Variables: checked at other values
        self.symbolic, used = True, {v.arg[0] for ei in self.jit_cache for v in ei.var_vals}
        if used <= {v.arg[0] for v in vals}: self.unchecked = vals  # (a Variable bound inside fxn can't be replayed)
        else: self._by_value()
    elif (change := _static_change(self.static, static)) is not None:
      raise JitError(f"TinyJit: a non-Tensor argument changed since the capture: {change}; a replay would run with "
                     "the captured value (pass it as a Tensor or a bound Variable, or reset())")
    else: ret = self._replay(inputs, bufs, vals)
    self._remember_call(args, kwargs, bufs, nodes)
    return ret

  def _remember_call(self, args: tuple, kwargs: dict, bufs: list[Buffer], nodes: list[UOp]) -> None:
    """Keep what the fast check of the next call needs (_same_as_last): each argument's node (weakly: holding it would
    keep a buffer's old version alive) or bound variable; nothing when an argument is neither, an input's node changed
    during the call (the checks were of the old one) or an input is copied at each call."""
    self._last = None
    if self.symbolic or kwargs or \
       not all(isinstance(a, Tensor) or (isinstance(a, UOp) and a.op is Ops.BIND) for a in args): return
    if any(p.uop is not n for p, n in zip(_parts([a for a in args if isinstance(a, Tensor)]), nodes)): return
    if any(id(b.base) in self.written for b in bufs): return  # results fed back in (h = step(h))
    self._last = (tuple(weakref.ref(a.uop) if isinstance(a, Tensor) else a.src[0] for a in args), bufs)

  def _same_as_last(self, args: tuple) -> dict[UOp, int] | None:
    """The values of the bound variables among args if args are the last call's tensors, still at the same nodes (so
    the same buffers, views, shapes and dtypes, all checked then), and bound variables of the same variables; else
    None. Lazy tensors, containers, keywords and other arguments take the full path."""
    assert self._last is not None
    last = self._last[0]
    if len(args) != len(last): return None
    var_vals: dict[UOp, int] = {}
    for a, was in zip(args, last):
      if type(a) is Tensor:
        if type(was) is UOp or a.uop is not was(): return None
      elif type(a) is UOp and a.op is Ops.BIND and a.src[0] is was: var_vals[was] = a.src[1].arg
      else: return None
    return var_vals

  def _run(self, args: tuple, kwargs: dict) -> Any:
    """Call the function; realize its results and the tensors it assigns to (a replay repeats those writes)."""
    assigned: dict[int, Tensor] = {}
    _assign_watchers.append(lambda t: assigned.setdefault(id(t), t))
    try: ret = self.fxn(*args, **kwargs)
    finally: _assign_watchers.pop()
    Tensor.realize_all(_tensors_in(ret) + list(assigned.values()))
    return ret

  def _capture(self, args: tuple, kwargs: dict, inputs: list, bufs: list[Buffer]) -> Any:
    start = STATE.rng_counter
    draws: list[tuple[Tensor, int]] = []
    _rng_hooks.append(lambda state, counter: draws.append((state, counter - start)))
    try:
      with state.capture() as cap, Context(BEAM=JITBEAM.value or BEAM.value):  # results from before: computed again
        self.jit_cache, self.index_flags, self.bounds = cap.items, cap.flags, cap.bounds
        ret = self._run(args, kwargs)
    finally: _rng_hooks.pop()
    if not self.jit_cache: raise JitError("TinyJit: the function launched no kernels, so there is nothing to replay")
    if bad := [(w, v) for w, v in _leaves(ret, "result") if v is not None and not isinstance(v, Tensor)]:
      raise JitError(f"TinyJit: {_spell(bad[0][0])} is a {type(bad[0][1]).__name__}, not a Tensor: a replay would "
                     "return the capture's value (JIT results must be Tensors or None, as tinygrad's)")
    self.rng_draws = [(_input_buffer(state, "a random state"), off) for state, off in draws]
    if self.prune: self._prune(bufs)
    self.input_slots = [(i, j, bufs.index(b)) for i, ei in enumerate(self.jit_cache) for j, b in enumerate(ei.bufs)
                        if any(b is x for x in bufs)]
    # buffers the kernels write that are not inputs (results, intermediates): a later input in one of them is copied
    inputs_written = {(i, j) for i, j, _ in self.input_slots}
    self.written = {id(ei.bufs[0].base) for i, ei in enumerate(self.jit_cache) if (i, 0) not in inputs_written}
    self.rng_step = STATE.rng_counter - start
    # results that are (views of) inputs must follow the inputs of each replay, not stay the capture's inputs
    self.ret_structure, self.ret_tensors = _structure(ret), _parts(_tensors_in(ret))
    base_of = {id(b): (k, state.view_base(t.uop)) for k, (t, b) in enumerate(zip(inputs, bufs))}
    self.from_inputs = {i: base_of[id(base.arg)] for i, t in enumerate(self.ret_tensors)
                        if (base := state.view_base(t.uop)).op is Ops.BUFFER and id(base.arg) in base_of}
    self.cnt = 2
    dprint(1, colored(f"JIT captured {len(self.jit_cache)} kernels with {len(bufs)} inputs", "magenta"))
    # results computed into buffers of their own (nothing else holds them): each replay writes new ones (no copy)
    self.out_slots = {}
    for i, t in enumerate(self.ret_tensors):
      base = state.view_base(t.uop)
      if i in self.from_inputs or base.op is not Ops.BUFFER or base.src: continue
      slots = [(k, j) for k, ei in enumerate(self.jit_cache) for j, b in enumerate(ei.bufs) if b is base.arg]
      if any(j == 0 for _, j in slots): self.out_slots[i] = slots  # written by a kernel here
    self.written -= {id(state.view_base(self.ret_tensors[i].uop).arg.base) for i in self.out_slots}  # (new each replay)
    return self._results([state.view_base(t.uop) for t in inputs], fresh=set(self.out_slots))

  def _prune(self, inputs: list[Buffer]) -> None:
    """Keep the kernels that touch a buffer whose contents vary between calls (an input, a random state, or one that
    a kept kernel writes), or that use a variable; repeat until nothing changes (a later kept writer of a buffer
    makes its earlier writers vary too)."""
    live = {id(b.base) for b in inputs} | {id(rng.base) for rng, _ in self.rng_draws}
    keep = [isinstance(ei.runner, CompiledRunner) and bool(ei.runner.p.vars) for ei in self.jit_cache]
    changed = True
    while changed:
      changed = False
      for i, ei in enumerate(self.jit_cache):
        if not keep[i] and any(id(b.base) in live for b in ei.bufs): keep[i] = changed = True
        if keep[i] and id(ei.bufs[0].base) not in live:
          live.add(id(ei.bufs[0].base))
          changed = True
    dprint(1, colored(f"JIT pruned {keep.count(False)} of {len(keep)} kernels (their results can't change)", "magenta"))
    self.jit_cache = [ei for ei, k in zip(self.jit_cache, keep) if k]

  def _plan(self) -> _Plan:
    """What a replay does, worked out once per capture: where each input's buffer goes, the results' new buffers, and
    the kernels as plain calls (the others, and every item under DEBUG>=2, run through ExecItem.run)."""
    if self._plan_cache is not None and self._plan_cache.items is self.jit_cache: return self._plan_cache
    cache = self.jit_cache
    swaps = [(cache[i].bufs, j, k) for i, j, k in self.input_slots]
    outs = [(cache[slots[0][0]].bufs[slots[0][1]], [cache[k].bufs for k, _ in slots], [j for _, j in slots])
            for slots in self.out_slots.values()]
    calls: list[Any] = [_bind(ei) for ei in cache]
    direct = [ei for ei, c in zip(cache, calls) if c is not ei]  # the others count themselves in run()
    swapped = {i for i, _, _ in self.input_slots} | {k for s in self.out_slots.values() for k, _ in s}
    plan = _Plan(cache, swaps, outs, calls, sum(ei.runner.flops for ei in direct), sum(ei.mem for ei in direct),
                 sum(isinstance(ei.runner, CompiledRunner) for ei in direct),
                 {i: [b._buf for b in cache[i].bufs] for i in sorted(swapped)})
    self._plan_cache = plan
    return plan

  def _replay(self, inputs: list, bufs: list[Buffer], var_vals: dict[UOp, int]) -> Any:
    for b, e, size, what in self.bounds:  # (before anything runs: a kernel would read past the axis)
      if not b <= (e := _sym(e, var_vals)) <= (size := _sym(size, var_vals)):
        raise IndexError(f"slice {what} is [{b}, {e}) outside an axis of size {size} at this call's values")
    plan = self._plan()
    bases: list[UOp] | None = None  # the inputs' base nodes, when a result is a view of an input
    if self.written and any(id(b.base) in self.written for b in bufs):
      bufs, bases = list(bufs), [state.view_base(t.uop) for t in inputs]
      for k, b in enumerate(bufs):
        if id(b.base) in self.written:  # a result of this JIT fed back in (h = step(h)): the replay would overwrite
          bufs[k] = Buffer(b.device, b.size, b.dtype).copyin(memoryview(b.as_bytes()))  # it while reading it: copy
          bases[k] = UOp(Ops.BUFFER, b.dtype, (), bufs[k])
    for lst, j, k in plan.swaps:
      lst[j] = b = bufs[k]
      if b._buf is None: b.allocate()
    for rng, off in self.rng_draws:  # fresh random numbers: the counter each draw would have had now
      rng.copyin(struct.pack("<QQ", Tensor._seed & 0xFFFFFFFFFFFFFFFF, STATE.rng_counter + off))
    STATE.rng_counter += self.rng_step
    for old, lists, js in plan.outs:  # the results' buffers: the last call's where only its slots hold it, else new
      if sys.getrefcount(lists[0][js[0]]) > len(js) + 1:  # (+ 1: getrefcount's argument)
        new = Buffer(old.device, old.size, old.dtype).allocate()
        for lst, j in zip(lists, js): lst[j] = new
    if DEBUG.value >= 2:
      for ei in self.jit_cache: ei.run(var_vals, jit=True)  # the variables' values of this call
    else:
      for i, bound in plan.rebind.items():  # bound again where a buffer's memory changed (a swapped input, new result)
        if (handles := [b._buf for b in self.jit_cache[i].bufs]) != bound:
          plan.calls[i], plan.rebind[i] = _bind(self.jit_cache[i], plan.calls[i]), handles
      for c in plan.calls:
        if type(c) is ExecItem: c.run(var_vals, jit=True)
        else: c()
      GlobalCounters.global_ops += plan.flops
      GlobalCounters.global_mem += plan.mem
      GlobalCounters.kernel_count += plan.kernels
    self.cnt += 1
    state.rewritten([ei.bufs[0] for ei in self.jit_cache])  # graphs built after this read the new contents
    if self.index_flags and CHECK_INDEX: read_flags(self.index_flags)  # IndexError if an index is out of range
    if bases is None and self.from_inputs: bases = [state.view_base(t.uop) for t in inputs]
    return self._results(bases or [], fresh=self.out_slots, vals=var_vals if self.symbolic else None)

  def _results(self, bases: list[UOp], fresh: Container[int], vals: dict[UOp, int] | None = None) -> Any:
    """This call's results, as tensors later calls leave alone: (views of) inputs rebuilt on this call's inputs (their
    bases); those in fresh on the buffers this call wrote them into (out_slots); the others (written into a buffer that
    existed before, a parameter) copied out, one copy each; a constant as it is."""
    outs = []
    for i, t in enumerate(self.ret_tensors):
      chain, base = state.view_chain(u := t.uop)
      if i in self.from_inputs:
        k, old_base = self.from_inputs[i]
        t = Tensor._wrap(u.substitute({old_base: bases[k]}))
      elif i in fresh:
        k, j = self.out_slots[i][0]
        t = Tensor._wrap(state.rebuild(UOp(Ops.BUFFER, base.dtype, (), self.jit_cache[k].bufs[j]), chain))
      elif base.op is Ops.BUFFER:
        buf = base.arg
        copy = Buffer(buf.device, buf.size, buf.dtype)
        ExecItem(CopyRunner(buf.device, buf.device, buf.nbytes), [copy, buf]).run()
        t = Tensor._wrap(state.rebuild(UOp(Ops.BUFFER, buf.dtype, (), copy), chain))
      if vals:  # sizes from Variables at this call's values
        chain, base = state.view_chain(t.uop)
        t = Tensor._wrap(state.rebuild(base, [c.replace(arg=_sym(c.arg, vals)) for c in chain]))
      outs.append(t)
    return outs[0] if self.ret_structure is Tensor else _rebuild(self.ret_structure, iter(outs))

@dataclass
class _Plan:
  """A replay, worked out once (TinyJit._plan)."""
  items: list[ExecItem]  # the jit_cache it was made for
  swaps: list[tuple[list[Buffer], int, int]]  # (an item's buffer list, position, input index)
  outs: list[tuple[Buffer, list[list[Buffer]], list[int]]]  # per fresh result: a buffer it had (its kind), its slots
  calls: list[Any]  # per item: its kernel's launch, bound (_bind), or the ExecItem to run
  flops: int
  mem: int
  kernels: int
  rebind: dict[int, list[Any]]  # the items whose buffers a replay may swap (inputs, results): the memory bound to

def _bind(ei: ExecItem, old: Any = None) -> Any:
  """ei's launch as a call of nothing, bound once: a kernel's (the program's own launcher where it has one), or a copy
  the devices queue (CopyRunner.launcher, given old, ei's launch bound before); else ei itself, run by ExecItem.run."""
  r, handles = ei.runner, [b.allocate()._buf for b in ei.bufs]  # (allocated again after free_intermediates)
  if isinstance(r, CompiledRunner) and not r.p.vars and r.prg is not None:
    launcher = getattr(r.prg, "launcher", None)
    return (launcher(*handles) if launcher is not None else None) or \
      functools.partial(r.prg, *handles, global_size=r.p.global_size, local_size=r.p.local_size)
  return (r.launcher(ei.bufs, old) if isinstance(r, CopyRunner) else None) or ei

def _same(a: Any, b: Any) -> bool:
  """a and b are the same value (of the same type: 1 and 1.0 build different graphs); objects compare by identity
  where == doesn't give a bool."""
  if a is b: return True
  if type(a) is not type(b): return False
  if isinstance(a, float) and math.isnan(a) and math.isnan(b): return True
  try: return bool(a == b) is True
  except Exception: return False

def _static_change(was: list[tuple[str, Any]], now: list[tuple[str, Any]]) -> str | None:
  """What differs between the non-Tensor arguments of the capture and these, in words (None: nothing)."""
  old, new = dict(was), dict(now)
  for where in dict.fromkeys([*old, *new]):
    if where not in old: return f"{where} = {new[where]!r} was not given at the capture"
    if where not in new: return f"{where} = {old[where]!r} at the capture is missing now"
    if not _same(old[where], new[where]): return f"{where} was {old[where]!r}, now {new[where]!r}"
  return None

def _check_distinct(bufs: list[Buffer], names: list[str]) -> None:
  """Two inputs in one buffer can't be told apart in the captured kernels: refuse them at the capture."""
  first: dict[int, int] = {}  # id of a buffer -> the first input in it
  for i, b in enumerate(bufs):
    if (j := first.setdefault(id(b), i)) != i:
      raise JitError(f"TinyJit: inputs {j} ({names[j]}) and {i} ({names[i]}) are (views of) the same buffer; "
                     "the capture needs a buffer of its own for each input (pass a .contiguous().realize() copy)")

@dataclass
class _Trace:
  """One traced call of a `function`: the graph it built, with stand-in nodes where the inputs go."""
  holders: list[UOp]  # stand-ins for the inputs, in input order
  binds: list[UOp]  # the bound variables among the arguments (their values change from call to call)
  structure: Any  # the returned value with a marker for each Tensor
  outs: list[UOp]  # the returned tensors' graphs
  out_grad: list[bool | None]  # whether each returned tensor requires grad
  captured: list[tuple[weakref.ref, UOp]]  # tensors read from outside that require grad, with their node then
  rng_states: list[tuple[UOp, str, int]]  # random-state nodes drawn inside: node, device, counter offset
  rng_step: int  # how far the traced call moved the random counter
  buffers: list[UOp]  # the BUFFER nodes the graph reads: buffers written since are read at their newest version
  checks: list[tuple[UOp, list[IndexCheck]]]  # the index checks in the graph, put on each call's results
  writes: list[_Write]  # the assigns the call made to tensors it didn't return, repeated on each call
  grads: list[_Write]  # the .grad the call set on tensors from outside (a backward inside it)

@dataclass
class _Write:
  """A side effect of a traced call: the tensor (an input's index, or a weak reference) went from node `before` to
  node `after`; each call sets it to `after` with `before` replaced by the tensor's node at that call."""
  target: int | weakref.ref
  before: UOp | None  # None: a gradient that wasn't there before
  after: UOp | None  # None: a gradient the call removed (zero_grad)

  def tensor(self, inputs: list) -> Any: return inputs[self.target] if isinstance(self.target, int) else self.target()

def function(fxn: Callable | None = None, *, precompile: bool = False, precompile_backward: bool = False,
             allow_implicit: bool = True, grad_fxn: Callable | None = None) -> Any:
  """Decorator: trace the graph a function of tensors builds, once per input signature, and reuse it: calls give the
  same results (and gradients) as f. The signature, the side effects repeated and tinygrad's keywords: docs/jit.md."""
  if grad_fxn is not None: raise NotImplementedError("function: grad_fxn (a custom gradient) is not supported")
  make = functools.partial(_Function, allow_implicit=allow_implicit)
  return make if fxn is None else make(fxn)

class _Function:
  def __init__(self, fxn: Callable, allow_implicit: bool = True):
    self.fxn, self.traces, self.by_value = fxn, dict[tuple, _Trace](), False  # by_value: as TinyJit's, traced per value
    self.allow_implicit = allow_implicit  # False: a trace that reads or writes a buffer it wasn't given raises
    functools.update_wrapper(self, fxn)

  def __get__(self, obj: Any, objtype: Any = None) -> Callable:
    if obj is None: return self  # looked up on the class
    return functools.partial(self.__call__, obj)  # as a method: bind the instance (part of the signature)

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    with RUN_LOCK: return self._call(*args, **kwargs)  # one call at a time: a call from another thread waits
  def _call(self, *args: Any, **kwargs: Any) -> Any:
    inputs, binds, _ = _split_args(args, kwargs)
    key = (tuple((t.shape, t.dtype, t.device, bool(t.requires_grad)) for t in inputs), _is_training(),
           _hashable(args, "args"), _hashable({k: kwargs[k] for k in sorted(kwargs)}, "kwargs"),
           tuple(b.src[1].arg for b in binds) if self.by_value else ())
    written = _written_leaves(self.traces[key]) if key in self.traces else None
    if written is None:
      shapes, trace = STATE.value_shapes, self._trace(args, kwargs, inputs, binds)
      if STATE.value_shapes != shapes and not self.by_value:  # (a shape from a Variable's value: a trace per value)
        self.by_value, self.traces = True, {}
        key = (*key[:-1], tuple(b.src[1].arg for b in binds))
      if self.by_value and len(self.traces) >= 16: del self.traces[next(iter(self.traces))]  # (kept: the last values')
      self.traces[key] = trace
      return self._results(trace, inputs, {}, traced=True)
    trace = self.traces[key]
    fresh = {b: new for b in trace.buffers if (new := state.current(b)) is not b}  # buffers written since the trace
    fresh.update(written)  # weights written since the trace: their buffer nodes now
    # every random draw gets the counter it would have had now, as a plain call would
    for node, device, offset in trace.rng_states:
      seed, counter = Tensor._seed & 0xFFFFFFFFFFFFFFFF, STATE.rng_counter + offset
      fresh[node] = Tensor([seed, counter], dtype=dtypes.uint64, device=device).uop
    STATE.rng_counter += trace.rng_step
    fresh.update(zip(trace.binds, binds))  # this call's values of the variables
    return self._results(trace, inputs, fresh)

  def _results(self, trace: _Trace, inputs: list, fresh: dict[UOp, UOp], traced: bool = False) -> Any:
    sub = {h: t.uop for h, t in zip(trace.holders, inputs)} | fresh
    effects = _side_effects(trace, inputs, sub, traced)
    # one substitution for results and side effects (shared nodes), keeping composites' derivative rules (conv2d's)
    roots = (*trace.outs, *(after for _, after, _ in effects))
    new = iter(substitute_keeping_rules(UOp(Ops.SINK, src=roots), sub).src)
    results = []
    for grad in trace.out_grad:
      ret = Tensor(next(new))
      ret._requires_grad = grad
      results.append(ret)
    for t, _, is_grad in effects:
      if is_grad: t.grad = Tensor(next(new))
      else:
        t.uop = next(new)
        for note in _assign_watchers: note(t)  # a TinyJit around the call realizes (so captures) this write
    for node, checks in trace.checks:  # out-of-range indices of this call raise too (node is in a result's graph)
      for c in checks: add_index_check(node.substitute(sub), dataclasses.replace(c, flag=c.flag.substitute(sub)))
    return _rebuild(trace.structure, iter(results))

  def _trace(self, args: tuple, kwargs: dict, inputs: list, binds: list[UOp]) -> _Trace:
    name = getattr(self.fxn, '__name__', 'the function')
    holders = [UOp(Ops.BUFFER, t.dtype, (), Buffer(t.device, t.numel(), t.dtype)).reshape(t.shape) for t in inputs]
    stand_ins = [Tensor(h) for h in holders]
    for s, t in zip(stand_ins, inputs): s._requires_grad = t.requires_grad  # so results require grad as they would
    outside = list(STATE.grad_tensors.values())  # before the call: tensors made inside are the graph itself
    grads_before = [(t, t.grad.uop if t.grad is not None else None) for t in outside]
    start, draws = STATE.rng_counter, []
    assigned: dict[int, tuple[Any, UOp]] = {}  # id -> (tensor, its node before its first assign in the call)
    def refuse_inputs(roots: list[UOp]) -> None:
      if roots and any(n in held for n in UOp(Ops.SINK, src=tuple(roots)).toposort()):
        raise JitError(f"function: {name} computes values from its inputs while being traced (realize, numpy, item, "
                       "tolist...); a traced function may only build the graph")
    held = {state.view_base(h) for h in holders}
    _rng_hooks.append(lambda state, counter: draws.append((state.uop, state.device, counter - start)))
    def note_assign(t: Tensor) -> None: assigned.setdefault(id(t), (t, t.uop))
    _assign_hooks.append(note_assign)
    STATE.realize_hooks.append(refuse_inputs)
    try:
      stand = iter(stand_ins)
      def swap(v: Any) -> Any: return next(stand) if isinstance(v, Tensor) else v
      ret = self.fxn(*_map_leaves(list(args), swap), **_map_leaves({k: kwargs[k] for k in sorted(kwargs)}, swap))
    finally:
      _rng_hooks.pop()
      _assign_hooks.pop()
      STATE.realize_hooks.pop()
    returned = _tensors_in(ret)
    writes = _writes(name, assigned.values(), stand_ins)
    written = {id(w.tensor(inputs)) for w in writes if not isinstance(w.target, int)}
    grads = [_Write(weakref.ref(t), old, t.grad.uop if t.grad is not None else None) for t, old in grads_before
             if (t.grad.uop if t.grad is not None else None) is not old]
    nodes = set(UOp(Ops.SINK, src=tuple(o.uop for o in returned)).toposort()) if returned else set()
    if not self.allow_implicit and (any(n.op is Ops.BUFFER and n not in held for n in nodes) or written or grads):
      raise JitError(f"function {name} has implicit buffer(s), but allow_implicit=False")
    captured = [(weakref.ref(t), t.uop) for t in outside if t.uop in nodes and id(t) not in written]
    checks = list(pending_index_checks([o.uop for o in returned]).items())
    for node, _ in checks: STATE.index_checks.pop(node, None)  # the traced graph is never realized: each call's is
    return _Trace(holders, binds, _structure(ret), [o.uop for o in returned], [o._requires_grad for o in returned],
                  captured, draws, STATE.rng_counter - start, [n for n in nodes if n.op is Ops.BUFFER],
                  checks, writes, grads)

def _writes(name: str, assigned: Any, stand_ins: list) -> list[_Write]:
  """The assigns of a traced call to repeat on each call: to a stand-in (that call's input) or a live tensor. A tensor
  whose node wasn't a buffer (or a write into one) was rebound, not written: refused (a trace can't tell the two)."""
  ret = []
  index = {id(s): i for i, s in enumerate(stand_ins)}
  for t, before in assigned:
    if t.uop is before: continue
    if state.view_base(before).op not in (Ops.BUFFER, Ops.ASSIGN):
      raise JitError(f"function: {name} assigns to a tensor of shape {t.shape} that is not in a buffer (a constant "
                     "or a lazy value); realize it before the call (t = t.contiguous().realize())")
    ret.append(_Write(index[id(t)] if id(t) in index else weakref.ref(t), before, t.uop))
  return ret

def _side_effects(trace: _Trace, inputs: list, sub: dict[UOp, UOp], traced: bool) -> list[tuple[Any, UOp, bool]]:
  """This call's assigns and gradients, as a plain call would make them: (tensor, its new node before substitution,
  whether it is the gradient). Each target's node at the trace is replaced by its node now (sub grows by those). The
  traced call made them on its stand-ins already: there only the stand-ins are replaced by the inputs."""
  ret = []
  for w in trace.writes:
    if (t := w.tensor(inputs)) is None: continue
    if isinstance(w.target, int) and state.view_base(t.uop).op not in (Ops.BUFFER, Ops.ASSIGN):
      raise JitError(f"function: the traced call assigns to its input {w.target} (shape {t.shape}), which is not in a "
                     "buffer now; realize it first")
    assert w.before is not None and w.after is not None  # (only a gradient comes or goes)
    if not traced: sub[w.before] = t.uop
    ret.append((t, w.after, False))
  for w in trace.grads:
    if (t := w.tensor(inputs)) is None: continue
    if not traced and w.before is not None and t.grad is not None: sub[w.before] = t.grad.uop
    if w.after is None: t.grad = None
    else: ret.append((t, w.after, True))
  return ret

def _written_leaves(trace: _Trace) -> dict[UOp, UOp] | None:
  """For the tensors the trace read from outside: the BUFFER nodes that writes since the trace replaced (same memory,
  a new node), to substitute; None when the trace must be made again: one stands for something else now (realized,
  replaced, an assign pending), or a gradient the call sets is there now and wasn't then, or the reverse."""
  if any((t := w.tensor([])) is not None and (t.grad is None) != (w.before is None) for w in trace.grads): return None
  ret: dict[UOp, UOp] = {}
  for ref, old in trace.captured:
    if (t := ref()) is None or t.uop is old: continue
    (old_chain, old_leaf), (new_chain, new_leaf) = state.view_chain(old), state.view_chain(t.uop)
    if old_leaf.op is not Ops.BUFFER or new_leaf.op is not Ops.BUFFER or old_leaf.arg is not new_leaf.arg \
       or [(c.op, c.arg) for c in old_chain] != [(c.op, c.arg) for c in new_chain]: return None
    ret[old_leaf] = new_leaf
  return ret

def _hashable(x: Any, where: str) -> Any:
  """x as a hashable key, with every Tensor replaced by a marker (tensors are keyed by shape and dtype instead)."""
  if isinstance(x, Tensor): return Tensor
  if isinstance(x, UOp) and x.op is Ops.BIND: return ("bind", x.src[0])  # the variable; its value may change
  if isinstance(x, (list, tuple)):
    return (type(x).__name__, tuple(_hashable(v, f"{where}[{i}]") for i, v in enumerate(x)))
  if isinstance(x, dict): return ("dict", tuple((k, _hashable(v, f"{where}[{k!r}]")) for k, v in x.items()))
  try: hash(x)
  except TypeError:
    raise TypeError(f"function: argument {where} of type {type(x).__name__} is not hashable, so it can't be part of "
                    "the trace's signature; pass it as a Tensor, or as numbers, strings or tuples") from None
  return (type(x), x)  # the type too: f(x, 1) and f(x, 1.0) build different graphs

def _map_leaves(x: Any, fn: Callable[[Any], Any]) -> Any:
  """x with fn applied to everything in it that is not a list, tuple (a NamedTuple too) or dict, in _leaves' order."""
  if isinstance(x, (list, tuple)):
    values = [_map_leaves(v, fn) for v in x]
    return type(x)(*values) if isinstance(x, tuple) and hasattr(x, "_fields") else type(x)(values)
  return {k: _map_leaves(v, fn) for k, v in x.items()} if isinstance(x, dict) else fn(x)

def _structure(x: Any) -> Any:
  """x with each Tensor replaced by a marker, to rebuild the same shape of result later."""
  def marker(v: Any) -> Any:
    if not isinstance(v, Tensor): return v
    return _Spread(v.uop.arg, len(v.uop.src)) if v.uop.op is Ops.MULTI else Tensor
  return _map_leaves(x, marker)

def _rebuild(structure: Any, tensors: Iterator) -> Any:
  """structure (of _structure) with the next of tensors at each marker."""
  def fill(v: Any) -> Any:
    if v is Tensor: return next(tensors)
    if isinstance(v, _Spread): return Tensor._wrap(multi.multi(tuple(next(tensors).uop for _ in range(v.n)), v.axis))
    return v
  return _map_leaves(structure, fill)
