"""The VIZ recording (engine and codegen events), the trace file, the page, and the server (its port, its errors)."""
import atexit, json, os, socket, subprocess, sys, urllib.request
import pytest
from fusegrad import Tensor, Context
from fusegrad import helpers, viz

@pytest.fixture
def recorded():
  """The events a realize records under VIZ (none are shown at this process's exit)."""
  helpers.viz_events.clear()
  yield helpers.viz_events
  atexit.unregister(helpers._show_viz)
  helpers.viz_events.clear()

def test_records_realize_and_codegen(recorded):
  a, b = Tensor.rand(5, 7).realize(), Tensor.rand(7).realize()
  with Context(VIZ=1, DISABLE_COMPILER_CACHE=1):
    out = ((a + b).exp2() * 3).sum(axis=1)
    got = out.tolist()
  assert got == pytest.approx(((2 ** (a.numpy() + b.numpy())) * 3).sum(axis=1), rel=1e-5)
  trace = viz.make_trace(recorded)
  assert len(trace["realizes"]) == 1 and len(trace["realizes"][0]) == 1  # one fused kernel
  item = trace["realizes"][0][0]
  assert item["time"] > 0 and item["mem"] == 4 * (5 + 35 + 7)
  kernel = trace["kernels"][item["function"]]
  assert kernel["ops"] == ["ADD", "EXP2", "MUL", "REDUCE"]
  names = [n for n, _ in kernel["passes"]]
  assert names[:5] == ["kernel AST", "fold_reduces", "gated_loads", "merge_axes", "optimize"]
  assert names[-1] == "linearize" and "devectorize" in names
  assert item["function"] in kernel["src"] and "exp2" in kernel["src"]
  assert "\x1b" not in kernel["name"] + item["name"]  # no terminal colors in the page

def test_nothing_recorded_without_viz(recorded):
  (Tensor.rand(3) + 1).realize()
  assert recorded == []

def test_trace_file_and_page(recorded, tmp_path):
  with Context(VIZ=1):
    (Tensor([1.0, 2.0]) * 2).realize()
  trace = viz.make_trace(recorded)
  viz.write(path := tmp_path / "trace.json", trace)
  assert viz.load(path) == json.loads(json.dumps(trace))
  viz.write(page := tmp_path / "page.html", {**trace, "kernels": {"k": {"src": "</script><b>"}}, "realizes": []})
  html = page.read_text()
  assert "__TRACE__" not in html and "</script><b>" not in html and "<\\/script><b>" in html

@pytest.mark.parametrize("text, error", [("not json", "it isn't JSON"), ('{"a": 1}', 'no "format"'),
                                         ('{"format": "fusegrad-viz", "version": 1}', 'lacks "kernels"')])
def test_not_a_trace(tmp_path, text, error):
  (path := tmp_path / "t.json").write_text(text)
  with pytest.raises(ValueError, match=error): viz.load(path)
  cli = subprocess.run([sys.executable, "-m", "fusegrad.viz", str(path)], capture_output=True, text=True, timeout=60)
  assert cli.returncode == 1 and "is not a fusegrad VIZ trace" in cli.stderr

def test_taken_port_picks_another(capsys):
  with socket.socket() as taken:
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    server = viz.bind(viz.BaseHTTPRequestHandler, port)
    server.server_close()
  assert server.server_address[1] != port and f"port {port} is taken" in capsys.readouterr().out

def test_serves_the_page(tmp_path):
  viz.write(path := tmp_path / "trace.json", viz.make_trace([]))
  proc = subprocess.Popen([sys.executable, "-m", "fusegrad.viz", str(path), "--port", "0"], stdout=subprocess.PIPE,
                          text=True)
  try:
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line.startswith("VIZ: 0 realizes, 0 kernels at http://127.0.0.1:")
    url = line.split(" at ")[1].split()[0]
    assert "fusegrad VIZ" in urllib.request.urlopen(url, timeout=10).read().decode()
  finally: proc.terminate()
  proc.wait(timeout=10)

def test_viz_script_serves_at_exit(tmp_path):
  """VIZ=1 python script.py: the script's output, then the viewer's URL; the page holds the script's kernels."""
  script = "from fusegrad import Tensor\nprint((Tensor([1.0, 2.0]) * 3).tolist(), flush=True)\n"
  env = {**os.environ, "VIZ": "1", "VIZ_PORT": "0", "DISABLE_COMPILER_CACHE": "1"}
  proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
  try:
    assert proc.stdout.readline() == "[3.0, 6.0]\n"  # type: ignore[union-attr]
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line.startswith("VIZ: 1 realizes, 1 kernels at http://127.0.0.1:"), line
    page = urllib.request.urlopen(line.split(" at ")[1].split()[0], timeout=10).read().decode()
    assert '"format": "fusegrad-viz"' in page and "E_2" in page
  finally: proc.terminate()
  proc.wait(timeout=10)
