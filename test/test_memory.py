"""Bounded memory for long-running programs (issue 8, section 4): a Python scalar that changes every step does not
recompile, loaded programs are bounded (PROGRAM_CACHE), and a long TinyJit run keeps RSS, open files and mappings flat.
The soak test runs SOAK_STEPS steps (300 by default; SOAK_STEPS=10000 for the long run)."""
import gc, os, subprocess, sys
import numpy as np
import pytest
from fusegrad import Tensor, TinyJit, nn, dtypes, Context, Device, GlobalCounters
from fusegrad.engine import realize
from fusegrad.engine.state import STATE
from fusegrad.helpers import getenv

def rss_mb() -> float: return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
def mapped_libs() -> int: return sum(1 for line in open("/proc/self/maps") if ".so" in line)
def open_files() -> int: return len(os.listdir("/proc/self/fd"))

@pytest.fixture
def compiles(monkeypatch):
  """The number of kernels compiled (get_program calls) while the test runs."""
  count = [0]
  def counting(*args, **kwargs):
    count[0] += 1
    return get_program(*args, **kwargs)
  get_program = realize.get_program
  monkeypatch.setattr(realize, "get_program", counting)
  return count

def test_changing_scalar_compiles_twice(compiles):
  # the loop: one program with the constant inline, then one with it as a parameter for every later value
  for i in range(2000):
    out = (Tensor.ones(256) * i + 1).realize()
    if i in (0, 1, 2, 999, 1999): np.testing.assert_equal(out.numpy(), np.ones(256, np.float32) * i + 1)
  assert compiles[0] <= 3  # 0 and 1 are special values (x*0, x*1): at most one more structure

@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16, dtypes.int32, dtypes.int64, dtypes.bfloat16])
def test_parameter_constants_match_numpy(dt, compiles):
  if dt == dtypes.bfloat16 and Device.DEFAULT == "CL": pytest.skip("no bfloat16 on CL")
  base = np.array([1.5, -2.0, 3.25, 0.5], np.float32)
  x = Tensor(base).cast(dt).realize()
  npdt = np.float32 if dt == dtypes.bfloat16 else {dtypes.float32: np.float32, dtypes.float16: np.float16,
                                                    dtypes.int32: np.int32, dtypes.int64: np.int64}[dt]
  for v in [3, -7, 5, 11, 2 ** 10]:
    got = (x * v - 2).cast(dtypes.float32).numpy()
    np.testing.assert_allclose(got, (base.astype(npdt) * npdt(v) - npdt(2)).astype(np.float32), rtol=1e-2)
  assert compiles[0] <= 4  # the cast, the first value, the parametrized program (x*v-2 with v as a parameter)

def test_special_float_parameters():
  x = Tensor([1.0, -2.0]).realize()
  for v in [2.0, -0.0, float("inf"), float("nan"), 0.5]:
    np.testing.assert_equal((x * v).numpy(), np.array([1.0, -2.0], np.float32) * np.float32(v))
  h = Tensor([1.0, -2.0], dtype=dtypes.float16).realize()
  with np.errstate(over="ignore"):
    for v in [3.0, 1e6, 65519.0]:  # a parameter past half's range is infinity, as the constant would be
      np.testing.assert_equal((h * v).numpy(), np.array([1.0, -2.0], np.float16) * np.float16(v))

def test_program_cache_is_bounded():
  from fusegrad.runtime.ops_cpu import CPUProgram
  if Device.DEFAULT != "CPU": pytest.skip("counts loaded shared libraries")
  with Context(PROGRAM_CACHE=8):
    for n in range(1, 41): (Tensor.ones(n) * 2 + 1).realize()  # 40 kernels of different shapes
    gc.collect()
    assert len(STATE.programs) <= 8
    assert sum(isinstance(o, CPUProgram) for o in gc.get_objects()) <= 8 + 4  # the rest were unloaded
    np.testing.assert_equal((Tensor.ones(3) * 2 + 1).numpy(), [3.0, 3.0, 3.0])  # evicted kernels compile again

def test_state_reset_drops_the_caches():
  x = Tensor([1.0, 2.0]).realize()
  np.testing.assert_equal((x * 3 + 1).numpy(), [4.0, 7.0])
  assert STATE.programs and STATE.templates
  STATE.reset()  # as a new process would start: the next realize schedules and compiles again
  assert not (STATE.programs or STATE.templates or STATE.quick or STATE.index_checks)
  np.testing.assert_equal((x * 3 + 1).numpy(), [4.0, 7.0])
  assert STATE.programs

