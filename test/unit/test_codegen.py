"""Codegen: optimization actions keep results equal, bad ones raise KernelOptError; reduce folding removes loops.

Kernels come from the scheduler (Tensor.schedule) and are compiled with get_program(ast, renderer, opts=[...]) for the
default device, then run on the schedule's own buffers.
"""
import math
import numpy as np
import pytest
from fusegrad import Tensor, Device, dtypes
from fusegrad.dtype import to_numpy
from fusegrad.codegen import get_program, Kernel, Opt, OptOps, KernelOptError, ProgramSpec
from fusegrad.codegen.fold import fold_reduces
from fusegrad.codegen.lower import merge_axes
from fusegrad.codegen.kernel import range_size
from fusegrad.codegen.heuristic import hand_coded_optimizations
from fusegrad.renderer import MachineModel
from fusegrad.renderer.cstyle import ClangRenderer
AVX512 = MachineModel(isa="avx512", vector_bytes=64, vector_registers=32)
from fusegrad.uop.ops import UOp
from fusegrad.engine.runner import CompiledRunner
from fusegrad.engine.realize import ExecItem, run_schedule
from fusegrad.engine.schedule import ScheduleItem
from fusegrad.uop.ops import Ops, AxisType

def renderer(): return Device[Device.DEFAULT].renderer

def kernel_of(out: Tensor) -> ScheduleItem:
  """The last kernel of out's schedule; the kernels before it run now, so its inputs hold their values."""
  sched = out.schedule()
  run_schedule(sched[:-1])
  return sched[-1]

def run_program(si: ScheduleItem, p: ProgramSpec) -> np.ndarray:
  out = si.bufs[0]
  fill = np.full(out.size, np.nan if dtypes.is_float(out.dtype) else -7, dtype=to_numpy(out.dtype))
  out.copyin(memoryview(fill.tobytes()))  # so a kernel that writes nothing can't pass on an earlier run's result
  ExecItem(CompiledRunner(p), list(si.bufs), dict(si.var_vals)).run()
  return np.frombuffer(out.as_bytes(), dtype=to_numpy(out.dtype)).copy()

def run_with(si: ScheduleItem, opts: list[Opt]) -> tuple[np.ndarray, ProgramSpec]:
  p = get_program(si.ast, renderer(), opts=opts)
  assert p.applied_opts == opts
  return run_program(si, p), p

def axes_of(si: ScheduleItem) -> list[tuple[AxisType, int]]:
  """The (role, size) of each axis an Opt can address, as get_program sees the kernel."""
  k = Kernel(merge_axes(fold_reduces(si.ast)), renderer())
  return [(r.arg[1], r.src[0].arg) for r in k.axes()]

def stores(p: ProgramSpec) -> int:
  """Elements the flat program stores (a vector store counts each lane)."""
  return sum(u.src[2].dtype.count for u in p.uops if u.op is Ops.STORE)

RNG = np.random.default_rng(0)
A = RNG.standard_normal((8, 12)).astype(np.float32)
B = RNG.standard_normal((12, 16)).astype(np.float32)

