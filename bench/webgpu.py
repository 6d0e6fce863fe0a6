"""The WEBGPU backend against fusegrad's CPU backend, natively and in a browser, in one run:

- the MNIST CNN's forward pass (examples/beautiful_mnist.py's model) at batch 1 and 256;
- the launch overhead per kernel: a chain of 33 tiny kernels (16 floats each) against a chain of 1, per extra kernel.

Columns: CPU (TinyJit), WEBGPU native (TinyJit on wgpu: lavapipe, Mesa's CPU Vulkan driver, on a machine without a
GPU) and the browser (the same function exported with fusegrad.export.webgpu and run by its model.js in Debian's
chromium, headless, through Playwright: SwiftShader, Chrome's CPU adapter, without a GPU). Each cell is the median
time per call over the rounds, a call writing the input and reading the output back (.numpy() natively, model.run
in the page). The browser column needs chromium and playwright (else it is skipped, saying why).

  python bench/webgpu.py                 # BS=1,256 ROUNDS=10
"""
from __future__ import annotations
import functools, http.server, os, statistics, sys, tempfile, threading, time
from typing import Callable
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np
import fusegrad
from fusegrad import Tensor, TinyJit, nn
from fusegrad.helpers import getenv
from examples.beautiful_mnist import Model

ROUNDS, CHROMIUM = getenv("ROUNDS", 10), getenv("CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless=new", "--enable-unsafe-webgpu", "--no-sandbox", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
HARNESS = """<!doctype html><title>bench</title><link rel="icon" href="data:,"><script type="module">
import {load} from "./model.js";
const model = await load();
window.timeRuns = async (x, rounds) => {  // median ms of model.run over rounds, after 2 warm-up runs
  const input = Float32Array.from(x), times = [];
  for (let i = 0; i < rounds + 2; i++) {
    const start = performance.now();
    await model.run(input);
    times.push(performance.now() - start);
  }
  return times.slice(2).sort((a, b) => a - b)[Math.floor(rounds / 2)];
};
document.title = "ready";
</script>"""

def native(fn: Callable[[Tensor], Tensor], x: np.ndarray, device: str) -> float:
  """Median seconds of a TinyJit replay of fn on device, input copied in and output read back."""
  jit = TinyJit(fn)
  times = []
  for _ in range(ROUNDS + 3):
    start = time.perf_counter()
    jit(Tensor(x, device=device).realize()).numpy()
    times.append(time.perf_counter() - start)
  return statistics.median(times[3:])

class Browser:
  """chromium with WebGPU, serving a temporary folder from 127.0.0.1."""
  def __init__(self) -> None:
    from playwright.sync_api import sync_playwright
    self.root = tempfile.mkdtemp(prefix="fg_bench_webgpu_")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=self.root)
    handler.log_message = lambda *a: None  # type: ignore[method-assign]
    self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=self.server.serve_forever, daemon=True).start()
    self.playwright = sync_playwright().start()
    self.browser = self.playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
  def time(self, name: str, fn: Callable[[Tensor], Tensor], x: np.ndarray) -> float:
    """Median seconds of model.run for fn exported (input shape of x) and loaded in a page."""
    fusegrad.export.webgpu(fn, [Tensor(x)], os.path.join(self.root, name))
    with open(os.path.join(self.root, name, "index.html"), "w") as f: f.write(HARNESS)
    page = self.browser.new_page()
    page.goto(f"http://127.0.0.1:{self.server.server_address[1]}/{name}/index.html")
    page.wait_for_function("document.title === 'ready'", timeout=300_000)
    ms = page.evaluate("([x, rounds]) => timeRuns(x, rounds)", [x.reshape(-1).tolist(), ROUNDS])
    page.close()
    return ms / 1e3
  def close(self) -> None:
    self.browser.close()
    self.playwright.stop()
    self.server.shutdown()

def chain(n: int) -> Callable[[Tensor], Tensor]:
  def fn(x: Tensor) -> Tensor:
    for _ in range(n): x = (x + 1).contiguous()  # each its own kernel
    return x
  return fn

def main() -> None:
  Tensor.manual_seed(0)
  cpu, gpu = Model(), Model()
  nn.state.load_state_dict(gpu, nn.state.get_state_dict(cpu))
  for t in nn.state.get_state_dict(gpu).values(): t.to_("WEBGPU").realize()
  browser: Browser | None = None
  if not os.path.exists(CHROMIUM): print(f"note: no chromium at {CHROMIUM}: the browser column is skipped")
  else:
    try: browser = Browser()
    except ImportError: print("note: playwright is not installed: the browser column is skipped")
  print(f"{'workload':24s}{'CPU':>12s}{'WEBGPU':>12s}{'browser':>12s}   (ms a call, median of {ROUNDS})")
  rng = np.random.default_rng(0)
  def row(name: str, cells: list[Callable[[], float]]) -> list[float]:
    secs = [cell() for cell in cells]
    print(f"{name:24s}" + "".join(f"{s * 1e3:12.3f}" for s in secs))
    return secs
  for bs in getenv("BS", "1,256").split(","):
    x = rng.integers(0, 256, (int(bs), 1, 28, 28)).astype(np.float32)
    row(f"mnist_forward_bs{bs}", [lambda: native(cpu, x, "CPU"), lambda: native(gpu, x, "WEBGPU")] +
        ([lambda: browser.time(f"mnist{bs}", gpu, x)] if browser else []))  # type: ignore[union-attr]
  x = rng.standard_normal(16).astype(np.float32)
  def per_kernel(device: str) -> float: return (native(chain(33), x, device) - native(chain(1), x, device)) / 32
  def per_kernel_browser() -> float:
    return (browser.time("chain33", chain(33), x) - browser.time("chain1", chain(1), x)) / 32  # type: ignore[union-attr]
  row("launch_per_kernel", [lambda: per_kernel("CPU"), lambda: per_kernel("WEBGPU")] +
      ([per_kernel_browser] if browser else []))
  if browser: browser.close()

if __name__ == "__main__":
  main()
