"""fetch: download once into the cache, verify, gunzip; served here by a local HTTP server (no internet needed)."""
import gzip, hashlib, http.server, threading
import pytest
from fusegrad import fetch
from fusegrad.helpers import CACHE_DIR

PAYLOAD = b"fusegrad fetch test " * 100
GZIPPED = gzip.compress(PAYLOAD, mtime=0)  # (a fixed time in its header: two compressions a second apart differed)

class _Handler(http.server.BaseHTTPRequestHandler):
  requests: list[tuple[str, str | None]] = []
  def do_GET(self):
    _Handler.requests.append((self.path, self.headers.get("X-Token")))
    body = {"/data.bin": PAYLOAD, "/data.gz": GZIPPED, "/bad.gz": b"not gzip"}.get(self.path)
    if body is None:
      self.send_error(404)
      return
    self.send_response(200)
    self.send_header("Content-Length", str(len(body)))
    self.end_headers()
    self.wfile.write(body)
  def log_message(self, *args): pass

@pytest.fixture
def server(tmp_path, monkeypatch):
  monkeypatch.setattr(CACHE_DIR, "value", str(tmp_path))
  httpd = http.server.HTTPServer(("127.0.0.1", 0), _Handler)
  threading.Thread(target=httpd.serve_forever, daemon=True).start()
  _Handler.requests.clear()
  yield f"http://127.0.0.1:{httpd.server_address[1]}"
  httpd.shutdown()
  httpd.server_close()

def test_fetch_downloads_once(server, tmp_path):
  p = fetch(f"{server}/data.bin")
  assert p.read_bytes() == PAYLOAD and tmp_path in p.parents
  assert fetch(f"{server}/data.bin") == p and len(_Handler.requests) == 1, "the second fetch should hit the cache"
  fetch(f"{server}/data.bin", allow_caching=False)
  assert len(_Handler.requests) == 2

def test_fetch_name_subdir_headers(server):
  p = fetch(f"{server}/data.bin", "mine.bin", subdir="sub", headers={"X-Token": "abc"})
  assert p.name == "mine.bin" and p.parent.name == "sub" and p.read_bytes() == PAYLOAD
  assert _Handler.requests == [("/data.bin", "abc")]

def test_fetch_sha256(server):
  good = hashlib.sha256(PAYLOAD).hexdigest()
  assert fetch(f"{server}/data.bin", sha256=good).read_bytes() == PAYLOAD
  with pytest.raises(ValueError, match="sha256 mismatch"): fetch(f"{server}/data.bin", "other.bin", sha256="0" * 64)

def test_fetch_gunzip(server):
  assert fetch(f"{server}/data.gz", gunzip=True).read_bytes() == PAYLOAD
  assert fetch(f"{server}/data.gz").read_bytes() == GZIPPED, "without gunzip the bytes stay compressed"
  with pytest.raises(ValueError, match="gunzip"): fetch(f"{server}/bad.gz", gunzip=True)

def test_fetch_errors_and_local_paths(server, tmp_path):
  with pytest.raises(Exception, match="404"): fetch(f"{server}/missing")
  local = tmp_path / "here.bin"
  local.write_bytes(b"x")
  assert fetch(str(local)) == local

def test_tensor_from_url_and_path(server, tmp_path):
  """Tensor.from_url: the downloaded bytes as uint8 (gunzipped on request); Tensor(pathlib.Path): a file's bytes, on
  the disk device, reinterpreted as dtype when given (as tinygrad's)."""
  import numpy as np
  from fusegrad import Tensor, dtypes
  t = Tensor.from_url(f"{server}/data.bin")
  assert t.dtype == dtypes.uint8 and t.shape == (len(PAYLOAD),)
  np.testing.assert_array_equal(t.numpy(), np.frombuffer(PAYLOAD, np.uint8))
  assert bytes(Tensor.from_url(f"{server}/data.gz", gunzip=True).numpy()) == PAYLOAD
  (tmp_path / "f.bin").write_bytes(b"\x01\x02\xff\x00\x07")
  assert Tensor(tmp_path / "f.bin").tolist() == [1, 2, 255, 0, 7] and Tensor(tmp_path / "f.bin").device.startswith("DISK:")
  assert Tensor(tmp_path / "f.bin", dtype=dtypes.int16).tolist() == np.frombuffer(b"\x01\x02\xff\x00", np.int16).tolist()
  assert Tensor(tmp_path / "f.bin", device="CPU").device == "CPU"
  with pytest.raises(FileNotFoundError): Tensor(tmp_path / "missing.bin")
