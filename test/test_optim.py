"""Optimizers against torch.optim (SGD, Adam, AdamW) and numpy references of the published rules (LARS, LAMB, Muon),
step by step on one small model; TinyJit replays of a step realized with the loss; learning-rate changes;
bad arguments."""
import numpy as np
import pytest
import torch
from fusegrad import Tensor, TinyJit, dtypes, Device
from fusegrad.nn import optim as fgoptim
from fusegrad.nn.optim import Optimizer, OptimizerGroup, SGD, LARS, Adam, AdamW, LAMB, Muon, newton_schulz
from test.helpers import two_devices

rng = np.random.default_rng(0)
W1, W2 = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
BIAS, X = rng.standard_normal(2).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
STEPS = 3

@pytest.fixture(autouse=True)
def training():
  """Optimizers step in training mode only (as tinygrad): every test here runs in it, but test_step_needs_training."""
  with Tensor.train(): yield

def test_step_needs_training():
  """tinygrad's schedule_step raises RuntimeError when TRAINING is off; so does ours, and Context(TRAINING=1) or
  Tensor.train() turns it on."""
  from fusegrad import Context
  try: import tinygrad  # (installed by .ci/run; the check of our own behaviour below runs without it too)
  except ImportError: tinygrad = None
  if tinygrad is not None:
    with pytest.raises(RuntimeError, match="TRAINING must be enabled"):  # tinygrad 0.14 itself
      tinygrad.nn.optim.SGD([tinygrad.Tensor([1.0, 2.0])], lr=0.1).schedule_step()
  ps = fg_params()
  opt = SGD(ps, lr=0.1)
  fg_loss(ps, Tensor(X)).backward()
  with Tensor.train(False):
    with pytest.raises(RuntimeError, match="training mode"): opt.step()
    with pytest.raises(RuntimeError, match="training mode"): OptimizerGroup(opt).schedule_step()
    assert np.array_equal(ps[0].numpy(), W1)  # nothing changed
    with Context(TRAINING=1): opt.step()
  assert not np.array_equal(ps[0].numpy(), W1)

def fg_loss(ps: list, x: Tensor) -> Tensor: return ((x @ ps[0]).relu() @ ps[1] + ps[2]).square().mean()
def torch_loss(ps: list, x: torch.Tensor) -> torch.Tensor: return ((x @ ps[0]).relu() @ ps[1] + ps[2]).square().mean()

def fg_params() -> list[Tensor]: return [Tensor(a, requires_grad=True) for a in (W1, W2, BIAS)]
def torch_params() -> list[torch.Tensor]: return [torch.tensor(a, requires_grad=True) for a in (W1, W2, BIAS)]

def run_fg(make_opt, steps: int = STEPS) -> list[list[np.ndarray]]:
  """Parameters after each step of a fusegrad optimizer."""
  ps = fg_params()
  opt, x, out = make_opt(ps), Tensor(X), []
  for _ in range(steps):
    opt.zero_grad()
    fg_loss(ps, x).backward()
    opt.step()
    out.append([p.numpy() for p in ps])
  return out

def run_torch(make_opt, steps: int = STEPS) -> list[list[np.ndarray]]:
  ps = torch_params()
  opt, x, out = make_opt(ps), torch.tensor(X), []
  for _ in range(steps):
    opt.zero_grad()
    torch_loss(ps, x).backward()
    opt.step()
    out.append([p.detach().numpy().copy() for p in ps])
  return out

def run_reference(update, steps: int = STEPS) -> list[list[np.ndarray]]:
  """Parameters after each step of a numpy update rule update(step, i, p, g) -> new p, with gradients from torch."""
  ps, x, out = [a.astype(np.float64) for a in (W1, W2, BIAS)], torch.tensor(X, dtype=torch.float64), []
  for t in range(1, steps + 1):
    tp = [torch.tensor(p, requires_grad=True) for p in ps]
    torch_loss(tp, x).backward()
    ps = [update(t, i, p, q.grad.numpy()) for i, (p, q) in enumerate(zip(ps, tp))]
    out.append([p.copy() for p in ps])
  return out

def assert_steps_close(got, want, atol=1e-5, rtol=1e-4):
  for step, (g, w) in enumerate(zip(got, want)):
    for i, (a, b) in enumerate(zip(g, w)):
      np.testing.assert_allclose(a, b, atol=atol, rtol=rtol, err_msg=f"parameter {i} after step {step + 1}")

# *** against torch.optim ***

@pytest.mark.parametrize("kwargs", [dict(lr=0.1), dict(lr=0.05, momentum=0.9),
                                    dict(lr=0.05, momentum=0.9, nesterov=True),
                                    dict(lr=0.1, weight_decay=0.1),
                                    dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.05)])
