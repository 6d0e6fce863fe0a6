"""TinyJit: call 1 runs the function, call 2 captures the kernels it launches, later calls replay them with the new
inputs' buffers. Every replayed result is checked against numpy or against the same computation run without the JIT,
over several calls with different values; training steps update parameters and optimizer state on every replay; random
numbers are fresh on every replay and the same as without the JIT; bad inputs raise JitError naming what changed."""
import functools, gc, weakref
from typing import NamedTuple
import numpy as np
import pytest
from fusegrad import Tensor, TinyJit, Context, Device, GlobalCounters, Variable, UOp, dtypes, nn
from fusegrad.jit import JitError, function
from fusegrad.nn.optim import SGD, Adam

CALLS = 5

def rand_np(*shape: int, seed: int) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
def realized(a: np.ndarray) -> Tensor: return Tensor(a).realize()

def check_calls(fxn, make_inputs, reference, calls: int = CALLS, atol: float = 1e-5) -> TinyJit:
  """Call TinyJit(fxn) `calls` times with fresh inputs and compare every result with reference(numpy inputs)."""
  jit = TinyJit(fxn)
  for i in range(calls):
    arrays = make_inputs(i)
    out = jit(*[realized(a) for a in arrays])
    np.testing.assert_allclose(out.numpy(), reference(*arrays), atol=atol, rtol=1e-5, err_msg=f"call {i + 1}")
  assert jit.cnt == calls
  return jit

# *** replays give the right values ***

def test_elementwise():
  jit = check_calls(lambda a, b: (a + b).relu() * 2 - a.exp(),
                    lambda i: (rand_np(3, 4, seed=i), rand_np(3, 4, seed=100 + i)),
                    lambda a, b: np.maximum(a + b, 0) * 2 - np.exp(a))
  assert len(jit.jit_cache) == 1  # one fused elementwise kernel

def test_matmul():
  check_calls(lambda a, b: a @ b, lambda i: (rand_np(4, 6, seed=i), rand_np(6, 3, seed=50 + i)), lambda a, b: a @ b,
              atol=1e-4)

def test_reductions():
  def fxn(a): return a.sum(axis=1) + a.max(axis=1) - a.mean()
  check_calls(fxn, lambda i: (rand_np(5, 7, seed=i),), lambda a: a.sum(1) + a.max(1) - a.mean(), atol=1e-4)

def test_softmax_of_matmul():
  def ref(x, w):
    y = x @ w
    e = np.exp(y - y.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)
  check_calls(lambda x, w: (x @ w).softmax(axis=1), lambda i: (rand_np(3, 5, seed=i), rand_np(5, 4, seed=9 + i)), ref)

def test_kernels_run_with_capturing_off_are_not_replayed():
  """tinygrad's Context(CAPTURING=0) inside a jitted function: those kernels run at the capture, not in replays."""
  side = Tensor.zeros(2).contiguous().realize()
  @TinyJit
  def f(a):
    with Context(CAPTURING=0): side.assign(side + 1).realize()
    return (a * 2).realize()
  for i in range(4): np.testing.assert_equal(f(Tensor([i, 1.0])).numpy(), [2 * i, 2])
  assert len(f.jit_cache) == 1 and side.tolist() == [2.0, 2.0]  # the warm-up and the capture ran it, no replay

def test_first_and_capture_calls_return_results():
  jit = TinyJit(lambda a: a * a)
  for i in range(3):
    a = rand_np(4, seed=i)
    assert jit.cnt == i
    np.testing.assert_allclose(jit(realized(a)).numpy(), a * a, rtol=1e-6)

def test_replay_skips_python():
  calls = []
  @TinyJit
  def f(a: Tensor) -> Tensor:
    calls.append(1)
    return a + 1
  for i in range(CALLS):
    np.testing.assert_allclose(f(realized(rand_np(3, seed=i))).numpy(), rand_np(3, seed=i) + 1)
  assert len(calls) == 2  # runs once, captures once, then replays only kernels

def test_keyword_inputs():
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return a - b * 2
  for i in range(CALLS):
    a, b = rand_np(4, seed=i), rand_np(4, seed=20 + i)
    np.testing.assert_allclose(f(a=realized(a), b=realized(b)).numpy(), a - b * 2, rtol=1e-6, err_msg=f"call {i + 1}")

def test_keyword_inputs_in_another_order():
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return a - b
  for i in range(CALLS):
    a, b = rand_np(4, seed=i), rand_np(4, seed=20 + i)
    out = f(a=realized(a), b=realized(b)) if i % 2 == 0 else f(b=realized(b), a=realized(a))
    np.testing.assert_allclose(out.numpy(), a - b, rtol=1e-6, err_msg=f"call {i + 1}")

def test_mixed_positional_and_keyword_inputs():
  @TinyJit
  def f(a: Tensor, b: Tensor, scale: float = 1.0) -> Tensor: return (a * b).sum() * scale
  for i in range(CALLS):
    a, b = rand_np(6, seed=i), rand_np(6, seed=30 + i)
    np.testing.assert_allclose(f(realized(a), b=realized(b), scale=3.0).numpy(), (a * b).sum() * 3, rtol=1e-5)

def test_list_and_dict_inputs():
  @TinyJit
  def f(xs: list, d: dict) -> Tensor: return xs[0] * xs[1] + d["bias"] - d["other"][0]
  for i in range(CALLS):
    a, b, c, e = (rand_np(2, 3, seed=10 * i + k) for k in range(4))
    out = f([realized(a), realized(b)], {"bias": realized(c), "other": [realized(e)]})
    np.testing.assert_allclose(out.numpy(), a * b + c - e, rtol=1e-5, atol=1e-6, err_msg=f"call {i + 1}")

def test_several_outputs_in_a_structure():
  @TinyJit
  def f(a: Tensor) -> dict:
    return {"double": a * 2, "pair": (a + 1, a.sum()), "nothing": None}
  for i in range(CALLS):
    a = rand_np(5, seed=i)
    out = f(realized(a))
    assert out["nothing"] is None
    np.testing.assert_allclose(out["double"].numpy(), a * 2, rtol=1e-6)
    np.testing.assert_allclose(out["pair"][0].numpy(), a + 1, rtol=1e-6)
    np.testing.assert_allclose(out["pair"][1].numpy(), a.sum(), rtol=1e-5)

class Pair(NamedTuple):
  first: Tensor
  second: Tensor

def test_named_tuple_inputs_and_outputs():
  @TinyJit
  def f(p: Pair) -> Pair: return Pair(p.first + p.second, p.first * p.second)
  for i in range(CALLS):
    a, b = rand_np(3, seed=i), rand_np(3, seed=7 + i)
    out = f(Pair(realized(a), realized(b)))
    assert isinstance(out, Pair)
    np.testing.assert_allclose(out.first.numpy(), a + b, rtol=1e-6)
    np.testing.assert_allclose(out.second.numpy(), a * b, rtol=1e-6)

def test_outputs_are_realized():
  from fusegrad.uop.ops import GroupOp, Ops
  @TinyJit
  def f(a: Tensor) -> tuple: return a + 1, (a * 3).sum()
  for i in range(4):
    for t in f(realized(rand_np(3, seed=i))):
      u = t.uop
      while u.op in GroupOp.Movement: u = u.src[0]
      assert u.op is Ops.BUFFER, f"call {i + 1}: output is {u.op}, not a buffer"

