"""CPU_ISA and the machine model: each instruction set the host runs gets kernels whose register tiles fit its vector
registers. For the MNIST step's convolutions (forward, both gradients, from the step's schedule) and two matmuls,
the heuristic's kernel compiled for the ISA has its tile within the machine model, computes with vector multiply-adds
(SSE4: vector multiplies) and, compiled by clang and by gcc for AVX2 or AVX-512, has no spill (stack reference of a
vector register) in its hot loop. The max pool gradients' comparison counts have no jump in their hot loop. A long
reduce into integers (argmax's index, a count) keeps a plain loop, which each compiler makes vectors of."""
import contextlib, dataclasses, functools, re, shutil, subprocess, tempfile
import numpy as np
import pytest
from fusegrad import Tensor, Device, dtypes, nn
from fusegrad.nn.state import get_parameters
from fusegrad.uop.ops import UOp, Ops, AxisType
from fusegrad.helpers import Context, ansistrip, prod
from fusegrad.codegen import Kernel, get_program
from fusegrad.codegen.kernel import range_size, Opt, OptOps
from fusegrad.codegen.fold import fold_reduces
from fusegrad.codegen.heuristic import hand_coded_optimizations, _reduce_loads, tile_registers, STREAM
from fusegrad.codegen.lower import merge_axes, simplify_gated_loads
from fusegrad.codegen.vectorize import vector_range
from fusegrad.runtime import ops_cpu
from fusegrad.runtime.ops_cpu import ClangCompiler, cpu_isa, cpu_machine, host_isas, find_c_compiler
from examples.beautiful_mnist import Model

pytestmark = pytest.mark.skipif(Device.DEFAULT != "CPU" or not host_isas(), reason="x86 CPU instruction sets")

def test_default_is_the_hosts_best_and_unknown_names_are_refused():
  with Context(CPU_ISA=""): assert cpu_isa() == host_isas()[0]
  with Context(CPU_ISA="avx3"), pytest.raises(ValueError, match="CPU_ISA='avx3' is invalid"): cpu_isa()

def test_an_isa_the_host_cant_run_is_refused(monkeypatch):
  monkeypatch.setattr(ops_cpu, "host_isas", lambda: ["avx2", "sse4"])
  with Context(CPU_ISA="avx512"), pytest.raises(ValueError, match="can't run it; it runs avx2, sse4"): cpu_isa()

def test_each_isa_has_its_flags_and_its_cache_key():
  compilers = {isa: ClangCompiler(find_c_compiler(), False, isa) for isa in host_isas()}
  assert len({c.cachekey for c in compilers.values()}) == len(compilers)  # type: ignore[attr-defined]
  if "avx2" in compilers: assert "-mno-avx512f" in compilers["avx2"].args
  if "avx512" in compilers: assert "-mprefer-vector-width=512" in compilers["avx512"].args

@contextlib.contextmanager
def device_isa(isa: str):
  """The CPU device's renderer with isa's machine model meanwhile: what is scheduled then (a conv gradient's layout
  depends on the registers) is what a run at CPU_ISA=isa compiles."""
  dev = Device["CPU"]
  old, dev.renderer = dev.renderer, dataclasses.replace(dev.renderer, machine=cpu_machine(isa))
  try: yield dev.renderer
  finally: dev.renderer = old

@functools.cache
def _mnist_kernels(isa: str, min_iterations: float = 2e8, reduces: bool = True) -> list[tuple[str, UOp]]:
  """(name, AST) of the biggest kernel of a 512 and a 1024 matmul (bench sizes: b packed in panels, the wide tiles)
  and of the MNIST step's convolutions: its kernels of over 2e8 iterations (forward, input and weight gradients, split
  reduces included; min_iterations=0: all its reduce kernels), batch 512, from the step's own schedule at isa
  (scheduled, never run; reduces=False: its elementwise kernels too)."""
  with device_isa(isa) as ren:
    def biggest(t: Tensor) -> UOp: return max(t.schedule(), key=lambda si: get_program(si.ast, ren).flops).ast
    out = [(f"matmul {n}", biggest(Tensor.empty(n, n) @ Tensor.empty(n, n))) for n in (512, 1024)]
    model = Model()
    for p in get_parameters(model): p.replace(Tensor.empty(*p.shape, requires_grad=True))  # no init kernels
    with Tensor.train():
      loss = model(Tensor.empty(512, 1, 28, 28, dtype=dtypes.uint8)).sparse_categorical_crossentropy(
        Tensor.empty(512, dtype=dtypes.int32)).backward()
    for si in loss.schedule(*[p.grad for p in get_parameters(model) if p.grad is not None]):
      if si.ast.op is Ops.SINK and (not reduces or any(u.op is Ops.REDUCE for u in si.ast.toposort())) and \
         prod(range_size(u) for u in si.ast.toposort() if u.op is Ops.RANGE) > min_iterations:
        out.append((ansistrip(Kernel(si.ast, ren).name), si.ast))
  return out