def test_sgd(kwargs):
  assert_steps_close(run_fg(lambda ps: SGD(ps, **kwargs)), run_torch(lambda ps: torch.optim.SGD(ps, **kwargs)))

def test_sgd_classic_momentum():
  lr, mom = 0.05, 0.9
  bufs = {}
  def rule(t, i, p, g):  # classic momentum: the learning rate goes into the buffer
    bufs[i] = mom * bufs.get(i, 0.0) + lr * g
    return p - bufs[i]
  assert_steps_close(run_fg(lambda ps: SGD(ps, lr=lr, momentum=mom, classic=True)), run_reference(rule))

@pytest.mark.parametrize("kwargs", [dict(lr=0.01), dict(lr=0.1, b1=0.8, b2=0.99, eps=1e-6),
                                    dict(lr=0.05, weight_decay=0.1)])
def test_adam(kwargs):
  torch_kwargs = {k: v for k, v in kwargs.items() if k not in ("b1", "b2")}
  torch_kwargs["betas"] = (kwargs.get("b1", 0.9), kwargs.get("b2", 0.999))
  assert_steps_close(run_fg(lambda ps: Adam(ps, **kwargs)), run_torch(lambda ps: torch.optim.Adam(ps, **torch_kwargs)))

@pytest.mark.skipif(Device.DEFAULT == "WEBGPU", reason="no float64")
@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_float64_parameters_step_in_float64_as_torch(name):
  # lr, Adam's moments and bias corrections were float32: 5 steps of Adam on float64 weights were 8e-10 off torch's
  make = {"SGD": (lambda p: SGD(p, lr=0.1, momentum=0.9), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
          "Adam": (lambda p: Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01)),
          "AdamW": (lambda p: AdamW(p, lr=0.01, weight_decay=0.1), lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1))}
  w, tw = Tensor(W1.astype(np.float64), requires_grad=True), torch.tensor(W1.astype(np.float64), requires_grad=True)
  opt, topt = make[name][0]([w]), make[name][1]([tw])
  for x in np.random.default_rng(1).standard_normal((5, 2, 4)):
    opt.zero_grad()
    topt.zero_grad()
    (Tensor(x) @ w).square().sum().backward()
    (torch.tensor(x) @ tw).square().sum().backward()
    opt.step()
    topt.step()
  assert w.dtype == dtypes.float64 and opt.lr.dtype == dtypes.float64
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), atol=1e-14, rtol=1e-13)

@pytest.mark.parametrize("kwargs", [dict(lr=0.01), dict(lr=0.1, weight_decay=0.3), dict(lr=0.05, weight_decay=0.0)])
def test_adamw(kwargs):
  assert_steps_close(run_fg(lambda ps: AdamW(ps, **kwargs)), run_torch(lambda ps: torch.optim.AdamW(ps, **kwargs)))

def test_adamw_default_weight_decay():
  assert AdamW(fg_params()).wd == 0.01  # tinygrad's (and torch's) default; Adam has none
  assert Adam(fg_params()).wd == 0.0 and Adam(fg_params()).l2 == 0.0

# *** against numpy references of the published rules ***

def lamb_rule(lr, b1, b2, eps, wd, adam=False):
  m, v = {}, {}
  def rule(t, i, p, g):
    m[i] = b1 * m.get(i, 0.0) + (1 - b1) * g
    v[i] = b2 * v.get(i, 0.0) + (1 - b2) * g * g
    u = (m[i] / (1 - b1 ** t)) / (np.sqrt(v[i] / (1 - b2 ** t)) + eps) + wd * p
    r1, r2 = np.linalg.norm(p), np.linalg.norm(u)
    trust = 1.0 if adam or r1 == 0 or r2 == 0 else r1 / r2
    return p - lr * trust * u
  return rule

@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_lamb(wd):
  got = run_fg(lambda ps: LAMB(ps, lr=0.05, b1=0.9, b2=0.99, eps=1e-6, weight_decay=wd))
  assert_steps_close(got, run_reference(lamb_rule(0.05, 0.9, 0.99, 1e-6, wd)))

def test_lamb_adam_is_adamw():
  got = run_fg(lambda ps: LAMB(ps, lr=0.05, weight_decay=0.1, eps=1e-8, adam=True))
  assert_steps_close(got, run_torch(lambda ps: torch.optim.AdamW(ps, lr=0.05, weight_decay=0.1, eps=1e-8)))