def test_returning_an_input_gives_the_new_input():
  @TinyJit
  def f(a: Tensor, b: Tensor) -> tuple: return a, b.reshape(2, 2), a + b
  for i in range(CALLS):
    a, b = rand_np(4, seed=i), rand_np(4, seed=40 + i)
    ra, rb, s = f(realized(a), realized(b))
    np.testing.assert_allclose(ra.numpy(), a, err_msg=f"call {i + 1}")
    np.testing.assert_allclose(rb.numpy(), b.reshape(2, 2), err_msg=f"call {i + 1}")
    np.testing.assert_allclose(s.numpy(), a + b, rtol=1e-6, err_msg=f"call {i + 1}")

def test_input_views():
  # a transposed and a sliced view of realized buffers: the kernels read them through the same view on every replay
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return a.T + b
  for i in range(CALLS):
    a, b = rand_np(3, 2, seed=i), rand_np(4, 3, seed=60 + i)
    out = f(realized(a), realized(b)[1:3])
    np.testing.assert_allclose(out.numpy(), a.T + b[1:3], rtol=1e-6, err_msg=f"call {i + 1}")

def test_same_tensor_as_two_inputs_after_capture():
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return a * 2 + b
  for i in range(3): f(realized(rand_np(3, seed=i)), realized(rand_np(3, seed=10 + i)))
  x = rand_np(3, seed=99)
  t = realized(x)
  np.testing.assert_allclose(f(t, t).numpy(), x * 3, rtol=1e-6)

def test_input_updated_in_place_between_calls():
  x = realized(np.zeros(4, np.float32))
  @TinyJit
  def f(a: Tensor) -> Tensor: return a * 10
  for i in range(CALLS):
    x.assign(x + 1).realize()
    np.testing.assert_allclose(f(x).numpy(), np.full(4, 10.0 * (i + 1)), err_msg=f"call {i + 1}")

def test_function_that_assigns_to_its_input():
  @TinyJit
  def step(acc: Tensor, x: Tensor) -> Tensor:
    acc.assign(acc + x)
    return acc.realize()
  acc, want = realized(np.zeros(3, np.float32)), np.zeros(3, np.float32)
  for i in range(CALLS):
    x = rand_np(3, seed=i)
    want = want + x
    step(acc, realized(x))
    np.testing.assert_allclose(acc.numpy(), want, rtol=1e-5, err_msg=f"call {i + 1}")

def test_closure_weights_updated_outside():
  w = realized(np.ones((3, 2), np.float32))
  @TinyJit
  def f(x: Tensor) -> Tensor: return x @ w
  for i in range(CALLS):
    w.assign(w * 2).realize()  # the replay reads w's buffer, so it sees the new weights
    x = rand_np(4, 3, seed=i)
    want = x @ (np.ones((3, 2)) * 2 ** (i + 1))
    np.testing.assert_allclose(f(realized(x)).numpy(), want, rtol=1e-5, err_msg=f"call {i + 1}")

def test_lazy_ops_on_outputs_see_each_replay():
  @TinyJit
  def f(a: Tensor) -> Tensor: return a * 3
  for i in range(CALLS):
    a = rand_np(4, seed=i)
    out = f(realized(a))
    np.testing.assert_allclose((out + 1).numpy(), a * 3 + 1, rtol=1e-6, err_msg=f"call {i + 1}")

def test_results_fed_back_as_inputs():
  """h = step(h): the input is the buffer the replay writes its result into; reading it while writing it (a transpose,
  a matmul) would mix old and new values."""
  w = rand_np(33, 33, seed=1) / 6
  @TinyJit
  def step(h: Tensor, x: Tensor) -> tuple: return (h @ Tensor(w) + x).tanh(), h.T * 0.5
  h, t = realized(rand_np(33, 33, seed=0)), None
  hn = h.numpy()
  for i in range(CALLS):
    x = rand_np(33, 33, seed=10 + i)
    h, t = step(h, realized(x))
    hn, tn = np.tanh(hn @ w + x), hn.T * 0.5
    np.testing.assert_allclose(h.numpy(), hn, atol=1e-5, err_msg=f"call {i + 1}")
    np.testing.assert_allclose(t.numpy(), tn, atol=1e-5, err_msg=f"call {i + 1}")

def test_reshaped_results_fed_back():
  # a result's view is a chain of reshapes of its buffer: the same view as a fresh input of that shape
  @TinyJit
  def step(x: Tensor) -> Tensor: return x.cumsum(axis=1)
  x, xn = realized(np.ones((1, 8), np.float32)), np.ones((1, 8), np.float32)
  for i in range(CALLS):
    x, xn = step(x), np.cumsum(xn, 1)
    np.testing.assert_allclose(x.numpy(), xn, rtol=1e-6, err_msg=f"call {i + 1}")

def test_capture_that_raised_is_done_again():
  fail = [False]
  @TinyJit
  def step(acc: Tensor, x: Tensor) -> Tensor:
    acc.assign(acc + x).realize()
    if fail[0]: raise RuntimeError("boom")
    return (acc * 2).realize()
  acc, want = realized(np.zeros(3, np.float32)), np.zeros(3, np.float32)
  for i in range(CALLS):
    fail[0] = i == 1  # the first capture raises after running a kernel
    x = rand_np(3, seed=i)
    want = want + x
    if fail[0]:
      with pytest.raises(RuntimeError, match="boom"): step(acc, realized(x))
    else: np.testing.assert_allclose(step(acc, realized(x)).numpy(), want * 2, rtol=1e-5, err_msg=f"call {i + 1}")
    np.testing.assert_allclose(acc.numpy(), want, rtol=1e-5, err_msg=f"call {i + 1}")  # each add runs once
  assert step.cnt == CALLS - 1

def test_first_call_that_raised_leaves_nothing_behind():
  @TinyJit
  def f(a: Tensor) -> Tensor: return a @ a.T
  with pytest.raises(ValueError): f(realized(rand_np(1, 3, 1, seed=0)))
  for i in range(3):
    a = rand_np(2, 3, seed=i)
    np.testing.assert_allclose(f(realized(a)).numpy(), a @ a.T, rtol=1e-5)

def test_bound_variable_arguments():
  i = Variable("i", 1, 10)
  @TinyJit
  def f(x: Tensor, k: UOp) -> Tensor: return x * k + 1
  a = rand_np(4, seed=0)
  for k in range(1, 7):
    np.testing.assert_allclose(f(realized(a), i.bind(k)).numpy(), a * k + 1, rtol=1e-6, err_msg=f"i={k}")
  assert len(f.jit_cache) == 1

def test_error_bound_variables_change():
  i, j = Variable("i", 1, 10), Variable("j", 1, 10)
  f = TinyJit(lambda x, k: x * k)
  for k in range(1, 3): f(realized(rand_np(3, seed=k)), i.bind(k))
  with pytest.raises(JitError, match=r"variables.*\['i'\].*\['j'\]"): f(realized(rand_np(3, seed=0)), j.bind(2))

def test_no_tensor_inputs():
  w = realized(rand_np(4, seed=0))
  @TinyJit
  def f() -> Tensor:
    w.assign(w * 0.5 + 1)
    return w.realize()
  want = rand_np(4, seed=0)
  for i in range(CALLS):
    want = want * 0.5 + 1
    np.testing.assert_allclose(f().numpy(), want, rtol=1e-6, err_msg=f"call {i + 1}")