def disassemble(lib: bytes) -> str:
  with tempfile.NamedTemporaryFile(suffix=".so") as f:
    f.write(lib)
    f.flush()
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", f.name], capture_output=True, text=True).stdout

def inner_loops(lib: bytes) -> list[list[str]]:
  """The instructions of each innermost loop of lib (a backward jump and what it jumps over)."""
  dis = disassemble(lib)
  ins = [(int(m.group(1), 16), m.group(2)) for m in re.finditer(r"^\s*([0-9a-f]+):\s+(.*)$", dis, re.M)]
  loops = [(int(m.group(1), 16), a) for a, t in ins if (m := re.match(r"j\w+\s+([0-9a-f]+) ", t)) and
           int(m.group(1), 16) <= a]
  inner = [(lo, hi) for lo, hi in loops if not any(lo <= l2 and h2 <= hi and (l2, h2) != (lo, hi) for l2, h2 in loops)]
  return [[t for a, t in ins if lo <= a <= hi] for lo, hi in inner]

def hot_loop(lib: bytes) -> list[str]:
  """The innermost loop with the most multiplies in lib."""
  return max(inner_loops(lib), key=lambda b: sum("mul" in t or "fmadd" in t for t in b), default=[])

def function_text(lib: bytes, name: str) -> list[str]:
  """The instructions ("address: text") of the function of lib whose symbol contains name."""
  funcs = re.split(r"\n(?=[0-9a-f]+ <)", disassemble(lib))
  return [ln.strip() for fn in funcs if re.match(rf"[0-9a-f]+ <[^>]*{name}[^>]*>:", fn) for ln in fn.splitlines()[1:]
          if re.match(r"\s*[0-9a-f]+:", ln)]

def stack_spills(loop: list[str]) -> list[str]:
  """The instructions of loop that move a vector register to or from the stack."""
  return [t for t in loop if "(%rsp" in t and "mm" in t]

@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) reads the compiled kernels")
@pytest.mark.parametrize("cc", [c for c in ("clang", "gcc") if shutil.which(c)])
@pytest.mark.parametrize("isa", host_isas())
def test_mnist_kernels_fit_the_registers(isa, cc):
  """gcc's too: its RTL GCSE once hoisted AVX2 conv1's weight broadcasts out of the output loops (46 stack loads)."""
  machine = cpu_machine(isa)
  ren = dataclasses.replace(Device["CPU"].renderer, machine=machine)  # the device's, threads included: one ISA's
  compiler = ClangCompiler([cc], ops_cpu.openmp_works([cc]), isa)
  # SSE4 (no FMA, two-operand multiplies) needs copies the model counts roughly
  checks_spills = machine.fma_units > 0
  assert len(_mnist_kernels(isa)) >= 12  # the matmul, the first conv's forward and weight gradient, 3 per other conv
  for name, ast in _mnist_kernels(isa):
    k = Kernel(merge_axes(simplify_gated_loads(fold_reduces(ast))), ren)
    opts = hand_coded_optimizations(k)
    for o in opts: k.apply_opt(o)
    assert tile_registers(k, _reduce_loads(k)) <= machine.vector_registers, (name, opts)
    p = get_program(ast, ren, opts)
    loop = hot_loop(compiler.compile(p.src))
    vector_ops = [t for t in loop if re.match(r"vfmadd\d+ps" if isa != "sse4" else r"mulps", t)]
    assert vector_ops, f"{name} ({isa}): no vector multiply-adds in the hot loop:\n" + "\n".join(loop)
    spills = stack_spills(loop)
    assert not checks_spills or not spills, f"{name} ({isa}): {len(spills)} spills in the hot loop, opts {opts}"

