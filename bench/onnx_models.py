"""fusegrad (OnnxRunner under TinyJit) against ONNX Runtime on real models, in one run: Silero VAD (one 512-sample
chunk with its state), RapidOCR's text recognizer (1x3x48x320) and detector (1x3x96x320).

Prints the median time per call of each after warm-up (fusegrad's first two calls compile and capture), the ratio
fusegrad / ONNX Runtime, and the largest difference between their outputs. Settings: RUNS (10), MODELS (all, or a
comma-separated subset of vad, rec, det). (Not named bench/onnx.py: a script of that name would shadow the onnx
package.)"""
import importlib.util, os, statistics, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np
from fusegrad import Tensor, TinyJit, Device
from fusegrad.helpers import getenv
from fusegrad.nn.onnx import OnnxRunner

RUNS = getenv("RUNS", 10)

def package_file(package: str, *parts: str) -> str:
  spec = importlib.util.find_spec(package)
  if spec is None or not spec.submodule_search_locations: raise SystemExit(f"pip install {package} first")
  return os.path.join(spec.submodule_search_locations[0], *parts)

def timed(fn, runs: int) -> tuple[float, object]:
  times, out = [], None
  for _ in range(runs):
    st = time.perf_counter()
    out = fn()
    times.append(time.perf_counter() - st)
  return statistics.median(times), out

def bench(name: str, path: str, feeds: dict[str, np.ndarray]) -> None:
  import onnxruntime as ort
  sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
  runner = OnnxRunner(path)
  inputs = {k: Tensor(v).realize() for k, v in feeds.items()}
  step = TinyJit(lambda **kw: [v.realize() for v in runner(kw).values()])
  st = time.perf_counter()
  for _ in range(2): step(**inputs)  # run, then capture
  warm = time.perf_counter() - st
  ours, out = timed(lambda: [o.numpy() for o in step(**inputs)], RUNS)
  theirs, ref = timed(lambda: sess.run(None, feeds), RUNS)
  diff = max(float(np.abs(a - b).max()) for a, b in zip(out, ref))  # type: ignore[arg-type]
  print(f"{name:28s} fusegrad {ours * 1e3:8.2f} ms   onnxruntime {theirs * 1e3:8.2f} ms   ratio {ours / theirs:6.2f}x"
        f"   max diff {diff:.2e}   (first two calls {warm:.1f} s)")

def main() -> None:
  models = getenv("MODELS", "vad,rec,det").split(",")
  print(f"fusegrad on {Device.DEFAULT}, {RUNS} runs each; ratio > 1 means fusegrad is slower")
  rng = np.random.default_rng(0)
  if "vad" in models:
    feeds = {"input": (rng.standard_normal((1, 576)) * 0.1).astype(np.float32),
             "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000, np.int64)}
    bench("silero_vad (1 chunk)", package_file("silero_vad", "data", "silero_vad.onnx"), feeds)
  ocr = lambda f: package_file("rapidocr_onnxruntime", "models", f)
  if "rec" in models:
    bench("rapidocr rec 1x3x48x320", ocr("ch_PP-OCRv4_rec_infer.onnx"),
          {"x": rng.uniform(-1, 1, (1, 3, 48, 320)).astype(np.float32)})
  if "det" in models:
    bench("rapidocr det 1x3x96x320", ocr("ch_PP-OCRv4_det_infer.onnx"),
          {"x": rng.uniform(-1, 1, (1, 3, 96, 320)).astype(np.float32)})

if __name__ == "__main__":
  main()