def test_copies_between_devices():
  @TinyJit
  def f(x: Tensor, y: Tensor) -> Tensor: return (x.to("PYTHON") * 2 + y).to("CPU").sum()
  for i in range(CALLS):
    a, b = rand_np(3, seed=i), rand_np(3, seed=30 + i)
    out = f(Tensor(a, device="CPU").realize(), Tensor(b, device="PYTHON").realize())
    assert out.device == "CPU"
    np.testing.assert_allclose(out.numpy(), (a * 2 + b).sum(), rtol=1e-5, err_msg=f"call {i + 1}")

def test_stacked_with_train_decorator():
  @TinyJit
  @Tensor.train()
  def f(x: Tensor) -> Tensor: return x.dropout(0.5)
  Tensor.manual_seed(3)
  masks = [f(Tensor.ones(16).contiguous().realize()).numpy() for _ in range(CALLS)]
  assert not Tensor.training
  assert all(set(np.unique(m)) <= {0.0, 2.0} for m in masks) and len({m.tobytes() for m in masks}) == CALLS

# *** as a decorator on methods ***

class Linear2:
  def __init__(self, seed: int):
    self.w1, self.w2 = realized(rand_np(4, 8, seed=seed)), realized(rand_np(8, 2, seed=seed + 1))
  @TinyJit
  def __call__(self, x: Tensor) -> Tensor: return (x @ self.w1).relu() @ self.w2
  def plain(self, x: np.ndarray) -> np.ndarray: return np.maximum(x @ self.w1.numpy(), 0) @ self.w2.numpy()

def test_method():
  model = Linear2(0)
  for i in range(CALLS):
    x = rand_np(3, 4, seed=i)
    got = model(realized(x)).numpy()
    np.testing.assert_allclose(got, model.plain(x), atol=1e-5, rtol=1e-5, err_msg=f"call {i + 1}")

def test_method_on_two_instances():
  a, b = Linear2(0), Linear2(10)
  for i in range(CALLS):
    x = rand_np(3, 4, seed=i)
    for name, m in (("a", a), ("b", b)):  # each instance replays its own capture, with its own weights
      got = m(realized(x)).numpy()
      np.testing.assert_allclose(got, m.plain(x), atol=1e-5, rtol=1e-5, err_msg=f"model {name}, call {i + 1}")
  assert a.__call__ is a.__call__ and a.__call__ is not b.__call__
  assert a.__call__.cnt == CALLS and len(a.__call__.jit_cache) == len(b.__call__.jit_cache)

def test_method_capture_is_dropped_with_the_instance():
  m = Linear2(3)
  for i in range(3): m(realized(rand_np(2, 4, seed=i)))
  ref = weakref.ref(m)
  del m
  gc.collect()
  assert ref() is None, "the TinyJit keeps the instance alive"

def test_reset_on_the_class_resets_instances():
  m = Linear2(5)
  for i in range(3): m(realized(rand_np(2, 4, seed=i)))
  Linear2.__call__.reset()
  assert m.__call__.cnt == 0
  x = rand_np(5, 4, seed=9)  # a new shape is fine after the reset
  np.testing.assert_allclose(m(realized(x)).numpy(), m.plain(x), atol=1e-5, rtol=1e-5)

def test_method_with_jit_attribute():
  class Model:
    def __init__(self):
      self.w = realized(rand_np(3, 3, seed=7))
      self.forward = TinyJit(self._forward)
    def _forward(self, x: Tensor) -> Tensor: return (x @ self.w).tanh()
  m = Model()
  for i in range(CALLS):
    x = rand_np(2, 3, seed=i)
    got = m.forward(realized(x)).numpy()
    np.testing.assert_allclose(got, np.tanh(x @ m.w.numpy()), atol=1e-5, err_msg=f"call {i + 1}")

# *** kernel counts ***

def test_kernel_count_is_stable():
  @TinyJit
  def f(a: Tensor, b: Tensor) -> tuple: return (a @ b).relu(), (a.sum(axis=0) * 2).exp()
  counts = []
  for i in range(6):
    GlobalCounters.reset()
    f(realized(rand_np(3, 4, seed=i)), realized(rand_np(4, 5, seed=i + 1)))
    if i >= 1: counts.append(len(f.jit_cache))
    if i >= 2: counts.append(GlobalCounters.kernel_count)  # a replay launches exactly the captured kernels
  assert len(f.jit_cache) >= 2
  assert counts == [len(f.jit_cache)] * len(counts), counts

def test_debug_prints_the_capture(capsys):
  @TinyJit
  def f(a: Tensor) -> Tensor: return (a + 1).sum()
  with Context(DEBUG=1):
    f(realized(rand_np(3, seed=0)))
    assert "JIT captured" not in capsys.readouterr().out
    f(realized(rand_np(3, seed=1)))
    out = capsys.readouterr().out
    f(realized(rand_np(3, seed=2)))
    assert "JIT captured" not in capsys.readouterr().out
  assert f"JIT captured {len(f.jit_cache)} kernels" in out, out

def test_jit_off():
  calls = []
  def fxn(a: Tensor) -> Tensor:
    calls.append(1)
    return a * 2
  jit = TinyJit(fxn)
  with Context(JIT=0):
    for i in range(CALLS):
      a = rand_np(3, seed=i)
      np.testing.assert_allclose(jit(realized(a)).numpy(), a * 2)
  assert len(calls) == CALLS and jit.cnt == 0 and not jit.jit_cache

def test_jit_off_accepts_lazy_inputs():
  jit = TinyJit(lambda a: a * 2)
  with Context(JIT=0):
    np.testing.assert_allclose(jit(Tensor([1.0, 2.0]) + 1).numpy(), [4.0, 6.0])

# *** results handed back stay valid ***

def test_results_kept_from_earlier_calls_keep_their_values():
  @TinyJit
  def g(a: Tensor) -> Tensor: return a * 2
  outs = [g(realized(np.full(3, float(i), np.float32))) for i in range(4)]
  assert len({id(o) for o in outs}) == 4
  for i, o in enumerate(outs): np.testing.assert_allclose(o.numpy(), np.full(3, 2.0 * i))
  pair = TinyJit(lambda a: (a + 1, (a * 3).reshape(3, 1).T))
  kept = [pair(realized(np.full(3, float(i), np.float32))) for i in range(4)]
  for i, (p, q) in enumerate(kept):
    np.testing.assert_allclose(p.numpy(), np.full(3, i + 1.0))
    np.testing.assert_allclose(q.numpy(), np.full((1, 3), 3.0 * i))

def test_results_get_new_buffers_and_returned_state_is_copied():
  w = realized(np.zeros(3, np.float32))
  @TinyJit
  def g(a: Tensor) -> tuple:
    w.assign(w + a).realize()
    return a * 2, w
  kept = [g(realized(np.full(3, float(i), np.float32))) for i in range(5)]
  assert kept[0][1] is w  # call 1 runs the function: it returns w itself
  for i, (doubled, state) in enumerate(kept):
    np.testing.assert_allclose(doubled.numpy(), np.full(3, 2.0 * i))
    if i: np.testing.assert_allclose(state.numpy(), np.full(3, i * (i + 1) / 2))  # w's value after call i
  np.testing.assert_allclose(w.numpy(), np.full(3, 10.0))
  assert len({id(d.uop.base.arg) for d, _ in kept[1:]}) == 4  # a new buffer per call from the capture on

