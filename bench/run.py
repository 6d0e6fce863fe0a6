"""fusegrad against PyTorch, NumPy and tinygrad on the workloads of the CPU speed table, in one command.

  python bench/run.py            # short run (a few minutes): smaller sizes, few repeats
  python bench/run.py --full     # the sizes of the table (MNIST batch 512, matmul up to 2048, 4096x4096 reductions)
  python bench/run.py --only matmul,softmax --json out.json

Setup: `pip install -e .[testing]`, plus `pip install --no-deps tinygrad==0.14.0` for its column (absent: skipped with
a note). Every implementation runs in this one process, each through its JIT after warm-up (fusegrad's and
tinygrad's TinyJit; PyTorch and NumPy eagerly). They take turns, round after round: in its turn an implementation
makes calls back to back for at least 20 ms (one call where a call takes longer; the count is fixed at warm-up), and
the median over the rounds of its time per call is reported. Every thread pool spins about 1 ms after its last
parallel region, then sleeps (OMP_WAIT_POLICY=PASSIVE with GOMP_SPINCOUNT=100000 for PyTorch's OpenMP, KMP_BLOCKTIME=1
for fusegrad's, OPENBLAS_THREAD_TIMEOUT=20 for NumPy's OpenBLAS: set before any of them loads, about 1 ms each, where
their defaults spin up to 200 ms), and the turns are 3 ms apart (a busy wait: in this VM a core that sleeps runs
the next few milliseconds of work at about half speed), so no library's spinning workers take the cores from the
next one's turn. The "first step" row
runs each framework in a fresh subprocess with an empty compile cache (cold), then in another with the cache
the first filled (warm). tinygrad's MNIST rows run with --full only
(its cold compile of the training step takes minutes on 2 cores).

`--isa avx2` (or sse4, avx512) runs every implementation at that instruction set: fusegrad's CPU_ISA, PyTorch's
ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA and MKL_ENABLE_INSTRUCTIONS (its matmul), OpenBLAS's OPENBLAS_CORETYPE, set
before any of them loads. The first lines name the CPU, the ISA each library runs at, the compiler and the versions.

Prints one line per row: the median time (or GFLOPS / GB/s where that is the table's unit) of each implementation and
the ratio fusegrad / best other (time: below 1 is faster; rates: above 1 is faster). Writes all medians to JSON.
"""
from __future__ import annotations
import argparse, json, os, statistics, subprocess, sys, tempfile, time
from typing import Any, Callable
# every thread pool spins about 1 ms after its last parallel region, then sleeps (the defaults spin up to 200 ms):
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # OpenMP (PyTorch's and fusegrad's kernels): idle threads sleep
os.environ.setdefault("GOMP_SPINCOUNT", "100000")  # after spinning this much in gcc's OpenMP (PyTorch's): about 1 ms
os.environ.setdefault("KMP_BLOCKTIME", "1")  # or this many ms in clang's OpenMP (fusegrad's CPU_SPIN default)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "20")  # OpenBLAS (NumPy): 2**20 cycles, about 1 ms, not 2**28
# fusegrad and tinygrad on the CPU unless DEV says otherwise (tinygrad's default is the first device that works, CL
# where PoCL is installed, and it then writes DEV=CL into the environment, which the first-step subprocesses inherit)
os.environ.setdefault("DEV", "CPU")
# --isa: each library's own setting for its instruction set, before any of them loads (read once, at load)
ISA_ENV = {"avx512": {"CPU_ISA": "avx512"},
           "avx2": {"CPU_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                    "MKL_ENABLE_INSTRUCTIONS": "AVX2", "OPENBLAS_CORETYPE": "Haswell"},
           "sse4": {"CPU_ISA": "sse4", "ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "OPENBLAS_CORETYPE": "Nehalem"}}
_ISA = next((a.split("=", 1)[1] if "=" in a else sys.argv[i + 2] for i, a in enumerate(sys.argv[1:])
             if a.startswith("--isa") and ("=" in a or i + 2 < len(sys.argv))), "")
os.environ.update(ISA_ENV.get(_ISA, {}))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np

IMPLS = ("fusegrad", "torch", "numpy", "tinygrad")
Runner = Callable[[], Any]

# *** the frameworks ***
def _torch() -> Any:
  import torch
  torch.set_num_threads(os.cpu_count() or 1)
  return torch

def _tinygrad() -> Any:
  try:
    import tinygrad
    return tinygrad
  except ImportError: return None

def _fg_jit(fn: Callable[..., Any], *args: Any) -> Runner:
  from fusegrad import TinyJit
  jit = TinyJit(lambda *a: fn(*a).realize())
  return lambda: jit(*args)

def _tg_jit(fn: Callable[..., Any], *args: Any) -> Runner:
  from tinygrad import TinyJit, Device
  jit = TinyJit(lambda *a: fn(*a).realize())
  def run() -> None:
    jit(*args)
    Device[Device.DEFAULT].synchronize()
  return run

def _inputs(impl: str, shapes: list[tuple[int, ...]]) -> list[Any]:
  rng = np.random.default_rng(0)
  arrays = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
  if impl == "fusegrad":
    from fusegrad import Tensor
    return [Tensor(a).realize() for a in arrays]
  if impl == "tinygrad":
    from tinygrad import Tensor as TT
    return [TT(a).realize() for a in arrays]
  if impl == "torch": return [_torch().from_numpy(a) for a in arrays]
  return arrays

def elementwise(impl: str, shapes: list[tuple[int, ...]], fn: Callable[..., Any],
                np_fn: Callable[..., Any] | None = None) -> Runner | None:
  """fn(*tensors) written once for fusegrad, tinygrad and torch (same method names); np_fn for NumPy."""
  if impl == "tinygrad" and _tinygrad() is None: return None
  if impl == "numpy" and np_fn is None: return None
  args = _inputs(impl, shapes)
  if impl == "fusegrad": return _fg_jit(fn, *args)
  if impl == "tinygrad": return _tg_jit(fn, *args)
  if impl == "torch": return lambda: fn(*args)
  assert np_fn is not None
  return lambda: np_fn(*args)

# *** the workloads: each gives a runner per implementation (None: not available) and the work of one call ***
def matmul(impl: str, n: int) -> Runner | None:
  return elementwise(impl, [(n, n), (n, n)], lambda a, b: a @ b, lambda a, b: a @ b)

def sum_axis(impl: str, n: int, axis: int | None) -> Runner | None:
  def np_sum(a: np.ndarray) -> Any: return a.sum(axis=axis)
  return elementwise(impl, [(n, n)], (lambda a: a.sum(axis)) if axis is not None else (lambda a: a.sum()), np_sum)

def argmax(impl: str, n: int) -> Runner | None:
  def np_argmax(a: np.ndarray) -> Any: return a.argmax(axis=1)
  return elementwise(impl, [(n, n)], lambda a: a.argmax(1), np_argmax)

def softmax(impl: str, n: int) -> Runner | None:
  def np_softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
  return elementwise(impl, [(n, n)], lambda a: a.softmax(-1), np_softmax)

def fused(impl: str, n: int) -> Runner | None:
  def np_fused(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray: return np.maximum(a * b + c, 0)
  return elementwise(impl, [(n,)] * 3, lambda a, b, c: (a * b + c).relu(), np_fused)

def layernorm(impl: str, rows: int, cols: int) -> Runner | None:
  def np_ln(a: np.ndarray) -> np.ndarray:
    m = a.mean(-1, keepdims=True)
    return (a - m) / np.sqrt(((a - m) ** 2).mean(-1, keepdims=True) + 1e-5)
  if impl == "torch": return elementwise(impl, [(rows, cols)], lambda a: _torch().nn.functional.layer_norm(a, (cols,)))
  return elementwise(impl, [(rows, cols)], lambda a: a.layernorm(), np_ln)

def conv(impl: str, bs: int, backward: bool) -> Runner | None:
  """conv 32->32 5x5 on bs x 32 x 24 x 24 (the second conv of the MNIST model), alone or with both gradients."""
  if impl == "numpy" or (impl == "tinygrad" and _tinygrad() is None): return None
  x, w = _inputs(impl, [(bs, 32, 24, 24), (32, 32, 5, 5)])
  if impl == "torch":
    torch = _torch()
    x.requires_grad_(backward)
    w.requires_grad_(backward)
    def run_torch() -> None:
      out = torch.nn.functional.conv2d(x, w)
      if backward: torch.autograd.grad(out.sum(), [x, w])
    return run_torch
  if not backward: return (_fg_jit if impl == "fusegrad" else _tg_jit)(lambda x, w: x.conv2d(w), x, w)
  x.requires_grad, w.requires_grad = True, True
  def fwd_bwd(x: Any, w: Any) -> Any:
    x.grad, w.grad = None, None
    x.conv2d(w).sum().backward()
    return x.grad.realize(w.grad)  # type: ignore[union-attr]
  if impl == "fusegrad":
    from fusegrad import TinyJit
    jit = TinyJit(fwd_bwd)
    return lambda: jit(x, w)
  from tinygrad import TinyJit as TTJ, Device
  tjit = TTJ(fwd_bwd)
  def run_tg() -> None:
    tjit(x, w)
    Device[Device.DEFAULT].synchronize()
  return run_tg

def roundtrip(impl: str) -> Runner | None:
  """(Tensor([1.,2,3,4])+1).numpy(): the overhead of building, scheduling and running one tiny graph."""
  if impl == "numpy": return None
  if impl == "fusegrad":
    from fusegrad import Tensor
    return lambda: (Tensor([1., 2, 3, 4]) + 1).numpy()
  if impl == "tinygrad":
    if _tinygrad() is None: return None
    from tinygrad import Tensor as TT
    return lambda: (TT([1., 2, 3, 4]) + 1).numpy()
  torch = _torch()
  return lambda: (torch.tensor([1., 2, 3, 4]) + 1).numpy()

SLOW_TINYGRAD = False  # tinygrad's MNIST step compiles for minutes on 2 cores: only with --full

def mnist_step(impl: str, bs: int) -> Runner | None:
  if impl == "numpy" or (impl == "tinygrad" and (_tinygrad() is None or not SLOW_TINYGRAD)): return None
  rng = np.random.default_rng(0)
  X = rng.integers(0, 256, (4096, 1, 28, 28), dtype=np.uint8)
  Y = rng.integers(0, 10, (4096,), dtype=np.int32)
  if impl == "torch": return _torch_mnist(X, Y, bs)
  if impl == "fusegrad":
    from fusegrad import Tensor, TinyJit, nn
    from examples.beautiful_mnist import Model
  else:
    from tinygrad import Tensor, TinyJit, nn  # type: ignore[no-redef]
    Model = _tinygrad_model()
  Xt, Yt = Tensor(X).realize(), Tensor(Y).realize()
  model = Model()
  opt = nn.optim.Adam(nn.state.get_parameters(model), lr=0.002)
  if impl == "fusegrad": train = Tensor.train
  else:  # tinygrad 0.14 has no Tensor.train: training mode is the TRAINING context variable
    from tinygrad.helpers import Context
    def train() -> Any: return Context(TRAINING=1)
  @TinyJit
  def step() -> Any:
    with train():
      opt.zero_grad()
      idx = Tensor.randint(bs, high=Xt.shape[0])
      loss = model(Xt[idx]).sparse_categorical_crossentropy(Yt[idx]).backward()
      opt.step()
      return loss.realize()
  return lambda: step().item()

def _tinygrad_model() -> Any:
  from tinygrad import Tensor, nn
  class Model:
    def __init__(self) -> None:
      self.layers = [nn.Conv2d(1, 32, 5), Tensor.relu, nn.Conv2d(32, 32, 5), Tensor.relu, nn.BatchNorm(32),
                     Tensor.max_pool2d, nn.Conv2d(32, 64, 3), Tensor.relu, nn.Conv2d(64, 64, 3), Tensor.relu,
                     nn.BatchNorm(64), Tensor.max_pool2d, lambda x: x.flatten(1), nn.Linear(576, 10)]
    def __call__(self, x: Any) -> Any: return x.sequential(self.layers)
  return Model

def _torch_mnist(X: np.ndarray, Y: np.ndarray, bs: int) -> Runner:
  torch = _torch()
  nn = torch.nn
  model = nn.Sequential(nn.Conv2d(1, 32, 5), nn.ReLU(), nn.Conv2d(32, 32, 5), nn.ReLU(), nn.BatchNorm2d(32),
                        nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(),
                        nn.BatchNorm2d(64), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(576, 10))
  opt = torch.optim.Adam(model.parameters(), lr=0.002)
  xt, yt = torch.from_numpy(X), torch.from_numpy(Y).long()
  def step() -> float:
    idx = torch.randint(0, xt.shape[0], (bs,))
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(xt[idx].float()), yt[idx])
    loss.backward()
    opt.step()
    return loss.item()
  return step

# *** measuring ***
ROUND_S = 0.02  # each implementation's turn in a round lasts at least this long (calls back to back, as in a loop)
COOLDOWN_S = 0.003  # the pause between turns: longer than any thread pool spins (about 1 ms), so none takes the cores
                    # from the next implementation's turn. It busy-waits: in this VM a core that sleeps 20 ms then
                    # runs the next few ms of work at about half speed (a 512 matmul: 2.0 ms instead of 0.9)

def _pause(seconds: float) -> None:
  end = time.perf_counter() + seconds
  while time.perf_counter() < end: pass

def measure(runners: dict[str, Runner], rounds: int, warmup: int = 3) -> dict[str, float]:
  """Median seconds per call of each runner. Implementations alternate round by round; in its turn each runs a number
  of calls back to back (fixed at warm-up: enough to last ROUND_S) and the turn's time per call counts, once as many
  calls again ran uncounted where a turn has more than one call: a turn's first calls are slower by an amount that
  depends on what ran before, another library's turn (docs/speed.md, "December 7, 19:45"), which a loop of one library
  never meets."""
  reps = {}
  for name, run in runners.items():
    for _ in range(warmup): run()
    st = time.perf_counter()
    run()
    reps[name] = max(1, min(200, int(ROUND_S / max(time.perf_counter() - st, 1e-6))))
  times: dict[str, list[float]] = {k: [] for k in runners}
  for _ in range(rounds):
    for name, run in runners.items():
      _pause(COOLDOWN_S)
      for _ in range(reps[name] if reps[name] > 1 else 0): run()
      st = time.perf_counter()
      for _ in range(reps[name]): run()
      times[name].append((time.perf_counter() - st) / reps[name])
  return {k: statistics.median(v) for k, v in times.items()}

def first_step(impl: str, bs: int) -> tuple[float, float] | None:
  """Seconds of the first MNIST training step in a fresh process with an empty compile cache (cold), and again in a
  second fresh process with the cache the first one filled (warm)."""
  if impl == "numpy" or (impl == "tinygrad" and (_tinygrad() is None or not SLOW_TINYGRAD)): return None
  with tempfile.TemporaryDirectory() as tmp:
    env = dict(os.environ, CACHEDB=os.path.join(tmp, "cache.db"), XDG_CACHE_HOME=tmp)
    code = (f"import sys, time; sys.argv = ['run.py']; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
            f"import run; run.SLOW_TINYGRAD = True; r = run.mnist_step({impl!r}, {bs}); st = time.perf_counter(); r(); "
            "print(time.perf_counter() - st)")
    out = []
    for _ in range(2):
      proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
      if proc.returncode != 0:
        print(f"  first step ({impl}) failed: {proc.stderr.strip().splitlines()[-1:]}")
        return None
      out.append(float(proc.stdout.strip().splitlines()[-1]))
    return out[0], out[1]

def rows(full: bool) -> list[tuple[str, str, float, Callable[[str], Runner | None]]]:
  """(name, unit, work per call, runner factory); unit 's' (time), 'GFLOPS' (work in flops) or 'GB/s' (bytes)."""
  bs, n_red, n_mm = (512, 4096, (512, 1024, 2048)) if full else (128, 2048, (512, 1024))
  conv_bs, n_ew = (128, 1 << 24) if full else (32, 1 << 22)
  conv_flops = 2 * conv_bs * 32 * 20 * 20 * 32 * 25
  out: list[tuple[str, str, float, Callable[[str], Runner | None]]] = [
    (f"mnist_step_bs{bs}", "s", 1, lambda i: mnist_step(i, bs)),
    (f"conv_fwd_bwd_bs{conv_bs}", "GFLOPS", 3 * conv_flops, lambda i: conv(i, conv_bs, True)),
    (f"conv_fwd_bs{conv_bs}", "GFLOPS", conv_flops, lambda i: conv(i, conv_bs, False))]
  out += [(f"matmul_{n}", "GFLOPS", 2 * n ** 3, lambda i, n=n: matmul(i, n)) for n in n_mm]
  out += [(f"sum_axis1_{n_red}", "s", 1, lambda i: sum_axis(i, n_red, 1)),
          (f"sum_all_{n_red}", "s", 1, lambda i: sum_axis(i, n_red, None)),
          (f"argmax_axis1_{n_red}", "s", 1, lambda i: argmax(i, n_red)),
          (f"softmax_{n_red}", "s", 1, lambda i: softmax(i, n_red)),
          (f"layernorm_{n_red}", "s", 1, lambda i: layernorm(i, n_red, n_red)),
          (f"fused_relu_{n_ew}", "GB/s", 16 * n_ew, lambda i: fused(i, n_ew)),
          ("roundtrip_tiny", "s", 1, roundtrip)]
  return out

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--full", action="store_true", help="the table's sizes (default: smaller, a few minutes)")
  p.add_argument("--only", default="", help="comma-separated name prefixes of the rows to run")
  p.add_argument("--impls", default=",".join(IMPLS), help="implementations to run")
  p.add_argument("--rounds", type=int, default=0, help="timed rounds per row (default 5, 11 with --full)")
  p.add_argument("--isa", choices=list(ISA_ENV), help="every implementation at this instruction set (see above)")
  p.add_argument("--json", default="bench_results.json", help="where to write the results")
  args = p.parse_args()
  global SLOW_TINYGRAD
  SLOW_TINYGRAD = args.full
  impls = [i for i in args.impls.split(",") if i in IMPLS]
  if "tinygrad" in impls and _tinygrad() is None:
    print("note: tinygrad is not installed (pip install --no-deps tinygrad==0.14.0): its column is skipped")
    impls.remove("tinygrad")
  rounds = args.rounds or (11 if args.full else 5)
  machine()
  only = [s for s in args.only.split(",") if s]
  results: dict[str, Any] = {"cpu_count": os.cpu_count(), "full": args.full, "rows": {}}
  print(f"{'workload':24s}" + "".join(f"{i:>14s}" for i in impls) + f"{'fusegrad/best':>15s}")
  for name, unit, work, factory in rows(args.full):
    if only and not any(name.startswith(o) for o in only): continue
    runners = {i: r for i in impls if (r := factory(i)) is not None}
    secs = measure(runners, 3 if name.startswith("mnist") and not args.full else rounds)
    show(name, unit, work, secs, impls, results)
  if not only or any("first".startswith(o) or o.startswith("first") for o in only):
    bs = 512 if args.full else 128
    both = {i: t for i in impls if (t := first_step(i, bs)) is not None}
    show(f"first_step_bs{bs}", "s", 1, {i: t[0] for i, t in both.items()}, impls, results)
    show(f"first_step_warm_bs{bs}", "s", 1, {i: t[1] for i, t in both.items()}, impls, results)
  with open(args.json, "w") as f: json.dump(results, f, indent=1)
  print(f"wrote {args.json}")

def machine() -> None:
  """The first lines: the CPU, and the instruction set, compiler and version of each implementation."""
  from fusegrad import Device
  from fusegrad.runtime.ops_cpu import compiler_version
  model = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?") \
    if os.path.exists("/proc/cpuinfo") else "?"
  print(f"CPU: {model}, {os.cpu_count()} cores")
  dev = Device["CPU"]
  cc = dev.compiler.cc  # type: ignore[attr-defined]
  print(f"fusegrad: ISA {dev.renderer.machine.isa} ({dev.renderer.machine}), compiler {' '.join(cc)}: "
        f"{compiler_version(tuple(cc)).splitlines()[0]}")
  torch = _torch()
  limits = [f"{k}={os.environ[k]}" for k in ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS") if k in os.environ]
  print(f"torch {torch.__version__}: ISA {torch.backends.cpu.get_cpu_capability()} {' '.join(limits)}")
  try:
    import threadpoolctl
    blas = [f"{i['internal_api']} {i['version']} {i.get('architecture', '')}" for i in threadpoolctl.threadpool_info()
            if i["user_api"] == "blas"]
  except ImportError: blas = ["(threadpoolctl not installed: pip install threadpoolctl)"]
  print(f"numpy {np.__version__}: {', '.join(blas)}")
  if _tinygrad() is not None:
    from importlib.metadata import version
    print(f"tinygrad {version('tinygrad')}")

def show(name: str, unit: str, work: float, secs: dict[str, float], impls: list[str], results: dict[str, Any]) -> None:
  vals = {i: (s if unit == "s" else work / s / (1e9)) for i, s in secs.items()}
  others = [v for i, v in vals.items() if i != "fusegrad"]
  ratio = None
  if "fusegrad" in vals and others:
    best = min(others) if unit == "s" else max(others)
    ratio = vals["fusegrad"] / best
  def fmt(v: float) -> str:
    return f"{v * 1e3:11.3f} ms" if unit == "s" else f"{v:8.1f} {unit:>5s}"
  cells = "".join(f"{fmt(vals[i]) if i in vals else '-':>14s}" for i in impls)
  print(f"{name:24s}{cells}{(f'{ratio:14.2f}x' if ratio is not None else '-'):>15s}", flush=True)
  results["rows"][name] = {"unit": "ms" if unit == "s" else unit, "ratio_fusegrad_over_best": ratio,
                           **{i: (v * 1e3 if unit == "s" else v) for i, v in vals.items()}}

if __name__ == "__main__":
  main()
