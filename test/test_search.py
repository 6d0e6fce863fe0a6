"""BEAM search (engine/search.py): results equal NOOPT's up to float reassociation, the actions are the heuristic's,
candidates are timed on the device, the winner is cached on disk, and failing or slow candidates are dropped.
Small shapes and BEAM=2 keep it quick."""
import math
import numpy as np
import pytest
from fusegrad import Tensor, Device, Context
from fusegrad.device import CompileError
from fusegrad.helpers import cache_reset
from fusegrad.codegen import Kernel, OptOps
from fusegrad.codegen.heuristic import hand_coded_optimizations, pick_compiler
from fusegrad.codegen.lower import merge_axes, simplify_gated_loads
from fusegrad.codegen.fold import fold_reduces
from fusegrad.engine import search
from fusegrad.engine.state import STATE

KERNELS = {  # name: (input shapes, the computation)
  "matmul": ([(8, 16), (16, 12)], lambda a, b: a @ b),
  "conv": ([(1, 2, 6, 6), (4, 2, 3, 3)], lambda x, w: x.conv2d(w)),
  "sum_rows": ([(8, 32)], lambda a: a.sum(1)),
  "elementwise": ([(4, 24), (4, 24)], lambda a, b: (a * 2 + b).relu()),
}

# PoCL compiles each candidate for about a second: there only the small kernels are searched
SEARCHED = list(KERNELS) if Device.DEFAULT in ("CPU", "PYTHON") else ["sum_rows", "elementwise"]

def make(name: str) -> Tensor:
  """The kernel's computation on fixed random inputs, as a new lazy graph each call."""
  shapes, fn = KERNELS[name]
  rng = np.random.default_rng(0)
  return fn(*[Tensor(rng.standard_normal(s).astype(np.float32)) for s in shapes])

@pytest.fixture
def fresh(tmp_path, monkeypatch):
  """An empty disk cache and no program loaded in the process; counts the candidates BEAM times."""
  cache_reset()
  monkeypatch.setattr(STATE, "programs", type(STATE.programs)())
  timed = [0]
  time_kernel = search.time_kernel
  def counting(*args, **kwargs):
    timed[0] += 1
    return time_kernel(*args, **kwargs)
  monkeypatch.setattr(search, "time_kernel", counting)
  monkeypatch.setattr(search, "MIN_TIME", 0.0)  # these kernels run in microseconds: search them all the same
  with Context(CACHEDB=str(tmp_path / "cache.db"), DISABLE_COMPILER_CACHE=0): yield timed
  cache_reset()

def kernel(t: Tensor) -> Kernel:
  ast = t.schedule()[-1].ast
  return Kernel(merge_axes(simplify_gated_loads(fold_reduces(ast))), Device[Device.DEFAULT].renderer)

@pytest.mark.parametrize("name", SEARCHED)
def test_beam_matches_noopt_and_is_cached(name, fresh, monkeypatch):
  with Context(NOOPT=1): want = make(name).numpy()
  monkeypatch.setattr(STATE, "programs", type(STATE.programs)())  # loaded programs don't depend on BEAM: drop them
  with Context(BEAM=2, NOOPT=0): got = make(name).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  if Device.DEFAULT == "PYTHON": return  # no compile cache: nothing is stored
  assert fresh[0] > 0  # it searched: candidates timed on the device
  searched = fresh[0]
  monkeypatch.setattr(STATE, "programs", type(STATE.programs)())  # as a new process would
  with Context(BEAM=2, NOOPT=0): again = make(name).numpy()
  np.testing.assert_equal(again, got)
  assert fresh[0] == searched  # the winner came from the disk cache

def test_search_result_cached_by_itself(fresh):
  """The beam cache alone (no codegen cache in between): the second search times nothing and picks the same opts."""
  k = kernel(make(SEARCHED[0]))
  first = search.beam_search(k.copy(), 2)
  n = fresh[0]
  assert n > 0
  second = search.beam_search(k.copy(), 2)
  assert fresh[0] == n and second.applied_opts == first.applied_opts
  with Context(IGNORE_BEAM_CACHE=1): search.beam_search(k.copy(), 2)  # tinygrad's flag: the cache is not read
  assert fresh[0] > n

