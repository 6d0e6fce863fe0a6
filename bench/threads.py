"""What threads do for each kernel of the jitted MNIST training step, measured so a shared machine doesn't hide it.

  CPU_THREADS=1 python bench/threads.py --json t1.json
  CPU_THREADS=2 python bench/threads.py --json t2.json --compare t1.json

On a shared machine the wall time of a 2-thread kernel says little: the scheduler shares the CPUs between sessions
(autogroups), so a process with two threads may get no more than one core while others are busy. This times each
kernel of the step by the CPU time of every thread of the process (per-thread CPU clocks), best of N runs: `crit` is
the busiest thread's time (what the kernel would take with a core per thread), `cpu` the sum over threads (the work,
with whatever threading costs), `wait` the time threads spent runnable but not running (/proc schedstat).
"""
from __future__ import annotations
import argparse, json, os, re, sys, time
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

def thread_times() -> dict[str, tuple[int, int]]:
  """Each thread of this process: (CPU time, run-queue wait time), in ns."""
  out = {}
  for tid in os.listdir("/proc/self/task"):
    try:  # the CPU clock of a thread: clockid (~tid << 3) | 6 (Linux: CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD)
      cpu = time.clock_gettime_ns(((~int(tid)) << 3) | 6)
      with open(f"/proc/self/task/{tid}/schedstat") as f: wait = int(f.read().split()[1])
    except OSError: continue
    out[tid] = (cpu, wait)
  return out

def measure(bs: int, n: int) -> list[dict]:
  import run
  from fusegrad.engine.runner import CompiledRunner
  step = run.mnist_step("fusegrad", bs)
  assert step is not None
  for _ in range(3): step()
  jit = next(c.cell_contents for c in step.__closure__ or () if hasattr(c.cell_contents, "jit_cache"))
  rows = []
  for ei in jit.jit_cache:
    best: dict | None = None
    for _ in range(n):
      t0 = thread_times()
      ei.run(wait=True)
      t1 = thread_times()
      d = [(t1[k][0] - t0[k][0], t1[k][1] - t0[k][1]) for k in t1 if k in t0 and t1[k][0] > t0[k][0]]
      rec = {"crit": max((c for c, _ in d), default=0) / 1e9, "cpu": sum(c for c, _ in d) / 1e9,
             "wait": sum(w for _, w in d) / 1e9, "threads": len(d)}
      if best is None or rec["crit"] < best["crit"]: best = rec
    assert best is not None
    name = re.sub(r"\x1b\[[0-9;]*m", "", ei.runner.name)
    applied = ei.runner.p.applied_opts if isinstance(ei.runner, CompiledRunner) else []
    opts = [f"{o.op.name}{o.axis},{o.arg}" for o in applied]
    rows.append({"kernel": name, "opts": opts, **best})
  return rows

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--bs", type=int, default=512)
  p.add_argument("--runs", type=int, default=5, help="runs per kernel (the best is kept)")
  p.add_argument("--top", type=int, default=15, help="kernels to list (the most CPU time first)")
  p.add_argument("--json", default="", help="write the rows here")
  p.add_argument("--compare", default="", help="a JSON file of another run (e.g. CPU_THREADS=1) to list beside")
  args = p.parse_args()
  rows = measure(args.bs, args.runs)
  if args.json:
    with open(args.json, "w") as f: json.dump(rows, f)
  ref = json.load(open(args.compare)) if args.compare else None
  order = sorted(range(len(rows)), key=lambda i: -rows[i]["cpu"])
  head = f"{'kernel':40s} {'crit ms':>8s} {'cpu ms':>8s} {'thr':>3s}"
  print(head + (f" {'ref crit':>8s} {'ref cpu':>8s}" if ref else ""))
  for i in order[:args.top]:
    r = rows[i]
    extra = f" {ref[i]['crit'] * 1e3:8.2f} {ref[i]['cpu'] * 1e3:8.2f}" if ref and i < len(ref) else ""
    print(f"{r['kernel'][:40]:40s} {r['crit'] * 1e3:8.2f} {r['cpu'] * 1e3:8.2f} {r['threads']:3d}{extra}  "
          + " ".join(r["opts"]))
  tot = {k: sum(r[k] for r in rows) for k in ("crit", "cpu", "wait")}
  print(f"CPU_THREADS={os.environ.get('CPU_THREADS', 'all')}, {len(rows)} kernels: "
        f"critical path {tot['crit'] * 1e3:.1f} ms, "
        f"CPU {tot['cpu'] * 1e3:.1f} ms, run-queue wait {tot['wait'] * 1e3:.1f} ms (load {os.getloadavg()[0]:.1f})")

if __name__ == "__main__": main()
