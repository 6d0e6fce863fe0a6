"""The schedule cache (engine/cache.py): a graph shaped like one scheduled before reuses its schedule, and gets the
values a fresh schedule gives (every hit here is also compared with a fresh schedule: test/schedule_check.py)."""
import random
import numpy as np
import pytest
from fusegrad import Tensor, Variable
from fusegrad.dtype import dtypes
from fusegrad.engine.cache import CacheStats
from fusegrad.engine.state import STATE
from test.schedule_check import checked_cache

@pytest.fixture(autouse=True)
def checked():
  with checked_cache(): yield

def hits_of(f, kind: str = "hits") -> int:
  """How many schedules f took from the cache (kind="quick": of those, how many by the quick path)."""
  CacheStats.reset()
  f()
  return getattr(CacheStats, kind)

def rnd(*shape, seed=0) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def test_round_trip_hits():
  """Each round trip after the first comes from the cache, by the quick path."""
  (Tensor([1., 2, 3, 4]) + 1).numpy()
  def again():
    for i in range(5): np.testing.assert_equal((Tensor([1., 2, 3, float(i)]) + 1).numpy(), [2, 3, 4, i + 1])
  assert hits_of(again) == 5
  assert hits_of(again, "quick") == 5

def test_float_constants_are_parameters():
  x = Tensor(rnd(3, 4)).realize()
  (x * 2 + 1).numpy()
  def others():
    for c in (3.0, -2.5, 1e-30, 7.0, 3.0):
      np.testing.assert_equal((x * c + 1).numpy(), rnd(3, 4) * np.float32(c) + 1)
  assert hits_of(others) == 5
  # 0, 1, -1, inf and nan simplify expressions: each is a key of its own, and gets its own (right) values
  for c in (-0.0, 0.0, 1.0, -1.0, float("inf"), float("nan"), 2.0):
    np.testing.assert_equal((x * c + 1).numpy(), rnd(3, 4) * np.float32(c) + 1)

def test_float_constants_in_comparisons_and_reduces():
  x = Tensor(rnd(5, 6)).realize()
  for c in (0.25, -0.5, 0.75, 0.25):
    np.testing.assert_equal((x < c).where(x * c, 2.5).numpy(), np.where(rnd(5, 6) < np.float32(c),
                                                                         rnd(5, 6) * np.float32(c), 2.5))
    np.testing.assert_allclose((x * c).sum(1).numpy(), (rnd(5, 6) * np.float32(c)).sum(1), rtol=1e-5)
    np.testing.assert_equal((x * c).cast(dtypes.int32).numpy(), (rnd(5, 6) * np.float32(c)).astype(np.int32))

def test_other_dtype_shape_device_other_key():
  for a in (np.arange(6, dtype=np.float32), np.arange(6, dtype=np.int32), np.arange(8, dtype=np.float32),
            np.arange(6, dtype=np.float32).reshape(2, 3)):
    for dev in ("CPU", "PYTHON"):
      np.testing.assert_equal((Tensor(a, device=dev) * 3).numpy(), a * 3)
  keys = len(STATE.templates)
  assert hits_of(lambda: (Tensor(np.arange(6, dtype=np.float32), device="PYTHON") * 3).numpy()) == 1
  assert len(STATE.templates) == keys

def test_aliasing_is_in_the_key():
  a, b = Tensor(rnd(4, seed=1)).realize(), Tensor(rnd(4, seed=2)).realize()
  np.testing.assert_allclose((a * b).numpy(), rnd(4, seed=1) * rnd(4, seed=2))
  np.testing.assert_allclose((a * a).numpy(), rnd(4, seed=1) ** 2)  # one buffer read twice: not the same key
  c = Tensor(rnd(4, seed=3)).realize()
  assert hits_of(lambda: np.testing.assert_allclose((c * b).numpy(), rnd(4, seed=3) * rnd(4, seed=2))) == 1