class TinyNet:
  def __init__(self): self.l1, self.l2 = nn.Linear(16, 32), nn.Linear(32, 4)
  def __call__(self, x: Tensor) -> Tensor: return self.l2(self.l1(x).relu())

@pytest.mark.slow
def test_soak_jit_training_steps():
  steps = getenv("SOAK_STEPS", 300)
  Tensor.manual_seed(0)
  model = TinyNet()
  opt = nn.optim.SGD(nn.state.get_parameters(model), lr=0.01)
  X, Y = Tensor.randn(64, 16).realize(), Tensor.randint(64, high=4).realize()
  @TinyJit
  def step() -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = model(X).sparse_categorical_crossentropy(Y).backward()
      opt.step()
      return loss.realize()
  marks = {}
  for i in range(steps):
    loss = step()
    if i == min(50, steps // 4): marks["start"] = (rss_mb(), open_files(), mapped_libs())
    if i % 100 == 0: loss.item()
  gc.collect()
  start, end = marks["start"], (rss_mb(), open_files(), mapped_libs())
  print(f"soak: {steps} TinyJit steps: rss {start[0]:.1f} -> {end[0]:.1f} MB, open files {start[1]} -> {end[1]}, "
        f"mapped libraries {start[2]} -> {end[2]}, loss {loss.item():.4f}")
  assert end[1] <= start[1] and end[2] <= start[2]
  assert end[0] - start[0] < 20  # MB: flat, not growing with the number of steps
  assert np.isfinite(loss.item())

def test_freed_big_buffers_are_reused_with_right_values():
  # a freed big CPU buffer is handed out again for the same size: results written into it must be the new ones
  from fusegrad import Device
  if Device.DEFAULT != "CPU": pytest.skip("the CPU allocator's pool")
  alloc = Device["CPU"].allocator
  n = (1 << 20) // 4 + 16
  a = Tensor(np.arange(n, dtype=np.float32)).realize()
  addr = a._buffer()._buf.addr
  del a
  gc.collect()
  b = (Tensor.ones(n) * 3).contiguous().realize()
  assert b._buffer()._buf.addr == addr  # the same memory again
  np.testing.assert_equal(b.numpy(), np.full(n, 3, np.float32))
  assert alloc.pooled <= alloc.POOL_BYTES

def _asked_for_huge_pages(addr: int) -> bool:
  """Whether the mapping holding addr was madvised MADV_HUGEPAGE (its VmFlags in /proc/self/smaps hold "hg")."""
  inside = False
  with open("/proc/self/smaps") as f:
    for line in f:
      if "-" in (first := line.split(" ", 1)[0]) and ":" not in first:
        lo, hi = (int(x, 16) for x in first.split("-"))
        inside = lo <= addr < hi
      elif inside and line.startswith("VmFlags:"): return "hg" in line.split()
  raise AssertionError(f"no mapping holds {addr:#x}")

def test_huge_pages_for_big_buffers_the_host_fills_or_reuses(monkeypatch):
  # data copied in from the host (a data set, weights) is read again and again: 2 MB pages; a kernel's output is left
  # in 4 KB pages, which are cheaper to fault in fresh (the README job's evaluation)
  import mmap
  from fusegrad.runtime import ops_cpu
  if Device.DEFAULT != "CPU" or not hasattr(mmap, "MADV_HUGEPAGE") or not os.path.exists("/proc/self/smaps"):
    pytest.skip("Linux's transparent huge pages, on the CPU device")
  monkeypatch.setattr(ops_cpu, "HUGE_PAGES_FROM", 1 << 21)
  n = (1 << 21) // 4 + 48  # a size no other test frees into the pool
  a = Tensor(np.arange(n, dtype=np.float32)).realize()
  b = (a + 1).realize()
  assert _asked_for_huge_pages(a._buffer()._buf.addr)
  assert not _asked_for_huge_pages(b._buffer()._buf.addr)
  np.testing.assert_equal(b.numpy(), np.arange(n, dtype=np.float32) + 1)
  # a buffer handed out of the pool a second time (a TinyJit replay's output) is hot: mapped again in huge pages
  alloc, nbytes = Device["CPU"].allocator, n * 4 + 64
  handles = [alloc.alloc(nbytes)]
  for _ in range(3):
    alloc.free(handles[-1], nbytes)
    handles.append(alloc.alloc(nbytes))
  assert [_asked_for_huge_pages(h.addr) for h in handles] == [False, False, True, True]
  assert handles[0].addr == handles[1].addr != handles[2].addr == handles[3].addr
  alloc.free(handles[-1], nbytes)

def test_realized_view_does_not_keep_its_source_graph():
  # a view remembers the tensor it was made from (a write through it reaches that tensor); once realized into a
  # buffer of its own, it must not keep that tensor's lazy graph alive: the graph reads w, so overwriting w would
  # copy w's old contents aside for it
  from fusegrad import GlobalCounters
  w, x = Tensor.rand(64, 64).realize(), Tensor.rand(8, 64).realize()
  out = (lambda: (x @ w).relu().reshape(-1))().realize()
  expected = np.maximum(x.numpy() @ w.numpy(), 0).reshape(-1)
  gc.collect()
  before = GlobalCounters.mem_used
  for _ in range(3): w.assign(w - 1).realize()
  assert GlobalCounters.mem_used == before
  np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)