def lars_rule(lr, momentum=0.9, weight_decay=1e-4, nesterov=False, classic=True, tcoef=0.001):
  """The rule of LARS in docs/optim.md, in float64."""
  bufs = {}
  def rule(t, i, p, g):
    p_norm, g_norm = np.linalg.norm(p), np.linalg.norm(g)
    r = tcoef * p_norm / (g_norm + weight_decay * p_norm) if tcoef and p_norm > 0 and g_norm > 0 else 1.0
    gd = g + weight_decay * p
    if momentum == 0: return p - lr * r * gd
    if classic:
      bufs[i] = momentum * bufs.get(i, 0.0) + lr * r * gd
      return p - (lr * r * gd + momentum * bufs[i] if nesterov else bufs[i])
    bufs[i] = momentum * bufs.get(i, 0.0) + gd
    return p - lr * r * (gd + momentum * bufs[i] if nesterov else bufs[i])
  return rule

LARS_CASES = [dict(lr=0.1, momentum=0.0, weight_decay=0.0, tcoef=0.5),
              dict(lr=0.1, momentum=0.9, weight_decay=0.0, tcoef=0.5),
              dict(lr=0.1, momentum=0.9, weight_decay=0.1, tcoef=0.5),
              dict(lr=0.1, momentum=0.9, weight_decay=0.1, nesterov=True, tcoef=0.5),
              dict(lr=0.2, momentum=0.8, weight_decay=0.05, classic=False, tcoef=0.3),
              dict(lr=0.2, momentum=0.8, weight_decay=0.05, classic=False, nesterov=True, tcoef=0.3),
              dict(lr=0.1, momentum=0.0, weight_decay=0.1, classic=False, tcoef=0.5),
              dict(lr=20.0)]  # tinygrad's defaults (momentum 0.9, weight_decay 1e-4, tcoef 0.001, classic)

@pytest.mark.parametrize("kwargs", LARS_CASES)
def test_lars(kwargs):
  got = run_fg(lambda ps: LARS(ps, **kwargs))
  assert_steps_close(got, run_reference(lars_rule(**kwargs)))
  # the steps are big enough that a wrong trust ratio or momentum would show
  assert np.abs(got[-1][0] - W1).max() > 1e-2
  with_r1 = run_reference(lars_rule(**{**kwargs, "tcoef": 0.0}))
  assert not np.allclose(got[-1][0], with_r1[-1][0], atol=1e-3), "the trust ratio should change the steps"

IDLE = np.array([0.5, -1.5, 2.0], dtype=np.float32)

@pytest.mark.parametrize("kwargs", [dict(lr=0.1, momentum=0.9, weight_decay=0.1, tcoef=0.5),
                                    dict(lr=0.2, momentum=0.8, weight_decay=0.05, classic=False, nesterov=True,
                                         tcoef=0.3)])
def test_lars_zero_gradient_and_zero_parameter(kwargs):
  # a parameter whose gradient is all zeros (r = 1: only the weight decay moves it) and one that starts at zero
  # (||p|| = 0: r = 1, a plain SGD step)
  rule, x = lars_rule(**kwargs), Tensor(X)
  ps = fg_params() + [Tensor(IDLE, requires_grad=True), Tensor.zeros(2, requires_grad=True)]
  want = [a.astype(np.float64) for a in (W1, W2, BIAS, IDLE, np.zeros(2))]
  opt = LARS(ps, **kwargs)
  for t in range(1, STEPS + 1):
    opt.zero_grad()
    (fg_loss(ps, x) + (ps[3] * 0).sum() + (ps[4] * Tensor([1.0, -2.0])).sum()).backward()
    opt.step()
    tp = [torch.tensor(p, requires_grad=True) for p in want]
    xt = torch.tensor(X, dtype=torch.float64)
    (torch_loss(tp, xt) + (tp[3] * 0).sum() + (tp[4] * torch.tensor([1.0, -2.0], dtype=torch.float64)).sum()).backward()
    want = [rule(t, i, p, q.grad.numpy()) for i, (p, q) in enumerate(zip(want, tp))]
    for i, (p, w) in enumerate(zip(ps, want)):
      np.testing.assert_allclose(p.numpy(), w, atol=1e-5, rtol=1e-4, err_msg=f"parameter {i} after step {t}")
  np.testing.assert_allclose(ps[3].grad.numpy(), [0.0, 0.0, 0.0])
  assert not np.allclose(ps[3].numpy(), IDLE) and not np.allclose(ps[4].numpy(), 0.0)

@pytest.mark.parametrize("kwargs", [dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1),
                                    dict(lr=0.1, momentum=0.0, weight_decay=0.0)])