def test_assign_targets_differ_between_hits():
  ps = [Tensor(rnd(5, seed=i)).realize() for i in range(4)]
  want = [rnd(5, seed=i) for i in range(4)]
  def update(k: int) -> None:
    ps[k].assign(ps[k] * 0.5 + ps[(k + 1) % 4]).realize()
    want[k] = want[k] * np.float32(0.5) + want[(k + 1) % 4]
  update(0)
  assert hits_of(lambda: [update(k) for k in (1, 2, 3, 0, 1)]) == 5
  for p, w in zip(ps, want): np.testing.assert_allclose(p.numpy(), w, rtol=1e-6)

def test_lazy_values_keep_old_versions_on_hits():
  # a lazy value read before an assign keeps the old contents (a copy made aside), on hits as on the first time
  for seed in range(3):
    p = Tensor(rnd(6, seed=seed)).realize()
    old = p * 2
    p.assign(p + 1).realize()
    np.testing.assert_allclose(old.numpy(), rnd(6, seed=seed) * 2)
    np.testing.assert_allclose(p.numpy(), rnd(6, seed=seed) + 1)

def test_views_of_assigned_buffers():
  for seed in range(3):
    p = Tensor(rnd(4, 3, seed=seed)).realize()
    v = p.T[1:]
    p.assign(p * 3).realize()
    np.testing.assert_allclose((v + 1).numpy(), (rnd(4, 3, seed=seed) * 3).T[1:] + 1, rtol=1e-6)

def test_two_writes_in_one_schedule():
  for seed in range(3):
    p, q = Tensor(rnd(4, seed=seed)).realize(), Tensor(rnd(4, seed=seed + 7)).realize()
    old_p = p * 1  # lazy: p's contents now
    a, b = p.assign(q * 2), q.assign(old_p + 1)  # each reads the version the other overwrites (one is copied aside)
    Tensor.realize(a, b)
    np.testing.assert_allclose(p.numpy(), rnd(4, seed=seed + 7) * 2)
    np.testing.assert_allclose(q.numpy(), rnd(4, seed=seed) + 1)

def test_setitem_hits():
  def fill(seed: int) -> None:
    x = Tensor(rnd(4, 4, seed=seed)).realize()
    x[1:3, 2] = 7.0
    want = rnd(4, 4, seed=seed)
    want[1:3, 2] = 7
    np.testing.assert_equal(x.numpy(), want)
  fill(0)
  assert hits_of(lambda: [fill(s) for s in (1, 2)]) > 0

def test_gather_and_arange_index_constants():
  x = Tensor(rnd(10, 3)).realize()
  for idx in ([1, 2, 9], [0, 0, 5], [9, 8, 7]):
    np.testing.assert_equal(x[Tensor(idx)].numpy(), rnd(10, 3)[idx])
  for n in (5, 7, 5):
    np.testing.assert_equal(Tensor.arange(n).numpy(), np.arange(n))
  with pytest.raises(IndexError): x[Tensor([1, 10, 2])].numpy()  # the index check still runs on a hit
  np.testing.assert_equal(x[Tensor([3, 3, 3])].numpy(), rnd(10, 3)[[3, 3, 3]])

def test_variables_bound_to_other_values():
  x = Tensor(rnd(8)).realize()
  v = Variable("i", 1, 8)
  for i in (3, 5, 3, 8):
    np.testing.assert_allclose((x + v.bind(i)).numpy(), rnd(8) + i)

