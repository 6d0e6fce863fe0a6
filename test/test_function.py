"""`function`: trace the graph a function builds once per input signature and reuse it. Results and gradients are
checked against calling the plain function; traces are counted (`len(f.traces)`, and how often the body runs); weights
from the enclosing scope that an optimizer updates are seen by reused traces; random numbers stay fresh."""
from typing import NamedTuple
import numpy as np
import pytest
from fusegrad import Tensor, function, Device, TinyJit, Variable, dtypes, nn, Context
from fusegrad.jit import JitError
from fusegrad.dtype import to_numpy
from fusegrad.nn.optim import SGD, Adam

def rand_np(*shape: int, seed: int) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

W = rand_np(5, 3, seed=1)
B = rand_np(3, seed=2)

def counted(fxn):
  """fxn under @function, and a list that grows each time fxn's body runs (once per trace)."""
  runs = []
  def body(*args, **kwargs):
    runs.append(1)
    return fxn(*args, **kwargs)
  return function(body), runs

# *** same results as the plain function ***

@pytest.mark.parametrize("name, fxn", [
  ("elementwise", lambda x: (x * 2 + 1).relu().exp()),
  ("matmul", lambda x: x @ Tensor(W)),
  ("reductions", lambda x: x.sum(axis=0) - x.max(axis=1).mean()),
  ("softmax", lambda x: x.log_softmax(axis=-1)),
  ("movement", lambda x: x.T.reshape(-1)[1:7].flip(0).pad(((1, 2),))),
])
def test_values_identical(name, fxn):
  f = function(fxn)
  for i in range(3):
    x = Tensor(rand_np(4, 5, seed=i))
    np.testing.assert_array_equal(f(x).numpy(), fxn(x).numpy(), err_msg=f"{name}, call {i + 1}")
  assert len(f.traces) == 1

def test_gradients_identical():
  w, b = Tensor(W, requires_grad=True), Tensor(B, requires_grad=True)
  def layer(x: Tensor) -> Tensor: return (x @ (w * 2) + b).tanh()
  f = function(layer)
  for i in range(3):
    got, want = [], []
    for fxn, store in ((f, got), (layer, want)):
      x = Tensor(rand_np(4, 5, seed=i), requires_grad=True)
      w.grad = b.grad = None
      (fxn(x) * Tensor(rand_np(4, 3, seed=10 + i))).sum().backward()
      store.extend([x.grad.numpy(), w.grad.numpy(), b.grad.numpy()])
    for name, g, p in zip(("x", "w", "b"), got, want):
      np.testing.assert_allclose(g, p, rtol=1e-5, atol=1e-6, err_msg=f"gradient of {name}, call {i + 1}")
  assert len(f.traces) == 1

def test_gradient_after_realize():
  x = Tensor(rand_np(3, 4, seed=0), requires_grad=True)
  out = function(lambda a: (a * a).sum())(x)
  assert out.requires_grad
  out.realize().backward()
  np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy(), rtol=1e-6)

def test_results_need_no_grad_without_grad_inputs():
  out = function(lambda a: a + 1)(Tensor([1.0, 2.0]))
  assert not out.requires_grad

def test_lazy_inputs():
  f = function(lambda a, b: (a * b).sum(axis=1))
  for i in range(3):
    a, b = rand_np(3, 4, seed=i), rand_np(3, 4, seed=5 + i)
    got = f(Tensor(a) + 1, Tensor(b).exp()).numpy()  # inputs that are graphs themselves
    np.testing.assert_allclose(got, ((a + 1) * np.exp(b)).sum(1), rtol=1e-5)

def test_returning_an_input():
  f = function(lambda a, b: (a, a + b))
  for i in range(3):
    a, b = rand_np(4, seed=i), rand_np(4, seed=9 + i)
    ra, s = f(Tensor(a), Tensor(b))
    np.testing.assert_array_equal(ra.numpy(), a)
    np.testing.assert_allclose(s.numpy(), a + b, rtol=1e-6)

# *** one trace per signature ***