def test_a_result_nothing_holds_gives_its_buffer_to_the_next_replay():
  """The last call's result buffer is written again once nothing holds it (no allocation, no binding again); a result
  held as a tensor, through a view or in a lazy graph keeps its buffer and its values."""
  @TinyJit
  def g(a: Tensor) -> Tensor: return a * 2
  x = realized(np.ones(3, np.float32))
  for _ in range(3): g(x)
  first = weakref.ref(g(x).uop.base.arg)
  assert g(x).uop.base.arg is first()  # (alive: the capture's slots hold it)
  held, view, lazy = [g(realized(np.full(3, float(i), np.float32))) for i in range(3)]
  view, lazy = view.reshape(3, 1), lazy + 1
  for _ in range(3): np.testing.assert_allclose(g(x).numpy(), [2.0] * 3)
  assert len({id(held.uop.base.arg), id(view.uop.base.arg)}) == 2
  np.testing.assert_allclose(held.numpy(), [0.0] * 3)
  np.testing.assert_allclose(view.numpy(), [[2.0]] * 3)
  np.testing.assert_allclose(lazy.numpy(), [5.0] * 3)

def test_non_tensor_argument_changes_raise():
  @TinyJit
  def g(a: Tensor, k: int, scale: float = 1.0) -> Tensor: return a * k * scale
  x = realized(np.ones(3, np.float32))
  for _ in range(3): np.testing.assert_allclose(g(x, 3).numpy(), [3.0] * 3)
  with pytest.raises(JitError, match=r"args\[1\] was 3, now 5"): g(x, 5)
  with pytest.raises(JitError, match="scale"): g(x, 3, scale=2.0)
  with pytest.raises(JitError, match="was 3, now 3.0"): g(x, 3.0)
  np.testing.assert_allclose(g(x, 3).numpy(), [3.0] * 3)  # the capture is still usable
  g.reset()
  for _ in range(3): np.testing.assert_allclose(g(x, 5).numpy(), [5.0] * 3)

def test_lazy_inputs_are_realized():
  jit = TinyJit(lambda a, b: a * 2 + b)
  for i in range(4):
    a = rand_np(3, seed=i)
    x = Tensor(a) + 1  # still lazy: realized by the call
    np.testing.assert_allclose(jit(x, Tensor(a).realize()).numpy(), (a + 1) * 2 + a, rtol=1e-6)
  assert jit.cnt == 4

def test_reset():
  @TinyJit
  def f(a: Tensor) -> Tensor: return a + 1
  for i in range(3): f(realized(rand_np(3, seed=i)))
  assert f.cnt == 3 and f.jit_cache and f.captured is not None and f.captured.jit_cache is f.jit_cache
  f.reset()
  assert f.cnt == 0 and not f.jit_cache and f.captured is None
  for i in range(3):  # new shapes are fine after a reset: this is a new capture
    a = rand_np(2, 2, seed=i)
    np.testing.assert_allclose(f(realized(a)).numpy(), a + 1, rtol=1e-6)
  assert f.cnt == 3 and len(f.jit_cache) == 1

# *** training steps ***

def make_mlp(seed: int) -> list[Tensor]:
  return [Tensor(rand_np(*s, seed=seed + k) * 0.5, requires_grad=True) for k, s in enumerate([(4, 8), (8,), (8, 3)])]

def mlp_loss(ps: list[Tensor], x: Tensor, y: Tensor) -> Tensor:
  return ((x @ ps[0] + ps[1]).relu() @ ps[2]).sparse_categorical_crossentropy(y)

def batches(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
  return [(rand_np(6, 4, seed=200 + i), np.random.default_rng(i).integers(0, 3, 6).astype(np.int32)) for i in range(n)]

def run_training(make_opt, use_jit: bool, steps: int = 6) -> tuple[list[float], list[np.ndarray], object]:
  ps = make_mlp(0)
  opt = make_opt(ps)
  @Context(TRAINING=1)  # optimizers step in training mode only (tinygrad's decorator order: TinyJit outside)
  def step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    loss = mlp_loss(ps, x, y).backward()
    opt.step()
    return loss.realize()
  fxn = TinyJit(step) if use_jit else step
  losses = [fxn(realized(x), Tensor(y).realize()).item() for x, y in batches(steps)]
  return losses, [p.numpy() for p in ps], opt

@pytest.mark.parametrize("make_opt", [lambda ps: SGD(ps, lr=0.1, momentum=0.9), lambda ps: Adam(ps, lr=0.01)],
                         ids=["SGD", "Adam"])
def test_training_step_matches_no_jit(make_opt):
  jl, jp, jopt = run_training(make_opt, True)
  pl, pp, popt = run_training(make_opt, False)
  np.testing.assert_allclose(jl, pl, rtol=1e-5, atol=1e-6)
  assert len(set(np.round(jl, 6))) == len(jl), "the loss should change every step"
  for i, (a, b) in enumerate(zip(jp, pp)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"parameter {i}")
  for i, (a, b) in enumerate(zip(jopt._state(), popt._state())):  # momentum / moments / step counter
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"optimizer state {i}")

def test_learning_rate_change_takes_effect_in_replays():
  w = Tensor(np.ones(3, np.float32), requires_grad=True)
  opt = SGD([w], lr=0.0)
  @TinyJit
  @Context(TRAINING=1)
  def step() -> Tensor:
    opt.zero_grad()
    loss = w.sum().backward()
    opt.step()
    return loss.realize()
  for _ in range(3): step()
  np.testing.assert_allclose(w.numpy(), np.ones(3))
  opt.lr.assign(Tensor([0.5])).realize()
  for _ in range(2): step()
  np.testing.assert_allclose(w.numpy(), np.zeros(3), atol=1e-7)

# *** random numbers ***

def random_fxn(a: Tensor) -> tuple:
  return a + Tensor.rand(4), Tensor.randn(2, 3) * a.sum()

def test_random_is_fresh_and_matches_no_jit():
  Tensor.manual_seed(1234)
  jit = TinyJit(random_fxn)
  inputs = [rand_np(4, seed=i) for i in range(CALLS)]
  got = [[t.numpy() for t in jit(realized(a))] for a in inputs]
  Tensor.manual_seed(1234)
  want = [[t.numpy() for t in random_fxn(realized(a))] for a in inputs]
  for i, (g, w) in enumerate(zip(got, want)):
    for j in range(2): np.testing.assert_allclose(g[j], w[j], rtol=1e-5, atol=1e-6, err_msg=f"call {i + 1}, output {j}")
  rands = [g[0] - a for g, a in zip(got, inputs)]
  assert all(not np.allclose(rands[i], rands[i + 1]) for i in range(CALLS - 1)), "random numbers repeat across replays"

def test_random_after_the_jit_continues_the_stream():
  Tensor.manual_seed(5)
  jit = TinyJit(lambda a: a * Tensor.rand(3))
  for i in range(4): jit(realized(np.ones(3, np.float32)))
  after_jit = Tensor.rand(3).numpy()
  Tensor.manual_seed(5)
  for i in range(4): (realized(np.ones(3, np.float32)) * Tensor.rand(3)).realize()
  np.testing.assert_allclose(after_jit, Tensor.rand(3).numpy())

