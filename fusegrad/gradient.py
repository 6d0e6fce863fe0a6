"""Reverse-mode autodiff over the lazy graph: one derivative rule per primitive (see docs/developer/autograd.md)."""
from __future__ import annotations
import math, weakref
from typing import Callable
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops, inverse_permutation
from fusegrad.engine import multi

def _max_grad(g: UOp, n: UOp) -> tuple[UOp, UOp]:
  """d max(x, y): all of it to the larger input, half to each on a tie, all to both where one is nan (as torch)."""
  x, y = n.src
  eq, zero = x.ne(y).logical_not(), g.const_like(0)
  g_or_half = eq.where(g * g.const_like(0.5), g)
  return x.alu(Ops.CMPLT, y).where(zero, g_or_half), y.alu(Ops.CMPLT, x).where(zero, g_or_half)

def _reduce_max_grad(g: UOp, n: UOp) -> tuple[UOp]:
  """d max over axes: shared equally by the elements that equal the max."""
  x, wide = n.src[0], dtypes.float32 if g.dtype.itemsize < 4 else g.dtype  # (a half count stops at 2048 exact)
  mask = x.ne(n.expand(x.shape)).logical_not()
  share = g.cast(wide) * mask.cast(wide).r(Ops.ADD, n.arg[1]).alu(Ops.RECIPROCAL)
  return (mask.cast(g.dtype) * share.cast(g.dtype).expand(x.shape),)

def _reduce_grad(g: UOp, n: UOp) -> tuple[UOp | None]:
  op, axes = n.arg
  if op is Ops.ADD: return (g.expand(n.src[0].shape),)
  if op is Ops.MAX: return _reduce_max_grad(g, n)
  if op is Ops.MUL: return _reduce_prod_grad(g, n)
  raise RuntimeError(f"no gradient for a {op} reduce")

def _reduce_prod_grad(g: UOp, n: UOp) -> tuple[UOp]:
  """d prod over axes: the product of the other elements. That is prod / x, except where x is 0: there it is the
  product of the nonzero others when x is the only zero of its group, else 0."""
  x, axes = n.src[0], n.arg[1]
  is_zero = x.ne(0).logical_not()
  prod_nonzero = is_zero.where(x.const_like(1), x).r(Ops.MUL, axes).expand(x.shape)
  zeros = is_zero.cast(x.dtype).r(Ops.ADD, axes).expand(x.shape)
  at_zero = zeros.ne(1).where(x.const_like(0), prod_nonzero)
  return (g.expand(x.shape) * is_zero.where(at_zero, n.expand(x.shape) * x.alu(Ops.RECIPROCAL)),)

def _expand_grad(g: UOp, n: UOp) -> tuple[UOp]:
  axes = tuple(i for i, (s, o) in enumerate(zip(n.src[0].shape, n.shape)) if s != o)
  return (g.r(Ops.ADD, axes),)

def _cast_grad(g: UOp, n: UOp) -> tuple[UOp | None]:
  return (g.cast(n.src[0].dtype),) if dtypes.is_float(n.src[0].dtype) else (None,)

def _cos(x: UOp) -> UOp:
  """cos(x) = 1 - 2 sin(x/2)^2 (sin's derivative): x/2 is exact, where pi/2 - x rounds away the answer for large x."""
  s = (x * x.const_like(0.5)).alu(Ops.SIN)
  return x.const_like(1) - s * s * x.const_like(2)

LN2 = math.log(2)
# rule(grad of output, node) -> gradients of node.src, in order
grad_rules: dict[Ops, Callable[[UOp, UOp], tuple[UOp | None, ...]]] = {
  Ops.ADD: lambda g, n: (g, g), Ops.MUL: lambda g, n: (g * n.src[1], g * n.src[0]), Ops.MAX: _max_grad,
  Ops.FDIV: lambda g, n: (g.alu(Ops.FDIV, n.src[1]), -(g * n.alu(Ops.FDIV, n.src[1]))),  # (torch's: -g * (a/b/b))
  Ops.MULACC: lambda g, n: (g * n.src[1], g * n.src[0], g), Ops.RECIPROCAL: lambda g, n: (-(g * n * n),),
  Ops.WHERE: lambda g, n: (None, n.src[0].where(g, g.const_like(0)), n.src[0].where(g.const_like(0), g)),
  Ops.SQRT: lambda g, n: (g * (n * n.const_like(2)).alu(Ops.RECIPROCAL),),
  Ops.EXP2: lambda g, n: (g * n * n.const_like(LN2),), Ops.SIN: lambda g, n: (g * _cos(n.src[0]),),
  Ops.LOG2: lambda g, n: (g * (n.src[0] * n.const_like(LN2)).alu(Ops.RECIPROCAL),), Ops.CAST: _cast_grad,
  # rounding, bit reinterpretation, comparisons, integer and bit ops, random bits: no gradient flows through them
  **{op: lambda g, n: (None,) * len(n.src) for op in (Ops.TRUNC, Ops.BITCAST, Ops.CMPLT, Ops.CMPNE, Ops.IDIV,
                                                        Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.THREEFRY)},
  Ops.MOD: lambda g, n: (g, g * (n - n.src[0]) * n.src[1].alu(Ops.RECIPROCAL)) if dtypes.is_float(n.dtype) else
           (None, None),  # fmod(a, b) = a - trunc(a / b) * b; integer % has none
  Ops.REDUCE_AXIS: _reduce_grad, Ops.RESHAPE: lambda g, n: (g.reshape(n.src[0].shape),),
  Ops.PERMUTE: lambda g, n: (g.permute(inverse_permutation(n.arg)),), Ops.EXPAND: _expand_grad,
  Ops.PAD: lambda g, n: (g.shrink(tuple((b, b + s) for (b, _), s in zip(n.arg, n.src[0].shape))),),
  Ops.SHRINK: lambda g, n: (g.pad(tuple((b, s - e) for (b, e), s in zip(n.arg, n.src[0].shape))),),
  Ops.FLIP: lambda g, n: (g.flip(n.arg),), Ops.CONTIGUOUS: lambda g, n: (g,), Ops.DETACH: lambda g, n: (None,),
  Ops.COPY: lambda g, n: (g.copy_to_device(n.src[0].device),),  # type: ignore[arg-type]
  Ops.ASSIGN: lambda g, n: (None, g), Ops.MULTI: lambda g, n: multi.parts_like(g, n)}  # (MULTI: each device's part)