def test_random_mix_against_numpy():
  """Random graphs drawn from a few shapes and constants, so that structures repeat, against NumPy."""
  rng = random.Random(1234)
  consts = [0.5, 2.0, -1.0]
  live: list[tuple[Tensor, np.ndarray]] = [(Tensor(rnd(3, 4, seed=i)).realize(), rnd(3, 4, seed=i)) for i in range(3)]
  ops = [lambda a, b, c: (a * c + b, lambda x, y: x * np.float32(c) + y),
         lambda a, b, c: ((a - b).relu(), lambda x, y: np.maximum(x - y, 0)),
         lambda a, b, c: (a.sum(1, keepdim=True) * b, lambda x, y: x.sum(1, keepdims=True) * y),
         lambda a, b, c: (a.flip(0) + c, lambda x, y: x[::-1] + np.float32(c))]
  CacheStats.reset()
  for step in range(60):
    (a, na), (b, nb) = rng.choice(live), rng.choice(live)
    k, c = rng.randrange(len(ops)), rng.choice(consts)
    t, f = ops[k](a, b, c)
    nt = f(na, nb).astype(np.float32)
    what = rng.choice(["new", "assign", "lazy"])
    if what == "assign":  # write into one of the live buffers (the others' lazy values keep what they read)
      i = rng.randrange(len(live))
      live[i][0].assign(t).realize()
      live[i] = (live[i][0], nt)
    elif what == "new": live.append((t.realize(), nt))
    else: np.testing.assert_allclose(t.numpy(), nt, rtol=1e-5, atol=1e-6, err_msg=f"step {step}")
    if len(live) > 6: live.pop(0)
  for t, nt in live: np.testing.assert_allclose(t.numpy(), nt, rtol=1e-5, atol=1e-6)
  assert CacheStats.hits > 10

def test_value_semantics_model_under_the_cache():
  from test.test_value_semantics import Model
  CacheStats.reset()
  for seed in range(100, 104):  # seeds test_value_semantics doesn't use
    m = Model(random.Random(seed))
    for _ in range(40): m.step()
    m.check_all()
  assert CacheStats.hits > 0

def test_cache_can_be_turned_off():
  from fusegrad.helpers import Context
  x = Tensor(rnd(4)).realize()
  with Context(SCHEDULE_CACHE=0):
    (x + 5).numpy()
    assert hits_of(lambda: np.testing.assert_allclose((x + 5).numpy(), rnd(4) + 5)) == 0

def test_int_and_bool_dtypes():
  for dt in (dtypes.int32, dtypes.int8, dtypes.bool):
    a = np.array([0, 1, 1, 0], dtype=np.int32)
    t = Tensor(a, dtype=dt)
    np.testing.assert_equal(((t * t) * 3).numpy(), (a * a) * 3)

def test_copies_between_devices():
  def move(seed: int) -> None:
    a = Tensor(rnd(5, seed=seed), device="PYTHON")
    np.testing.assert_allclose((a.to("CPU") * 3 + 1).numpy(), rnd(5, seed=seed) * 3 + 1, rtol=1e-6)
    np.testing.assert_allclose((a * 2).to("CPU").numpy(), rnd(5, seed=seed) * 2)
  move(0)
  assert hits_of(lambda: [move(s) for s in (1, 2)]) == 4

def test_training_loop_same_with_and_without_the_cache():
  from fusegrad import nn
  from fusegrad.helpers import Context
  def train(cache_size: int) -> tuple[list[float], list[np.ndarray]]:
    Tensor.manual_seed(3)
    l1, l2 = nn.Linear(6, 8), nn.Linear(8, 3)
    opt = nn.optim.Adam(nn.state.get_parameters([l1, l2]), lr=0.01)
    X, Y = Tensor(rnd(10, 6)), Tensor([0, 1, 2, 1, 0, 2, 2, 1, 0, 0])
    losses = []
    with Context(SCHEDULE_CACHE=cache_size), Tensor.train():
      CacheStats.reset()
      for _ in range(4):
        opt.zero_grad()
        loss = l2(l1(X).relu().dropout(0.25)).sparse_categorical_crossentropy(Y).backward()
        opt.step()
        losses.append(loss.item())
      assert (CacheStats.hits > 0) == (cache_size > 0)
    return losses, [p.numpy() for p in nn.state.get_parameters([l1, l2])]
  (la, pa), (lb, pb) = train(512), train(0)
  assert la == lb
  for a, b in zip(pa, pb): np.testing.assert_array_equal(a, b)