def test_traced_once_per_signature():
  f, runs = counted(lambda x: (x * 3).sum(axis=-1))
  other = "PYTHON" if Device.DEFAULT != "PYTHON" else "CPU"
  calls = [((2, 3), dtypes.float32, None), ((2, 3), dtypes.float32, None),
           ((4, 3), dtypes.float32, None), ((2, 3), dtypes.float32, None),  # a new shape, then the first again
           ((2, 3), dtypes.int32, None), ((2, 3), dtypes.int32, None),  # a new dtype
           ((2, 3), dtypes.float32, other), ((2, 3), dtypes.float32, other)]  # a new device
  traces = []
  for i, (shape, dtype, device) in enumerate(calls):
    a = (rand_np(*shape, seed=i) * 10).astype(np.float32)
    x = Tensor(a, device=device).cast(dtype)
    out = f(x)
    assert out.dtype == (dtype if dtypes.is_float(dtype) else dtypes.int64) and out.device == x.device  # torch: int sums in int64
    np.testing.assert_allclose(out.numpy(), (a.astype(to_numpy(dtype)) * 3).sum(-1), rtol=1e-5)
    traces.append(len(f.traces))
  assert traces == [1, 1, 2, 2, 3, 3, 4, 4]
  assert len(runs) == 4

def test_other_arguments_are_part_of_the_signature():
  f, runs = counted(lambda x, k, mode="add": x + k if mode == "add" else x * k)
  x = Tensor([1.0, 2.0])
  np.testing.assert_array_equal(f(x, 2).numpy(), [3.0, 4.0])
  np.testing.assert_array_equal(f(x, 3).numpy(), [4.0, 5.0])
  np.testing.assert_array_equal(f(x, 3, mode="mul").numpy(), [3.0, 6.0])
  np.testing.assert_array_equal(f(x, 2).numpy(), [3.0, 4.0])
  assert len(f.traces) == 3 and len(runs) == 3

def test_int_and_float_arguments_differ():
  f = function(lambda x, k: x * k)
  x = Tensor([1, 2], dtype=dtypes.int32)
  assert f(x, 2).dtype == (x * 2).dtype
  assert f(x, 2.0).dtype == (x * 2.0).dtype
  np.testing.assert_array_equal(f(x, 2.5).numpy(), (x * 2.5).numpy())
  assert len(f.traces) == 3

def test_requires_grad_is_part_of_the_signature():
  f, runs = counted(lambda x: x * 2)
  assert not f(Tensor([1.0])).requires_grad
  assert f(Tensor([1.0], requires_grad=True)).requires_grad
  assert len(runs) == 2

def test_keyword_order_does_not_matter():
  f, runs = counted(lambda a, b: a - b)
  a, b = Tensor([5.0, 6.0]), Tensor([1.0, 2.0])
  np.testing.assert_array_equal(f(a=a, b=b).numpy(), [4.0, 4.0])
  np.testing.assert_array_equal(f(b=b, a=a).numpy(), [4.0, 4.0])
  assert len(runs) == 1

def test_bound_variable_arguments():
  f, runs = counted(lambda x, k: (x * k).sum())
  i, x = Variable("i", 1, 10), Tensor([1.0, 2.0, 3.0])
  for k in range(1, 5): assert f(x, i.bind(k)).item() == 6.0 * k
  assert len(runs) == 1  # the variable's value is not part of the signature

def test_unhashable_argument():
  f = function(lambda x, arr: x + 1)
  with pytest.raises(TypeError, match=r"args\[1\].*ndarray.*not hashable"): f(Tensor([1.0]), np.zeros(2))

def test_reading_values_while_tracing_is_an_error():
  def fxn(x: Tensor) -> Tensor: return x * x.max().item()
  with pytest.raises(JitError, match="fxn.*only build the graph"): function(fxn)(Tensor([1.0, 2.0]))

# *** nested inputs and outputs ***

def test_nested_inputs_and_outputs():
  def fxn(batch: dict, extra: list) -> dict:
    a, b = batch["pair"]
    return {"sum": a + b + extra[0], "parts": [a * 2, (b.sum(), "tag")], "n": len(extra)}
  f, runs = counted(fxn)
  for i in range(3):
    a, b, c = rand_np(2, 3, seed=i), rand_np(2, 3, seed=i + 10), rand_np(3, seed=i + 20)
    out = f({"pair": (Tensor(a), Tensor(b))}, [Tensor(c)])
    assert set(out) == {"sum", "parts", "n"} and out["n"] == 1 and out["parts"][1][1] == "tag"
    assert isinstance(out["parts"], list) and isinstance(out["parts"][1], tuple)
    np.testing.assert_allclose(out["sum"].numpy(), a + b + c, rtol=1e-6)
    np.testing.assert_allclose(out["parts"][0].numpy(), a * 2, rtol=1e-6)
    np.testing.assert_allclose(out["parts"][1][0].numpy(), b.sum(), rtol=1e-5)
  assert len(runs) == 1