def test_a_loop_reading_the_loss_keeps_no_graph_per_step():
  # a realized intermediate that requires grad remembers its graph for autograd (STATE.lazy_defs); the root's memo entry
  # held the realized node, the key of its own entry: a cycle, one forward graph kept per step of such a loop
  lin = nn.Linear(4, 2)
  opt = nn.optim.SGD(nn.state.get_parameters(lin), lr=0.1)
  gc.collect()
  before = len(STATE.lazy_defs)  # (values read by earlier tests that are still alive keep theirs)
  with Tensor.train():
    for _ in range(10):
      opt.zero_grad()
      loss = lin(Tensor.rand(8, 4)).sum()
      loss.item()
      loss.backward()
      opt.step()
  del loss
  gc.collect()
  assert len(STATE.lazy_defs) == before

def test_past_losses_kept_in_a_list_keep_no_copy_of_the_weights():
  # a loss read with item() keeps its graph for autograd; the optimizer then overwrites the weights that graph reads:
  # it was kept anyway, so every step copied the weights aside for it (1 MB a step here); now the write drops it
  lin = nn.Linear(512, 512)
  opt = nn.optim.SGD(nn.state.get_parameters(lin), lr=0.01)
  x, losses, used = Tensor.rand(8, 512, requires_grad=False).realize(), [], []
  with Tensor.train():
    for order in ("item first", "step first") * 3:
      opt.zero_grad()
      loss = lin(x).square().mean()
      loss.backward()
      if order == "item first": loss.item()
      opt.step()
      if order == "step first": loss.item()  # (the step copies the weights aside for the lazy loss: freed once read)
      losses.append(loss)
      used.append(GlobalCounters.mem_used)
  assert used[-1] - used[2] < 1024, used  # the scalar losses, not 1 MB a step

def test_a_generation_loop_keeping_its_logits_copies_no_cache():
  # the logits of each step are read and kept; the next step writes the cache they were computed from
  cache, W, kept = Tensor.zeros(64, 1024).contiguous().realize(), Tensor.ones(1024, 8).realize(), []
  used = []
  for i in range(6):
    cache[i:i+1].assign(Tensor.full((1, 1024), float(i)).contiguous()).realize()
    logits = cache.sum(0, keepdim=True).dot(W)  # (a reshape of the matmul: realized in place by the read)
    assert logits.numpy()[0, 0] == sum(range(i + 1)) * 1024
    kept.append(logits)
    used.append(GlobalCounters.mem_used)
  assert used[-1] - used[1] < 5 * 1024, used  # the logits themselves, not a 256 KB cache copy per step

