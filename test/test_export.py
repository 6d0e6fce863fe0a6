"""fusegrad.export.webgpu: what it writes, what it refuses (natively, on the WEBGPU device), and the exported modules in
a real browser: Playwright drives Debian's chromium with WebGPU (SwiftShader) on pages served from 127.0.0.1. A
matmul + softmax against NumPy, and the MNIST page of examples/webgpu/ on 100 test images against fusegrad's CPU
logits; its screenshot goes to test/artifacts/ (kept by CI). The browser tests skip without chromium or playwright."""
import functools, http.server, json, os, pathlib, shutil, struct, threading
import numpy as np
import pytest
import fusegrad
from fusegrad import Tensor, Device, TinyJit, nn
from fusegrad.export import ExportError
from fusegrad.renderer.wgsl import WGSLRenderer

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test" / "artifacts"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless=new", "--enable-unsafe-webgpu", "--no-sandbox", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
OK, WHY = Device.get_available("WEBGPU")
pytestmark = pytest.mark.skipif(not OK, reason=f"no WEBGPU device here: {WHY}")

def matmul_softmax(seed: int = 0) -> tuple:
  rng = np.random.default_rng(seed)
  w, x = rng.standard_normal((16, 10), np.float32), rng.standard_normal((4, 16), np.float32)
  return w, x, Tensor(w, device="WEBGPU").realize()

def softmax(z: np.ndarray) -> np.ndarray:
  e = np.exp(z - z.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)

def test_files(tmp_path):
  w, x, W = matmul_softmax()
  renderer = Device["WEBGPU"].renderer
  manifest = fusegrad.export.webgpu(lambda a: (a @ W).softmax(-1), [Tensor(x)], tmp_path)
  assert manifest["inputs"][0]["shape"] == [4, 16] and manifest["outputs"][0]["shape"] == [4, 10]
  assert len(manifest["weights"]) == 1 and len(manifest["kernels"]) >= 1
  header_len = struct.unpack("<Q", (tmp_path / "model.safetensors").read_bytes()[:8])[0]
  header = json.loads((tmp_path / "model.safetensors").read_bytes()[8:8 + header_len])
  (name, info), = [kv for kv in header.items() if kv[0] != "__metadata__"]
  assert info["dtype"] == "F32" and info["shape"] == [160] and manifest["weights"] == {name: int(name[1:])}
  got = nn.state.safe_load(tmp_path / "model.safetensors")[name].numpy()
  np.testing.assert_array_equal(got, w.reshape(-1))
  js = (tmp_path / "model.js").read_text()
  assert "export async function load(baseUrl" in js and "async run(...inputs)" in js
  for k in manifest["kernels"]:  # every kernel fits the limits any browser grants
    src = (tmp_path / k["file"]).read_text()
    size = [int(s) for s in src.split("@workgroup_size(")[1].split(")")[0].split(",")]
    assert np.prod(size) <= WGSLRenderer().max_workgroup and f"fn {k['name']}(" in src
  assert Device["WEBGPU"].renderer is renderer  # the adapter's own limits again after the export

def test_refusals(tmp_path, monkeypatch):
  _, x, W = matmul_softmax()
  with pytest.raises(ExportError, match="return a Tensor"): fusegrad.export.webgpu(lambda a: 3, [Tensor(x)], tmp_path)
  with pytest.raises(ExportError, match="random numbers"):
    fusegrad.export.webgpu(lambda a: a + Tensor.rand(4, 16, device="WEBGPU"), [Tensor(x)], tmp_path)
  state = Tensor(x, device="WEBGPU").realize()
  with pytest.raises(ExportError, match="outlives the call"):
    fusegrad.export.webgpu(lambda a: state.assign(state + a), [Tensor(x)], tmp_path)
  on_cpu = Tensor(x, device="CPU").realize()
  with pytest.raises(ExportError, match="copies from CPU to WEBGPU"):
    fusegrad.export.webgpu(lambda a: a + on_cpu.to("WEBGPU"), [Tensor(x)], tmp_path)
  with pytest.raises(ExportError, match="must be Tensors"): fusegrad.export.webgpu(lambda a: a, [x], tmp_path)
  monkeypatch.setattr(fusegrad.export, "MAX_BINDING", 128)  # as if 128 bytes were all an adapter must bind
  with pytest.raises(ExportError, match="a buffer of 256 bytes is larger than the 128 bytes"):
    fusegrad.export.webgpu(lambda a: a * 2, [Tensor(x)], tmp_path)

def test_tinyjit_is_captured_again(tmp_path):  # a TinyJit is exported from its function, with the browser's limits
  _, x, W = matmul_softmax()
  jit = TinyJit(lambda a: (a @ W).relu())
  for _ in range(3): jit(Tensor(x, device="WEBGPU").realize())
  manifest = fusegrad.export.webgpu(jit, [Tensor(x)], tmp_path)
  assert len(manifest["outputs"]) == 1 and len(jit.jit_cache) >= 1

# *** in the browser ***

@pytest.fixture(scope="module")
def browser():
  sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
  if not os.path.exists(CHROMIUM): pytest.skip(f"no chromium at {CHROMIUM} (apt install chromium)")
  with sync_api.sync_playwright() as p:
    b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
    yield b
    b.close()