def test_lars_without_trust_ratio_is_sgd(kwargs):
  got = run_fg(lambda ps: LARS(ps, tcoef=0.0, classic=False, **kwargs))
  assert_steps_close(got, run_torch(lambda ps: torch.optim.SGD(ps, **kwargs)))

def test_lars_defaults():
  opt = LARS(fg_params())
  assert (opt.momentum, opt.wd, opt.nesterov, opt.classic, opt.tcoef) == (0.9, 1e-4, False, True, 0.001)
  assert opt.lr.item() == pytest.approx(0.001) and len(opt.b) == 3

def test_lars_half_params():
  p = Tensor(np.array([1.0, -2.0], dtype=np.float16), requires_grad=True)
  opt = LARS([p], lr=1.0, tcoef=0.5, weight_decay=0.0)
  (p * p).sum().backward()  # g = 2p, so r = 0.25 and p moves by lr * r * g = p / 2
  opt.step()
  assert p.dtype == dtypes.float16 and opt.b[0].dtype == dtypes.float16
  np.testing.assert_allclose(p.numpy().astype(np.float32), [0.5, -1.0], atol=2e-3)

def np_newton_schulz(g, steps=5, a=3.4445, b=-4.7750, c=2.0315, eps=1e-7):
  """The published iteration (Keller Jordan's zeropower_via_newtonschulz5), in float64."""
  x = g.T if g.shape[0] > g.shape[1] else g
  x = x / (np.linalg.norm(x) + eps)
  for _ in range(steps):
    gram = x @ x.T
    x = a * x + (b * gram + c * gram @ gram) @ x
  return x.T if g.shape[0] > g.shape[1] else x

def muon_rule(lr, mom, nesterov, wd, ns_steps=5):
  bufs = {}
  def rule(t, i, p, g):
    bufs[i] = mom * bufs.get(i, 0.0) + (1 - mom) * g
    u = (1 - mom) * g + mom * bufs[i] if nesterov else bufs[i]
    u2 = u.reshape(p.shape[0], -1)
    o = np_newton_schulz(u2, ns_steps).reshape(p.shape)
    return p * (1 - lr * wd) - lr * max(1, u2.shape[0] / u2.shape[1]) ** 0.5 * o
  return rule

@pytest.mark.parametrize("nesterov,wd", [(True, 0.0), (False, 0.1)])
def test_muon(nesterov, wd):
  # the bias is 1-D: Muon treats it as a (2, 1) column
  got = run_fg(lambda ps: Muon(ps, lr=0.02, momentum=0.9, nesterov=nesterov, weight_decay=wd))
  assert_steps_close(got, run_reference(muon_rule(0.02, 0.9, nesterov, wd)), atol=1e-5, rtol=1e-4)

def test_muon_defaults():
  opt = Muon(fg_params())
  assert (opt.lr.item(), opt.momentum, opt.nesterov, opt.ns_steps) == (pytest.approx(0.001), 0.95, True, 5)
  assert opt.wd == 0.1 and opt.ns_coefficients == (3.4445, -4.7750, 2.0315)

@pytest.mark.parametrize("kw", [{}, {"lr": 0.02, "momentum": 0.9, "weight_decay": 0.0, "nesterov": False}])
def test_muon_matches_torch(kw):
  """torch.optim.Muon (2-D parameters only), defaults included. torch runs Newton-Schulz in bfloat16 (we use float32),
  so each step may differ by a few percent of its size, lr: the tolerance is 5% of lr."""
  got = run_fg(lambda ps: Muon(ps[:2], **kw))
  want = run_torch(lambda ps: torch.optim.Muon(ps[:2], **kw))
  assert_steps_close(got, want, atol=0.05 * kw.get("lr", 0.001), rtol=0)

@pytest.mark.parametrize("shape", [(3, 5), (6, 2)])
def test_newton_schulz(shape):
  g = rng.standard_normal(shape).astype(np.float32)
  got = newton_schulz(Tensor(g)).numpy()
  np.testing.assert_allclose(got, np_newton_schulz(g.astype(np.float64)), atol=1e-5, rtol=1e-4)
  # the point of the iteration: singular values pushed into roughly [0.7, 1.2]
  sv = np.linalg.svd(got, compute_uv=False)
  assert sv.min() > 0.5 and sv.max() < 1.3, sv

# *** value semantics: a step overwrites parameters that lazy values built before it still read ***
# The issue's model: the input is a parameter too, so each parameter's gradient reads the other parameters, and the
# step's writes depend on each other (the gradient of W reads x, the one of x reads W).
XI, WI, BI = (rng.standard_normal(s).astype(np.float32) for s in [(2, 3), (3, 3), (3,)])
MI = rng.standard_normal((2, 3)).astype(np.float32)