def test_starts_from_the_heuristic_and_stops_early(fresh, monkeypatch, tmp_path):
  """The heuristic's kernel is in the first beam (the result is never slower); a kernel it makes fast enough, or a
  search out of time, keeps the best timed so far without timing a round of candidates."""
  k = kernel(make("elementwise"))
  heuristic = hand_coded_optimizations(k) + pick_compiler(k)
  if not heuristic: pytest.skip("the heuristic applies no opt to this kernel on this device")
  monkeypatch.setattr(search, "time_kernel", lambda r, *a, **kw: 1.0 if r is None or r.p.applied_opts != heuristic
                      else 0.5)  # every other kernel slower than the heuristic's
  assert search.beam_search(k.copy(), 2).applied_opts == heuristic
  for min_time, budget in ((math.inf, 10.0), (0.0, 0.0)):
    monkeypatch.setattr(search, "MIN_TIME", min_time)
    monkeypatch.setattr(search, "BUDGET", budget)
    timed = [0]
    monkeypatch.setattr(search, "time_kernel", lambda *a, **kw: timed.__setitem__(0, timed[0] + 1) or 1.0)
    cache_reset()
    with Context(CACHEDB=str(tmp_path / f"{budget}.db")):  # an empty cache: searched again
      assert search.beam_search(k.copy(), 2).applied_opts == heuristic
    assert timed[0] == 1  # the heuristic's kernel only

def test_a_lucky_candidate_is_timed_again_and_the_total_budget_ends_searches(fresh, monkeypatch, tmp_path):
  """A candidate timed faster than the heuristic's once but slower when the two are timed again by turns doesn't win;
  once the process's TOTAL is spent, kernels keep the heuristic's opts without timing anything, uncached."""
  k = kernel(make("elementwise"))
  heuristic = hand_coded_optimizations(k) + pick_compiler(k)
  runs: dict[tuple, int] = {}
  def lucky_once(r, *a, **kw):  # every candidate: 0.5 s on its first run, 2 s later; the heuristic's: 1 s
    ident = tuple(r.p.applied_opts) if r is not None else ()
    runs[ident] = runs.get(ident, 0) + 1
    return 1.0 if list(ident) == heuristic else 0.5 if runs[ident] == 1 else 2.0
  monkeypatch.setattr(search, "time_kernel", lucky_once)
  monkeypatch.setattr(search, "TOTAL", [60.0])
  assert search.beam_search(k.copy(), 2).applied_opts == heuristic
  assert len(runs) > 1 and 0 < search.TOTAL[0] < 60.0  # candidates were timed; the search's time was counted
  monkeypatch.setattr(search, "TOTAL", [0.0])
  runs.clear()
  cache_reset()
  with Context(CACHEDB=str(tmp_path / "spent.db")):  # an empty cache: it would be searched again
    assert search.beam_search(k.copy(), 2).applied_opts == heuristic and not runs
    assert search._cached_opts(search.search_key(k, 2)) is None

def test_heuristic_actions_are_candidates():
  """Every opt the heuristic applies (vector widths, upcasts, unrolls, threads, the compiler) is one BEAM tries."""
  for name in KERNELS:
    k = kernel(make(name))
    for opt in hand_coded_optimizations(k) + pick_compiler(k):
      assert opt in search.candidate_opts(k), f"{name}: {opt}"
      k.apply_opt(opt)
  ops = {o.op for o in search.candidate_opts(kernel(make("sum_rows")))}
  assert {OptOps.UPCAST, OptOps.UNROLL, OptOps.LANES} <= ops
  ren = Device[Device.DEFAULT].renderer
  if ren.threads: assert OptOps.THREAD in ops
  if len(ren.compilers) > 1: assert OptOps.COMPILER in ops

