"""The documentation site and the VIZ viewer in a real browser: Playwright driving Debian's chromium (headless, no
browser download). Screenshots go to test/artifacts/ (kept by CI). The site must be built first (`mkdocs build
--strict`, as test/run_all.sh does); without chromium or playwright the tests skip, saying which is missing."""
import functools, http.server, os, pathlib, subprocess, sys, threading, urllib.parse
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SITE, ARTIFACTS = ROOT / "site", ROOT / "test" / "artifacts"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"no chromium at {CHROMIUM} (apt install chromium)")

@pytest.fixture(scope="module")
def browser():
  with sync_api.sync_playwright() as p:
    b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
    yield b
    b.close()

def open_page(browser):
  """A new page that collects console errors and failed requests."""
  page = browser.new_page(viewport={"width": 1280, "height": 900})
  errors: list[str] = []
  page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
  page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
  page.on("response", lambda r: errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
  return page, errors

def shot(page, name: str) -> None:
  ARTIFACTS.mkdir(exist_ok=True)
  page.screenshot(path=str(ARTIFACTS / name), full_page=False)

@pytest.fixture(scope="module")
def site_url():
  if not (SITE / "index.html").exists(): pytest.skip("the site isn't built: run `mkdocs build --strict` first")
  handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(SITE))
  handler.log_message = lambda *a: None  # type: ignore[method-assign]
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  yield f"http://127.0.0.1:{server.server_address[1]}/"
  server.shutdown()

def test_docs_site(browser, site_url):
  page, errors = open_page(browser)
  todo, seen = [site_url], set()
  while todo:  # every page reachable from the index through internal links: each loads, nothing fails
    url = todo.pop()
    if url in seen: continue
    seen.add(url)
    response = page.goto(url, wait_until="load")
    assert response is not None and response.ok, f"{url}: HTTP {response and response.status}"
    for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)"):
      link = urllib.parse.urldefrag(href).url
      if link.startswith(site_url) and link not in seen: todo.append(link)
  assert len(seen) >= 30 and not errors, errors
  page.goto(site_url)
  assert "fusegrad" in page.title() and page.locator("text=Quickstart").first.is_visible()
  shot(page, "docs_index.png")
  page.goto(site_url + "tensor/elementwise/")
  assert page.locator("h3[id$='Tensor.relu']").count() == 1 and "max(x, 0)" in page.content()
  shot(page, "docs_api.png")
  page.goto(site_url + "flags/")
  rows = page.locator("table tr").all_inner_texts()
  assert any(r.startswith("VIZ\t") for r in rows) and any(r.startswith("DEBUG\t") for r in rows)
  shot(page, "docs_flags.png")
  assert not errors, errors

MNIST_STEP = """
from fusegrad import Tensor, nn
from fusegrad.nn.datasets import mnist
from examples.beautiful_mnist import Model
X_train, Y_train, _, _ = mnist()
model = Model()
opt = nn.optim.Adam(nn.state.get_parameters(model))
with Tensor.train():
  opt.zero_grad()
  loss = model(X_train[:8]).sparse_categorical_crossentropy(Y_train[:8]).backward()
  opt.step()
print("loss", loss.item(), flush=True)
"""

def test_viewer_for_an_mnist_step(browser):
  env = {**os.environ, "VIZ": "1", "VIZ_PORT": "0", "PYTHONPATH": str(ROOT)}
  proc = subprocess.Popen([sys.executable, "-c", MNIST_STEP], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
  try:
    lines = [proc.stdout.readline() for _ in range(2)]  # type: ignore[union-attr]
    assert lines[0].startswith("loss ") and " at http://127.0.0.1:" in lines[1], lines
    url = lines[1].split(" at ")[1].split()[0]
    page, errors = open_page(browser)
    page.goto(url)
    kernels = page.locator("nav button.kernel")
    assert kernels.count() > 20  # forward, backward and the optimizer's kernels of a small CNN
    kernels.filter(has_text="r_").first.click()  # a reduce kernel
    assert "void " in page.locator("#source").inner_text()
    passes = page.locator("#passes button").all_inner_texts()
    assert passes[0] == "1. kernel AST" and passes[-1].split(" (")[0].endswith("linearize")
    page.locator("#passes button", has_text="optimize").click()
    assert "RANGE" in page.locator("pre.pass-output").inner_text()
    assert "fused ops" in page.locator("main table").inner_text()
    shot(page, "viz_kernel.png")
    assert not errors, errors
  finally: proc.terminate()
  proc.wait(timeout=30)