class TestOpts:
  def test_matmul_axes(self):
    si = kernel_of(Tensor(A) @ Tensor(B))
    assert axes_of(si) == [(AxisType.GLOBAL, 8), (AxisType.GLOBAL, 16), (AxisType.REDUCE, 12)]

  @pytest.mark.parametrize("opts", [
    [],
    [Opt(OptOps.UPCAST, 0, 4)],
    [Opt(OptOps.UPCAST, 1, 4)],
    [Opt(OptOps.UPCAST, 1, 0)],  # 0: the whole axis (16)
    [Opt(OptOps.UNROLL, 0, 4)],
    [Opt(OptOps.UNROLL, 0, 0)],
    [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 4)],
    [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4)],
    [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 0, 3)],
    [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UNROLL, 0, 2)],
    [Opt(OptOps.SWAP, 0, 1)],
    [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.SWAP, 1, 0), Opt(OptOps.UNROLL, 0, 4)],
    [Opt(OptOps.SPLIT, 0, 4), Opt(OptOps.SWAP, 0, 1)],  # row blocks outside the columns, the rows of a block inside
    [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.SPLIT, 1, 2), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.UNROLL, 0, 2)],
    [Opt(OptOps.PADTO, 0, 3), Opt(OptOps.UPCAST, 0, 3)],  # 8 rows run as 9: the last one stores row 7 again
    [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.PADTO, 0, 3), Opt(OptOps.UPCAST, 0, 3), Opt(OptOps.PADTO, 0, 2),
     Opt(OptOps.SPLIT, 0, 2), Opt(OptOps.SWAP, 0, 1)],  # 3 row tiles padded to 2 blocks of 2
  ], ids=str)
  def test_matmul(self, opts):
    si = kernel_of(Tensor(A) @ Tensor(B))
    got, p = run_with(si, opts)
    np.testing.assert_allclose(got.reshape(8, 16), A @ B, atol=1e-5, rtol=1e-5)
    upcast = 1
    for o in opts:
      if o.op is OptOps.UPCAST: upcast *= o.arg or axes_of(si)[o.axis][1]
    assert stores(p) == upcast  # each upcast output is stored once (one lane of a vector store, or a store of its own)

  def test_unroll_leaves_a_shorter_loop(self):
    si = kernel_of(Tensor(A) @ Tensor(B))
    _, p = run_with(si, [Opt(OptOps.UNROLL, 0, 4)])
    reduce_loops = [u.src[0].arg for u in p.uops if u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE]
    assert reduce_loops == [3]
    _, p = run_with(si, [Opt(OptOps.UNROLL, 0, 0)])
    assert not any(u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE for u in p.uops)

  @pytest.mark.parametrize("red", ["sum", "max"])
  def test_unrolled_copies_of_a_sum_are_combined_before_the_accumulator(self, red):
    # a chain acc+v0+v1+v2+v3 waits for four adds an iteration; (v0+v1)+(v2+v3) first, then one add into acc
    x = RNG.standard_normal((4, 64)).astype(np.float32)
    got, p = run_with(kernel_of(getattr(Tensor(x), red)(axis=1)), [Opt(OptOps.UNROLL, 0, 4)])
    np.testing.assert_allclose(got, getattr(x, red)(axis=1), rtol=1e-6)
    assign = next(u for u in p.uops if u.op is Ops.ASSIGN)
    assert assign.src[0] in assign.src[1].src  # the update is one op on the accumulator
    products = kernel_of(Tensor(A) @ Tensor(B))  # products stay a chain of multiply-adds into the accumulator
    _, p = run_with(products, [Opt(OptOps.UNROLL, 0, 4)])
    assert sum(u.op is Ops.MULACC for u in p.uops) == 4

  @pytest.mark.parametrize("opts", [[], [Opt(OptOps.UNROLL, 0, 4)], [Opt(OptOps.UNROLL, 0, 16)],
                                    [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 8)]], ids=str)
  def test_reduce_max(self, opts):
    x = RNG.standard_normal((6, 16)).astype(np.float32)
    si = kernel_of(Tensor(x).max(axis=1))
    assert axes_of(si) == [(AxisType.GLOBAL, 6), (AxisType.REDUCE, 16)]
    got, _ = run_with(si, opts)
    np.testing.assert_equal(got, x.max(axis=1))

  # an UPCAST over a whole axis removes it from the list of axes: later opts count without it
  @pytest.mark.parametrize("opts", [[], [Opt(OptOps.UPCAST, 0, 2)], [Opt(OptOps.UPCAST, 1, 4)],
                                    [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 0, 3)],
                                    [Opt(OptOps.UPCAST, 1, 3), Opt(OptOps.UPCAST, 0, 2)]], ids=str)
  def test_elementwise_with_a_transposed_input(self, opts):
    x, y = RNG.standard_normal((12, 4)).astype(np.float32), RNG.standard_normal((4, 12)).astype(np.float32)
    si = kernel_of(Tensor(x).T * 2 + Tensor(y))
    assert axes_of(si) == [(AxisType.GLOBAL, 4), (AxisType.GLOBAL, 12)]
    got, _ = run_with(si, opts)
    np.testing.assert_allclose(got.reshape(4, 12), x.T * 2 + y, rtol=1e-6)

  @pytest.mark.parametrize("opts", [[], [Opt(OptOps.UPCAST, 0, 2)], [Opt(OptOps.UPCAST, 1, 3)],
                                    [Opt(OptOps.UPCAST, 0, 3), Opt(OptOps.UPCAST, 1, 2)],
                                    [Opt(OptOps.UPCAST, 1, 0), Opt(OptOps.UPCAST, 0, 2)]], ids=str)
  def test_padded_input(self, opts):
    # padding makes gated loads; upcasting must keep each copy's own gate
    x = RNG.standard_normal((4, 4)).astype(np.float32)
    si = kernel_of(Tensor(x).pad(((1, 1), (0, 2))).T + 1)
    assert axes_of(si) == [(AxisType.GLOBAL, 6), (AxisType.GLOBAL, 6)]
    got, _ = run_with(si, opts)
    np.testing.assert_allclose(got.reshape(6, 6), np.pad(x, ((1, 1), (0, 2))).T + 1, rtol=1e-6)

  @pytest.mark.parametrize("opts", [[Opt(OptOps.UPCAST, 0, 16)],
                                    [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UNROLL, 0, 4)]], ids=str)
  def test_vector_of_loads_stored_by_lane(self, opts):
    # (A @ B).T: the output is contiguous along i, but b's loads along j: a vector along j loads b whole and is stored
    # lane by lane
    si = kernel_of((Tensor(A) @ Tensor(B)).T.contiguous())
    assert axes_of(si) == [(AxisType.GLOBAL, 16), (AxisType.GLOBAL, 8), (AxisType.REDUCE, 12)]
    got, p = run_with(si, opts)
    np.testing.assert_allclose(got.reshape(16, 8), (A @ B).T, atol=1e-5, rtol=1e-5)
    assert stores(p) == np.prod([o.arg for o in opts if o.op is OptOps.UPCAST])  # one store per lane
    if opts[0].arg in renderer().vector_widths:
      assert any(u.op is Ops.LOAD and u.dtype.count == opts[0].arg for u in p.uops)

  @pytest.mark.parametrize("opts", [[], [Opt(OptOps.UPCAST, 0, 16)],
                                    [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 0, 2)]], ids=str)
  def test_vector_masks(self, opts):
    # a relu's gradient, x <= 0 as (x < 0) | ((x != 0) != True), and a NaN test: with vectors along the contiguous
    # axis the conditions are masks (bool vectors) and the WHERE a select; results as numpy's, NaN and -0.0 included
    x = RNG.standard_normal((4, 32)).astype(np.float32)
    x[0, :5], x[1, 3], x[2, 7] = 0.0, -0.0, np.nan
    g = RNG.standard_normal((4, 32)).astype(np.float32)
    X, G = Tensor(x), Tensor(g)
    si = kernel_of(((X < 0) | (X == 0)).where(0.0, G) + (X != X).where(1.0, X * 2))
    got, p = run_with(si, opts)
    want = np.where(x <= 0, 0.0, g) + np.where(np.isnan(x), 1.0, x * 2)
    np.testing.assert_allclose(got.reshape(4, 32), want, rtol=1e-6)
    if opts and opts[0].arg in renderer().vector_widths:
      assert any(u.op is Ops.WHERE and u.src[0].dtype == dtypes.bool.vec(opts[0].arg) for u in p.uops)

  def test_vector_select_on_a_scalar_condition(self):
    # a condition that doesn't move along the vector: one C ?: choosing between two whole vectors
    x, g = RNG.standard_normal((4, 32)).astype(np.float32), RNG.standard_normal((4, 32)).astype(np.float32)
    c = np.array([[1.0], [-1.0], [0.0], [2.0]], dtype=np.float32)
    si = kernel_of((Tensor(c) > 0).where(Tensor(g), Tensor(x) * 3))
    got, p = run_with(si, [Opt(OptOps.UPCAST, 1, 16)])
    np.testing.assert_allclose(got.reshape(4, 32), np.where(c > 0, g, x * 3), rtol=1e-6)
    if 16 in renderer().vector_widths:
      assert any(u.op is Ops.WHERE and u.dtype.count == 16 and u.src[0].dtype == dtypes.bool for u in p.uops)

  @pytest.mark.parametrize("dt", [np.uint8, np.int8])
  def test_vector_of_bytes_cast_to_float(self, dt):
    # raw pixels (MNIST's first convolution): n bytes loaded as one vector and converted, not one load per lane
    x = RNG.integers(-128 if dt == np.int8 else 0, 128 if dt == np.int8 else 256, (4, 32)).astype(dt)
    w = RNG.standard_normal((4, 32)).astype(np.float32)
    si = kernel_of(Tensor(x).float() * Tensor(w) + 1)
    got, p = run_with(si, [Opt(OptOps.UPCAST, 0, 8)])
    np.testing.assert_allclose(got.reshape(4, 32), x.astype(np.float32) * w + 1, rtol=1e-6)
    if 8 in renderer().vector_widths:
      assert any(u.op is Ops.LOAD and u.dtype.count == 8 and u.dtype.scalar().itemsize == 1 for u in p.uops)

  def test_vector_masks_in_a_lanes_reduce(self):
    # batch norm's backward sums a relu's gradient along a contiguous axis: LANES vectors, the mask inside the loop
    x = RNG.standard_normal((4, 64)).astype(np.float32)
    x[:, :9] = 0.0
    g = RNG.standard_normal((4, 64)).astype(np.float32)
    si = kernel_of(((Tensor(x) < 0) | (Tensor(x) == 0)).where(0.0, Tensor(g)).sum(1))
    got, p = run_with(si, [Opt(OptOps.LANES, 0, 16)])
    np.testing.assert_allclose(got, np.where(x <= 0, 0.0, g).sum(1), rtol=1e-5, atol=1e-6)
    if 16 in renderer().vector_widths:
      assert not any(u.op is Ops.LOAD and u.dtype.count == 1 and u.src[0].arg == 1 for u in p.uops)  # x: vectors

  def test_swap_puts_the_column_loop_outside(self):
    si = kernel_of(Tensor(A) @ Tensor(B))
    k = Kernel(merge_axes(fold_reduces(si.ast)), renderer())
    for o in [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.SWAP, 0, 1)]: k.apply_opt(o)
    assert [range_size(r) for r in k.axes()] == [4, 8, 12]  # columns / 4, rows, reduce

  def test_heuristic_opts_keep_results(self):
    si = kernel_of(Tensor(A) @ Tensor(B))
    p = get_program(si.ast, renderer())
    np.testing.assert_allclose(run_program(si, p).reshape(8, 16), A @ B, atol=1e-5, rtol=1e-5)