@pytest.mark.skipif(Device.DEFAULT != "CPU", reason="breaks the CPU compiler on purpose")
def test_failing_candidates_are_dropped(fresh, monkeypatch):
  """Candidates that don't compile (here every vectorized one) or that run too long are skipped, not fatal."""
  compiler = type(Device["CPU"].compiler)
  start = compiler.start_batch
  def failing(self, srcs, units=0):
    wait = start(self, [s for s in srcs if "float4" not in s], units)
    def finish():
      libs = wait()
      return [CompileError("no vectors today") if "float4" in s else libs.pop(0) for s in srcs]
    return finish
  monkeypatch.setattr(compiler, "start_batch", failing)
  with Context(NOOPT=1): want = make("matmul").numpy()
  monkeypatch.setattr(STATE, "programs", type(STATE.programs)())
  k = search.beam_search(kernel(make("matmul")), 2)
  assert fresh[0] > 0
  p = search.compile_candidates([k])[0]
  assert p is not None and "float4" not in p.p.src
  monkeypatch.setattr(STATE, "programs", type(STATE.programs)())
  with Context(BEAM=2, NOOPT=0): np.testing.assert_allclose(make("matmul").numpy(), want, rtol=1e-5, atol=1e-5)
  bufs = search._buffers_for(k)
  assert search.time_kernel(p, bufs, limit=0.0) == math.inf  # slower than the limit: dropped after one run
  assert search.time_kernel(p, bufs) < math.inf
  assert search.time_kernel(None, bufs) == math.inf  # didn't compile

def test_gather_keeps_the_heuristic(fresh):
  """A load whose index is read from memory (x[idx]) could touch any address of scratch buffers: not searched."""
  x = np.arange(4 * 28 * 28, dtype=np.uint8).reshape(4, 1, 28, 28)
  idx = np.array([3, 0, 2], dtype=np.int32)
  with Context(BEAM=2, NOOPT=0): got = Tensor(x)[Tensor(idx)].numpy()
  np.testing.assert_equal(got, x[idx])

def test_cache_key_per_isa_and_compiler():
  """A result found for one instruction set or compiler is not reused for another."""
  import dataclasses
  k = kernel(make("elementwise"))
  other_isa = dataclasses.replace(k.ren, machine=dataclasses.replace(k.ren.machine, isa="other"))
  other_cc = dataclasses.replace(k.ren, compilers=("othercc",) + tuple(k.ren.compilers))
  keys = {search.search_key(Kernel(k.ast, ren), 2) for ren in (k.ren, other_isa, other_cc)}
  assert len(keys) == 3 and search.search_key(k, 2) != search.search_key(k, 3)

def test_settings_choose_the_program_in_the_same_process():
  """A kernel compiled once in a process is compiled again under other opt settings (NOOPT, BEAM), as the disk cache
  keys it: Context(NOOPT=1) after a heuristic run of the same kernel gets the kernel without opts, and back."""
  from fusegrad.engine.realize import get_runner
  a, b = [Tensor(np.random.default_rng(i).standard_normal((64, 64), dtype=np.float32)).realize() for i in range(2)]
  fn = KERNELS["matmul"][1]
  ast = fn(a, b).schedule()[-1].ast
  with Context(NOOPT=0, BEAM=0): heuristic = get_runner(a.device, ast)[0]
  with Context(NOOPT=1, BEAM=0): plain = get_runner(a.device, ast)[0]
  assert heuristic.p.applied_opts and not plain.p.applied_opts
  with Context(NOOPT=0, BEAM=0): assert get_runner(a.device, ast)[0] is heuristic
  with Context(NOOPT=1): np.testing.assert_allclose(fn(a, b).numpy(), a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-5)

def test_scratch_buffers_hold_data_floats_random_ints_zero():
  """BEAM times candidates on values as data has them (code that branches on values, such as a max compiled to a jump,
  runs on data as it will: on zeros every branch is predicted): floats random of both signs, integers zero (indices)."""
  x, idx = Tensor.empty(64, 64), Tensor.empty(64, dtype="int32")
  k = kernel((x + idx.reshape(64, 1).cast("float32")).relu())
  bufs = search._buffers_for(k)
  vals = {b.dtype.name: np.frombuffer(b.as_bytes(), dtype=np.float32 if b.dtype.name == "float" else np.int32)
          for b in bufs[1:]}
  assert (vals["float"] < 0).mean() > 0.4 and (vals["float"] > 0).mean() > 0.4 and len(np.unique(vals["float"])) > 1000
  assert not vals["int"].any()