def test_dropout_is_fresh_and_matches_no_jit():
  def fxn(x: Tensor) -> Tensor:
    with Tensor.train(): return (x * 3).dropout(0.5)
  x = np.ones((4, 8), np.float32)
  Tensor.manual_seed(7)
  jit = TinyJit(fxn)
  got = [jit(realized(x)).numpy() for _ in range(CALLS)]
  Tensor.manual_seed(7)
  want = [fxn(realized(x)).numpy() for _ in range(CALLS)]
  for i, (g, w) in enumerate(zip(got, want)): np.testing.assert_allclose(g, w, err_msg=f"call {i + 1}")
  assert set(np.unique(np.concatenate(got))) <= {0.0, 6.0}
  assert all(not np.array_equal(got[i], got[i + 1]) for i in range(CALLS - 1)), "the dropout mask repeats"

def test_random_batch_sampling_without_inputs():
  """beautiful_mnist's pattern: a train step with no arguments that samples its batch with Tensor.randint."""
  data = realized(np.arange(20, dtype=np.float32).reshape(10, 2))
  def sample() -> Tensor: return data[Tensor.randint(4, high=10)]
  Tensor.manual_seed(42)
  jit = TinyJit(sample)
  got = [jit().numpy() for _ in range(CALLS)]
  Tensor.manual_seed(42)
  want = [sample().numpy() for _ in range(CALLS)]
  for i, (g, w) in enumerate(zip(got, want)): np.testing.assert_array_equal(g, w, err_msg=f"call {i + 1}")
  assert len({g.tobytes() for g in got}) > 1

# *** errors ***

def captured(fxn, *shape: int) -> TinyJit:
  jit = TinyJit(fxn)
  for i in range(2): jit(realized(rand_np(*shape, seed=i)))
  return jit

def test_error_shape_changes():
  jit = captured(lambda a: a * 2, 3, 4)
  with pytest.raises(JitError, match=r"shape.*\(3, 4\).*\(4, 3\)"): jit(realized(rand_np(4, 3, seed=0)))

def test_error_dtype_changes():
  jit = captured(lambda a: a * 2, 3)
  with pytest.raises(JitError, match="float.*int"): jit(Tensor([1, 2, 3], dtype=dtypes.int32).realize())

def test_error_device_changes():
  jit = captured(lambda a: a * 2, 3)
  other = "PYTHON" if Device.DEFAULT != "PYTHON" else "CPU"
  with pytest.raises(JitError, match=f"device.*{other}"): jit(Tensor(rand_np(3, seed=0), device=other).realize())

def test_error_number_of_inputs_changes():
  jit = TinyJit(lambda *xs: sum(xs[1:], xs[0]) * 2)
  for i in range(2): jit(realized(rand_np(3, seed=i)), realized(rand_np(3, seed=i)))
  with pytest.raises(JitError, match="2 tensor inputs.*3"): jit(*[realized(rand_np(3, seed=k)) for k in range(3)])

def test_error_view_changes():
  jit = TinyJit(lambda a: a + 1)
  for i in range(2): jit(realized(rand_np(3, 3, seed=i)))
  with pytest.raises(JitError, match="view"): jit(realized(rand_np(3, 3, seed=5)).T)

def test_lazy_input_after_capture():
  jit = captured(lambda a: a * 2, 3)
  np.testing.assert_allclose(jit(realized(rand_np(3, seed=0)) + 1).numpy(), (rand_np(3, seed=0) + 1) * 2, rtol=1e-6)

def test_constant_inputs():
  # tinygrad's test_jit_const_inputs: a constant input (no buffer of its own) is given one at each call, which the
  # capture reads as an input: a replay computes with each call's value (the JitError it raised is gone)
  add = TinyJit(lambda x, y, z: (x + y + z).realize())
  for i in range(5):
    np.testing.assert_equal(add(Tensor([i] * 3), Tensor.ones(3), Tensor.zeros(3)).numpy(), np.array([i + 1] * 3))
  double = TinyJit(lambda a: (a * 2).realize())
  for i in range(5): np.testing.assert_equal(double(Tensor.full((2,), float(i)).realize()).numpy(), [2.0 * i] * 2)
  assert len(double.jit_cache) == 1
  c = Tensor.full((2,), 3.0)
  for _ in range(3): np.testing.assert_equal(double(c).numpy(), [6.0, 6.0])
  assert c.tolist() == [3.0, 3.0]

def test_constant_made_contiguous_is_fine():
  jit = TinyJit(lambda a: a * 2)
  for i in range(3):
    np.testing.assert_allclose(jit(Tensor.full((3,), float(i)).contiguous().realize()).numpy(), [2.0 * i] * 3)

def test_error_nothing_captured():
  jit = TinyJit(lambda a: a)
  jit(realized(rand_np(3, seed=0)))
  with pytest.raises(JitError, match="no kernels"): jit(realized(rand_np(3, seed=1)))

def test_error_nothing_captured_for_views():
  jit = TinyJit(lambda a: a.reshape(3, 1).T)
  jit(realized(rand_np(3, seed=0)))
  with pytest.raises(JitError, match="no kernels"): jit(realized(rand_np(3, seed=1)))

def test_error_same_buffer_twice_from_the_first_call():  # as tinygrad's test_jit_duplicate_fail
  jit = TinyJit(lambda a, b: a * 2 + b)
  t = realized(rand_np(3, seed=0))
  with pytest.raises(JitError, match="same buffer"): jit(t, t)

def test_error_views_of_one_buffer():
  jit = TinyJit(lambda a, b: a * 2 + b)
  t = realized(rand_np(2, 3, seed=0))
  with pytest.raises(JitError, match="same buffer"): jit(t[0], t[1])

def test_first_call_is_a_warm_up_with_any_shapes():  # as tinygrad (its KV-cache test: a prompt, then one token)
  jit = TinyJit(lambda a: (a * 2).sum(1).realize())
  first, later = rand_np(2, 3, seed=0), [rand_np(2, 1, seed=i) for i in range(3)]
  np.testing.assert_allclose(jit(realized(first)).numpy(), (first * 2).sum(1), rtol=1e-6)
  for a in later: np.testing.assert_allclose(jit(realized(a)).numpy(), (a * 2).sum(1), rtol=1e-6)
  with pytest.raises(JitError, match="inputs changed since the capture"): jit(realized(first))

def test_error_jit_inside_jit():  # as tinygrad's test_jit_jit_error: the inner capture would be left out of the outer
  f = TinyJit(lambda t: t + 1)
  g = TinyJit(lambda t: f(t) * 3)
  assert g(realized(np.array([1.0], np.float32))).item() == 6  # a plain call of both
  with pytest.raises(RuntimeError, match="TinyJit inside another TinyJit"): g(realized(np.array([2.0], np.float32)))

def test_errors_leave_the_capture_usable():
  jit = captured(lambda a: a * 2, 3)
  with pytest.raises(JitError): jit(realized(rand_np(4, seed=0)))
  a = rand_np(3, seed=3)
  np.testing.assert_allclose(jit(realized(a)).numpy(), a * 2)

# *** a small MNIST training run ***