class Pair(NamedTuple):
  first: Tensor
  second: Tensor

def test_named_tuple_inputs_and_outputs():
  f, runs = counted(lambda p: Pair(p.first @ p.second, p.second.sum()))
  for i in range(3):
    a, b = rand_np(2, 3, seed=i), rand_np(3, 2, seed=4 + i)
    out = f(Pair(Tensor(a), Tensor(b)))
    assert isinstance(out, Pair)
    np.testing.assert_allclose(out.first.numpy(), a @ b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.second.numpy(), b.sum(), rtol=1e-5)
  assert len(runs) == 1

# *** weights from the enclosing scope ***

def make_model(lazy: bool) -> list[Tensor]:
  if lazy:
    Tensor.manual_seed(0)
    return [Tensor.kaiming_uniform(5, 8, requires_grad=True), Tensor.zeros(8, requires_grad=True),
            Tensor.kaiming_uniform(8, 3, requires_grad=True)]
  return [Tensor(rand_np(*s, seed=k) * 0.4, requires_grad=True) for k, s in enumerate([(5, 8), (8,), (8, 3)])]

def sgd(ps: list) -> SGD: return SGD(ps, lr=0.1, momentum=0.9)
def adam(ps: list) -> Adam: return Adam(ps, lr=0.02)

@pytest.mark.parametrize("make_opt, lazy", [(sgd, False), (adam, False), (adam, True)],
                         ids=["SGD", "Adam", "Adam-lazy_init"])
def test_training_with_weights_updated_in_place(make_opt, lazy):
  """Weights read from the enclosing scope and updated by an optimizer: every reused trace uses the new values. With
  lazy_init the first call traces the weights' lazy initialization, before the optimizer gives them buffers."""
  losses = {}
  for use_function in (True, False):
    ps = make_model(lazy)
    def forward(x: Tensor) -> Tensor: return (x @ ps[0] + ps[1]).relu() @ (ps[2] * 0.5)  # a weight-only subgraph too
    f, runs = counted(forward) if use_function else (forward, [])
    x0 = Tensor(rand_np(2, 5, seed=99))
    first = f(x0).numpy()  # traced here, before the optimizer exists
    opt = make_opt(ps)
    losses[use_function] = [first]
    for i in range(5):
      x, y = Tensor(rand_np(4, 5, seed=i)), Tensor(np.arange(4, dtype=np.int32) % 3)
      opt.zero_grad()
      loss = f(x).sparse_categorical_crossentropy(y).backward()
      with Tensor.train(): opt.step()
      losses[use_function] += [loss.numpy(), f(x0).numpy()]
    if use_function:  # batch 2 and batch 4: one trace each; lazy weights rebound by the optimizer retrace batch 2 once
      assert len(f.traces) == 2 and len(runs) == (3 if lazy else 2)
  for i, (a, b) in enumerate(zip(losses[True], losses[False])):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"value {i}")
  assert not np.allclose(losses[True][0], losses[True][-1]), "the model should have changed"

def test_weight_assigned_outside():
  w = Tensor(np.ones(3, np.float32))
  f = function(lambda x: x * w)
  x = Tensor([1.0, 2.0, 3.0])
  for i in range(1, 4):
    w.assign(w + 1).realize()
    np.testing.assert_array_equal(f(x).numpy(), [i + 1.0, 2 * (i + 1.0), 3 * (i + 1.0)])
  assert len(f.traces) == 1

