"""Real ONNX models through fusegrad's OnnxRunner, compared with ONNX Runtime on the same inputs: Silero VAD (recurrent
state, If subgraphs) and RapidOCR's text detector and recognizer (convolutional, dynamic sizes). The model files
come from the pip packages silero-vad and rapidocr-onnxruntime (found without importing them)."""
import importlib.util, os, sys
import numpy as np
import pytest
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from fusegrad.nn.onnx import OnnxRunner

def package_file(package: str, *parts: str) -> str:
  spec = importlib.util.find_spec(package)
  if spec is None or not spec.submodule_search_locations: pytest.skip(f"pip package {package} is not installed")
  path = os.path.join(spec.submodule_search_locations[0], *parts)
  if not os.path.exists(path): pytest.skip(f"{path} is missing")
  return path

def ort_session(path: str):
  return ort.InferenceSession(path, providers=["CPUExecutionProvider"])

# *** Silero VAD ***
def vowel_audio(sr: int, silence: float, seconds: float) -> np.ndarray:
  """Silence, then a synthetic vowel: a glottal pulse train (pitch 120 Hz +- 20) through three formant resonators
  (700, 1220, 2600 Hz), in syllables, with a little noise. Silero hears it as speech."""
  t = np.arange(int(sr * seconds)) / sr
  phase = np.cumsum((120 + 20 * np.sin(2 * np.pi * 3 * t)) / sr)
  y = (np.diff(np.floor(phase), prepend=0) > 0).astype(np.float64)
  for f, bw in [(700, 80), (1220, 90), (2600, 120)]:  # two-pole resonators, y[n] = (1-r) x[n] + a1 y[n-1] + a2 y[n-2]
    r, th = np.exp(-np.pi * bw / sr), 2 * np.pi * f / sr
    a1, a2, out = 2 * r * np.cos(th), -r * r, np.zeros_like(y)
    for n in range(len(y)): out[n] = (1 - r) * y[n] + a1 * out[n - 1] * (n >= 1) + a2 * out[n - 2] * (n >= 2)
    y = out
  voiced = y / np.abs(y).max() * 0.5 * np.clip(np.sin(2 * np.pi * 2.5 * t), 0, None) ** 0.5
  audio = np.concatenate([np.zeros(int(sr * silence)), voiced])
  return (audio + np.random.default_rng(0).normal(0, 0.003, audio.shape)).astype(np.float32)

@pytest.mark.parametrize("name, sr", [("silero_vad.onnx", 16000), ("silero_vad.onnx", 8000)])
def test_silero_vad(name, sr):
  """Chunk by chunk, with the recurrent state carried over and the last samples of the previous chunk prepended as
  context (as silero-vad's own wrapper does): speech probabilities and state equal to ONNX Runtime's within 1e-4."""
  path = package_file("silero_vad", "data", name)
  runner, sess = OnnxRunner(path), ort_session(path)
  chunk, context = (512, 64) if sr == 16000 else (256, 32)
  audio = np.concatenate([np.zeros(context, np.float32), vowel_audio(sr, 0.15, 0.3)])
  state = ref_state = np.zeros((2, 1, 128), np.float32)
  probs = []
  for i in range((len(audio) - context) // chunk):
    x = audio[i * chunk:(i + 1) * chunk + context][None]
    out = runner({"input": x, "state": state, "sr": np.array(sr, np.int64)})
    prob, state = out["output"].numpy(), out["stateN"].numpy()
    ref_prob, ref_state = sess.run(None, {"input": x, "state": ref_state, "sr": np.array(sr, np.int64)})
    np.testing.assert_allclose(prob, ref_prob, atol=1e-4)
    np.testing.assert_allclose(state, ref_state, atol=1e-4)
    probs.append(ref_prob.item())
  assert min(probs) < 0.2 and max(probs) > 0.8, f"silence and speech should both be in the signal: {probs}"

# *** RapidOCR ***
def text_image(text: str, height: int, width: int) -> np.ndarray:
  """A white image with black text, normalized as RapidOCR feeds its models: (1, 3, H, W), (x - 0.5) / 0.5."""
  from PIL import Image, ImageDraw, ImageFont
  img = Image.new("RGB", (width, height), "white")
  ImageDraw.Draw(img).text((8, (height - 32) // 2), text, fill="black", font=ImageFont.load_default(size=32))
  a = np.asarray(img).astype(np.float32) / 255.0
  return ((a - 0.5) / 0.5).transpose(2, 0, 1)[None].astype(np.float32)

def ctc_decode(probs: np.ndarray, charset: list[str]) -> str:
  """Greedy CTC: best class per step, repeats merged, blanks (0) dropped."""
  best = probs[0].argmax(-1)
  return "".join(charset[c] for i, c in enumerate(best) if c != 0 and (i == 0 or c != best[i - 1]))

def test_rapidocr_recognizer():
  import onnx
  path = package_file("rapidocr_onnxruntime", "models", "ch_PP-OCRv4_rec_infer.onnx")
  meta = {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
  charset = ["<blank>"] + meta["character"].split("\n") + [" "]
  x = text_image("HELLO 2026", 48, 320)
  out = next(iter(OnnxRunner(path)({"x": x}).values())).numpy()
  ref = ort_session(path).run(None, {"x": x})[0]
  np.testing.assert_allclose(out, ref, atol=1e-3)
  text, ref_text = ctc_decode(out, charset), ctc_decode(ref, charset)
  assert text == ref_text
  assert "2026" in ref_text, ref_text  # the models read the rendered text (a check on the test's own input)

def test_rapidocr_detector():
  path = package_file("rapidocr_onnxruntime", "models", "ch_PP-OCRv4_det_infer.onnx")
  x = text_image("HELLO 2026", 96, 320)
  out = next(iter(OnnxRunner(path)({"x": x}).values())).numpy()
  ref = ort_session(path).run(None, {"x": x})[0]
  assert out.shape == ref.shape == (1, 1, 96, 320)
  np.testing.assert_allclose(out, ref, atol=1e-3)
  # the text mask RapidOCR thresholds (0.3) is the same, and it found the text
  assert ((out > 0.3) == (ref > 0.3)).mean() > 0.999
  assert (ref > 0.3).sum() > 100