class TestBadOpts:
  @pytest.mark.parametrize("opt,msg", [
    (Opt(OptOps.UPCAST, 3, 2), "the kernel has 2 output axes"),
    (Opt(OptOps.UPCAST, -1, 2), "the kernel has 2 output axes"),
    (Opt(OptOps.UNROLL, 1, 4), "the kernel has 1 reduce axes"),
    (Opt(OptOps.UPCAST, 2, 4), "the kernel has 2 output axes"),
    (Opt(OptOps.UPCAST, 0, 3), "can't split an axis of 8 by 3"),
    (Opt(OptOps.UNROLL, 0, 5), "can't split an axis of 12 by 5"),
    (Opt(OptOps.UPCAST, 0, 1), "can't split"),
    (Opt(OptOps.UPCAST, 1, 32), "can't split"),
    (Opt(OptOps.SWAP, 0, 0), "two different output axes"),
    (Opt(OptOps.SWAP, 0, 2), "two different output axes"),
    (Opt(OptOps.PADTO, 0, 4), "no padding of an axis of 8"),
    (Opt(OptOps.PADTO, 1, 32), "no padding of an axis of 16"),
  ], ids=str)
  def test_invalid(self, opt, msg):
    si = kernel_of(Tensor(A) @ Tensor(B))
    with pytest.raises(KernelOptError, match=msg): get_program(si.ast, renderer(), opts=[opt])

  def test_too_much_upcasting(self):
    if renderer().upcast_max >= 8 * 16: pytest.skip("the device allows a whole 8x16 tile in registers")
    si = kernel_of(Tensor(A) @ Tensor(B))
    with pytest.raises(KernelOptError, match=f"more than {renderer().upcast_max} "):
      get_program(si.ast, renderer(), opts=[Opt(OptOps.UPCAST, 1, 0), Opt(OptOps.UPCAST, 0, 0)])

  def test_device_without_workgroups(self):
    if renderer().has_local: pytest.skip("the device has workgroups")
    si = kernel_of(Tensor(A) @ Tensor(B))
    with pytest.raises(KernelOptError, match="no workgroups"):
      get_program(si.ast, renderer(), opts=[Opt(OptOps.LOCAL, 0, 2)])
    with pytest.raises(KernelOptError, match="no workgroups|no shared memory"):
      get_program(si.ast, renderer(), opts=[Opt(OptOps.GROUP, 0, 4)])

  def test_padto_refuses_a_kernel_that_reads_what_it_writes(self):
    x = Tensor(A).realize()
    si = kernel_of(x.assign(x * 2 + 1))  # a repeated store of row 7 would double it twice
    with pytest.raises(KernelOptError, match="loads a buffer it stores"):
      get_program(si.ast, renderer(), opts=[Opt(OptOps.PADTO, 0, 5)])

  def test_failed_opt_leaves_kernel_unchanged(self):
    si = kernel_of(Tensor(A) @ Tensor(B))
    k = Kernel(merge_axes(fold_reduces(si.ast)), renderer())
    k.apply_opt(Opt(OptOps.UPCAST, 0, 2))
    ast = k.ast
    with pytest.raises(KernelOptError): k.apply_opt(Opt(OptOps.UPCAST, 0, 3))
    assert k.ast is ast and k.applied_opts == [Opt(OptOps.UPCAST, 0, 2)]