def test_method():
  class Layer:
    def __init__(self, seed: int):
      self.w = Tensor(rand_np(5, 3, seed=seed), requires_grad=True)
    @function
    def __call__(self, x: Tensor) -> Tensor: return (x @ self.w).sigmoid()
  a, b = Layer(0), Layer(1)
  for i in range(3):
    x = rand_np(2, 5, seed=i)
    for m in (a, b):
      np.testing.assert_allclose(m(Tensor(x)).numpy(), 1 / (1 + np.exp(-(x @ m.w.numpy()))), rtol=1e-5, atol=1e-6)
  assert len(Layer.__call__.traces) == 2  # the instance is part of the signature

# *** random numbers ***

def test_random_numbers_fresh_and_as_without_function():
  def fxn(x: Tensor) -> tuple: return x + Tensor.rand(3), Tensor.randn(2) * x.sum()
  f = function(fxn)
  xs = [rand_np(3, seed=i) for i in range(4)]
  Tensor.manual_seed(11)
  got = [[t.numpy() for t in f(Tensor(x))] for x in xs]
  after = Tensor.rand(2).numpy()
  Tensor.manual_seed(11)
  want = [[t.numpy() for t in fxn(Tensor(x))] for x in xs]
  np.testing.assert_array_equal(after, Tensor.rand(2).numpy())
  for i, (g, w) in enumerate(zip(got, want)):
    for j in range(2): np.testing.assert_allclose(g[j], w[j], rtol=1e-6, atol=1e-6, err_msg=f"call {i + 1}, output {j}")
  assert len(f.traces) == 1
  assert not np.allclose(got[0][0] - xs[0], got[1][0] - xs[1])

def test_dropout_in_training_and_eval():
  f, runs = counted(lambda x: x.dropout(0.5))
  x = Tensor(np.ones((4, 4), np.float32))
  with Tensor.train():
    masks = [f(x).numpy() for _ in range(3)]
  assert all(set(np.unique(m)) <= {0.0, 2.0} for m in masks) and not np.array_equal(masks[0], masks[1])
  with Tensor.test():
    np.testing.assert_array_equal(f(x).numpy(), np.ones((4, 4)))
  assert len(runs) == 2 and len(f.traces) == 2

# *** with TinyJit ***

def test_inside_tinyjit():
  w = Tensor(rand_np(4, 2, seed=3)).realize()
  layer = function(lambda x: (x @ w).relu())
  jit = TinyJit(lambda x: layer(x) * 2)
  for i in range(4):
    x = rand_np(3, 4, seed=i)
    np.testing.assert_allclose(jit(Tensor(x).realize()).numpy(), np.maximum(x @ w.numpy(), 0) * 2, rtol=1e-5, atol=1e-6)
  assert len(layer.traces) == 1

# *** side effects: the assigns and gradients of a traced call happen on every call, as without `function` ***

def run_twin(make, call, steps=3, jit=False):
  """make() -> (obj, step(obj, x) -> tensors to compare); runs it plain and with step under @function (and TinyJit),
  returns both runs' per-step values and final state values."""
  runs = []
  for traced in (False, True):
    Tensor.manual_seed(0)
    obj = make()
    step = function(call) if traced else call
    if jit: step = TinyJit(step)
    vals = []
    for i in range(steps):
      x = Tensor(rand_np(4, 3, 2, 2, seed=i) + i)
      vals.append([t.numpy() for t in step(obj, x)])
    runs.append(vals)
  return runs

def assert_same_runs(runs):
  for step, (plain, traced) in enumerate(zip(*runs)):
    for a, b in zip(plain, traced): np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6, err_msg=f"step {step}")

@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("kwargs", [{}, {"momentum": None}, {"track_running_stats": False}, {"affine": False}])
def test_batchnorm_running_stats(kwargs, jit):
  from fusegrad import nn, Context
  def call(bn, x):
    with Context(TRAINING=1): y = bn(x)
    stats = [bn.running_mean, bn.running_var, bn.num_batches_tracked] if bn.running_mean is not None else []
    return [y, *[s.cast(dtypes.float32) for s in stats]]
  runs = run_twin(lambda: nn.BatchNorm(3, **kwargs), call, steps=4, jit=jit)
  assert_same_runs(runs)
  if "track_running_stats" not in kwargs: assert np.abs(runs[1][-1][1]).max() > 0.5  # the running mean moved