@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) reads the compiled kernels")
@pytest.mark.parametrize("cc", [c for c in ("clang", "gcc") if shutil.which(c)])
@pytest.mark.parametrize("isa", host_isas())
def test_max_pool_gradient_does_not_jump(isa, cc):
  """The MNIST step's max pool gradients send each window's gradient to its first max: floats selected by an integer
  comparison, which gcc compiled to a mispredicted jump per element (4x slower; the renderer now picks the bits by a
  mask). The hot loop has no conditional jump but its own back edge. (clang at AVX2 once set each float of a counted
  comparison from a jump per mask bit, 33 in the loop.)"""
  ren = dataclasses.replace(Device["CPU"].renderer, machine=cpu_machine(isa))
  compiler = ClangCompiler([cc], ops_cpu.openmp_works([cc]), isa)
  def picks(u: UOp) -> bool:
    return u.op is Ops.WHERE and u.dtype == dtypes.float32 and u.src[0].op is Ops.CMPNE and dtypes.is_int(u.src[0].src[0].dtype)
  # (of 1e6 iterations or more: the loss's kernels select too, and their gated loads do jump)
  picked = [ast for _, ast in _mnist_kernels(isa, 1e6, reduces=False) if any(picks(u) for u in ast.toposort())]
  assert len(picked) >= 2  # both pools' backward
  for ast in picked:
    body = function_text(compiler.compile(get_program(ast, ren).src), "_body")  # (its loops may be unrolled whole)
    jumps = [t for t in body if (m := re.match(r"j(?!mp)\w*\s+([0-9a-f]+) ", t.split(":", 1)[1].strip())) and
             int(m.group(1), 16) > int(t.split(":")[0], 16)]
    assert not jumps, "\n".join(body)  # (a loop's own jump goes back)

@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) reads the compiled kernels")
@pytest.mark.parametrize("cc", [c for c in ("clang", "gcc") if shutil.which(c)])
@pytest.mark.parametrize("isa", [i for i in host_isas() if i != "sse4"])
def test_eval_conv_pool_kernels_do_not_spill(isa, cc):
  """The MNIST eval's conv+BatchNorm+relu+max pool kernels (the pool's max accumulators live across the conv's sum),
  compiled by clang and by gcc: the tile doesn't spill in the hot loop (gcc at AVX2 reloads 2 values per iteration
  there, as fast as clang). gcc's loop vectorizer once spilled the AVX-512 tile (73 stack references, 1.4x clang's
  time); the renderer turns it off for register tiles."""
  ren = dataclasses.replace(Device["CPU"].renderer, machine=cpu_machine(isa))
  compiler = ClangCompiler([cc], ops_cpu.openmp_works([cc]), isa)
  model = Model()
  for p in get_parameters(model): p.replace(Tensor.empty(*p.shape))
  fused = [si.ast for si in model(Tensor.empty(512, 1, 28, 28)).schedule()
           if si.ast.op is Ops.SINK and sum(u.op is Ops.REDUCE for u in si.ast.toposort()) >= 2 and
           prod(range_size(u) for u in si.ast.toposort() if u.op is Ops.RANGE) > 1e8]
  assert len(fused) == 2  # both convolution blocks
  for ast in fused:
    loop = hot_loop(compiler.compile(get_program(ast, ren).src))
    spills = stack_spills(loop)
    assert [t for t in loop if "vfmadd" in t] and len(spills) <= 2, f"{cc} {isa}: {len(spills)} spills\n" + \
      "\n".join(loop)

@pytest.mark.parametrize("isa", host_isas())
def test_short_pooled_axis_is_tiled_whole(isa):
  """The eval's conv4 + max pool kernel (3 x 3 pooled windows): with 32 vector registers its tile takes a row's 3
  windows whole (their loads 512 bytes apart), not 8 images (16 KB apart; 179 -> 133 ms an evaluation, AVX-512 on
  Zen 4); with 16 the 2 vectors x 3 would fill over half the registers, and it stays on images."""
  ren = dataclasses.replace(Device["CPU"].renderer, machine=cpu_machine(isa))
  model = Model()
  for p in get_parameters(model): p.replace(Tensor.empty(*p.shape))
  kernels = [Kernel(merge_axes(simplify_gated_loads(fold_reduces(si.ast))), ren)
             for si in model(Tensor.empty(512, 1, 28, 28)).schedule() if si.ast.op is Ops.SINK]
  (k,) = [k for k in kernels if [range_size(r) for r in k.output_axes()][2:] == [3, 3]]
  opts = hand_coded_optimizations(k)
  assert (Opt(OptOps.UPCAST, 3, 3) in opts) == (ren.machine.vector_registers >= 32), opts
  assert ren.machine.vector_registers < 32 or not any(o.op is OptOps.UPCAST and (o.axis, o.arg) == (0, 8) for o in opts)