def test_an_eager_loop_over_fixed_float_tensors_keeps_memory_flat():
  """Training without TinyJit on the same X and Y every step, whose requires_grad is None: backward fills their .grad
  too (as tinygrad's), and that unread sum kept every step's graph, with the step's weights and activations (177 MB
  over 10,000 steps of a Linear(8, 4)); now a .grad summing 8 backward calls is computed first. Both grads are torch's
  for X and Y as leaves that require grad."""
  import torch
  Tensor.manual_seed(0)
  lin = nn.Linear(8, 4)
  opt = nn.optim.SGD(nn.state.get_parameters(lin), lr=0.01)
  tlin = torch.nn.Linear(8, 4)
  with torch.no_grad(): tlin.weight[:], tlin.bias[:] = torch.tensor(lin.weight.numpy()), torch.tensor(lin.bias.numpy())
  topt = torch.optim.SGD(tlin.parameters(), lr=0.01)
  rng = np.random.default_rng(0)
  xs, ys = rng.standard_normal((32, 8)).astype(np.float32), rng.standard_normal((32, 4)).astype(np.float32)
  X, Y, tX, tY = Tensor(xs), Tensor(ys), torch.tensor(xs, requires_grad=True), torch.tensor(ys, requires_grad=True)
  used = []
  with Tensor.train():
    for _ in range(64):
      opt.zero_grad()
      ((lin(X) - Y) ** 2).mean().backward()
      opt.step()
      topt.zero_grad()
      ((tlin(tX) - tY) ** 2).mean().backward()
      topt.step()
      used.append(GlobalCounters.mem_used)
  assert max(used[32:]) <= max(used[:16]), used  # (it grew by 656 bytes a step)
  np.testing.assert_allclose(lin.weight.numpy(), tlin.weight.detach().numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(X.grad.numpy(), tX.grad.numpy(), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(Y.grad.numpy(), tY.grad.numpy(), rtol=1e-4, atol=1e-6)

# *** memory planning (engine/memory.py): a schedule's intermediates share memory ***

@pytest.fixture
def plan_all(monkeypatch):
  """Plan buffers of every size (1 MB and up otherwise), so small tests share memory (each takes 4 KB at least); the
  peak bytes allocated."""
  from fusegrad import device
  from fusegrad.engine import memory
  monkeypatch.setattr(memory, "PLAN_FROM", 0)
  peak, allocate = [0], device.Buffer.allocate
  def counting(self):
    ret = allocate(self)
    peak[0] = max(peak[0], GlobalCounters.mem_used)
    return ret
  monkeypatch.setattr(device.Buffer, "allocate", counting)
  return peak

def _train(planner: bool, peak: list[int]) -> tuple[list[float], list[np.ndarray], list[int]]:
  """Losses and parameters of 3 eager steps and 4 TinyJit steps of a small model (a conv, batch norm, three attention
  layers, Adam), and the peak bytes allocated during the first step and the capture."""
  Tensor.manual_seed(0)
  conv, bn = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm(8)
  layers = [(nn.Linear(16, 48), nn.LayerNorm(16), nn.Linear(16, 16)) for _ in range(3)]
  params = nn.state.get_parameters([conv, bn, layers])
  opt = nn.optim.Adam(params, lr=1e-2)
  rng = np.random.default_rng(0)
  X, Y = Tensor(rng.standard_normal((32, 1, 16, 16)).astype(np.float32)), Tensor(rng.integers(0, 10, 32))
  def step() -> Tensor:
    opt.zero_grad()
    x = bn(conv(X)).relu().reshape(32, 8 * 16, 16)
    for qkv, norm, out in layers:
      q, k, v = qkv(norm(x)).chunk(3, dim=-1)
      x = x + out(q.scaled_dot_product_attention(k, v))
    loss = x.mean(1)[:, :10].sparse_categorical_crossentropy(Y)
    loss.backward()
    opt.step()
    return loss
  jit, losses, peaks = TinyJit(step), [], []
  with Context(NO_MEMORY_PLANNER=int(not planner)), Tensor.train():
    for i in range(7):
      gc.collect()
      peak[0] = before = GlobalCounters.mem_used
      losses.append((step() if i < 3 else jit()).item())
      if i in (0, 4): peaks.append(peak[0] - before)
  return losses, [p.numpy() for p in params], peaks

def test_a_training_step_shares_memory_and_trains_the_same(plan_all):
  # the same kernels on the same values: bit for bit the same losses and parameters, in less memory (the activations
  # the backward reads stay; the temporaries of the forward and the backward take turns)
  (want, want_params, unplanned), (got, got_params, planned) = _train(False, plan_all), _train(True, plan_all)
  assert got == want
  for a, b in zip(got_params, want_params): np.testing.assert_array_equal(a, b)
  assert all(p < u for p, u in zip(planned, unplanned)), (planned, unplanned)

def test_a_value_a_live_tensor_holds_keeps_its_buffer(plan_all):
  # an intermediate a live tensor names is read later without computing it again; one that only a lazy tensor of
  # another dtype reaches is computed again when read (its memory went to other values)
  rng = np.random.default_rng(0)
  x, w, w2 = (Tensor(rng.standard_normal(s).astype(np.float32)).realize() for s in ((8, 16), (16, 16), (16, 4)))
  h = (x @ w).relu().contiguous()
  a = (x @ w2) * 3
  mask = (a > 0).contiguous_backward()  # (bool: not among the tensors the planner looks at)
  del a
  out = ((h @ w2).exp() + (x @ w2) * 3 * 2).sum()
  out.realize()
  kernels = GlobalCounters.kernel_count
  np.testing.assert_allclose(h.numpy(), np.maximum(x.numpy() @ w.numpy(), 0), rtol=1e-5)
  assert GlobalCounters.kernel_count == kernels  # h was stored, not computed again
  np.testing.assert_array_equal(mask.numpy(), x.numpy() @ w2.numpy() * 3 > 0)

def test_backward_after_a_planned_realize_reads_what_it_needs(plan_all):
  # loss.item() before backward: autograd keeps the forward graph (STATE.lazy_defs), so its stored values stay
  import torch
  rng = np.random.default_rng(1)
  xs, ws = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 16)).astype(np.float32)
  w, tw = Tensor(ws, requires_grad=True), torch.tensor(ws, requires_grad=True)
  loss = ((Tensor(xs) @ w).relu() @ w).tanh().sum()
  tloss = ((torch.tensor(xs) @ tw).relu() @ tw).tanh().sum()
  np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
  loss.backward()
  tloss.backward()
  np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-5)