def issue_loss(ps: list, m): return (ps[0] @ ps[1] + ps[2]).relu().log_softmax(1).mul(m).add(m).sum()

def reference_run(torch_opt=None, make_rule=None, steps: int = STEPS) -> list[tuple]:
  """(loss, gradients, parameters after the step) for each step, in float64: torch.optim, or a numpy rule."""
  ps = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in (XI, WI, BI)]
  opt, out = torch_opt(ps) if torch_opt is not None else None, []
  rule = make_rule() if make_rule is not None else None
  for t in range(1, steps + 1):
    for p in ps: p.grad = None
    loss = issue_loss(ps, torch.tensor(MI, dtype=torch.float64))
    loss.backward()
    grads = [p.grad.numpy().copy() for p in ps]
    if opt is not None: opt.step()
    else:
      with torch.no_grad():
        for i, p in enumerate(ps): p.copy_(torch.tensor(rule(t, i, p.numpy(), p.grad.numpy())))
    out.append((loss.item(), grads, [p.detach().numpy().copy() for p in ps]))
  return out

EVERY_OPTIMIZER = {
  "sgd": (lambda ps: SGD(ps, lr=0.5), dict(torch_opt=lambda ps: torch.optim.SGD(ps, lr=0.5))),
  "sgd_momentum": (lambda ps: SGD(ps, lr=0.3, momentum=0.9),
                   dict(torch_opt=lambda ps: torch.optim.SGD(ps, lr=0.3, momentum=0.9))),
  "sgd_nesterov": (lambda ps: SGD(ps, lr=0.3, momentum=0.9, nesterov=True, weight_decay=0.1),
                   dict(torch_opt=lambda ps: torch.optim.SGD(ps, lr=0.3, momentum=0.9, nesterov=True,
                                                             weight_decay=0.1))),
  "adam": (lambda ps: Adam(ps, lr=0.1, weight_decay=0.1),
           dict(torch_opt=lambda ps: torch.optim.Adam(ps, lr=0.1, weight_decay=0.1))),
  "adamw": (lambda ps: AdamW(ps, lr=0.1, weight_decay=0.2),
            dict(torch_opt=lambda ps: torch.optim.AdamW(ps, lr=0.1, weight_decay=0.2))),
  "lamb": (lambda ps: LAMB(ps, lr=0.1, weight_decay=0.1), dict(make_rule=lambda: lamb_rule(0.1, 0.9, 0.999, 1e-6, 0.1))),
  "lars": (lambda ps: LARS(ps, lr=0.5, weight_decay=0.1, tcoef=0.5, nesterov=True),
           dict(make_rule=lambda: lars_rule(0.5, weight_decay=0.1, tcoef=0.5, nesterov=True))),
  "muon": (lambda ps: Muon(ps, lr=0.1, momentum=0.9, weight_decay=0.1),
           dict(make_rule=lambda: muon_rule(0.1, 0.9, True, 0.1))),
}

@pytest.mark.parametrize("mode", ["lazy", "realized", "read_after"])
@pytest.mark.parametrize("name", list(EVERY_OPTIMIZER))
def test_every_optimizer_with_lazy_and_realized_gradients(name, mode):
  """lazy: the gradients are still lazy at step(); realized: computed before it; read_after: the loss and the
  gradients are read only after the step, and must still be those at the parameters before it."""
  make_opt, ref = EVERY_OPTIMIZER[name]
  want = reference_run(**ref)
  ps = [Tensor(a, requires_grad=True) for a in (XI, WI, BI)]
  opt, m = make_opt(ps), Tensor(MI)
  for t, (want_loss, want_grads, want_ps) in enumerate(want):
    opt.zero_grad()
    loss = issue_loss(ps, m).backward()
    if mode == "realized": Tensor.realize(*[p.grad for p in ps])
    opt.step()
    if mode == "read_after":
      np.testing.assert_allclose(loss.item(), want_loss, atol=1e-5, rtol=1e-5, err_msg=f"loss at step {t + 1}")
      for i, (p, g) in enumerate(zip(ps, want_grads)):
        np.testing.assert_allclose(p.grad.numpy(), g, atol=1e-5, rtol=1e-4, err_msg=f"grad {i} at step {t + 1}")
    for i, (p, w) in enumerate(zip(ps, want_ps)):
      np.testing.assert_allclose(p.numpy(), w, atol=1e-5, rtol=1e-4, err_msg=f"parameter {i} after step {t + 1}")
  assert np.abs(ps[0].numpy() - XI).max() > 1e-2  # the steps are big enough to show a wrong read