@pytest.mark.parametrize("isa", host_isas())
def test_tile_keeps_reread_loads_in_few_l1_sets(isa):
  """The training step's conv4 forward (NHWC input, 16 KB an image): the tile takes at most half the L1's ways of
  images, whose loads all fall in the same sets and are read again for the next output channels (8 images: 9.0 ms,
  4: 6.5-7.3 ms, AVX-512 on Zen 4, whose L1 is 32 KB in 8 ways)."""
  ren = dataclasses.replace(Device["CPU"].renderer, machine=dataclasses.replace(cpu_machine(isa), l1d=32768, l1_ways=8))
  model = Model()
  for p in get_parameters(model): p.replace(Tensor.empty(*p.shape))
  with Tensor.train(): schedule = model(Tensor.empty(512, 1, 28, 28)).schedule()
  kernels = [Kernel(merge_axes(simplify_gated_loads(fold_reduces(si.ast))), ren) for si in schedule
             if si.ast.op is Ops.SINK]
  (k,) = [k for k in kernels if k.reduce_op and [range_size(r) for r in k.output_axes()] == [512, 64, 6, 6]]
  images = [o.arg for o in hand_coded_optimizations(k) if o.op is OptOps.UPCAST and o.axis == 0]
  assert images and max(images) <= 4, images

@pytest.mark.parametrize("isa", [i for i in host_isas() if i != "sse4"])
def test_weight_gradient_tiles_its_taps_over_vector_lanes(isa):
  """MNIST's conv1 weight gradient (1 input channel, 5 x 5, its reduce's 24 columns in vector lanes): the tile takes
  the 5 taps along the columns whole (a vector load each, the output gradient's vectors shared by them), not 8 output
  channels (8 gradient loads per input load): 5.7-6.2 -> 3.9-4.3 ms at AVX-512, 5.9-6.2 -> 4.6-4.8 at AVX2 (Zen 4).
  Output channels take the registers left, more than half of them (no window stays live along lanes): AVX-512's 4
  channels, not 2, gcc 5.0 -> 3.6 ms, clang 3.8 -> 3.4."""
  ren = dataclasses.replace(Device["CPU"].renderer, machine=cpu_machine(isa))
  w, x = Tensor.empty(32, 1, 5, 5, requires_grad=True), Tensor.empty(512, 1, 28, 28, requires_grad=True)
  out = x.conv2d(w).relu().sum()
  out.backward()
  kernels = [Kernel(merge_axes(simplify_gated_loads(fold_reduces(si.ast))), ren) for si in out.schedule(w.grad)
             if si.ast.op is Ops.SINK]
  (k,) = [k for k in kernels if k.reduce_op and [range_size(r) for r in k.output_axes()][1:] == [32, 5, 5]]
  opts = hand_coded_optimizations(k)
  assert Opt(OptOps.UPCAST, 3, 5) in opts and any(o.op is OptOps.LANES for o in opts), opts
  channels = prod(o.arg for o in opts if o.op is OptOps.UPCAST and o.axis == 1)
  assert channels * 5 > ren.machine.vector_registers // 2, opts

def test_pool_gradient_upcasts_its_window():
  """A max pool's gradient (elementwise, loading the pooled value and its gradient at y // 2, x // 2) takes a 2 x 2
  tile, each of those loads serving the window's 4 outputs (MNIST's conv4 block, 6 x 6 images: 1.09 -> 0.37 ms with
  clang at AVX-512, where the plain loop's scalar code ran 2.5x slower than the same loop built for AVX2)."""
  x = Tensor.empty(512, 64, 6, 6, requires_grad=True)
  x.relu().max_pool2d().square().sum().backward()
  kernels = [Kernel(merge_axes(simplify_gated_loads(fold_reduces(si.ast))), Device["CPU"].renderer)
             for si in x.grad.schedule() if si.ast.op is Ops.SINK]
  (k,) = [k for k in kernels if not k.reduce_op and [range_size(r) for r in k.output_axes()][-2:] == [6, 6]]
  opts, n = hand_coded_optimizations(k), len(k.output_axes())  # (the batch and channels may be merged into one axis)
  assert Opt(OptOps.UPCAST, n - 1, 2) in opts and Opt(OptOps.UPCAST, n - 2, 2) in opts, opts
  torch, np = pytest.importorskip("torch"), pytest.importorskip("numpy")  # the tiled kernel's values: torch's
  for shape, size in [((512, 64, 6, 6), 2), ((16, 32, 30, 30), 3)]:
    a = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    x, t = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    x.relu().max_pool2d(size).square().sum().backward()
    torch.nn.functional.max_pool2d(t.relu(), size).square().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-6)