def test_free_intermediates_frees_the_shared_memory(plan_all):
  # the capture's intermediates share one block (a view each): free_intermediates frees the block, the next replay
  # allocates it again and points the views at it
  w = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()
  jit = TinyJit(lambda x: ((x @ w).exp2().contiguous() @ w).relu().sum(axis=0).realize())
  xs = [np.full((4, 4), i / 8, np.float32) for i in range(5)]
  def want(x): return np.maximum(np.exp2(x @ w.numpy()) @ w.numpy(), 0).sum(axis=0)
  for x in xs[:3]: np.testing.assert_allclose(jit(Tensor(x)).numpy(), want(x), rtol=1e-5)
  assert any(ei.bufs[0]._base is not None for ei in jit.captured.jit_cache)  # (planned)
  before = GlobalCounters.mem_used
  jit.captured.free_intermediates()
  assert GlobalCounters.mem_used < before
  for x in xs[3:]: np.testing.assert_allclose(jit(Tensor(x)).numpy(), want(x), rtol=1e-5)

def test_a_gradient_rule_holding_a_tensor_is_refused():
  """A composite's rule lives as long as its graph; a Tensor in it (whose .grad backward fills) would keep a step's
  buffers alive, as BatchNorm's, pow's and binary_crossentropy's rules did: with_rule refuses it, nodes are fine."""
  import functools
  from fusegrad.gradient import with_rule
  x = Tensor([1.0, 2.0], requires_grad=True)
  y = x * 2
  with pytest.raises(TypeError, match="holds a Tensor"): with_rule(y.uop, (x.uop,), lambda g: (g * 2,) if x else ())
  with pytest.raises(TypeError, match="holds a Tensor"):
    with_rule(y.uop, (x.uop,), functools.partial(lambda t, g: (g,), x))
  node = x.uop
  assert with_rule(y.uop, (node,), lambda g: (g * 2,) if node is not None else ()) is y.uop

def test_the_exit_leaves_the_graphs_out_of_its_collections(tmp_path):
  # at exit the interpreter's collections walked every object alive, the process's nodes among them (0.3 s after the
  # README's job): fusegrad freezes them first (gc.freeze), so the last handler to run (registered first) sees them frozen
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  code = ("import atexit, gc; atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0)); "
          "from fusegrad import Tensor; (Tensor.rand(16, 16) @ Tensor.rand(16, 16)).numpy()")
  env = {**os.environ, "PYTHONPATH": root, "XDG_CACHE_HOME": str(tmp_path)}
  proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=root)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.split() == ["frozen", "True"]