def test_issue_sgd_example():
  x0, w0, m0 = XI[:1], WI, MI[:1]
  x, w, m = Tensor(x0, requires_grad=True), Tensor(w0, requires_grad=True), Tensor(m0)
  opt = SGD([x, w], lr=10)
  opt.zero_grad()
  x.matmul(w).relu().log_softmax(1).mul(m).add(m).sum().backward()
  opt.step()
  tx, tw = torch.tensor(x0, requires_grad=True), torch.tensor(w0, requires_grad=True)
  topt = torch.optim.SGD([tx, tw], lr=10)
  topt.zero_grad()
  tx.matmul(tw).relu().log_softmax(1).mul(torch.tensor(m0)).add(torch.tensor(m0)).sum().backward()
  topt.step()
  np.testing.assert_allclose(x.numpy(), tx.detach().numpy(), atol=1e-5)
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), atol=1e-5)

@pytest.mark.parametrize("name", ["sgd_momentum", "adam"])
def test_jit_loss_returned_after_the_step(name):
  """beautiful_mnist's step: the loss is returned (and realized) after opt.step(); it is the loss before the step."""
  make_opt, ref = EVERY_OPTIMIZER[name]
  want = reference_run(**ref, steps=5)
  ps = [Tensor(a, requires_grad=True) for a in (XI, WI, BI)]
  opt = make_opt(ps)
  @TinyJit
  def step(m: Tensor) -> Tensor:
    opt.zero_grad()
    loss = issue_loss(ps, m).backward()
    opt.step()
    return loss
  m = Tensor(MI).realize()
  for t, (want_loss, _, want_ps) in enumerate(want):
    np.testing.assert_allclose(step(m).item(), want_loss, atol=1e-5, rtol=1e-5, err_msg=f"loss at step {t + 1}")
    for i, (p, w) in enumerate(zip(ps, want_ps)):
      np.testing.assert_allclose(p.numpy(), w, atol=1e-5, rtol=1e-4, err_msg=f"parameter {i} after step {t + 1}")
  assert step.cnt == 5

# *** TinyJit: a step realized together with the loss ***

def jit_vs_eager(make_opt, steps: int = 5, lr_schedule=None):
  results = []
  for use_jit in (False, True):
    ps = fg_params()
    opt = make_opt(ps)
    def train_step(x: Tensor) -> Tensor:
      opt.zero_grad()
      loss = fg_loss(ps, x)
      loss.backward()
      Tensor.realize(loss, *opt.schedule_step())
      return loss
    step = TinyJit(train_step) if use_jit else train_step
    x, out = Tensor(X), []
    for i in range(steps):
      if lr_schedule is not None: opt.lr.assign(Tensor([lr_schedule(i)])).realize()
      loss = step(x)
      out.append([loss.numpy().reshape(1)] + [p.numpy() for p in ps])
    results.append(out)
    if use_jit: assert step.cnt == steps, "the jitted step should have been captured and replayed"
  return results

@pytest.mark.parametrize("make_opt", [lambda ps: SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
                                      lambda ps: Adam(ps, lr=0.05),
                                      lambda ps: Muon(ps[:2], lr=0.05),
                                      lambda ps: LARS(ps, lr=0.1, weight_decay=0.1, tcoef=0.5)],
                         ids=["sgd", "adam", "muon", "lars"])
def test_jit_step_matches_eager(make_opt):
  eager, jitted = jit_vs_eager(make_opt)
  assert_steps_close(jitted, eager, atol=1e-6, rtol=1e-5)
  assert not np.allclose(eager[0][1], eager[-1][1]), "the parameters should change"

def test_lr_change_under_jit():
  schedule = lambda i: [0.1, 0.1, 0.1, 0.0, 0.0, 0.02][i]  # noqa: E731
  eager, jitted = jit_vs_eager(lambda ps: AdamW(ps, lr=0.1), steps=6, lr_schedule=schedule)
  assert_steps_close(jitted, eager, atol=1e-6, rtol=1e-5)
  # with lr 0 the replayed step leaves the parameters alone (the kernels read the new lr from its buffer)
  for a, b in zip(jitted[3][1:], jitted[4][1:]): np.testing.assert_array_equal(a, b)
  assert not np.array_equal(jitted[4][1], jitted[5][1])

@pytest.mark.parametrize("make", [SGD, LARS])
def test_lr_is_a_realized_tensor(make):
  opt = make(fg_params(), lr=0.25)
  assert isinstance(opt.lr, Tensor) and opt.lr.shape == (1,) and opt.lr.dtype == dtypes.float32
  assert opt.lr.item() == 0.25