# *** reduce folding ***
def _loops(p: ProgramSpec) -> list[AxisType]: return [u.arg[1] for u in p.uops if u.op is Ops.RANGE]

def assert_no_reduce_loop(p: ProgramSpec) -> None:
  """Only output loops are left (on a device with a launch grid, none at all), and no accumulator."""
  assert all(kind in (AxisType.GLOBAL, AxisType.LOOP, AxisType.THREAD) for kind in _loops(p)), _loops(p)
  assert not any(u.op is Ops.DEFINE_ACC for u in p.uops)

class TestReduceFolding:
  @pytest.mark.parametrize("args,want", [((10,), np.arange(10)), ((2, 20, 3), np.arange(2, 20, 3)),
                                         ((5, -4, -2), np.arange(5, -4, -2)),
                                         ((0.0, 1.0, 0.25), np.arange(0, 1, 0.25))], ids=str)
  def test_arange_has_no_loop(self, args, want):
    t = Tensor.arange(*args)
    sched = t.schedule()
    assert len(sched) == 1
    for opts in ([], None):  # no opts, and the heuristic's
      p = get_program(sched[0].ast, renderer(), opts=opts)
      assert_no_reduce_loop(p)
      np.testing.assert_allclose(run_program(sched[0], p), want)

  def test_sum_of_a_constant(self):
    sched = Tensor.full((5, 7), 3.0).sum(axis=1).schedule()
    assert len(sched) == 1
    p = get_program(sched[0].ast, renderer(), opts=[])
    assert_no_reduce_loop(p)
    np.testing.assert_equal(run_program(sched[0], p), np.full(5, 21.0, dtype=np.float32))

  def test_cumsum_of_data_keeps_its_loop(self):
    # folding must only fire where the summed value does not depend on the loop
    x = np.arange(1, 7, dtype=np.float32)
    si = kernel_of(Tensor(x).cumsum())
    p = get_program(si.ast, renderer(), opts=[])
    assert AxisType.REDUCE in _loops(p)
    np.testing.assert_equal(run_program(si, p), np.cumsum(x))

  @pytest.mark.parametrize("shape,index,axis", [((10,), [3, 1, 9, 0, -1], 0), ((5, 4), [4, 0, -2], 0),
                                                ((5, 4), [3, 3, 0, 1, 2, -4], 1)], ids=str)
  def test_gather_reads_one_element_per_output(self, shape, index, axis):
    x = RNG.standard_normal(shape).astype(np.float32)
    idx = np.array(index, dtype=np.int32)
    out = Tensor(x)[Tensor(idx)] if axis == 0 else Tensor(x)[:, Tensor(idx)]
    sched = out.schedule()
    assert len(sched) == 1, "the arange inside indexing fuses into the gather kernel"
    p = get_program(sched[0].ast, renderer(), opts=[])
    assert_no_reduce_loop(p)
    x_buf = next(i for i, b in enumerate(sched[0].bufs) if b.size == x.size and b.dtype == dtypes.float32 and i > 0)
    x_loads = [u for u in p.uops if u.op is Ops.LOAD and u.src[0].arg == x_buf]
    assert len(x_loads) == 1
    want = x[idx] if axis == 0 else x[:, idx]  # the kernel writes the result in its own order (index axes first here)
    np.testing.assert_equal(run_program(sched[0], p).reshape(want.shape), want)

  def test_gather_out_of_range_reads_zero(self):
    # an index past the end is gated, so the kernel never reads outside the buffer (an index already on the device:
    # indices still on the host are checked at the call, with no kernel)
    x = np.arange(1, 5, dtype=np.float32)
    sched = Tensor(x)[Tensor(np.array([0, 7, 2], dtype=np.int32)).realize()].schedule()
    p = get_program(sched[0].ast, renderer(), opts=[])
    np.testing.assert_equal(run_program(sched[0], p), np.array([1, 0, 3], dtype=np.float32))

