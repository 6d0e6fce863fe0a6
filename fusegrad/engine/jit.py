"""TinyJit: run a function once, capture the kernels it launches the second time, and replay them after that.

A replay skips Python entirely: no graph building, no scheduling, no codegen; the captured kernels run again with
the new inputs' buffers swapped in. So the function must do the same work every call: same input shapes, dtypes
and devices, and no Python-side branching on tensor values.

`function` is the lighter cousin: it traces the graph a function builds once per input signature and reuses it, so
building a model's forward graph again costs one substitution.
"""
from __future__ import annotations
import functools, struct, weakref
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar
from fusegrad.device import Buffer
from fusegrad.dtype import dtypes
from fusegrad.helpers import JIT, dprint, colored
from fusegrad.uop.ops import UOp, Ops, GroupOp
from fusegrad.engine.realize import ExecItem, capturing

ReturnType = TypeVar("ReturnType")

class JitError(RuntimeError):
  """A TinyJit call that can't be captured or replayed."""

def _tensors_in(x: Any) -> list:
  """Every Tensor in x: x itself, or inside lists, tuples and dicts (in order)."""
  from fusegrad.tensor import Tensor
  if isinstance(x, Tensor): return [x]
  if isinstance(x, (list, tuple)): return [t for v in x for t in _tensors_in(v)]
  if isinstance(x, dict): return [t for v in x.values() for t in _tensors_in(v)]
  return []

def _named_tensors(x: Any, name: str) -> list[tuple[str, Any]]:
  """(where, tensor) for every Tensor in x, in the order _tensors_in gives: `args[0]`, `kwargs['b'][1]`..."""
  from fusegrad.tensor import Tensor
  if isinstance(x, Tensor): return [(name, x)]
  if isinstance(x, (list, tuple)): return [nt for i, v in enumerate(x) for nt in _named_tensors(v, f"{name}[{i}]")]
  if isinstance(x, dict): return [nt for k, v in x.items() for nt in _named_tensors(v, f"{name}[{k!r}]")]
  return []