@pytest.mark.skipif(Device.DEFAULT == "PYTHON", reason="the PYTHON interpreter is too slow for a training run")
def test_mnist_training_beats_90_percent():
  """beautiful_mnist in small: a conv net built from Tensor ops, trained with Adam under TinyJit (a train step with no
  arguments that samples its batch with Tensor.randint) on 10000 training images; >90% on 2000 test images."""
  from fusegrad.nn.datasets import mnist
  X_train, Y_train, X_test, Y_test = mnist()
  X, Y = (X_train[:10000].float() / 255).realize(), Y_train[:10000].cast(dtypes.int32).realize()
  Tensor.manual_seed(0)
  ps = [Tensor.kaiming_uniform(8, 1, 5, 5), Tensor.zeros(8), Tensor.kaiming_uniform(10, 8 * 12 * 12), Tensor.zeros(10)]
  def model(x: Tensor) -> Tensor: return x.conv2d(ps[0], ps[1]).relu().max_pool2d(2).flatten(1) @ ps[2].T + ps[3]
  opt = Adam(ps, lr=3e-3)
  @TinyJit
  def train_step() -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      idx = Tensor.randint(64, high=X.shape[0])
      loss = model(X[idx]).sparse_categorical_crossentropy(Y[idx]).backward()
      opt.step()
      return loss.realize()
  losses = [train_step().item() for _ in range(300)]
  assert train_step.cnt == 300 and len(train_step.jit_cache) > 5
  assert np.mean(losses[-50:]) < np.mean(losses[:10]) / 4, (losses[:10], losses[-50:])
  with Tensor.test():
    predicted = model((X_test[:2000].float() / 255)).argmax(axis=1).numpy()
  accuracy = (predicted == Y_test[:2000].numpy()).mean()
  assert accuracy > 0.9, f"test accuracy {accuracy:.3f}"

# *** prune: kernels whose results can't change are left out of the replay ***

def _prune_fn(w: Tensor):
  def f(x: Tensor) -> Tensor: return (x @ (w * 2 + 1).contiguous()).relu().sum(1) + Tensor.rand(4)
  return f

@pytest.mark.parametrize("prune", [False, True])
def test_prune_keeps_results(prune):
  w = Tensor(np.random.default_rng(0).random((4, 4)).astype(np.float32)).realize()
  Tensor.manual_seed(3)
  eager = [_prune_fn(w)(Tensor.full((4, 4), float(i)).contiguous().realize()).numpy() for i in range(4)]
  Tensor.manual_seed(3)
  jit, counts, outs = TinyJit(_prune_fn(w), prune=prune), [], []
  for i in range(4):
    x = Tensor.full((4, 4), float(i)).contiguous().realize()
    GlobalCounters.reset()
    outs.append(jit(x).numpy())
    counts.append(GlobalCounters.kernel_count)
  np.testing.assert_allclose(np.array(outs), np.array(eager), rtol=1e-6)  # random numbers stay fresh on each call
  assert counts[3] == (counts[0] - 1 if prune else counts[0]), counts  # the (w * 2 + 1) kernel is pruned

def test_prune_as_method():
  class M:
    def __init__(self): self.w = Tensor.ones(3, 3).contiguous().realize()
    @functools.partial(TinyJit, prune=True)
    def __call__(self, x: Tensor) -> Tensor: return x @ (self.w + 1).contiguous()
  m = M()
  for i in range(3): out = m(Tensor.full((2, 3), float(i)).contiguous().realize())
  assert out.tolist() == [[12.0] * 3] * 2
  assert len(M.__call__.__get__(m).jit_cache) == 1, "the (w + 1) kernel should be pruned"

# *** out-of-range indices raise on replays too (the captured kernels compute the index flags; each replay reads them)
def test_replay_checks_indices():
  w = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3)).realize()
  f = TinyJit(lambda i: (w[i] * 2).contiguous())
  for k in range(3): np.testing.assert_equal(f(Tensor([k, 3 - k]).realize()).numpy(), w.numpy()[[k, 3 - k]] * 2)
  assert f.captured is not None
  with pytest.raises(IndexError, match="getitem: index 7 is out of bounds for size 4"): f(Tensor([1, 7]).realize())
  with pytest.raises(IndexError, match="index -5"): f(Tensor([-5, 0]).realize())
  np.testing.assert_equal(f(Tensor([2, -1]).realize()).numpy(), w.numpy()[[2, -1]] * 2)  # valid calls still work

def test_replay_index_check_off():
  w = Tensor(np.arange(8, dtype=np.float32)).realize()
  f = TinyJit(lambda i: w[i].contiguous())
  for k in range(3): f(Tensor([k]).realize())
  with Context(CHECK_INDEX=0): np.testing.assert_equal(f(Tensor([9]).realize()).numpy(), [0])  # reads 0, as unjitted

def test_one_hot_in_jit_and_function():  # one_hot(n) checks its ids lazily, so it can be captured and traced
  j = TinyJit(lambda y: (y.one_hot(4) * 2).contiguous())
  for k in range(3): np.testing.assert_equal(j(Tensor([k, 3]).realize()).numpy(), np.eye(4, dtype=np.int32)[[k, 3]] * 2)
  with pytest.raises(IndexError, match="one_hot: class id 4"): j(Tensor([0, 4]).realize())
  f = function(lambda y: y.one_hot(4) * 2)
  for ids in ([1, 3], [0, 2]):
    np.testing.assert_equal(f(Tensor(ids).realize()).numpy(), np.eye(4, dtype=np.int32)[ids] * 2)
  with pytest.raises(IndexError, match="one_hot: class id 5"): f(Tensor([0, 5]).realize()).numpy()

def test_function_checks_indices():  # each call's results carry the trace's index checks, on this call's inputs
  w = Tensor(np.arange(6, dtype=np.float32)).realize()
  f = function(lambda i: w[i] + 1)
  with pytest.raises(IndexError, match="getitem: index 6"): f(Tensor([0, 6]).realize()).numpy()  # the trace call
  np.testing.assert_equal(f(Tensor([1, -1]).realize()).numpy(), [2, 6])
  with pytest.raises(IndexError, match="getitem: index -7"): f(Tensor([-7, 0]).realize()).numpy()
  np.testing.assert_equal(f(Tensor([5, 0]).realize()).numpy(), [6, 1])

# *** calls with the very tensors of the last call (TinyJit checks them faster) still see every change ***

def test_same_input_tensor_follows_writes_into_it():
  x = realized(rand_np(6, seed=0))
  view = x[2:5]
  f = TinyJit(lambda t: (t * 3).realize())
  want = rand_np(6, seed=0)
  outs = []
  for i in range(6):
    if i % 3 == 1:
      x.assign(x + 1).realize()  # the tensor itself written
      want = want + 1
    elif i % 3 == 2:
      view.assign(view * 2).realize()  # its buffer written through another view
      want[2:5] *= 2
    outs.append((f(x), want * 3))
  for k, (out, ref) in enumerate(outs):  # earlier results keep their values
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, err_msg=f"call {k + 1}")

def test_same_input_tensor_with_pending_write():
  x = realized(rand_np(4, seed=1))
  f = TinyJit(lambda t: (t + 1).realize())
  for _ in range(3): f(x)
  x.assign(x * 10)  # lazy: the call computes it first
  np.testing.assert_allclose(f(x).numpy(), rand_np(4, seed=1) * 10 + 1, rtol=1e-6)
  np.testing.assert_allclose(x.numpy(), rand_np(4, seed=1) * 10, rtol=1e-6)