@pytest.fixture(scope="module")
def served(tmp_path_factory):
  """(a folder, the URL it is served at from 127.0.0.1)."""
  root = tmp_path_factory.mktemp("web")
  handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
  handler.log_message = lambda *a: None  # type: ignore[method-assign]
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  yield root, f"http://127.0.0.1:{server.server_address[1]}/"
  server.shutdown()

def open_page(browser, url: str, ready: str):
  """The page at url once its title ends with ready (async work done); errors it logged fail the test."""
  page = browser.new_page(viewport={"width": 1100, "height": 1200})
  errors: list[str] = []
  page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
  page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
  page.goto(url)
  page.wait_for_function(f"document.title.endsWith({ready!r}) || document.title.endsWith('error')", timeout=120_000)
  assert page.title().endswith(ready) and not errors, (page.title(), errors)
  return page

HARNESS = """<!doctype html><title>export</title><link rel="icon" href="data:,"><script type="module">
import {load} from "./model.js";
window.model = await load();
document.title += ": ready";
</script>"""

def test_matmul_softmax_in_browser(browser, served):
  root, url = served
  w, x, W = matmul_softmax(1)
  fusegrad.export.webgpu(lambda a: ((a @ W).softmax(-1), a @ W), [Tensor(x)], root / "mm")
  (root / "mm" / "index.html").write_text(HARNESS)
  page = open_page(browser, url + "mm/index.html", "ready")
  probs, logits = page.evaluate("async (x) => (await model.run(Float32Array.from(x))).map((y) => Array.from(y))",
                                x.reshape(-1).tolist())
  np.testing.assert_allclose(np.array(logits).reshape(4, 10), x @ w, atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(np.array(probs).reshape(4, 10), softmax(x @ w), atol=1e-6, rtol=1e-5)
  error = page.evaluate("async () => { try { await model.run(new Float32Array(3)); } catch (e) { return e.message; } }")
  assert "expected a Float32Array of 64 elements" in error

def test_mnist_page(browser, served):
  from examples.beautiful_mnist import Model
  from examples.webgpu.export_mnist import export_mnist
  from fusegrad.nn.datasets import mnist
  root, url = served
  Tensor.manual_seed(42)
  model, n = Model(), 100
  X_train, Y_train, X_test, Y_test = mnist()
  opt = nn.optim.Adam(nn.state.get_parameters(model))
  with Tensor.train():  # a few steps, so that the page (and its screenshot) shows a model that has learned something
    for _ in range(30):
      opt.zero_grad()
      idx = Tensor.randint(64, high=X_train.shape[0])
      model(X_train[idx].float()).sparse_categorical_crossentropy(Y_train[idx]).backward()
      opt.step()
  want = np.concatenate([model(X_test[i:i + 50].float()).numpy() for i in range(0, n, 50)])  # on the CPU
  for f in ("index.html", "app.js"): shutil.copy(ROOT / "examples" / "webgpu" / f, root / f)
  export_mnist(model, root / "model", n)
  page = open_page(browser, url + "index.html", "ready")
  got = np.array(page.evaluate("window.testLogits"))
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
  shown = [int(c) for c in page.locator("#tests figcaption").all_inner_texts()]
  assert shown == got.argmax(1).tolist() == want.argmax(1).tolist()
  assert (want.argmax(1) == Y_test[:n].numpy()).mean() > 0.7  # trained: the page's predictions mean something
  page.locator("#tests figure").nth(3).click()  # a test image onto the canvas: its class and probabilities
  assert page.locator("#prediction").inner_text() == str(shown[3]) and page.locator("#probs div").count() == 10
  page.locator("#clear").click()
  box = page.locator("#draw").bounding_box()
  page.mouse.move(box["x"] + 140, box["y"] + 40)
  page.mouse.down()
  page.mouse.move(box["x"] + 140, box["y"] + 240, steps=10)  # a stroke down the middle: some digit, 10 probabilities
  page.mouse.up()
  page.wait_for_function("document.querySelector('#prediction').textContent !== '-'")
  probs = [float(r.split()[-1]) for r in page.locator("#probs div").all_inner_texts()]
  assert abs(sum(probs) - 1) < 0.01 and page.locator("#prediction").inner_text() == str(int(np.argmax(probs)))
  ARTIFACTS.mkdir(exist_ok=True)
  page.screenshot(path=str(ARTIFACTS / "webgpu_mnist.png"), full_page=True)

def test_float16_in_browser(browser, served):  # no shader-f16 in Chrome on SwiftShader: f32 registers, 16-bit lanes
  root, url = served
  rng = np.random.default_rng(2)
  w, x = rng.standard_normal(33).astype(np.float16), rng.standard_normal(33).astype(np.float16)
  W = Tensor(w, device="WEBGPU").realize()
  fusegrad.export.webgpu(lambda a: (a * W + 1, (a * W).float().sum()), [Tensor(x)], root / "f16")
  (root / "f16" / "index.html").write_text(HARNESS)
  page = open_page(browser, url + "f16/index.html", "ready")
  bits, total = page.evaluate("async (x) => (await model.run(Uint16Array.from(x))).map((y) => Array.from(y))",
                              x.view(np.uint16).tolist())
  np.testing.assert_array_equal(np.array(bits, np.uint16).view(np.float16), x * w + np.float16(1))
  np.testing.assert_allclose(total[0], (x * w).astype(np.float32).sum(), rtol=1e-5)