@pytest.mark.parametrize("isa", [i for i in host_isas() if i != "sse4"])
def test_pool_window_left_to_reduce_is_unrolled_whole(isa):
  """MNIST's batch norm + relu + 2 x 2 max pool forward: after the window's columns go to vector lanes, its 2 rows are
  the only reduce left; they are unrolled whole (no loop left to carry the tile's registers), not kept as a 2-trip
  loop: 2.3-2.4 -> 1.8-2.1 ms a kernel with gcc at both ISAs, 2.4 -> 1.8 ms with clang at AVX-512 (Zen 4)."""
  ren = dataclasses.replace(Device["CPU"].renderer, machine=cpu_machine(isa))
  x = Tensor.empty(512, 32, 20, 20)
  with Tensor.train(): out = nn.BatchNorm(32)(x).relu().max_pool2d()
  kernels = [Kernel(merge_axes(simplify_gated_loads(fold_reduces(si.ast))), ren) for si in out.schedule()
             if si.ast.op is Ops.SINK]
  (k,) = [k for k in kernels if k.reduce_op and [range_size(r) for r in k.reduce_axes()] == [2, 2]]
  opts = hand_coded_optimizations(k)
  assert any(o.op is OptOps.LANES for o in opts) and Opt(OptOps.UNROLL, 0, 2) in opts, opts
  torch, np = pytest.importorskip("torch"), pytest.importorskip("numpy")  # the unrolled kernel's values: torch's
  a = np.random.default_rng(0).standard_normal((16, 32, 20, 20), dtype=np.float32)
  with Tensor.train(): got = nn.BatchNorm(32)(Tensor(a)).relu().max_pool2d().numpy()
  ref = torch.nn.functional.max_pool2d(torch.nn.BatchNorm2d(32).train()(torch.tensor(a)).relu(), 2)
  np.testing.assert_allclose(got, ref.detach().numpy(), rtol=1e-5, atol=1e-5)

CONVS = [(1, 3, 16, 3, 32), (16, 16, 32, 3, 16), (128, 32, 32, 5, 28), (16, 64, 64, 1, 14), (8, 8, 8, 7, 20),
         (64, 64, 128, 3, 14)]  # (batch, in channels, out channels, kernel size, image size)
# known spills of the unroll pass, left (AMD Zen 4, AVX-512, -mtune=generic): clang's on the 7x7 forward with its
# window unrolled whole, measured faster than not unrolled (batch 32: 0.48 against 0.54 ms). (gcc's on a 3x3 gradient
# unrolled by 3 went with the unroll of tiles filling half the registers: heuristic._unroll, December 6.)
SPILLS = {("avx512", "clang", (8, 8, 8, 7, 20))}

@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) reads the compiled kernels")
@pytest.mark.parametrize("conv", CONVS)
@pytest.mark.parametrize("cc", [c for c in ("clang", "gcc") if shutil.which(c)])
@pytest.mark.parametrize("isa", [i for i in host_isas() if i != "sse4"])
def test_conv_kernels_of_other_shapes_fit_the_registers(isa, cc, conv, request):
  """Beyond the MNIST step: the forward and both gradients of convolutions of 1x1 to 7x7 kernels, batch 1 to 128, have
  vector accumulators within the machine model and no spill in the hot loop. A heuristic tuned on one model's layers
  once dropped a plain 5x5 conv's forward at batch 128 to a scalar 4x4x4 tile (3x slower)."""
  if (isa, cc, conv) in SPILLS: request.applymarker(pytest.mark.xfail(reason="spills, faster than without the unroll"))
  ren = dataclasses.replace(Device["CPU"].renderer, machine=cpu_machine(isa))
  compiler = ClangCompiler([cc], ops_cpu.openmp_works([cc]), isa)
  b, cin, cout, size, hw = conv
  w, x = Tensor.empty(cout, cin, size, size, requires_grad=True), Tensor.empty(b, cin, hw, hw, requires_grad=True)
  out = x.conv2d(w).relu().sum()
  with device_isa(isa):
    out.backward()
    schedule = out.schedule(w.grad, x.grad)
  for si in schedule:
    if si.ast.op is not Ops.SINK or prod(range_size(u) for u in si.ast.toposort() if u.op is Ops.RANGE) < 1e6 or \
       not any(u.op is Ops.REDUCE for u in si.ast.toposort()): continue
    k = Kernel(merge_axes(simplify_gated_loads(fold_reduces(si.ast))), ren)
    opts = hand_coded_optimizations(k)
    for o in opts: k.apply_opt(o)
    assert tile_registers(k, _reduce_loads(k)) <= ren.machine.vector_registers, opts
    assert vector_range(k.stores()[0]) is not None or k.ranges_of(AxisType.LANES), opts
    loop = hot_loop(compiler.compile(get_program(si.ast, ren, opts).src))
    spills = stack_spills(loop)
    assert not spills, f"{cc} {isa}: {len(spills)} spills, opts {opts}"