def test_same_input_tensors_then_changed_inputs():
  a, b = realized(rand_np(2, 3, seed=2)), realized(rand_np(2, 3, seed=3))
  f = TinyJit(lambda x, y: (x * y).realize())
  for _ in range(4): np.testing.assert_allclose(f(a, b).numpy(), a.numpy() * b.numpy(), rtol=1e-6)
  np.testing.assert_allclose(f(b, a).numpy(), a.numpy() * b.numpy(), rtol=1e-6)  # swapped: each buffer goes in again
  with pytest.raises(JitError, match="view"): f(a.flip(1), b)  # a view of the same buffer
  with pytest.raises(JitError, match="shape"): f(a.reshape(3, 2), b)
  np.testing.assert_allclose(f(a, b).numpy(), a.numpy() * b.numpy(), rtol=1e-6)

def test_same_input_tensor_with_changing_variable():
  i = Variable("i", 1, 10)
  x = realized(rand_np(4, seed=4))
  f = TinyJit(lambda t, k: (t * k).realize())
  for k in range(1, 7): np.testing.assert_allclose(f(x, i.bind(k)).numpy(), x.numpy() * k, rtol=1e-6)
  with pytest.raises(JitError, match="variables"): f(x, Variable("j", 1, 10).bind(2))
  with pytest.raises(JitError, match="variables"): f(x, 2)
  g = TinyJit(lambda t, s: (t * s).realize())
  for _ in range(3): g(x, 2.0)
  with pytest.raises(JitError, match="non-Tensor"): g(x, 3.0)

def test_same_input_tensor_replay_counts_kernels():
  x = realized(rand_np(8, seed=5))
  f = TinyJit(lambda t: ((t + 1).contiguous() * 2).realize())
  for _ in range(3): f(x)
  GlobalCounters.reset()
  f(x)
  assert GlobalCounters.kernel_count == len(f.jit_cache) and GlobalCounters.global_mem > 0

@pytest.mark.parametrize("lazy", [False, True])
def test_same_input_tensor_written_by_the_function(lazy):
  def step(t: Tensor) -> Tensor:
    t.assign(t * 2)
    if not lazy: t.realize()
    return (t + 1).realize()
  x, want = realized(rand_np(4, seed=6)), rand_np(4, seed=6)
  f = TinyJit(step)
  for i in range(5):
    want = want * 2
    np.testing.assert_allclose(f(x).numpy(), want + 1, rtol=1e-6, err_msg=f"call {i + 1}")
    np.testing.assert_allclose(x.numpy(), want, rtol=1e-6, err_msg=f"call {i + 1}")

def test_graph_built_after_replay_reads_new_weights():
  """A replay writes parameters in place: a computation on them built after it sees the new values, not a value
  computed from the old ones before (model(x) after each training step)."""
  from fusegrad import nn
  from fusegrad.nn.optim import SGD
  Tensor.manual_seed(0)
  model = nn.Linear(3, 2)
  opt = SGD([model.weight, model.bias], lr=0.1)
  x = Tensor([[1.0, 2.0, 3.0]]).realize()
  @TinyJit
  def step() -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = model(x).square().sum()
      loss.backward()
      opt.step()
    return loss.realize()
  for _ in range(5):
    step()
    w, b = model.weight.numpy(), model.bias.numpy()
    np.testing.assert_allclose(model(x).numpy(), x.numpy() @ w.T + b, rtol=1e-5, atol=1e-6)

def test_writes_to_outside_state_read_only_through_results():
  """A step that assigns to state from outside and returns values computed from it, the state itself never read
  between calls: the capture must not compute the previous call's writes again (a replay would then start from the
  stale copy each time, and the state would stop moving)."""
  def run(jit):
    acc, b = Tensor.zeros(3).contiguous().realize(), Tensor.zeros(3).contiguous().realize()
    def step(x):
      b.assign(b * 0.5 + x)
      acc.assign(acc + b)
      return Tensor.realize(acc * 1, b * 1)
    f = TinyJit(step) if jit else step
    return [f(Tensor([1.0, 2.0, 3.0])).numpy() for _ in range(5)], acc.numpy(), b.numpy()
  (want, want_acc, want_b), (got, got_acc, got_b) = run(False), run(True)
  np.testing.assert_allclose(np.array(got), np.array(want))
  np.testing.assert_allclose(got_acc, want_acc)
  np.testing.assert_allclose(got_b, want_b)

def test_free_intermediates_keeps_results_inputs_and_parameters():
  # tinygrad's captured.free_intermediates(): the buffers only the capture holds are freed, allocated again by the next
  # replay; the last results (one a view of an intermediate), the inputs and a parameter written in place keep theirs
  w, ext = realized(np.zeros(5, np.float32)), Tensor([1.0, 24, 23, 45, 1])
  def step(x):
    t1 = (x * 2).contiguous().realize()
    t2 = (t1 + ext).contiguous().realize()
    w.assign(w + x).realize()
    return (t2 * 3).sum().contiguous().realize(), t1.reshape(5, 1)
  jit, x_np = TinyJit(step), rand_np(5, seed=0)
  for _ in range(3): s, v = jit(Tensor(x_np))
  def want(x: np.ndarray) -> tuple[float, np.ndarray]: return float(((x * 2 + ext.numpy()) * 3).sum()), x * 2
  for _ in range(2):
    before = GlobalCounters.mem_used
    jit.captured.free_intermediates()
    assert before - GlobalCounters.mem_used == 5 * 4  # t2 alone (t1 is a result's storage)
    np.testing.assert_allclose(s.item(), want(x_np)[0], rtol=1e-5)
    np.testing.assert_allclose(v.numpy().ravel(), want(x_np)[1])
    x2 = rand_np(5, seed=1)
    s2, v2 = jit(Tensor(x2))
    np.testing.assert_allclose(s2.item(), want(x2)[0], rtol=1e-5)
    np.testing.assert_allclose(v2.numpy().ravel(), want(x2)[1])
  np.testing.assert_allclose(w.numpy(), 3 * x_np + 2 * x2, rtol=1e-5)

def test_a_python_number_result_is_refused_at_the_capture_as_tinygrad():
  # a number would be the capture's on every replay: tinygrad raises "JIT return contains non-Tensor"
  f = TinyJit(lambda x, k: ((x * 2).sum(), k * 1.5))
  f(realized(rand_np(3, seed=0)), 2)
  with pytest.raises(JitError, match=r"result\[1\] is a float, not a Tensor"): f(realized(rand_np(3, seed=1)), 2)

@pytest.mark.parametrize("read", ["item", "tolist", "numpy", "masked_select", "bool"])
def test_reading_values_during_the_capture_is_refused_as_tinygrad(read):
  # the value read would be baked into every replay (x * 2.0 for x * x.sum().item()): tinygrad's JitError "cannot
  # access tensor data during JIT capture"; the warm-up call (the first) runs as a plain call
  body = {"item": lambda x: x * x.sum().item(), "tolist": lambda x: x * Tensor(x.tolist()).sum(),
          "numpy": lambda x: x * float(x.numpy().sum()), "masked_select": lambda x: x.masked_select(x > 0.5) * 2,
          "bool": lambda x: x * 2 if x.sum() > 0 else x * 3}[read]
  f, x = TinyJit(lambda x: body(x).realize()), rand_np(4, seed=0)
  np.testing.assert_allclose(f(realized(x)).numpy(), body(Tensor(x)).numpy(), rtol=1e-6)
  with pytest.raises(JitError, match="during the capture"): f(realized(rand_np(4, seed=1)))
  with pytest.raises(JitError, match="during the capture"): f(realized(rand_np(4, seed=2)))  # each try is refused