def test_gated_load_index_keeps_inner_loads_gated():
  """A load at a loaded index (a gather) under a pad: simplifying the outer index knowing its gate must leave the inner
  load's own gate and index alone (it runs whether or not the gate holds), so no load is left ungated."""
  from fusegrad.codegen.lower import simplify_gated_loads
  idx = Tensor([1, 2], dtype=dtypes.int32)
  t = Tensor([3, 20, 10], dtype=dtypes.int64).gather(0, idx).cat(Tensor([7], dtype=dtypes.int64))
  ast = simplify_gated_loads(fold_reduces(t.schedule()[-1].ast))
  loads = [u for u in ast.toposort() if u.op is Ops.LOAD]
  assert loads and all(len(u.src) > 2 and u.src[2].op is not Ops.CONST for u in loads), "a load lost its gate"

@pytest.mark.parametrize("padding", [2, (1, 0)])
def test_padded_conv_loops_over_the_rows_inside(padding):
  """A convolution of a padded view, where launch dimensions are loops: the sum over the kernel's rows runs over the
  rows inside the input only (a loop whose end depends on the output row) and the values stay torch's."""
  import torch
  if renderer().global_max is not None: pytest.skip("launch dimensions are loops only on the CPU")
  x, w = RNG.standard_normal((2, 3, 9, 7)).astype(np.float32), RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
  si = kernel_of(Tensor(x).conv2d(Tensor(w), padding=padding))
  p = get_program(si.ast, renderer())
  assert any(u.op is Ops.RANGE and u.src[0].op is not Ops.CONST for u in p.uops), "no loop bounded by the padding"
  want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=padding).numpy()
  np.testing.assert_allclose(run_program(si, p).reshape(want.shape), want, rtol=1e-5, atol=1e-5)