_LEAVES = {Ops.BUFFER, Ops.CONST, Ops.DEVICE, Ops.DEFINE_VAR, Ops.BIND}

# composites (pow...) whose primitives' rules get the derivative wrong at special values: result -> (inputs, rule(grad,
# result, *inputs) -> their gradients), used instead of walking into it. A rule holds neither (weak key).
_composite_rules: weakref.WeakKeyDictionary[UOp, tuple[tuple[UOp, ...], Callable]] = weakref.WeakKeyDictionary()

def with_rule(result: UOp, inputs: tuple[UOp, ...], rule: Callable[..., tuple[UOp | None, ...]]) -> UOp:
  """result, differentiated by rule with respect to inputs (its graph only gives the value). The rule lives as long as
  the graph: a Tensor in it (its .grad, filled by backward, would keep a step's buffers alive) is refused."""
  if any(c.__name__ == "Tensor" for h in _held(rule) for c in type(h).__mro__):
    raise TypeError(f"gradient rule {getattr(rule, '__qualname__', rule)!r} holds a Tensor; give it nodes or numbers")
  _composite_rules[result] = (inputs, rule)
  return result

def _held(fn: Callable) -> list:
  """What a function keeps: a bound method's object, a partial's arguments, its defaults, its closure's values."""
  out = [getattr(fn, "__self__", None), *getattr(fn, "args", ()), *(getattr(fn, "__defaults__", None) or ())]
  for cell in getattr(fn, "__closure__", None) or ():
    try: out.append(cell.cell_contents)
    except ValueError: pass  # (a cell not filled yet)
  return out

def substitute_keeping_rules(u: UOp, mapping: dict[UOp, UOp]) -> UOp:
  """u.substitute(mapping), with each composite's rule carried over to its rebuilt node and inputs."""
  new_of = dict(mapping)
  def carry(node: UOp, new: UOp) -> None:
    if (composite := _composite_rules.get(node)) is not None:
      _composite_rules[new] = (tuple(new_of.get(i, i) for i in composite[0]), composite[1])
    new_of[node] = new
  return u.substitute(mapping, carry)

def _target_inside(n: UOp, inputs: tuple[UOp, ...], targets: set[UOp]) -> bool:
  """True if a target is one of the nodes a composite is made of (between its result and its inputs): its rule gives
  no gradient there, so the composite is walked into instead."""
  return any(m in targets for m in n.toposort(gate=lambda m: m not in inputs) if m is not n and m not in inputs)

def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp], walk_into: UOp | None = None) -> dict[UOp, UOp]:
  """Gradients of root (seeded with root_grad) for every node on a path from root to a target. walk_into: a composite
  differentiated by its primitives (its own rule asks for that)."""
  topo = root.toposort()
  on_path: set[UOp] = set()
  for n in topo:  # sources come first, so one pass finds every node that leads to a target
    if n in targets or any(s in on_path for s in n.src): on_path.add(n)
  grads: dict[UOp, UOp] = {root: root_grad}
  for n in reversed(topo):
    if n not in grads or n.op in _LEAVES or (n.op is Ops.MULTI and not any(s in on_path for s in n.src)): continue
    composite = _composite_rules.get(n) if n is not walk_into else None
    if composite is not None and _target_inside(n, composite[0], targets): composite = None
    if composite is not None: srcs, rule = composite
    elif n.op in grad_rules: srcs, rule = n.src, grad_rules[n.op]
    else: raise RuntimeError(f"no derivative rule for {n.op}")
    for s, sg in zip(srcs, rule(grads[n], n, *srcs) if composite is not None else rule(grads[n], n)):
      if sg is None or s not in on_path: continue
      grads[s] = grads[s].alu(Ops.ADD, sg) if s in grads else sg
  return grads