def test_tensor_arguments_keep_their_places_as_tinygrad():
  f = TinyJit(lambda y, x: y - 2 * x)
  for i in range(3): f(realized(rand_np(3, seed=i)), realized(rand_np(3, seed=5 + i)))
  a, b = realized(rand_np(3, seed=20)), realized(rand_np(3, seed=21))
  with pytest.raises(JitError, match="tensor arguments"): f(x=b, y=a)  # would feed x where y was
  np.testing.assert_allclose(f(a, b).numpy(), rand_np(3, seed=20) - 2 * rand_np(3, seed=21), rtol=1e-6)

def test_one_buffer_as_two_inputs_of_a_kernel_that_writes_one_is_refused_on_replays():
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor:
    a.assign(b.flip(0) + 1)
    return (a * 2).realize()
  for i in range(3): f(realized(rand_np(6, seed=i)), realized(rand_np(6, seed=9 + i)))
  x = realized(np.arange(6, dtype=np.float32))
  with pytest.raises(JitError, match="same buffer"): f(x, x)

def test_assigns_no_result_reads_are_replayed():
  # a BatchNorm's running statistics (and any counter) are written on every replay, as on every eager call
  bn, n = nn.BatchNorm(3), realized(np.zeros(1, np.float32))
  @TinyJit
  def f(x: Tensor) -> Tensor:
    n.assign(n + 1)
    with Tensor.train(): return bn(x).realize()
  xs = [rand_np(4, 3, seed=i) for i in range(6)]
  for x in xs: f(realized(x))
  assert n.item() == 6 and bn.num_batches_tracked.item() == 6
  mean = np.zeros(3, np.float32)
  for x in xs: mean = 0.9 * mean + 0.1 * x.mean(0)
  np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-5, atol=1e-6)
  bn2 = nn.BatchNorm(3)  # the same through a traced call (@function writes its effects without assign)
  traced = function(lambda x: bn2(x))
  @TinyJit
  def g(x: Tensor) -> Tensor:
    with Tensor.train(): return traced(x).realize()
  for x in xs: g(realized(x))
  assert bn2.num_batches_tracked.item() == 6
  np.testing.assert_allclose(bn2.running_mean.numpy(), mean, rtol=1e-5, atol=1e-6)

def test_the_capture_result_fed_back_and_written_in_place_keeps_the_write():
  @TinyJit
  def f(a: Tensor, x: Tensor) -> Tensor:
    a.assign(a + x).realize()
    return (x * 2).realize()
  f(realized(np.zeros(3, np.float32)), realized(np.ones(3, np.float32)))
  r2 = f(realized(np.zeros(3, np.float32)), realized(np.ones(3, np.float32)))  # the capture's result
  f(r2, realized(np.ones(3, np.float32)))
  np.testing.assert_equal(r2.numpy(), [3.0, 3.0, 3.0])

# *** pickling a capture (tinygrad's test_pickle_jit; its deployment: a model compiled once, loaded elsewhere) ***

def test_a_captured_jit_pickles_and_replays_in_another_process(tmp_path):
  import pickle, subprocess, sys
  Tensor.manual_seed(3)
  net = [nn.Linear(6, 12), nn.Linear(12, 3)]
  opt = Adam(nn.state.get_parameters(net), lr=0.01)
  @TinyJit
  @Tensor.train()
  def step(x, y):
    opt.zero_grad()
    loss = (net[1](net[0](x).relu()) - y).square().mean().backward()
    opt.step()
    return loss
  @TinyJit
  def row(x, i): return x[i] * 2 + x.sum(0)  # a bound Variable: each replay takes its value
  X, Y = realized(rand_np(16, 6, seed=0)), realized(rand_np(16, 3, seed=1))
  Tensor.ones(8)[:Variable("n", 1, 8).bind(3)].realize()  # (a shape from a value: the loaded copy still refuses)
  v = Variable("r", 0, 15)
  for k in range(3): step(X, Y), row(X, v.bind(k))
  (tmp_path / "jit.pkl").write_bytes(pickle.dumps((step, row)))
  np.save(tmp_path / "x.npy", X.numpy()), np.save(tmp_path / "y.npy", Y.numpy())
  losses = [step(X, Y).item() for _ in range(3)]  # what the loaded copy must give: it holds the weights of now
  script = f"""
import pickle, numpy as np
from fusegrad import Tensor, Variable
from fusegrad.jit import JitError
step, row = pickle.loads(open({str(tmp_path / 'jit.pkl')!r}, 'rb').read())
X, Y = Tensor(np.load({str(tmp_path / 'x.npy')!r})), Tensor(np.load({str(tmp_path / 'y.npy')!r}))
print([step(X, Y).item() for _ in range(3)])
x = X.numpy()
assert all(np.allclose(row(X, Variable('r', 0, 15).bind(k)).numpy(), x[k] * 2 + x.sum(0), atol=1e-5) for k in (5, 15))
try: row(Tensor.ones(4, 6).contiguous(), Variable('r', 0, 15).bind(1))
except JitError as e: print(e)
"""
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  got, err = out.stdout.splitlines()
  np.testing.assert_allclose(eval(got), losses, rtol=1e-6)
  assert "shape was (16, 6), now (4, 6)" in err

def test_an_unpickled_jit_has_no_function_to_run():
  import pickle
  jit = TinyJit(lambda x: x * 2)
  for _ in range(3): jit(Tensor.ones(4).contiguous().realize())
  loaded = pickle.loads(pickle.dumps(jit))  # (a lambda pickles only because the function is left out)
  np.testing.assert_equal(loaded(Tensor.full((4,), 3.0).contiguous().realize()).numpy(), [6, 6, 6, 6])
  with Context(JIT=0), pytest.raises(JitError, match="unpickled without its function"):
    loaded(Tensor.ones(4).contiguous().realize())

def test_tinygrad_s_method_jit_path_and_device_graph():
  # tinygrad's test_method_jit reads fun.__call__.func.__self__ (its method TinyJit is a partial of __call__), and its
  # graph tests skip where Device[...].graph is None
  class Fun:
    def __init__(self): self.a = Tensor([1.0, 2.0]).realize()
    @TinyJit
    def __call__(self, b: Tensor) -> Tensor: return (self.a + b).realize()
  fun = Fun()
  for i in range(3): assert fun(Tensor([float(i), 0.0]).realize()).tolist() == [1.0 + i, 2.0]
  assert len(fun.__call__.func.__self__.jit_cache) == 1 and Device[Device.DEFAULT].graph is None

def test_jitbeam_searches_the_kernels_it_captures(monkeypatch):
  # JITBEAM (tinygrad's): BEAM for the captured kernels only; the first call's stay the heuristic's
  import fusegrad.engine.realize as realize
  searched, search = [], realize.beam_opts
  def counted(ast, ren, width, *args, **kwargs):
    searched.append(width)
    return search(ast, ren, width, *args, **kwargs)
  monkeypatch.setattr(realize, "beam_opts", counted)
  jit = TinyJit(lambda x: (x * 3 + 1).sum(1).realize())
  with Context(JITBEAM=1, IGNORE_BEAM_CACHE=1, DISABLE_COMPILER_CACHE=1):  # (a search, not a cached kernel)
    for i in range(3):
      x = realized(rand_np(16, 8, seed=i))
      np.testing.assert_allclose(jit(x).numpy(), (x.numpy() * 3 + 1).sum(1), rtol=1e-5)
  assert searched == [1]