@pytest.mark.parametrize("isa", host_isas())
def test_conv_input_gradient_tiles_images(isa):
  """MNIST conv2's input gradient (512 images of 24 x 24, 32 channels, 5 x 5): the tile takes 4 images x 2 vectors,
  not columns (8 images with 32 vector registers: 57 against 49 ms, Zen 4), and the output gradient is read unpadded:
  both window loops are bounded to the taps inside the image (bound_gated_reduces), where the columns padded in memory
  cost 20% more multiply-adds (AVX2, Zen 5: 57 -> 47 ms; AVX-512, Zen 4: 57 -> 54 ms), and run outside the channels'
  loop, which the gradient holds contiguously (a whole loop of 32 innermost, not 1-5 taps; not unrolled)."""
  x, w = Tensor.empty(512, 32, 24, 24, requires_grad=True), Tensor.empty(32, 32, 5, 5, requires_grad=True)
  out = x.conv2d(w)
  with device_isa(isa) as ren:
    (out * out).sum().backward()
    (si,) = [si for si in x.grad.schedule() if si.ast.op is Ops.SINK and si.bufs[0].size == x.numel()
             and any(u.op is Ops.REDUCE for u in si.ast.toposort())]
  k = Kernel(merge_axes(simplify_gated_loads(fold_reduces(si.ast))), ren)
  opts = hand_coded_optimizations(k)
  assert Opt(OptOps.UPCAST, 0, 4) in opts and not any(o.op is OptOps.UNROLL for o in opts), opts  # the batch axis
  assert si.bufs[1].size == 512 * 32 * 20 * 20  # the output gradient, unpadded
  uops = get_program(si.ast, ren, opts).uops
  assert not any(u.op is Ops.LOAD and len(u.src) > 2 for u in uops)  # no gate
  # the window's two loops (run-time counts) outside the 32 channels, which the output gradient holds contiguously
  counts = [u.src[0].arg if u.src[0].op is Ops.CONST else None for u in uops if u.op is Ops.RANGE]
  assert counts[-3:] == [None, None, 32], counts

@pytest.mark.parametrize("isa", host_isas())
def test_conv_input_gradient_with_little_padding_keeps_its_column_tile(isa):
  """A 3 x 3 conv padded by 1 on 32 x 32 images: its input gradient pads each row by 2 columns of 34, 6% zeros; with
  32 vector registers the gradient keeps that padding in memory and the tile of columns (images in the tile, their
  8 rows 256 KB apart in one L1 set: 265 -> 207 GFLOPS fwd + both grads, Zen 4, AVX-512); with 16, images as always."""
  x, w = Tensor.empty(64, 64, 32, 32, requires_grad=True), Tensor.empty(64, 64, 3, 3, requires_grad=True)
  out = x.conv2d(w, padding=1)
  with device_isa(isa) as ren:
    (out * out).sum().backward()
    si = [si for si in x.grad.schedule() if si.ast.op is Ops.SINK and si.bufs[0].size == x.numel()
          and any(u.op is Ops.REDUCE for u in si.ast.toposort())][-1]  # (the forward conv's output is as big)
  few = ren.machine.vector_registers <= 16
  assert si.bufs[1].size == 64 * 64 * 32 * (32 if few else 34)  # the output gradient, its columns padded in memory
  opts = hand_coded_optimizations(Kernel(merge_axes(simplify_gated_loads(fold_reduces(si.ast))), ren))
  assert (Opt(OptOps.UPCAST, 3, 4) in opts) != few, opts  # 4 columns in the tile, not images