def test_tinyjit_capture_uses_the_cache():
  # the capturing call (the second) collects the graph the first did: its schedule is the first call's template
  # (checked against a fresh one), and the replays compute what they compute with no cache and with no jit. (A value
  # stored before a capture is computed again in it: the graph then has a key of its own.)
  from fusegrad import nn, TinyJit
  from fusegrad.helpers import Context
  def train(cache_size: int, jit: bool) -> tuple[list[float], list[np.ndarray], list[int]]:
    Tensor.manual_seed(5)
    lin = nn.Linear(6, 3)
    opt = nn.optim.Adam(nn.state.get_parameters(lin), lr=0.01)
    Tensor.realize(*nn.state.get_parameters(opt))  # (else the first call initializes them: a graph of another key)
    X, Y = Tensor(rnd(10, 6)).realize(), Tensor([0, 1, 2, 1, 0, 2, 2, 1, 0, 0]).realize()
    def step() -> Tensor:
      opt.zero_grad()
      loss = lin(X).relu().sparse_categorical_crossentropy(Y).backward()
      return loss.realize(*opt.schedule_step())
    run, losses, hits = TinyJit(step) if jit else step, [], []
    with Context(SCHEDULE_CACHE=cache_size), Tensor.train():
      for _ in range(4):
        CacheStats.reset()
        losses.append(run().item())
        hits.append(CacheStats.hits)
    return losses, [p.numpy() for p in nn.state.get_parameters(lin)], hits
  (la, pa, hits), (lb, pb, _), (lc, pc, _) = train(512, True), train(0, True), train(0, False)
  assert hits[1] > 0  # the capture
  assert la == lb == lc
  for a, b, c in zip(pa, pb, pc): np.testing.assert_array_equal(a, b); np.testing.assert_array_equal(a, c)

def test_filled_constant_that_removes_a_load():
  # the kernel is built with 2.0 as a placeholder, so it loads both a and b; filling in 2.0 folds the where and drops
  # a's load: the kernel's buffers must be renumbered with it (b was read through a's slot)
  a, b = Tensor([1.0, 2.0, 3.0]).realize(), Tensor([4.0, 5.0, 6.0]).realize()
  for c in [2.0, 3.0, 2.0]:
    out = (Tensor.full((3,), c) == 0).where(a, b * c)
    np.testing.assert_equal(out.numpy(), np.array([4.0, 5.0, 6.0], np.float32) * c)

def test_quick_path_aliasing_and_outputs():
  a, b = Tensor(rnd(4, seed=1)).realize(), Tensor(rnd(4, seed=2)).realize()
  for _ in range(3):
    np.testing.assert_allclose((a * b + 2).numpy(), rnd(4, seed=1) * rnd(4, seed=2) + 2)
    np.testing.assert_allclose((a * a + 2).numpy(), rnd(4, seed=1) ** 2 + 2)  # one buffer read twice: another key
    x, y = a + b, (a * 3).sum()
    Tensor.realize(x, y, x.reshape(2, 2))  # several outputs, one of them a view of another
    np.testing.assert_allclose(x.numpy(), rnd(4, seed=1) + rnd(4, seed=2))
    np.testing.assert_allclose(y.numpy(), (rnd(4, seed=1) * 3).sum(), rtol=1e-6)
  assert hits_of(lambda: (a * b + 2).numpy(), "quick") == 1