# *** the matmul heuristic: 16 vector accumulators, column panels outside the row tiles, b packed in panels ***
VEC_CPU = ClangRenderer(vector_widths=(2, 4, 8, 16), machine=AVX512, upcast_max=256, threads=2)

def opts_of(t: Tensor) -> list[Opt]:
  """The heuristic's opts for t's last kernel on VEC_CPU (an AVX-512 C renderer)."""
  return hand_coded_optimizations(Kernel(merge_axes(fold_reduces(t.schedule()[-1].ast)), VEC_CPU))

@pytest.mark.parametrize("expr,kernels,panels", [("a @ b", 2, 16), ("d.T @ b", 3, 16), ("a @ b.T", 2, 16),
                                                  ("c @ c.transpose(1, 2)", 2, 32)])
def test_matmul_heuristic_tiles_and_orders(expr, kernels, panels):
  if not Device.get_available("CPU")[0]: pytest.skip("needs the CPU device, whose machine model asks for panels")
  a, b, c, d = (Tensor.empty(*s, device="CPU") for s in [(1024, 512), (512, 512), (2, 1024, 512), (512, 1024)])
  sched = eval(expr).schedule()
  assert len(sched) == kernels  # b's column panels are packed first (d.T is made rows first), then the matmul
  k = Kernel(merge_axes(fold_reduces(sched[-1].ast)), VEC_CPU)
  opts = hand_coded_optimizations(k)
  for o in opts: k.apply_opt(o)
  assert k.upcast_size() == 16 * 16 and OptOps.SWAP in [o.op for o in opts]
  outer = sorted((r for r in k.ranges_of(AxisType.GLOBAL, AxisType.THREAD)), key=lambda r: r.arg[0])
  # a (2 MB) in 2 blocks of 512 rows (each the model's 1 MB L2) outside the column panels, the row tiles inside
  assert [r.src[0].arg for r in outer] == ([2] if "c" in expr else []) + [2, panels, 512 // 8]

@pytest.mark.parametrize("shape", [((256, 128), (128, 512)), ((3, 256, 64), (64, 1024)), ((256, 1024), (1024, 96)),
                                   ((256, 320), (320, 250))])  # 250 columns: the last panel padded
def test_packed_matmul_values(shape):
  if Device.DEFAULT == "PYTHON": pytest.skip("too big to interpret")
  x, w = RNG.standard_normal(shape[0]).astype(np.float32), RNG.standard_normal(shape[1]).astype(np.float32)
  out = Tensor(x) @ Tensor(w)
  assert len(out.schedule()) == (2 if Device[Device.DEFAULT].renderer.machine.panel_bytes else 1)
  np.testing.assert_allclose(out.numpy(), x @ w, atol=1e-3, rtol=1e-4)
  xt = np.ascontiguousarray(x.swapaxes(-1, -2))  # a transposed left operand is copied to rows first
  np.testing.assert_allclose((Tensor(xt).transpose(-1, -2) @ Tensor(w)).numpy(), x @ w, atol=1e-3, rtol=1e-4)

@pytest.mark.parametrize("pad", [0, 4])
def test_transposed_loads_read_vectors(pad):
  """A load that gathers along the store's vector but is contiguous along another upcast axis (read NCHW, written NHWC,
  with a padding gate along that axis) reads vectors along it and takes their lanes in registers (vectorize.py,
  transposed): vector loads of the input where the renderer has vectors, and numpy's values."""
  x = RNG.standard_normal((2, 8, 12, 16)).astype(np.float32)
  si = kernel_of((Tensor(x).relu() * 2).permute(0, 2, 3, 1).pad(((0, 0), (0, 0), (pad, pad), (0, 0))).contiguous())
  n = len(axes := axes_of(si))  # (2, 12 * 16, 8) or, padded, (2, 12, 24, 8): C last (the store's), W before it
  assert axes[-1] == (AxisType.GLOBAL, 8) and axes[-2][1] % 4 == 0
  got, p = run_with(si, [Opt(OptOps.UPCAST, n - 1, 4), Opt(OptOps.UPCAST, n - 2, 4)])
  want = np.pad(np.maximum(x, 0) * 2, ((0, 0), (0, 0), (0, 0), (pad, pad))).transpose(0, 2, 3, 1)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6)
  if 4 in renderer().vector_widths:
    assert any(u.op is Ops.LOAD and u.dtype.count == 4 for u in p.uops), "no vector load of the transposed input"

def test_small_random_kernels_stay_plain_loops():
  """Random bits (THREEFRY) in a loop too small for threads get no upcast: gcc vectorizes the plain loop, and copies
  would repeat the scalar rounds per element; a threaded loop (its body runs once per iteration) keeps it."""
  assert not any(o.op is OptOps.UPCAST for o in opts_of(Tensor.rand(36864)))
  assert any(o.op is OptOps.UPCAST for o in opts_of(Tensor.rand(1 << 20)))