@pytest.mark.parametrize("isa", host_isas())
def test_padded_nchw_conv_keeps_its_window_loops_innermost(isa):
  """A padded forward conv on NCHW images (channels a plane apart): with images tiled (16 registers), its window loops
  stay inside the channels' loop (moved outside it, the channels' loop read 32 planes 3 KB apart: AVX2, Zen 4, 180 ->
  130 GFLOPS); with 32, the tile stays along the columns (8 images: 215 -> 165 GFLOPS at AVX-512)."""
  with device_isa(isa) as ren:
    out = Tensor.empty(128, 32, 28, 28).conv2d(Tensor.empty(32, 32, 5, 5), padding=2)
    si = [si for si in out.schedule() if si.ast.op is Ops.SINK][-1]
  counts = [u.src[0].arg if u.src[0].op is Ops.CONST else None for u in get_program(si.ast, ren).uops
            if u.op is Ops.RANGE]
  assert counts[-3:] == ([32, None, None] if ren.machine.vector_registers <= 16 else [32, None, 5]), counts

@pytest.mark.parametrize("isa", host_isas())
def test_transposed_tile_is_built_by_shuffles(isa):
  """An elementwise kernel reading NCHW and writing NHWC (a batch norm's backward into a channel-last gradient) reads
  an n x n tile along the channels and transposes it in registers: n log2(n) two-vector shuffles, not a vector built
  lane by lane from n others (gcc moved each lane through memory: 278 scalar moves for MNIST's 8 x 8 tiles at AVX2)."""
  with device_isa(isa) as ren:
    t = (Tensor.empty(16, 32, 400).permute(0, 2, 1) + Tensor.empty(16, 400, 32)).relu()
    (si,) = [si for si in t.schedule() if si.ast.op is Ops.SINK]
  src = get_program(si.ast, ren).src
  assert "= FG_SHUFFLE(val" in src and not re.search(r"\{val\d+\[\d+\], val\d+\[", src), src

@pytest.mark.parametrize("isa", host_isas())
def test_big_matmul_tile_keeps_the_fma_units_busy(isa):
  """A big matmul's tile holds more accumulators than its FMA units keep in flight (units x latency), within the
  registers: at AVX2 (2 units, 4 cycles) 4 rows x 3 vectors, the columns padded to a multiple of 3 vectors (4 x 2 took
  1.03-1.13x the time on Zen 4 at 1024 and 2048, docs/speed.md, "December 7, 22:15"); Zen 4 runs one AVX-512 FMA a
  cycle, its 4 x 2 zmm are enough. The product (rows and columns no tile divides) is NumPy's."""
  machine, rng = cpu_machine(isa), np.random.default_rng(0)
  a, b = rng.standard_normal((1000, 1024), dtype=np.float32), rng.standard_normal((1024, 1016), dtype=np.float32)
  with device_isa(isa) as ren:
    t = Tensor(a) @ Tensor(b)
    ast = max((si.ast for si in t.schedule() if si.ast.op is Ops.SINK), key=lambda x: get_program(x, ren).flops)
    np.testing.assert_allclose(t.numpy(), a @ b, rtol=1e-3, atol=1e-3)
  k = Kernel(merge_axes(simplify_gated_loads(fold_reduces(ast))), ren)
  for o in (opts := hand_coded_optimizations(k)): k.apply_opt(o)
  assert machine.fma_units * machine.fma_latency < k.upcast_size() // machine.vector(4), opts
  assert tile_registers(k, _reduce_loads(k)) <= machine.vector_registers, opts

