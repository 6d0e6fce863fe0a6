"""Optimizers: SGD, LARS, Adam, AdamW, LAMB and Muon, with tinygrad's names and PyTorch's update rules; every piece of
state lives in a Tensor of its own buffer that each step updates with `.assign()` (docs/optim.md)."""
from __future__ import annotations
import math
from typing import Iterable
from fusegrad.tensor import Tensor, _is_training
from fusegrad.mixin.linalg import MUON_COEFFICIENTS
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import Ops
from fusegrad.engine import state

def _fresh(value: Tensor) -> Tensor:
  """value written into a new buffer of its own (two equal expressions are one node: they would share a buffer)."""
  if isinstance(value.device, tuple): return value.clone().requires_grad_(False)  # on several devices: split alike
  return Tensor.empty(value.shape, dtype=value.dtype, device=value.device, requires_grad=False).assign(value)

def _own_buffer(t: Tensor) -> object | None:
  """The buffer t is a view of, or None when t is not realized into one (a constant or lazy expression)."""
  u = state.view_base(t.uop)
  if u.op is Ops.MULTI: u = state.view_base(u.src[0])  # on several devices: its first part's
  return u.arg if u.op is Ops.BUFFER else None

def _give_own_buffers(params: list[Tensor]) -> None:
  """Give each parameter a buffer no other parameter uses (lazily, as tinygrad's: nothing runs before the first
  realize), so assign() can update it in place."""
  seen: set[int] = set()
  for p in params:
    if (buf := _own_buffer(p)) is None or id(buf) in seen: p.replace(_fresh(p.detach()))  # (keeps requires_grad)
    else: seen.add(id(buf))

class Optimizer:
  """The base of every optimizer: holds the parameters (requires_grad=False ones as `buffers`) and the learning rate,
  zeroes gradients, schedules steps (docs/optim.md)."""
  def __init__(self, params: Iterable[Tensor], lr: float):
    params, name = list(params), type(self).__name__
    if not params: raise ValueError(f"{name}: got an empty list of parameters")
    for p in params:
      if not isinstance(p, Tensor): raise TypeError(f"{name}: parameters must be Tensors, got {type(p).__name__}")
    params = list({id(p): p for p in params}.values())  # a tensor given twice is one parameter (as tinygrad)
    if not isinstance(lr, (int, float)) or lr < 0 or math.isnan(lr):
      raise ValueError(f"{name}: invalid learning rate {lr!r}")
    for p in params:
      if p.requires_grad is None: p.requires_grad = True
    self.params: list[Tensor] = [p for p in params if p.requires_grad]
    self.buffers: list[Tensor] = [p for p in params if not p.requires_grad]
    if not self.params: raise ValueError(f"{name}: none of the {len(params)} parameters requires grad")
    if bad := [p for p in self.params if not dtypes.is_float(p.dtype)]:
      raise TypeError(f"{name}: parameter of shape {bad[0].shape} is {bad[0].dtype}; only floats can be optimized")
    _give_own_buffers(self.params)
    self.device = self.params[0].device  # (its scalars in float64 for float64 parameters: torch steps them in double)
    self.dtype = dtypes.float64 if any(p.dtype == dtypes.float64 for p in self.params) else dtypes.float32
    self.lr = Tensor([float(lr)], dtype=self.dtype, device=self.device, requires_grad=False)

  def _zeros_like(self, p: Tensor) -> Tensor:
    """Zeros like parameter p (split like p on several devices), in a buffer of its own: a state tensor."""
    zeros = Tensor.zeros(*p.shape, dtype=p.dtype, device=p.device)
    if p.uop.op is Ops.MULTI and p.uop.arg is not None: zeros = zeros.shard(p.device, p.uop.arg)  # type: ignore[arg-type]
    return _fresh(zeros)

  def _state(self) -> list[Tensor]:
    """Every state tensor a step writes (besides the parameters)."""; return []

  def zero_grad(self) -> None:
    """Forget the gradients of all parameters (the next backward() starts from zero)."""
    for p in self.params: p.grad = None

  def step(self) -> None:
    """Update the parameters from their gradients, now."""
    Tensor.realize_all(self.schedule_step())

  def schedule_step(self) -> list[Tensor]:
    """Build the update lazily and return the tensors to realize for it (state, parameters, buffers), in training mode:
    `Tensor.realize(loss, *opt.schedule_step())` computes the loss and the step in one schedule."""
    if not _is_training():
      raise RuntimeError(f"{type(self).__name__}: a step outside training mode; step inside `with Tensor.train():` or "
                         "`with Context(TRAINING=1):`")
    todo = [(i, p, p.grad) for i, p in enumerate(self.params) if p.grad is not None]
    if todo: self._begin_step([i for i, _, _ in todo])
    for i, p, grad in todo:
      if grad.shape != p.shape:
        raise ValueError(f"{type(self).__name__}: gradient of shape {grad.shape} for a parameter of shape {p.shape}")
      p.assign(self._update(i, p.detach(), grad.detach().cast(p.dtype)).reshape(p.shape).cast(p.dtype))
    return [*self._state(), *self.params, *self.buffers]

  def _lr(self, p: Tensor) -> Tensor:
    """The learning rate as a scalar on p's device (`opt.lr = 0.01`, a number, works too, as in tinygrad)."""
    return (self.lr if isinstance(self.lr, Tensor) else Tensor([self.lr], dtype=self.dtype)).to(p.device).reshape(())

  def _begin_step(self, stepped: list[int]) -> None:
    """Update per-step state (step counters) once, before the parameters (those numbered stepped have a gradient)."""

  def _update(self, i: int, p: Tensor, g: Tensor) -> Tensor:
    """The new value of parameter i (p, detached) from its gradient g; assigns the parameter's own state."""
    raise NotImplementedError

