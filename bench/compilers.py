"""The same kernels compiled by each of the CPU device's compilers (clang and gcc where both are installed).

For the kernels of a training step (matmul, convolution forward and both gradients, a row sum), each with the
heuristic's opts, prints GFLOPS with each compiler (best of REPEATS runs, process CPU time, so run it with
CPU_THREADS=1 on a shared machine), the time ratio, and the compiler the heuristic picks (codegen/heuristic.py
pick_compiler). BEAM=n searches the compiler along with the other opts.
"""
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from typing import Iterator
from fusegrad import Tensor, Device
from fusegrad.uop.ops import UOp
from fusegrad.codegen import Kernel, Opt, OptOps, get_program
from fusegrad.codegen.heuristic import hand_coded_optimizations, pick_compiler
from fusegrad.codegen.lower import merge_axes, simplify_gated_loads
from fusegrad.codegen.fold import fold_reduces
from fusegrad.engine.search import _buffers_for
from fusegrad.engine.runner import CompiledRunner
from fusegrad.helpers import getenv

REPEATS = getenv("REPEATS", 7)

def biggest(t: Tensor) -> UOp:
  ren = Device["CPU"].renderer
  return max(t.schedule(), key=lambda si: get_program(si.ast, ren).flops).ast

def kernels() -> Iterator[tuple[str, UOp]]:
  Tensor.manual_seed(0)
  yield "matmul 512", biggest(Tensor.rand(512, 512) @ Tensor.rand(512, 512))
  for cin, cout, k, hw in ((32, 32, 5, 24), (32, 64, 3, 12), (64, 64, 3, 10)):
    x, w = Tensor.rand(32, cin, hw, hw, requires_grad=True), Tensor.rand(cout, cin, k, k, requires_grad=True)
    out = x.conv2d(w)
    yield f"conv {cin}->{cout} {k}x{k} forward", biggest(out)
    out.sum().backward()
    assert x.grad is not None and w.grad is not None
    yield f"conv {cin}->{cout} {k}x{k} input grad", biggest(x.grad)
    yield f"conv {cin}->{cout} {k}x{k} weight grad", biggest(w.grad)
  yield "rand + row sum 2048x2048", biggest(Tensor.rand(2048, 2048).sum(axis=1))

def seconds(runner: CompiledRunner, bufs: list) -> float:
  vals = {v: v.arg[1] for v in runner.p.vars}
  best = float("inf")
  for _ in range(REPEATS):
    st = time.process_time()
    runner(bufs, vals, wait=True)
    best = min(best, time.process_time() - st)
  return best

def main() -> None:
  ren = Device["CPU"].renderer
  if len(ren.compilers) < 2: sys.exit(f"the CPU device has one compiler ({ren.compilers[0]}): nothing to compare")
  print(f"compilers {ren.compilers}; CPU_THREADS={os.environ.get('CPU_THREADS', 'all')}; load {os.getloadavg()[0]:.1f}")
  names = ren.compilers[:2]
  for name, ast in kernels():
    k = Kernel(merge_axes(simplify_gated_loads(fold_reduces(ast))), ren)
    opts, bufs = hand_coded_optimizations(k), _buffers_for(k)
    times = [seconds(CompiledRunner(get_program(ast, ren, opts + ([Opt(OptOps.COMPILER, 0, i)] if i else []))), bufs)
             for i in range(2)]
    flops = get_program(ast, ren, opts).flops
    picked = names[pick_compiler(k)[0].arg] if pick_compiler(k) else names[0]
    rates = [f"{names[i]} {flops / times[i] * 1e-9:7.1f} GFLOPS" for i in range(2)]
    print(f"{name:28s} {'  '.join(rates)}  {names[1]}/{names[0]} time {times[1] / times[0]:5.2f}  heuristic: {picked}")

if __name__ == "__main__": main()