@pytest.mark.parametrize("isa", host_isas())
def test_big_row_reduce_streams_128_bytes_of_a_row_a_step(isa):
  """A row sum whose rows are a page or more and that reads more than the L2 holds: each row's elements in vector
  lanes, unrolled to read STREAM (128) bytes of the row a step, no more, one row per thread at a time (the 4096 x 4096
  sums on Zen 4 through TinyJit: 512 bytes a step took 1.04-1.25x the time with gcc and with clang at AVX-512, about
  the same with clang at AVX2: docs/speed.md, "December 7, 19:45"); short rows, or a matrix that fits the L2, keep
  the usual unroll (at most 4 steps, or short rows whole). A sum of exps (softmax's) is bound by computing the exps,
  not by the memory: 4 x STREAM bytes a step where that many loads fit the registers (AVX-512), else one vector
  (AVX2). Against STREAM bytes a step that took 0.88-0.91x the time (gcc at AVX-512: the same). The sums are NumPy's."""
  l2 = cpu_machine(isa).l2
  for rows, cols, streams in ((l2 // 1024, 1024, True), (l2 // 8192, 1024, False), (l2 // 64, 256, False)):
    x = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    for exp, step in ((False, STREAM), (True, 4 * STREAM)):
      with device_isa(isa) as ren:
        t = (Tensor(x).exp() if exp else Tensor(x)).sum(1)
        (si,) = [si for si in t.schedule() if si.ast.op is Ops.SINK]
        opts = get_program(si.ast, ren).applied_opts
        np.testing.assert_allclose(t.numpy(), (np.exp(x) if exp else x).sum(1), rtol=1e-4, atol=1e-4)
      (lanes,) = [o.arg for o in opts if o.op is OptOps.LANES]
      unroll = next((o.arg for o in opts if o.op is OptOps.UNROLL), 1)
      assert not any(o.op is OptOps.UPCAST for o in opts), (rows, cols, exp, opts)
      if streams and step // (lanes * 4) + 1 > cpu_machine(isa).vector_registers: assert unroll == 1, (exp, opts)
      elif streams: assert STREAM == 128 and unroll * lanes * 4 == step, (rows, cols, exp, opts)
      else: assert unroll <= 4 or unroll * lanes == cols, (rows, cols, exp, opts)

@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) reads the compiled kernels")
@pytest.mark.parametrize("cc", [c for c in ("clang", "gcc") if shutil.which(c)])
@pytest.mark.parametrize("isa", host_isas())
def test_long_integer_reduces_keep_a_loop_the_compiler_vectorizes(isa, cc):
  """A row's argmax (its index: an integer max), a count into int64, an int32 row max and any() (a byte max) over 1024
  elements: no vector lanes (a reduce into integers keeps scalar accumulators, 16 elements apart: 2-7x slower), the
  plain loop, which clang and gcc make vectors of: the hot loop computes on packed integers. The results are NumPy's."""
  compiler = ClangCompiler([cc], ops_cpu.openmp_works([cc]), isa)
  x = np.random.default_rng(0).integers(-50, 50, (64, 1024), dtype=np.int32)
  for f, ref in ((lambda t: t.float().argmax(1), x.argmax(1)), (lambda t: (t == 3).sum(1), (x == 3).sum(1)),
                 (lambda t: t.max(1), x.max(1)), (lambda t: (t > 48).any(1), (x > 48).any(1))):
    with device_isa(isa) as ren:
      t = f(Tensor(x))
      ast = [si.ast for si in t.schedule() if si.ast.op is Ops.SINK][-1]  # (argmax: the max first, then the index)
      p = get_program(ast, ren)
      np.testing.assert_equal(t.numpy(), ref)
    assert not any(o.op is OptOps.LANES for o in p.applied_opts), p.applied_opts
    loop = max(inner_loops(compiler.compile(p.src)), key=len)
    assert any(re.match(r"v?p(cmp|max|add|sub|and|blend|min)\w*\s.*%[xyz]mm", t) for t in loop), "\n".join(loop)

@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) reads the compiled kernels")
@pytest.mark.parametrize("cc", [c for c in ("clang", "gcc") if shutil.which(c)])
@pytest.mark.parametrize("isa", host_isas())
def test_narrow_elementwise_kernels_take_16_bytes_a_step(isa, cc):
  """An elementwise kernel's step (a call of its body per iteration of the threaded loop) covers 16 bytes of its
  widest values, 4 elements at least: uint8 and int8 16, int16 8, float32 (and a float32 cast to uint8) 4. With 4
  bytes a step a uint8 add paid a call per 4 bytes (4.7 ms for 16M, clang; 1.0 with 16); its body adds the 16 bytes
  with one packed add. The results are NumPy's."""
  compiler = ClangCompiler([cc], ops_cpu.openmp_works([cc]), isa)
  rng = np.random.default_rng(0)
  add = lambda a, b: a + b  # noqa: E731 (the same code for tensors and arrays)
  to_bytes = (lambda a, b: (a * 2).cast(dtypes.uint8), lambda a, b: (a * 2).astype(np.uint8))  # (in range: no wrap)
  for dt, (f, ref), step in ((np.uint8, (add, add), 16), (np.int8, (add, add), 16), (np.int16, (add, add), 8),
                             (np.float32, (add, add), 4), (np.float32, to_bytes, 4)):
    x, y = (rng.integers(0, 60, (256, 1024)).astype(dt) for _ in range(2))
    with device_isa(isa) as ren:
      t = f(Tensor(x), Tensor(y))
      (si,) = [si for si in t.schedule() if si.ast.op is Ops.SINK]
      p = get_program(si.ast, ren)
      np.testing.assert_equal(t.numpy(), ref(x, y))
    assert [o.arg for o in p.applied_opts if o.op is OptOps.UPCAST] == [step], (dt, p.applied_opts)
    if step == 16:
      body = function_text(compiler.compile(p.src), "_body")
      assert any(re.search(r"\sv?paddb\s", t) for t in body), "\n".join(body)