def test_quick_path_after_writes():
  # a lazy value built before an assign reads the old version: not the quick path, and the old values
  p = Tensor(rnd(5)).realize()
  for i in range(3): (p * 2 + 1).numpy()
  old = p * 2 + 1
  p.assign(p + 1).realize()
  assert hits_of(lambda: np.testing.assert_allclose(old.numpy(), rnd(5) * 2 + 1), "quick") == 0
  np.testing.assert_allclose((p * 2 + 1).numpy(), (rnd(5) + 1) * 2 + 1)  # the newest version: quick again
  assert hits_of(lambda: np.testing.assert_allclose((p * 2 + 1).numpy(), (rnd(5) + 1) * 2 + 1), "quick") == 1
  q = (p * 2 + 1).realize()  # a stored value in the graph: the general path
  assert hits_of(lambda: np.testing.assert_allclose((q - 1).numpy(), (rnd(5) + 1) * 2), "quick") == 0

def test_quick_path_float_constants():
  x = Tensor(rnd(3)).realize()
  for c in (0.5, 1.5, 0.5, 1.5, 2.5):
    np.testing.assert_equal((x * c).numpy(), rnd(3) * np.float32(c))
  assert hits_of(lambda: np.testing.assert_equal((x * 1.5).numpy(), rnd(3) * np.float32(1.5)), "quick") == 1

def test_quick_path_lets_go_of_the_graph():
  # nothing the quick path makes may keep the realized graph alive once its tensor is gone (a reference cycle would,
  # until the collector ran): what still refers to a version of a buffer decides whether a write copies it aside first
  import gc, weakref
  a = Tensor(rnd(4)).realize()
  gc.disable()
  try:
    for i in range(3):
      t = a * 3 + 2
      node = weakref.ref(t.uop)
      CacheStats.reset()
      np.testing.assert_allclose(t.numpy(), rnd(4) * 3 + 2, rtol=1e-6)
      del t  # (a value read keeps its graph for autograd while it lives: test_autograd)
      assert node() is None and CacheStats.quick == (i > 0)
  finally: gc.enable()

def test_quick_walk_stops_early():
  # a write on top (an optimizer step) or a big graph ends the quick key's walk where it is met: the general path's
  # graphs pay little for the quick path's attempt
  from fusegrad.engine.cache import quick_key, QUICK_NODES
  x = Tensor(rnd(8)).realize()
  y = x
  for i in range(3): y = y * x + i
  w = x.assign(y)
  computed = [n for n in w.uop.src[1].toposort() if n.op.name in ("ADD", "MUL")]  # (the constants are shared nodes)
  assert quick_key([w.uop]) is None and computed and all("pure" not in n._cache for n in computed)
  z = Tensor(rnd(8, seed=5)).realize()
  deep = z
  for i in range(QUICK_NODES + 5): deep = deep + z
  assert quick_key([deep.uop]) is None
  np.testing.assert_allclose(deep.numpy(), rnd(8, seed=5) * (QUICK_NODES + 6), rtol=1e-5)

def test_templates_on_disk_for_the_next_process(monkeypatch):
  """A template written to the disk cache serves the next process (STATE.reset stands for one) without scheduling,
  and gives the kernels a fresh schedule gives (checked_cache compares); what is read is JSON, checked: anything it
  didn't write, a pickle included, is refused."""
  from fusegrad.engine import cache
  monkeypatch.setattr(cache, "DISK_NODES", 0)
  monkeypatch.setattr(cache, "DISK_SECONDS", 0.0)
  x, w = Tensor(rnd(4, 8)).realize(), Tensor(rnd(8, 3)).realize()
  def step(): return ((x @ w).relu().softmax() * 0.5 + x.sum(0)[:3]).numpy()
  want = step()
  STATE.reset()
  calls = []
  monkeypatch.setattr(cache, "schedule_graph", lambda g: calls.append(g) or pytest.fail("scheduled again"))
  assert hits_of(lambda: np.testing.assert_allclose(step(), want, rtol=1e-6)) == 1 and not calls
  import pickle
  for bad in (pickle.dumps(cache.Template([], [], [], [], [])), b'{"nodes": [["ADD", null, null, [0]]], "rest": []}',
              b'{"nodes": [["CONST", {"DType": ["float", 1]}, {"eval": "1"}, []]], "rest": []}', b"[]"):
    assert cache._template_from(bad) is None