class OptimizerGroup(Optimizer):
  """Several optimizers used as one: `OptimizerGroup(Muon(matrices), AdamW(others))`. step(), zero_grad() and
  schedule_step() act on all of them; `group[i]` is the i-th optimizer."""
  def __init__(self, *optimizers: Optimizer):  # no super().__init__: the members hold the parameters and state
    if not optimizers: raise ValueError("OptimizerGroup: needs at least one optimizer")
    self.optimizers = list(optimizers)
    self.params = [p for o in self.optimizers for p in o.params]
    self.buffers = [b for o in self.optimizers for b in o.buffers]
    if len({id(p) for p in self.params}) != len(self.params):
      raise ValueError("OptimizerGroup: a parameter belongs to more than one optimizer")
  def __getitem__(self, i: int) -> Optimizer: return self.optimizers[i]
  def __len__(self) -> int: return len(self.optimizers)
  def zero_grad(self) -> None:
    for o in self.optimizers: o.zero_grad()
  def schedule_step(self) -> list[Tensor]: return [t for o in self.optimizers for t in o.schedule_step()]

def _check_range(name: str, below_one: tuple[str, ...] = (), **values: float) -> None:
  """Each value must be >= 0 (and < 1 if named in below_one), else ValueError names the first that isn't."""
  for what, v in values.items():
    if not (0.0 <= v < 1.0 if what in below_one else 0.0 <= v): raise ValueError(f"{name}: invalid {what} {v!r}")

