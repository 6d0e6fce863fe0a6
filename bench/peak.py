"""The machine's peak: float32 multiply-adds per second on every core, at each instruction set the host runs, so
DEBUG=2's GFLOPS (and bench/run.py's) can be read as a fraction of what the cores can do.

  python bench/peak.py            # prints one line per ISA: GFLOPS on 1 thread and on all cores

A C loop of 12 independent vector multiply-add chains per thread (enough to cover the FMA latency on any x86 core),
compiled by the CPU device's compiler with its ISA flags (CPU_ISA), run on 1 thread and on all cores (OpenMP).
The median of 5 runs; in a VM the result moves with the host's load and clock (AMD EPYC Zen 4, 2 vCPUs: 197-232
GFLOPS with AVX-512 over a minute)."""
import os, statistics, subprocess, sys, tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fusegrad.helpers import Context
from fusegrad.runtime.ops_cpu import ISAS, cpu_machine, find_c_compiler, host_isas

SRC = r"""
#include <stdio.h>
#include <omp.h>
typedef float vec __attribute__((vector_size(%(bytes)d)));
int main(int argc, char **argv) {
  long steps = 20000000; int threads = %(threads)d; double sum = 0;
  double t0 = omp_get_wtime();
  #pragma omp parallel num_threads(threads) reduction(+:sum)
  {
    vec a[12], b, c;
    for (int l = 0; l < %(lanes)d; l++) { b[l] = 1.0000001f; c[l] = 1e-7f; }
    for (int i = 0; i < 12; i++) for (int l = 0; l < %(lanes)d; l++) a[i][l] = (float)i;
    for (long n = 0; n < steps; n++) {
      #pragma GCC unroll 12
      for (int i = 0; i < 12; i++) a[i] = a[i] * b + c;
    }
    for (int i = 0; i < 12; i++) for (int l = 0; l < %(lanes)d; l++) sum += a[i][l];
  }
  double t = omp_get_wtime() - t0;
  printf("%%f %%f\n", 2.0 * steps * 12 * %(lanes)d * threads / t / 1e9, sum);
  return 0;
}
"""

def peak(isa: str, threads: int, runs: int = 5) -> float:
  """Median GFLOPS of the multiply-add loop at isa on `threads` threads."""
  cc, machine = find_c_compiler(), cpu_machine(isa)
  src = SRC % {"bytes": machine.vector_bytes, "lanes": machine.vector_bytes // 4, "threads": threads}
  with tempfile.TemporaryDirectory() as tmp:
    exe = os.path.join(tmp, "peak")
    flags = ["-O2", "-march=native", "-ffp-contract=fast", "-fopenmp", *ISAS[isa][3]]
    subprocess.run([*cc, *flags, "-x", "c", "-", "-o", exe], input=src.encode(), check=True)
    return statistics.median(float(subprocess.run([exe], capture_output=True, text=True, check=True).stdout.split()[0])
                             for _ in range(runs))

if __name__ == "__main__":
  cores = os.cpu_count() or 1
  print(f"compiler: {' '.join(find_c_compiler())}; {cores} cores")
  for isa in host_isas():
    with Context(CPU_ISA=isa):
      print(f"{isa:7s} {peak(isa, 1):7.1f} GFLOPS on 1 thread, {peak(isa, cores):7.1f} on {cores}")
