"""Datasets: MNIST and Fashion-MNIST as uint8 tensors (where the files are looked for: docs/datasets.md)."""
from __future__ import annotations
import gzip, hashlib, http.client, pathlib, struct, zlib
from fusegrad.tensor import Tensor
from fusegrad.dtype import dtypes
from fusegrad.helpers import fetch, MNIST_DIR, FASHION_MNIST_DIR, prod

# sha256 of the uncompressed IDX files
MNIST_SHA256 = {"train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
  "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
  "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
  "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"}
FASHION_SHA256 = {"train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
  "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
  "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
  "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"}
MNIST_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
FASHION_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
BUNDLED = pathlib.Path(__file__).resolve().parents[2] / "data" / "mnist"
DEBIAN_FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")

def _folders(fashion: bool, directory: str | pathlib.Path | None) -> list[pathlib.Path]:
  env = FASHION_MNIST_DIR.value if fashion else MNIST_DIR.value
  return [pathlib.Path(d) for d in (directory, env) if d] + [DEBIAN_FASHION if fashion else BUNDLED]

def _read(name: str, fashion: bool, directory: str | pathlib.Path | None) -> bytes:
  """The uncompressed, verified contents of one IDX file."""
  want = (FASHION_SHA256 if fashion else MNIST_SHA256)[name]
  for folder in _folders(fashion, directory):
    for candidate in (folder / f"{name}.gz", folder / name):
      if candidate.is_file(): return _verified(candidate, want)
  url = (FASHION_URL if fashion else MNIST_URL) + f"{name}.gz"
  try: path = fetch(url, f"{name}.gz", subdir="fashion-mnist" if fashion else "mnist")
  except (OSError, http.client.HTTPException) as e:
    what, env = ("Fashion-MNIST", "FASHION_MNIST_DIR") if fashion else ("MNIST", "MNIST_DIR")
    where = ", ".join(str(f) for f in _folders(fashion, directory))
    raise FileNotFoundError(f"{what} file {name} is not in {where} and the download of {url} failed ({e}); "
                            f"set {env} to a folder holding the .gz files") from None
  try: return _verified(path, want)
  except ValueError as e:  # a damaged download would fail every later call: remove it, so the next call fetches again
    path.unlink(missing_ok=True)
    raise ValueError(f"{e}; the download was removed, call again to fetch it again") from None

def _verified(path: pathlib.Path, sha256: str) -> bytes:
  raw = path.read_bytes()
  try: data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
  except (OSError, EOFError, zlib.error) as e: raise ValueError(f"{path} is corrupt: {e}") from None
  if hashlib.sha256(data).hexdigest() != sha256:
    raise ValueError(f"{path} is corrupt or not the expected file (sha256 mismatch)")
  return data

def _idx_tensor(data: bytes, name: str, device: str | None) -> Tensor:
  """An IDX file (big-endian header: magic 0x0000080N with N dims, then N sizes) as a uint8 tensor."""
  magic, = struct.unpack(">I", data[:4])
  ndim = magic & 0xFF
  if magic >> 8 != 0x08 or ndim not in (1, 3):
    raise ValueError(f"{name}: not an IDX file of unsigned bytes (magic {magic:#010x})")
  shape, body = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim]), data[4 + 4 * ndim:]
  if len(body) != prod(shape): raise ValueError(f"{name}: {len(body)} bytes of data for shape {shape}")
  return Tensor(body, device=device, dtype=dtypes.uint8).reshape(shape)

def mnist(device: str | None = None, fashion: bool = False,
          directory: str | pathlib.Path | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """(X_train, Y_train, X_test, Y_test): images (N, 1, 28, 28) and labels (N,), all uint8.
  `X_train, Y_train, X_test, Y_test = mnist()`; `mnist(fashion=True)` for Fashion-MNIST."""
  def load(name: str) -> Tensor: return _idx_tensor(_read(name, fashion, directory), name, device)
  X_train, X_test = load("train-images-idx3-ubyte"), load("t10k-images-idx3-ubyte")
  Y_train, Y_test = load("train-labels-idx1-ubyte"), load("t10k-labels-idx1-ubyte")
  return X_train.reshape(-1, 1, 28, 28), Y_train, X_test.reshape(-1, 1, 28, 28), Y_test