class SGD(Optimizer):
  """Stochastic gradient descent, as torch.optim.SGD without dampening; classic=True applies the learning rate before
  the momentum (the rule: docs/optim.md)."""
  def __init__(self, params: Iterable[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0,
               nesterov: bool = False, classic: bool = False):
    super().__init__(params, lr)
    name = type(self).__name__
    _check_range(name, momentum=momentum, weight_decay=weight_decay)
    if nesterov and momentum <= 0: raise ValueError(f"{name}: Nesterov momentum needs a momentum > 0")
    self.momentum, self.wd, self.nesterov, self.classic = momentum, weight_decay, nesterov, classic
    self.b = [self._zeros_like(p) for p in self.params] if momentum else []

  def _state(self) -> list[Tensor]: return self.b

  def _update(self, i: int, p: Tensor, g: Tensor) -> Tensor:
    return self._descend(i, p, g + self.wd * p if self.wd else g)

  def _descend(self, i: int, p: Tensor, g: Tensor, scale: Tensor | None = None) -> Tensor:
    """p moved against g with momentum and the learning rate (times scale, if given); assigns b[i]."""
    lr = self._lr(p) if scale is None else self._lr(p) * scale
    if self.classic: g = g * lr
    if self.momentum:
      self.b[i].assign(self.momentum * self.b[i] + g)
      g = g + self.momentum * self.b[i] if self.nesterov else self.b[i]
    if not self.classic: g = g * lr
    return p - g

class LARS(SGD):
  """LARS (You et al. 2017, arXiv:1708.03888): SGD with each parameter's learning rate scaled by its trust ratio
  tcoef * ||p|| / (||g|| + weight_decay * ||p||) (the rule: docs/optim.md)."""
  def __init__(self, params: Iterable[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 1e-4,
               nesterov: bool = False, classic: bool = True, tcoef: float = 0.001):
    _check_range("LARS", tcoef=tcoef)
    super().__init__(params, lr, momentum, weight_decay, nesterov, classic)
    self.tcoef = tcoef

  def _trust_ratio(self, p: Tensor, g: Tensor) -> Tensor:
    """r for parameter p with gradient g (before weight decay), a scalar (float32 for half p)."""
    p_norm, g_norm = p._wide().square().sum().sqrt(), g._wide().square().sum().sqrt()
    ratio = self.tcoef * p_norm / (g_norm + self.wd * p_norm)
    return (p_norm > 0).where((g_norm > 0).where(ratio, 1.0), 1.0)

  def _update(self, i: int, p: Tensor, g: Tensor) -> Tensor:
    r = self._trust_ratio(p, g).cast(g.dtype) if self.tcoef else None
    return self._descend(i, p, g + self.wd * p if self.wd else g, scale=r)

class LAMB(Optimizer):
  """LAMB (You et al. 2019, arXiv:1904.00962); with adam=True it is AdamW. The step counters are the tensors
  b1_t = b1^t and b2_t = b2^t, an entry for each parameter (the rule: docs/optim.md)."""
  def __init__(self, params: Iterable[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
               weight_decay: float = 0.0, adam: bool = False):
    super().__init__(params, lr)
    _check_range(type(self).__name__, ("b1", "b2"), b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
    self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
    self.l2 = 0.0  # weight decay added to the gradient (Adam's, as torch.optim.Adam); wd above is decoupled
    self.b1_t = _fresh(Tensor.ones((len(self.params),), dtype=self.dtype, device=self.device))
    self.b2_t = _fresh(Tensor.ones((len(self.params),), dtype=self.dtype, device=self.device))
    self.m, self.v = [self._zeros_like(p) for p in self.params], [self._zeros_like(p) for p in self.params]

  def _state(self) -> list[Tensor]: return [self.b1_t, self.b2_t, *self.m, *self.v]

  def _begin_step(self, stepped: list[int]) -> None:
    b1, b2, n = self.b1, self.b2, len(self.params)
    if len(stepped) < n:  # a parameter without a gradient keeps its count (torch counts each parameter's steps)
      took = Tensor([i in stepped for i in range(n)], device=self.b1_t.device)
      b1, b2 = took.where(b1, 1.0), took.where(b2, 1.0)
    self.b1_t.assign(self.b1_t * b1)
    self.b2_t.assign(self.b2_t * b2)

  def _update(self, i: int, p: Tensor, g: Tensor) -> Tensor:
    dev = self.m[i].device  # the state may be elsewhere (offloaded with to_("CPU")): the update is computed there
    if self.l2: g = g + self.l2 * p
    self.m[i].assign(self.b1 * self.m[i] + (1.0 - self.b1) * g.to(dev))
    self.v[i].assign(self.b2 * self.v[i] + (1.0 - self.b2) * g.to(dev).square())
    b1_t, b2_t = (t.to(dev)[i if t.numel() > 1 else 0] for t in (self.b1_t, self.b2_t))
    m_hat = self.m[i]._wide() / (1.0 - b1_t)  # (half in float32; float64 stays float64)
    v_hat = self.v[i]._wide() / (1.0 - b2_t)
    up = m_hat / (v_hat.sqrt() + self.eps)
    if up.device != p.device: up = up.shard(p.device, p.uop.axis) if isinstance(p.device, tuple) else up.to(p.device)
    if self.wd: up = up + self.wd * p._wide()
    if self.adam: return p - self._lr(p) * up
    r1, r2 = p._wide().square().sum().sqrt(), up.square().sum().sqrt()
    trust = (r1 > 0).where((r2 > 0).where(r1 / r2, 1.0), 1.0)
    return p - self._lr(p) * trust * up

class Adam(LAMB):
  """Adam (Kingma & Ba, arXiv:1412.6980), as torch.optim.Adam: weight_decay is L2, added to the gradient."""
  def __init__(self, params: Iterable[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
               weight_decay: float = 0.0):
    super().__init__(params, lr, b1, b2, eps, weight_decay=0.0, adam=True)
    _check_range("Adam", weight_decay=weight_decay)
    self.l2 = weight_decay

class AdamW(LAMB):
  """AdamW (Loshchilov & Hutter, arXiv:1711.05101), as torch.optim.AdamW: the weight decay is decoupled."""
  def __init__(self, params: Iterable[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
               weight_decay: float = 0.01):
    super().__init__(params, lr, b1, b2, eps, weight_decay=weight_decay, adam=True)

def newton_schulz(g: Tensor, steps: int = 5, coefficients: tuple[float, float, float] = MUON_COEFFICIENTS,
                  eps: float = 1e-7) -> Tensor:
  """Muon's orthogonalization of the matrix g: Tensor.newton_schulz (mixin/linalg.py), which holds the iteration."""
  if g.ndim != 2: raise ValueError(f"newton_schulz: needs a matrix, got shape {g.shape}")
  return g.newton_schulz(steps, coefficients, eps)

class Muon(Optimizer):
  """Muon (Keller Jordan, 2024), for weight matrices: momentum, orthogonalized by newton_schulz (the rule, and what
  to use for biases: docs/optim.md)."""
  def __init__(self, params: Iterable[Tensor], lr: float = 0.001, momentum: float = 0.95, weight_decay: float = 0.1,
               ns_steps: int = 5, ns_coefficients: tuple[float, float, float] = MUON_COEFFICIENTS,
               nesterov: bool = True, eps: float = 1e-7):  # tinygrad's argument order; its and torch's defaults
    super().__init__(params, lr)
    _check_range("Muon", ("momentum",), momentum=momentum, weight_decay=weight_decay)
    if not isinstance(ns_steps, int) or ns_steps < 0: raise ValueError(f"Muon: invalid ns_steps {ns_steps!r}")
    self.momentum, self.nesterov, self.ns_steps, self.wd = momentum, nesterov, ns_steps, weight_decay
    self.ns_coefficients, self.eps = tuple(ns_coefficients), eps
    self.b = [self._zeros_like(p) for p in self.params]

  def _state(self) -> list[Tensor]: return self.b

  def _update(self, i: int, p: Tensor, g: Tensor) -> Tensor:
    self.b[i].assign(self.momentum * self.b[i] + (1 - self.momentum) * g)
    u = (1 - self.momentum) * g + self.momentum * self.b[i] if self.nesterov else self.b[i]
    u = u.reshape(p.shape[0] if p.ndim else 1, -1)._wide()  # (half and bfloat16 in float32)
    ortho = newton_schulz(u, self.ns_steps, self.ns_coefficients, self.eps)  # type: ignore[arg-type]
    scale, lr = max(1.0, u.shape[0] / u.shape[1]) ** 0.5, self._lr(p)
    decayed = p * (1 - lr * self.wd) if self.wd else p
    return decayed - (lr * scale) * ortho.reshape(p.shape)
