"""Run any ONNX file with fusegrad and print its outputs and timing.

  python examples/onnx_run.py MODEL.onnx [NAME=FILE.npy ...] [--runs N] [--jit]

Inputs not given are made up from the model's declared shapes and types: random normal floats, zeros for ints
(dynamic dimensions become 1; override with DIM=value, e.g. batch=4, or ?=48 for unnamed ones). --jit runs through
TinyJit, so the later runs replay the captured kernels."""
import argparse, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np
from fusegrad import Tensor, TinyJit
from fusegrad.nn.onnx import OnnxRunner, onnx_dtype
from fusegrad.dtype import dtypes, to_numpy

def made_up_input(info, dims: dict[str, int], rng: np.random.Generator) -> np.ndarray:
  """An array for a graph input from its type: declared sizes, named dims from dims (default 1)."""
  t = info.type.tensor_type
  shape = [d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param or "?", 1) for d in t.shape.dim]
  dt = onnx_dtype(t.elem_type)
  if dtypes.is_float(dt): return rng.standard_normal(shape).astype(np.float32).astype(to_numpy(dt))
  return np.zeros(shape, dtype=to_numpy(dt))

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("model")
  ap.add_argument("inputs", nargs="*", help="NAME=FILE.npy for an input, or DIM=INT for a dynamic dimension")
  ap.add_argument("--runs", type=int, default=3)
  ap.add_argument("--jit", action="store_true", help="run through TinyJit")
  args = ap.parse_args()
  t0 = time.perf_counter()
  runner = OnnxRunner(args.model)
  print(f"loaded {args.model} in {(time.perf_counter() - t0) * 1e3:.1f} ms: opsets {runner.opset}, "
        f"{len(runner.model.graph.node)} nodes, {len(runner.initializers)} initializers")
  files = dict(a.split("=", 1) for a in args.inputs)
  dims = {k: int(v) for k, v in files.items() if v.lstrip("-").isdigit()}
  rng = np.random.default_rng(0)
  feeds = {name: np.load(files[name]) if name in files else made_up_input(info, dims, rng)
           for name, info in runner.inputs.items()}
  for name, v in feeds.items(): print(f"  input  {name}: {v.shape} {v.dtype}")
  tensors = {k: Tensor(v).realize() for k, v in feeds.items()}
  run = TinyJit(lambda **kw: {k: v.realize() for k, v in runner(kw).items()}) if args.jit else \
    (lambda **kw: {k: v.realize() for k, v in runner(kw).items()})
  for i in range(args.runs):
    st = time.perf_counter()
    out = run(**tensors)
    results = {k: v.numpy() for k, v in out.items()}
    print(f"run {i}: {(time.perf_counter() - st) * 1e3:.1f} ms{' (compiles kernels)' if i == 0 else ''}")
  for name, v in results.items():
    flat = v.reshape(-1)
    print(f"  output {name}: {v.shape} {v.dtype} first values {flat[:6].tolist()}"
          + (f" mean {flat.astype(np.float64).mean():.6g}" if flat.size and v.dtype.kind in "fiu" else ""))

if __name__ == "__main__":
  main()