def test_small_kernels_keep_only_vector_opts():
  """Under SMALL_WORK iterations a kernel gets no register tile, unrolling or transpose tile (they only cost codegen
  and compile time there); the vector opts stay (a row sum's lanes). Bigger ones get them (the unroll where the tile
  fills less than half the registers: test_register_tiles_are_not_unrolled)."""
  assert opts_of(Tensor.empty(8, 12) @ Tensor.empty(12, 16)) == []
  assert opts_of(Tensor.empty(16, 64).T.contiguous()) == [Opt(OptOps.UPCAST, 1, 4)]  # the elementwise vector only
  assert [o.op for o in opts_of(Tensor.empty(16, 64).sum(1))] == [OptOps.LANES]
  assert OptOps.UPCAST in [o.op for o in opts_of(Tensor.empty(64, 32) @ Tensor.empty(32, 64))]
  assert [o.op for o in opts_of(Tensor.empty(256, 256).sum(1))] == [OptOps.LANES, OptOps.UNROLL, OptOps.THREAD]
  assert 16 in [o.arg for o in opts_of(Tensor.empty(256, 256).T.contiguous()) if o.op is OptOps.UPCAST]  # the tile

def test_register_tiles_are_not_unrolled():
  """A reduce whose accumulators fill half the vector registers or more keeps its reduce loop (a step is 16 or more
  vector multiply-adds at AVX-512: unrolling only multiplied the C, codegen and compile time); a smaller tile is
  unrolled (a row sum's lanes: test_small_kernels_keep_only_vector_opts), and so is a big matmul's reduce."""
  conv = opts_of(Tensor.empty(64, 32, 24, 24).conv2d(Tensor.empty(32, 32, 5, 5)))
  accumulators = math.prod(o.arg for o in conv if o.op in (OptOps.UPCAST, OptOps.LANES))
  assert AVX512.register_tile(accumulators * 4)  # float32 accumulators filling half the registers or more
  assert OptOps.UNROLL not in [o.op for o in conv]
  assert OptOps.UNROLL in [o.op for o in opts_of(Tensor.empty(1024, 1024) @ Tensor.empty(1024, 1024))]

def test_short_reduce_loops_are_unrolled_whole():
  """A batch norm's statistics over NCHW (conv4's: 36 floats of each image, a 9-step loop of 4 lanes, a page apart)
  unroll their innermost loop whole where nothing is upcast (gcc keeps a 9-step loop and waits on memory between
  rows: up to 2x slower); a kernel with an upcast keeps the bound of 8 steps (an ONNX model's convolution, its 8 x 8
  tile unrolled 15 times: 3.5x slower with gcc)."""
  x = Tensor.empty(512, 64, 6, 6)
  assert Opt(OptOps.UNROLL, 1, 9) in opts_of(((x - x.mean((0, 2, 3), keepdim=True)) ** 2).sum((0, 2, 3)))
  assert Opt(OptOps.UNROLL, 0, 15) in opts_of(Tensor.empty(256, 256, 15).sum(2))
  tiled = opts_of(Tensor.empty(64, 8, 20, 20).conv2d(Tensor.empty(8, 8, 1, 15), padding=(0, 7)))
  assert OptOps.UPCAST in [o.op for o in tiled] and not any(o.op is OptOps.UNROLL and o.arg > 8 for o in tiled)

def test_small_or_narrow_matmuls_stay_one_kernel():
  for sa, sb in [((128, 256), (256, 256)), ((256, 256), (256, 24)), ((256, 32), (32, 256))]:
    assert len((Tensor.ones(*sa) @ Tensor.ones(*sb)).schedule()) == 1

@pytest.mark.parametrize("m", [1024, 1000])  # 1000: the last panel padded, sliced off the product
def test_packed_matmul_gradients(m):
  if Device.DEFAULT == "PYTHON": pytest.skip("too big to interpret")
  x, w, g = (RNG.standard_normal(s).astype(np.float32) for s in [(256, 96), (96, m), (256, m)])
  tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  out = tx.T.T @ tw
  (out * Tensor(g)).sum().backward()
  np.testing.assert_allclose(out.numpy(), x @ w, atol=1e-3, rtol=1e-4)
  np.testing.assert_allclose(tw.grad.numpy(), x.T @ g, atol=1e-3, rtol=1e-4)
  np.testing.assert_allclose(tx.grad.numpy(), g @ w.T, atol=1e-3, rtol=1e-4)