def _call_inputs(args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
  """The tensors of a call, named; keyword arguments in name order, so f(a=x, b=y) and f(b=y, a=x) agree."""
  return _named_tensors(list(args), "args") + _named_tensors({k: kwargs[k] for k in sorted(kwargs)}, "kwargs")

def _view_structure(u: UOp) -> tuple:
  """The movement ops between a tensor and its buffer (the kernels were built for exactly this view)."""
  chain = []
  while u.op in GroupOp.Movement:
    chain.append((u.op, u.arg))
    u = u.src[0]
  return tuple(chain)

def _input_buffer(t: Any, what: str) -> Buffer:
  base = t.uop.base
  if base.op is Ops.CONST:
    raise JitError(f"TinyJit: {what} (shape {t.shape}) is a constant with no buffer of its own; "
                   "pass x.contiguous().realize() instead")
  if base.op is not Ops.BUFFER:
    raise JitError(f"TinyJit: {what} (shape {t.shape}) is not realized; call .realize() on inputs before passing them")
  return base.arg

@dataclass(frozen=True)
class _Signature:
  shapes: tuple
  dtypes: tuple
  devices: tuple
  views: tuple

def _signature(tensors: list) -> _Signature:
  return _Signature(tuple(t.shape for t in tensors), tuple(t.dtype for t in tensors), tuple(t.device for t in tensors),
                    tuple(_view_structure(t.uop) for t in tensors))

def _describe_change(was: _Signature, now: _Signature, names: list[str]) -> str:
  """What differs between the captured inputs and these, in words."""
  if len(was.shapes) != len(now.shapes):
    return f"{len(was.shapes)} tensor inputs at the capture, {len(now.shapes)} now"
  for i, name in enumerate(names):
    for field in ("shape", "dtype", "device", "view"):
      old, new = getattr(was, field + "s")[i], getattr(now, field + "s")[i]
      if old != new: return f"input {i} ({name}): {field} was {old}, now {new}"
  return f"was {was}, now {now}"

class TinyJit(Generic[ReturnType]):
  """Decorator: `@TinyJit def step(x): ...`. Call 1 runs normally, call 2 captures, later calls replay.

  Inputs (Tensors anywhere in the arguments, also inside lists and dicts) must be realized, and keep their shapes,
  dtypes, devices and views. A replay returns the Tensors the capture returned, with new values written into the same
  buffers: copy what you want to keep. `JIT=0` turns it off; `reset()` forgets the capture."""
  def __init__(self, fxn: Callable[..., ReturnType]):
    self.fxn, self.cnt = fxn, 0
    self.jit_cache: list[ExecItem] = []
    self.input_slots: list[tuple[int, int, int]] = []  # (exec item, buffer position, input index)
    self.rng_draws: list[tuple[Buffer, int]] = []  # random-state buffers captured, with their counter offsets
    self.rng_step = 0
    self.from_inputs: dict[int, tuple[int, UOp]] = {}  # output position -> (input index, the input's base at capture)
    self._per_instance: dict[int, tuple[Any, TinyJit]] = {}  # id(instance) -> its TinyJit, when used as a method
    functools.update_wrapper(self, fxn)  # type: ignore[arg-type]

  def reset(self) -> None:
    """Forget the capture: the next call runs normally again."""
    self.cnt, self.jit_cache, self.input_slots, self.rng_draws, self.from_inputs = 0, [], [], [], {}
    for _, jit in self._per_instance.values(): jit.reset()

  def __get__(self, obj: Any, objtype: Any = None) -> Callable[..., ReturnType]:
    """As a method: each instance gets a TinyJit of its own (two models must not replay each other's kernels)."""
    if obj is None: return self  # looked up on the class
    entry = self._per_instance.get(id(obj))
    if entry is None:
      entry = self._per_instance[id(obj)] = self._bind(obj)
    return entry[1]

  def _bind(self, obj: Any) -> tuple[Any, TinyJit]:
    """A TinyJit of the method bound to obj, holding obj weakly (forgotten with it) where obj allows weak references."""
    fxn = self.fxn
    try: ref = weakref.ref(obj)
    except TypeError: return obj, TinyJit(functools.partial(fxn, obj))  # held strongly, so its id is never reused
    weakref.finalize(obj, self._per_instance.pop, id(obj), None)
    def bound(*args: Any, **kwargs: Any) -> Any: return fxn(ref(), *args, **kwargs)
    return None, TinyJit(functools.wraps(fxn)(bound))

  def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
    if not JIT: return self.fxn(*args, **kwargs)
    named = _call_inputs(args, kwargs)
    names, inputs = [n for n, _ in named], [t for _, t in named]
    bufs = [_input_buffer(t, f"input {i} ({n})") for i, (n, t) in enumerate(named)]
    sig = _signature(inputs)
    if self.cnt == 0:
      self.sig, self.cnt = sig, 1
      return self._finish(self.fxn(*args, **kwargs))
    if sig != self.sig:
      raise JitError(f"TinyJit: inputs changed since the capture: {_describe_change(self.sig, sig, names)}")
    if self.cnt == 1:
      _check_distinct(bufs, names)
      return self._capture(args, kwargs, inputs, bufs)
    return self._replay(inputs, bufs)

  def _finish(self, ret: Any) -> Any:
    from fusegrad.tensor import Tensor
    Tensor.realize_all(_tensors_in(ret))
    return ret

  def _capture(self, args: tuple, kwargs: dict, inputs: list, bufs: list[Buffer]) -> Any:
    from fusegrad.tensor import Tensor, _rng_hooks
    start = Tensor._rng_counter
    draws: list[tuple[Tensor, int]] = []
    _rng_hooks.append(lambda state, counter: draws.append((state, counter - start)))
    capturing.append(self.jit_cache)
    try: ret = self._finish(self.fxn(*args, **kwargs))
    finally:
      capturing.pop()
      _rng_hooks.pop()
    if not self.jit_cache: raise JitError("TinyJit: the function launched no kernels, so there is nothing to replay")
    self.input_slots = [(i, j, bufs.index(b)) for i, ei in enumerate(self.jit_cache) for j, b in enumerate(ei.bufs)
                        if any(b is x for x in bufs)]
    self.rng_draws = [(_input_buffer(state, "a random state"), off) for state, off in draws]
    self.rng_step = Tensor._rng_counter - start
    # results that are (views of) inputs must follow the inputs of each replay, not stay the capture's inputs
    self.ret, self.ret_structure, self.ret_tensors = ret, _structure(ret), _tensors_in(ret)
    base_of = {id(t.uop.base.arg): (k, t.uop.base) for k, t in enumerate(inputs)}
    self.from_inputs = {i: base_of[id(t.uop.base.arg)] for i, t in enumerate(self.ret_tensors)
                        if t.uop.base.op is Ops.BUFFER and id(t.uop.base.arg) in base_of}
    self.cnt = 2
    dprint(1, colored(f"JIT captured {len(self.jit_cache)} kernels with {len(bufs)} inputs", "magenta"))
    return ret

  def _replay(self, inputs: list, bufs: list[Buffer]) -> Any:
    from fusegrad.tensor import Tensor
    for i, j, k in self.input_slots: self.jit_cache[i].bufs[j] = bufs[k]
    for state, off in self.rng_draws:  # fresh random numbers: the counter each draw would have had now
      state.copyin(struct.pack("<QQ", Tensor._seed & 0xFFFFFFFFFFFFFFFF, Tensor._rng_counter + off))
    Tensor._rng_counter += self.rng_step
    for ei in self.jit_cache: ei.run(jit=True)
    self.cnt += 1
    return self._results(inputs)

  def _results(self, inputs: list) -> Any:
    """The capture's results; those that are (views of) inputs rebuilt on this call's inputs."""
    from fusegrad.tensor import Tensor
    if not self.from_inputs: return self.ret
    outs = []
    for i, t in enumerate(self.ret_tensors):
      if i in self.from_inputs:
        k, old_base = self.from_inputs[i]
        t = Tensor(t.uop.substitute({old_base: inputs[k].uop.base}))
      outs.append(t)
    return _rebuild(self.ret_structure, iter(outs))

def _check_distinct(bufs: list[Buffer], names: list[str]) -> None:
  """Two inputs in one buffer can't be told apart in the captured kernels: refuse them at the capture."""
  seen: dict[int, int] = {}
  for i, b in enumerate(bufs):
    if id(b) in seen:
      j = seen[id(b)]
      raise JitError(f"TinyJit: inputs {j} ({names[j]}) and {i} ({names[i]}) are (views of) the same buffer; "
                     "the capture needs a buffer of its own for each input (pass a .contiguous().realize() copy)")
    seen[id(b)] = i

class function:
  """Decorator: trace the graph a function of tensors builds, once per input signature, and reuse it.
  `@function def f(x): return (x @ w).relu()`: calls with same-shaped inputs give the same results as calling f."""
  def __init__(self, fxn: Callable):
    self.fxn = fxn
    self.traces: dict[_Signature, tuple[list[UOp], Any, list]] = {}
    functools.update_wrapper(self, fxn)

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    from fusegrad.tensor import Tensor
    inputs = _tensors_in(list(args)) + _tensors_in(kwargs)
    key = _Signature(tuple(t.shape for t in inputs), tuple(t.dtype for t in inputs), tuple(t.device for t in inputs),
                     (tuple(kwargs), len(args)))
    if key not in self.traces: self.traces[key] = self._trace(args, kwargs, inputs)
    holders, structure, outs = self.traces[key]
    sub = {h: t.uop for h, t in zip(holders, inputs)}
    results = iter([Tensor(o.substitute(sub)) for o in outs])
    return _rebuild(structure, results)

  def _trace(self, args: tuple, kwargs: dict, inputs: list) -> tuple[list[UOp], Any, list]:
    from fusegrad.tensor import Tensor
    holders = [UOp(Ops.BUFFER, t.dtype, (), Buffer(t.device, t.numel(), t.dtype)).reshape(t.shape) for t in inputs]
    stand_ins = iter([Tensor(h) for h in holders])
    ret = self.fxn(*_swap(list(args), stand_ins), **_swap(dict(kwargs), stand_ins))
    roots = [o.uop for o in _tensors_in(ret)]
    return holders, _structure(ret), _realize_external(roots, set(holders))

def _realize_external(roots: list[UOp], held: set[UOp]) -> list[UOp]:
  """roots with every part that doesn't depend on the inputs (weights, lazily initialized or computed) replaced by
  its realized buffer, so a reused trace never recomputes it (and sees updates written into those buffers)."""
  from fusegrad.tensor import Tensor
  topo = UOp(Ops.SINK, src=tuple(roots)).toposort()[:-1]
  dependent: dict[UOp, bool] = {}
  for n in topo: dependent[n] = n in held or any(dependent[x] for x in n.src)
  users_dependent = {x for n in topo if dependent[n] for x in n.src}
  frontier = [n for n in topo if not dependent[n] and (n in users_dependent or n in roots)]
  todo = [n for n in frontier if _view_base(n).op not in (Ops.BUFFER, Ops.CONST, Ops.DEVICE)]
  if not todo: return roots
  done = [Tensor(n) for n in todo]
  Tensor.realize_all(done)
  return [r.substitute({n: t.uop for n, t in zip(todo, done)}) for r in roots]

def _view_base(u: UOp) -> UOp:
  while u.op in GroupOp.Movement or u.op is Ops.DETACH: u = u.src[0]
  return u

def _swap(x: Any, stand_ins: Any) -> Any:
  from fusegrad.tensor import Tensor
  if isinstance(x, Tensor): return next(stand_ins)
  if isinstance(x, list): return [_swap(v, stand_ins) for v in x]
  if isinstance(x, tuple): return tuple(_swap(v, stand_ins) for v in x)
  if isinstance(x, dict): return {k: _swap(v, stand_ins) for k, v in x.items()}
  return x

def _structure(x: Any) -> Any:
  """x with each Tensor replaced by a marker, to rebuild the same shape of result later."""
  from fusegrad.tensor import Tensor
  if isinstance(x, Tensor): return Tensor
  if isinstance(x, (list, tuple)): return type(x)(_structure(v) for v in x)
  if isinstance(x, dict): return {k: _structure(v) for k, v in x.items()}
  return x

def _rebuild(structure: Any, tensors: Any) -> Any:
  from fusegrad.tensor import Tensor
  if structure is Tensor: return next(tensors)
  if isinstance(structure, (list, tuple)): return type(structure)(_rebuild(v, tensors) for v in structure)
  if isinstance(structure, dict): return {k: _rebuild(v, tensors) for k, v in structure.items()}
  return structure