def test_lars_lr_change_under_jit():
  schedule = lambda i: [0.1, 0.1, 0.0, 0.0, 0.3][i]  # noqa: E731
  make = lambda ps: LARS(ps, lr=0.1, momentum=0.0, tcoef=0.5, classic=False)  # noqa: E731
  eager, jitted = jit_vs_eager(make, steps=5, lr_schedule=schedule)
  assert_steps_close(jitted, eager, atol=1e-6, rtol=1e-5)
  for a, b in zip(jitted[2][1:], jitted[3][1:]): np.testing.assert_array_equal(a, b)
  assert not np.array_equal(jitted[3][1], jitted[4][1])

def test_lr_assign_changes_the_step():
  p = Tensor([1.0, 2.0], requires_grad=True)
  opt = SGD([p], lr=0.5)
  opt.lr.assign([0.125])
  (p * Tensor([1.0, 4.0])).sum().backward()
  opt.step()
  np.testing.assert_allclose(p.numpy(), [1.0 - 0.125, 2.0 - 0.5])

# *** the Optimizer contract ***

def test_requires_grad_none_becomes_true_and_false_is_a_buffer():
  a, b, c = Tensor([1.0, 2.0]), Tensor([3.0], requires_grad=True), Tensor([5.0], requires_grad=False)
  opt = SGD([a, b, c], lr=0.1)
  assert a.requires_grad is True and opt.params == [a, b] and opt.buffers == [c]
  (a.sum() * 2 + b.sum() * 3 + c.sum()).backward()
  opt.step()
  np.testing.assert_allclose(a.numpy(), [0.8, 1.8])
  np.testing.assert_allclose(b.numpy(), [2.7])
  np.testing.assert_allclose(c.numpy(), [5.0])

def test_params_without_grad_are_left_alone():
  a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0], requires_grad=True)
  opt = Adam([a, b], lr=0.1)
  (a * a).sum().backward()
  opt.step()
  assert not np.allclose(a.numpy(), [1.0, 2.0])
  np.testing.assert_array_equal(b.numpy(), [3.0, 4.0])
  np.testing.assert_array_equal(opt.m[1].numpy(), [0.0, 0.0])

def test_zero_grad():
  ps = fg_params()
  opt = SGD(ps)
  fg_loss(ps, Tensor(X)).backward()
  assert all(p.grad is not None for p in ps)
  opt.zero_grad()
  assert all(p.grad is None for p in ps)

def test_schedule_step_returns_what_to_realize():
  ps = fg_params()
  opt = Adam(ps)
  loss = fg_loss(ps, Tensor(X))
  loss.backward()
  todo = opt.schedule_step()
  for p in ps: assert any(t is p for t in todo)
  for s in [opt.b1_t, opt.b2_t, *opt.m, *opt.v]: assert any(t is s for t in todo)
  Tensor.realize(loss, *todo)
  assert not np.allclose(ps[0].numpy(), W1)
  np.testing.assert_allclose(opt.b1_t.numpy(), [0.9] * len(ps))  # b1^t of each parameter

def test_equal_constant_params_stay_independent():
  # two parameters built from the same expression must not end up sharing one buffer
  a, b = Tensor.zeros(3, requires_grad=True), Tensor.zeros(3, requires_grad=True)
  opt = SGD([a, b], lr=1.0, momentum=0.5)
  (a.sum() + 2 * b.sum()).backward()
  opt.step()
  np.testing.assert_allclose(a.numpy(), [-1, -1, -1])
  np.testing.assert_allclose(b.numpy(), [-2, -2, -2])
  assert not np.allclose(opt.b[0].numpy(), opt.b[1].numpy())

def test_half_params():
  p = Tensor(np.array([1.0, -2.0], dtype=np.float16), requires_grad=True)
  opt = Adam([p], lr=0.1)
  (p * p).sum().backward()
  opt.step()
  assert p.dtype == dtypes.float16 and opt.m[0].dtype == dtypes.float16
  np.testing.assert_allclose(p.numpy().astype(np.float32), [0.9, -1.9], atol=2e-3)

def test_optimizer_group():
  def fg_group(ps): return OptimizerGroup(SGD(ps[:1], lr=0.05, momentum=0.9), Adam(ps[1:], lr=0.02))
  def torch_group(ps):
    sgd, adam = torch.optim.SGD(ps[:1], lr=0.05, momentum=0.9), torch.optim.Adam(ps[1:], lr=0.02)
    class Both:
      def zero_grad(self): sgd.zero_grad(), adam.zero_grad()
      def step(self): sgd.step(), adam.step()
    return Both()
  assert_steps_close(run_fg(fg_group), run_torch(torch_group))
  group = fg_group(fg_params())
  assert isinstance(group[0], SGD) and isinstance(group[1], Adam) and len(group) == 2 and len(group.params) == 3