def test_batchnorm_through_a_traced_method():
  """The issue's case: a BatchNorm called through a @function method, three times in training."""
  from fusegrad import nn, Context
  class M:
    def __init__(self): self.bn = nn.BatchNorm(3)
    @function
    def __call__(self, x): return self.bn(x)
  m, bn = M(), nn.BatchNorm(3)
  for i in range(3):
    x = Tensor(rand_np(4, 3, seed=i) + 1)
    with Context(TRAINING=1): np.testing.assert_allclose(m(x).numpy(), bn(x).numpy(), rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(m.bn.running_mean.numpy(), bn.running_mean.numpy(), rtol=1e-6)
  np.testing.assert_allclose(m.bn.running_var.numpy(), bn.running_var.numpy(), rtol=1e-6)
  assert m.bn.num_batches_tracked.item() == 3 and len(M.__call__.traces) == 1

@pytest.mark.parametrize("jit", [False, True])
def test_kv_cache(jit):
  """A cache written at a bound position each call and read back up to it (GPT-2's KV cache pattern: the slot is a
  mask of the position, the read a mask of the positions before it)."""
  from fusegrad import Variable
  def step(kv, x, pos):
    slot = (Tensor.arange(6) == pos).reshape(6, 1)
    kv.assign(slot.where(x.reshape(1, 3), kv))
    return [((Tensor.arange(6) <= pos).reshape(6, 1).where(kv, 0) * 2).sum(0)]
  for traced in (False, True):
    kv = Tensor.zeros(6, 3).contiguous().realize()
    f = function(step) if traced else step
    if jit: f = TinyJit(f)
    outs = [f(kv, Tensor(rand_np(3, seed=i)), Variable("pos", 0, 5).bind(i))[0].numpy() for i in range(5)]
    if not traced: want, want_kv = outs, kv.numpy()
  np.testing.assert_allclose(np.array(outs), np.array(want), rtol=1e-6)
  np.testing.assert_allclose(kv.numpy(), want_kv, rtol=1e-6)
  assert np.abs(want_kv[:5]).min() > 0 and not want_kv[5].any()

@pytest.mark.parametrize("jit", [False, True])
def test_writes_through_views_of_a_buffer(jit):
  """A cache written through views of it (a slice, a shrink, a permute, a reshape: tinygrad's KV cache writes
  `cache[:, start:end].assign(x)`): the traced call writes the buffer as the plain call does (the writes were lost)."""
  def step(c, x):
    c[1:3, 0:2].assign(x)
    c.shrink(((0, 1), None)).assign(x[0:1, 0:1].expand(1, 3) + 1)
    c.permute(1, 0)[2].assign(x.reshape(4) * 3)
    c.reshape(12)[10:12].assign(x[0] - 4)
    return [c * 2 + 1]
  for traced in (False, True):
    c = Tensor.zeros(4, 3).contiguous().realize()
    f = function(step) if traced else step
    if jit: f = TinyJit(f)
    outs = [f(c, Tensor(rand_np(2, 2, seed=i)))[0].numpy() for i in range(4)]
    if not traced: want, want_c = outs, c.numpy()
  np.testing.assert_allclose(np.array(outs), np.array(want), rtol=1e-6)
  np.testing.assert_allclose(c.numpy(), want_c, rtol=1e-6)
  x, ref = rand_np(2, 2, seed=3), np.zeros((4, 3), np.float32)  # the last call's writes, in numpy
  ref[1:3, 0:2], ref[0:1] = x, x[0, 0] + 1
  ref.T[2], ref.reshape(12)[10:12] = x.reshape(4) * 3, x[0] - 4
  np.testing.assert_allclose(want_c, ref, rtol=1e-6)

@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("make_opt", [lambda ps: SGD(ps, lr=0.1, momentum=0.9), lambda ps: Adam(ps, lr=0.01)])
def test_optimizer_step_traced(make_opt, jit):
  """Forward, backward and the optimizer's lazy step all inside the traced call: weights, optimizer state and grads
  move on every call as they would without `function`."""
  from fusegrad import Context
  def run(traced):
    w = Tensor(W.copy(), requires_grad=True)
    opt = make_opt([w])
    def step(x):
      opt.zero_grad()
      loss = (x @ w).square().mean().backward()
      return loss, *opt.schedule_step()
    f = function(step) if traced else step
    if jit:
      g = f
      f = TinyJit(lambda x: [t.realize() for t in g(x)][0])
    losses = []
    with Context(TRAINING=1):
      for i in range(4):
        out = f(Tensor(rand_np(2, 5, seed=i)))
        loss = out if jit else Tensor.realize(*out)
        losses.append(loss.item())
    return losses, w.numpy(), w.grad.numpy()
  plain, traced = run(False), run(True)
  np.testing.assert_allclose(traced[0], plain[0], rtol=1e-5)
  np.testing.assert_allclose(traced[1], plain[1], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(traced[2], plain[2], rtol=1e-5, atol=1e-6)

def test_assign_to_an_input():
  def f(acc, x):
    acc.assign(acc + x)
    return acc * 1
  plain_acc, traced_acc = Tensor.zeros(3).contiguous().realize(), Tensor.zeros(3).contiguous().realize()
  tf = function(f)
  for i in range(3):
    x = Tensor(rand_np(3, seed=i))
    np.testing.assert_allclose(tf(traced_acc, x).numpy(), f(plain_acc, x).numpy(), rtol=1e-6)
  np.testing.assert_allclose(traced_acc.numpy(), plain_acc.numpy(), rtol=1e-6)

def test_assign_to_a_lazy_value_is_refused():
  state = Tensor.zeros(3)  # a constant, no buffer: the assign rebinds it, which a trace can't repeat
  f = function(lambda x: state.assign(state + x) * 1)
  with pytest.raises(JitError, match="not in a buffer"): f(Tensor(rand_np(3, seed=0)))

def test_realize_inside_is_refused_before_anything_runs():
  w = Tensor(W.copy(), requires_grad=True)
  opt = SGD([w], lr=0.1)
  def step(x):
    opt.zero_grad()
    (x @ w).sum().backward()
    opt.step()  # realizes the new weights, computed from the (stand-in) input
    return w * 1
  from fusegrad import Context
  with Context(TRAINING=1), pytest.raises(JitError, match="computes values from its inputs"):
    function(step)(Tensor(rand_np(2, 5, seed=0)))
  np.testing.assert_array_equal(w.numpy(), W)  # the weights weren't touched

def test_gradients_accumulate_as_without_function():
  """A backward inside the call with no zero_grad: the gradient accumulates over calls, as it would without
  `function` (the first call had none to add to, so the next one is traced again)."""
  def run(traced):
    w = Tensor(W.copy(), requires_grad=True)
    def step(x): return (x @ w).sum().backward()
    f = function(step) if traced else step
    for i in range(3): f(Tensor(rand_np(2, 5, seed=i)))
    return w.grad.numpy()
  np.testing.assert_allclose(run(True), run(False), rtol=1e-6)

def test_tinygrads_keywords():
  w = Tensor([1.0, 2.0]).realize()
  f = function(precompile=True, precompile_backward=True)(lambda x: x * 2)
  np.testing.assert_allclose(f(Tensor([1.0, 3.0])).numpy(), [2.0, 6.0])
  g = function(allow_implicit=True)(lambda x: x * w)  # w comes from the enclosing scope: allowed (always, here)
  np.testing.assert_allclose(g(Tensor([1.0, 1.0])).numpy(), [1.0, 2.0])
  with pytest.raises(NotImplementedError, match="grad_fxn"): function(grad_fxn=lambda *a: a)
  h = function(allow_implicit=False)(lambda x, y: (x * y).sum(0) + 1)  # reads only its arguments: as without
  np.testing.assert_allclose(h(Tensor([[1.0, 2.0]]), Tensor([3.0, 4.0])).numpy(), [4.0, 9.0])
  np.testing.assert_allclose(h(Tensor([[2.0, 2.0]]), Tensor([3.0, 1.0])).numpy(), [7.0, 3.0])
  implicit = function(allow_implicit=False)(lambda x: x * w)  # w is not an argument: tinygrad's error
  with pytest.raises(RuntimeError, match="implicit buffer"): implicit(Tensor([1.0, 1.0]))
  bn = nn.BatchNorm(2)
  with Context(TRAINING=1), pytest.raises(RuntimeError, match="implicit buffer"):  # its running statistics, its weight
    function(allow_implicit=False)(bn)(Tensor([[1.0, 2.0], [3.0, 5.0]]))
