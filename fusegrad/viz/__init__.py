"""The viewer: what VIZ=1 recorded (each realize's kernels and timings, each kernel's codegen passes, opts and source)
as one page of plain HTML and JavaScript (viewer.html), served on 127.0.0.1 or written to a file. The trace format
and how the engine records it: docs/viz.md."""
from __future__ import annotations
import errno, json, pathlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from fusegrad.helpers import VIZ_OUT, VIZ_PORT, ansistrip

FORMAT, VERSION = "fusegrad-viz", 1
PORTS_TRIED = 20  # a taken port: the next ones are tried, this many in all

def make_trace(events: list[dict[str, Any]]) -> dict[str, Any]:
  """The trace of recorded events: the kernels by function name, and the items each realize ran."""
  kernels = {e["function"]: {k: v for k, v in e.items() if k != "kind"} for e in events if e["kind"] == "kernel"}
  for k in kernels.values(): k["name"] = ansistrip(k["name"])
  realizes = [e["items"] for e in events if e["kind"] == "realize"]
  return {"format": FORMAT, "version": VERSION, "kernels": kernels, "realizes": realizes}

def load(path: str | pathlib.Path) -> dict[str, Any]:
  """The trace in a file VIZ_OUT wrote; ValueError saying what is wrong for anything else."""
  what = f"{path} is not a fusegrad VIZ trace (write one with VIZ=1 VIZ_OUT=trace.json python script.py)"
  try: trace = json.loads(pathlib.Path(path).read_text())
  except OSError as e: raise ValueError(f"can't read {path}: {e.strerror}") from e
  except (UnicodeDecodeError, json.JSONDecodeError) as e: raise ValueError(f"{what}: it isn't JSON ({e})") from e
  if not isinstance(trace, dict) or trace.get("format") != FORMAT:
    raise ValueError(f"{what}: it has no \"format\": \"{FORMAT}\"")
  if trace.get("version") != VERSION: raise ValueError(f"{path}: a VIZ trace of version {trace.get('version')}, "
                                                       f"this viewer reads version {VERSION}")
  if not isinstance(trace.get("kernels"), dict) or not isinstance(trace.get("realizes"), list):
    raise ValueError(f"{what}: it lacks \"kernels\" (an object) or \"realizes\" (a list)")
  return trace

def to_html(trace: dict[str, Any]) -> str:
  """The viewer's page with the trace in it: one file, nothing else to load."""
  data = json.dumps(trace).replace("</", "<\\/")  # no "</script>" can end the data early
  return (pathlib.Path(__file__).parent / "viewer.html").read_text().replace("__TRACE__", data)

def write(path: str | pathlib.Path, trace: dict[str, Any]) -> None:
  """Write the trace as JSON, or as the viewer's page when the file name ends with .html."""
  text = to_html(trace) if str(path).endswith(".html") else json.dumps(trace)
  pathlib.Path(path).write_text(text)

def bind(handler: type[BaseHTTPRequestHandler], port: int) -> ThreadingHTTPServer:
  """A server on 127.0.0.1:port, or on the next free port (saying so) when that one is taken."""
  for p in range(port, port + PORTS_TRIED) if port else [0]:
    try: server = ThreadingHTTPServer(("127.0.0.1", p), handler)
    except OSError as e:
      if e.errno != errno.EADDRINUSE: raise
      continue
    if p != port and port: print(f"VIZ: port {port} is taken, using {server.server_address[1]}")
    return server
  raise OSError(errno.EADDRINUSE, f"VIZ: ports {port} to {port + PORTS_TRIED - 1} are all taken; set VIZ_PORT")

def serve(trace: dict[str, Any], port: int) -> None:
  """Serve the viewer's page on 127.0.0.1 until interrupted (Ctrl-C)."""
  page = to_html(trace).encode()
  class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
      if self.path.split("?")[0] not in ("/", "/index.html"): return self.send_error(404)
      self.send_response(200)
      self.send_header("Content-Type", "text/html; charset=utf-8")
      self.send_header("Content-Length", str(len(page)))
      self.end_headers()
      self.wfile.write(page)
    def log_message(self, *args: Any) -> None: pass
  server = bind(Handler, port)
  print(f"VIZ: {len(trace['realizes'])} realizes, {len(trace['kernels'])} kernels at "
        f"http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C to stop)", flush=True)
  try: server.serve_forever()
  except KeyboardInterrupt: pass
  finally: server.server_close()

def show_at_exit(events: list[dict[str, Any]]) -> None:
  """What VIZ=1 does at exit: write the trace to VIZ_OUT when set, else serve it."""
  trace = make_trace(events)
  if VIZ_OUT.value:
    write(VIZ_OUT.value, trace)
    print(f"VIZ: wrote {VIZ_OUT.value}", flush=True)
  else: serve(trace, VIZ_PORT.value)