@pytest.mark.parametrize("make", [lambda: SGD([]),
                                  lambda: SGD([Tensor([1.0])], lr=-1),
                                  lambda: SGD([Tensor([1.0])], nesterov=True), lambda: Adam([Tensor([1.0])], b1=1.0),
                                  lambda: SGD([Tensor([1.0], requires_grad=False)]),
                                  lambda: Muon([Tensor([[1.0]])], ns_steps=-1),
                                  lambda: LARS([Tensor([1.0])], tcoef=-0.1), lambda: LARS([Tensor([1.0])], lr=-1),
                                  lambda: LARS([Tensor([1.0])], momentum=0.0, nesterov=True),
                                  lambda: LARS([Tensor([1.0])], weight_decay=-1.0)])
def test_bad_arguments(make):
  with pytest.raises(ValueError): make()

def test_bad_param_types():
  with pytest.raises(TypeError, match="Tensors"): SGD([np.zeros(3)])
  with pytest.raises(TypeError, match="float"): SGD([Tensor([1, 2], requires_grad=True)])
  a = Tensor([1.0])
  with pytest.raises(ValueError, match="more than one"): OptimizerGroup(SGD([a]), Adam([a]))

def test_is_optimizer():
  for opt in (SGD(fg_params()), LARS(fg_params()), Adam(fg_params()), AdamW(fg_params()), LAMB(fg_params()),
              Muon(fg_params())):
    assert isinstance(opt, Optimizer)
  assert isinstance(Adam(fg_params()), LAMB) and type(SGD(fg_params())) is SGD

def test_same_tensor_twice_is_one_parameter():  # tinygrad de-duplicates; stepping it twice would double the update
  w, tw = Tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
  opt, topt = SGD([w, w], lr=0.1), torch.optim.SGD([tw], lr=0.1)
  assert len(opt.params) == 1
  for o, x in ((opt, w), (topt, tw)):
    o.zero_grad()
    (x * x).sum().backward()
    o.step()
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-6)

@pytest.mark.parametrize("adam", [False, True])
def test_lamb_state_offloaded_to_another_device(adam):  # tinygrad's LAMB computes the update where its state lives
  devices = two_devices()
  x = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
  ref, off = Tensor(x, requires_grad=True), Tensor(x, requires_grad=True).shard_(devices, axis=1)
  opts = [LAMB([t], lr=0.1, weight_decay=0.01, adam=adam) for t in (ref, off)]
  for p in opts[1].m + opts[1].v + [opts[1].b1_t, opts[1].b2_t]: p.to_("CPU")
  with Tensor.train():
    for _ in range(2):
      for t, o in zip((ref, off), opts):
        o.zero_grad()
        (t * t).sum().backward()
        o.step()
  assert off.device == devices and opts[1].m[0].device == "CPU"
  np.testing.assert_allclose(off.numpy(), ref.numpy(), rtol=1e-6)

@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_a_parameter_left_out_of_steps_counts_its_own_as_torch(name):
  # torch counts each parameter's steps: one that had no gradient in a step is bias-corrected by its own count
  rng = np.random.default_rng(0)
  inits = [rng.standard_normal(s).astype(np.float32) for s in [(3,), (2, 2), (4,)]]
  ps = [Tensor(a.copy(), requires_grad=True) for a in inits]
  tps = [torch.tensor(a.copy(), requires_grad=True) for a in inits]
  opt, topt = getattr(fgoptim, name)(ps, lr=0.1), getattr(torch.optim, name)(tps, lr=0.1)
  for used in [(0, 1), (0, 1), (0, 2), (0, 1, 2), (1,), (0, 1, 2)]:
    with Tensor.train():
      opt.zero_grad()
      sum((ps[i] * ps[i]).sum() for i in used).backward()
      opt.step()
    topt.zero_grad()
    sum((tps[i] * tps[i]).sum() for i in used).backward()
    topt.step()
    for p, tp in zip(ps, tps): np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-4, atol=1e-5)

def test_lr_set_to_a_number_as_tinygrad():
  # tinygrad's optimizers multiply by opt.lr, so a script may set it to a number mid-training; it raised AttributeError
  w = Tensor([1.0, 2.0], requires_grad=True)
  opt = SGD([w], lr=0.1)
  with Tensor.train():
    opt.lr = 0.25
    (w * w).sum().backward()
    opt.step()
  assert w.tolist() == [0.5, 1.0]