def test_render_bool_add_mul_as_or_and():
  """A bool ADD/MUL built directly (not through UOp.alu, which makes them OR/AND) still renders as | and &:
  in C, true+true is the int 2, which a cast to int would keep."""
  a, b = UOp(Ops.DEFINE_VAR, dtypes.bool, arg=("a", 0, 1)), UOp(Ops.DEFINE_VAR, dtypes.bool, arg=("b", 0, 1))
  r = ClangRenderer()
  assert r.render_alu(UOp(Ops.ADD, dtypes.bool, (a, b)), ["a", "b"]) == "(a|b)"
  assert r.render_alu(UOp(Ops.MUL, dtypes.bool, (a, b)), ["a", "b"]) == "(a&b)"
  assert r.render_alu(UOp(Ops.ADD, dtypes.int, (a, b)), ["a", "b"]) == "(a+b)"
  assert (a + b).op is Ops.OR and (a * b).op is Ops.AND and (a * b).dtype == dtypes.bool

def test_tiles_bounded_by_the_body_they_copy():
  """Dropout masks fused into a gradient's matmul (THREEFRY, ~100 integer operations a lane once lowered): the tile and
  the unroll stay within BODY_OPS copies of the body (the transformer example's kernel, tiled 256 ways, rendered 4 MB
  of C that took minutes to compile)."""
  from fusegrad.codegen.heuristic import BODY_OPS, _body_ops
  from fusegrad.uop.ops import Ops
  Tensor.manual_seed(0)
  x, w1, w2 = Tensor.rand(64, 128), Tensor.rand(128, 384, requires_grad=True), Tensor.rand(384, 128, requires_grad=True)
  with Tensor.train():
    (x @ w1).dropout(0.1).relu().dropout(0.1).matmul(w2).dropout(0.1).sum().backward()
  kernels = [si.ast for si in w1.grad.schedule(w2.grad) if si.ast.op is Ops.SINK]
  assert sum(u.op is Ops.THREEFRY for ast in kernels for u in ast.toposort()) >= 4
  for ast in kernels:
    k = Kernel(ast, Device["CPU"].renderer)
    for opt in hand_coded_optimizations(k): k.apply_opt(opt)
    assert _body_ops(k) <= BODY_OPS, (_body_ops(k), k.name)

def test_vectors_stored_lane_by_lane_are_one_loop(monkeypatch):
  # a register tile whose output isn't contiguous along its vectors (a conv's weight gradient: its loads are) writes
  # lane by lane; compilers spent as long on AVX-512's 16 x 16 such stores as on the rest of the kernel, so a run of
  # them is one loop over the lanes. With the threshold lowered the host's own tiles take it, and compute the same
  import torch
  import dataclasses
  from fusegrad import Context
  if isinstance(renderer(), ClangRenderer):
    monkeypatch.setattr(Device[Device.DEFAULT], "renderer", dataclasses.replace(renderer(), lane_loop_min=2))
  rng = np.random.default_rng(0)
  xn, wn = rng.standard_normal((8, 16, 12, 12), dtype=np.float32), rng.standard_normal((32, 16, 3, 3), dtype=np.float32)
  with Context(DISABLE_COMPILER_CACHE=1):
    x, w = Tensor(xn).realize(), Tensor(wn, requires_grad=True).realize()
    x.conv2d(w).relu().sum().backward()
    if isinstance(renderer(), ClangRenderer):
      assert any("#pragma GCC unroll 1" in get_program(si.ast, renderer()).src for si in w.grad.schedule())
    got = w.grad.numpy()
  tx, tw = torch.tensor(xn), torch.tensor(wn, requires_grad=True)
  torch.nn.functional.conv2d(tx, tw).relu().sum().backward()
  np.testing.assert_allclose(got, tw.grad.numpy(), rtol=1e-4, atol=1e-3)

def test_a_run_of_lane_stores_is_a_loop_only_when_it_writes_the_same():
  from fusegrad.renderer.cstyle import lane_run
  buf, x = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(), (), 0), UOp(Ops.DEFINE_VAR, dtypes.int, (), ("x", 0, 99))
  a, b = (UOp(Ops.DEFINE_ACC, dtypes.float.vec(4), (UOp.const(dtypes.float.vec(4), 0.0),), k) for k in range(2))
  def st(v: UOp, lane: int, c: int, at: UOp = x) -> UOp:
    return UOp(Ops.STORE, dtypes.void, (buf, at + c, UOp(Ops.GEP, dtypes.float, (v,), lane)))
  good = [st(v, lane, c0 + 8 * lane) for lane in range(4) for v, c0 in ((a, 0), (b, 1))]
  assert lane_run(good, 2) == (x, [(a, 0, 8), (b, 1, 8)])
  assert lane_run(good[:-1], 2) is None  # a lane missing
  assert lane_run(good[:-1] + [st(b, 3, 99)], 2) is None  # not at b's stride
  assert lane_run(good + [good[0]], 2) is None  # an address twice
  assert lane_run(good[:-1] + [st(b, 3, 25, x * 2)], 2) is None  # another x
