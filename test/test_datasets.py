"""fusegrad.nn.datasets: MNIST and Fashion-MNIST as uint8 tensors. Shapes, dtypes and known facts of the data (first
labels, label counts, mean pixel values, checked against a plain numpy reading of the files); loading from a folder
argument, from MNIST_DIR (in a fresh process) and from uncompressed files; clear errors for corrupt, truncated, wrong
and missing files with no network, never a crash."""
import gzip, os, pathlib, shutil, subprocess, sys
from unittest import mock
import numpy as np
import pytest
from fusegrad import Tensor, Context, Device, dtypes
import fusegrad.nn.datasets as datasets
from fusegrad.nn.datasets import mnist

REPO = pathlib.Path(__file__).resolve().parents[1]
MNIST_FILES = REPO / "data" / "mnist"
FASHION_FILES = pathlib.Path("/usr/share/datasets/fashion-mnist")
NAMES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
# published facts about the two datasets
MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
MNIST_FIRST_TRAIN, MNIST_FIRST_TEST = [5, 0, 4, 1, 9, 2, 1, 3, 1, 4], [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
FASHION_FIRST_TRAIN, FASHION_FIRST_TEST = [9, 0, 0, 3, 0, 2, 7, 2, 5, 5], [9, 2, 1, 1, 6, 1, 4, 6, 5, 7]

def read_idx(path: pathlib.Path) -> np.ndarray:
  """An IDX file read with numpy alone: the oracle for what mnist() returns."""
  data = gzip.decompress(path.read_bytes())
  ndim = data[3]
  shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
  return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)

@pytest.fixture(scope="module")
def loaded() -> tuple:
  return mnist()

@pytest.fixture
def folder(tmp_path: pathlib.Path) -> pathlib.Path:
  """A folder with copies of the four MNIST .gz files."""
  for name in NAMES: shutil.copy(MNIST_FILES / f"{name}.gz", tmp_path / f"{name}.gz")
  return tmp_path

@pytest.fixture
def offline(tmp_path_factory: pytest.TempPathFactory):
  """No bundled copy, an empty download cache and a download URL that refuses connections."""
  cache = tmp_path_factory.mktemp("cache")
  with mock.patch.object(datasets, "BUNDLED", cache / "no-bundled-copy"), \
       mock.patch.object(datasets, "MNIST_URL", "http://127.0.0.1:9/"), Context(XDG_CACHE_HOME=str(cache)):
    yield cache

def corrupt(path: pathlib.Path, offset: int) -> None:
  data = bytearray(path.read_bytes())
  for i in range(offset, offset + 4): data[i] ^= 0xA5
  path.write_bytes(bytes(data))

# *** shapes, dtypes and contents ***

def test_shapes_and_dtypes(loaded):
  X_train, Y_train, X_test, Y_test = loaded
  assert X_train.shape == (60000, 1, 28, 28) and Y_train.shape == (60000,)
  assert X_test.shape == (10000, 1, 28, 28) and Y_test.shape == (10000,)
  for t in loaded: assert t.dtype == dtypes.uint8 and t.device == Device.DEFAULT

def test_labels(loaded):
  _, Y_train, _, Y_test = loaded
  y_train, y_test = Y_train.numpy(), Y_test.numpy()
  assert y_train[:10].tolist() == MNIST_FIRST_TRAIN and y_test[:10].tolist() == MNIST_FIRST_TEST
  assert np.bincount(y_train).tolist() == MNIST_TRAIN_COUNTS and np.bincount(y_test).tolist() == MNIST_TEST_COUNTS
  assert Y_train[:10].tolist() == MNIST_FIRST_TRAIN  # through the tensor path too

def test_pixels(loaded):
  X_train, _, X_test, _ = loaded
  x_train, x_test = X_train.numpy(), X_test.numpy()
  np.testing.assert_array_equal(x_train[:, 0], read_idx(MNIST_FILES / "train-images-idx3-ubyte.gz"))
  np.testing.assert_array_equal(x_test[:, 0], read_idx(MNIST_FILES / "t10k-images-idx3-ubyte.gz"))
  # the means behind the usual normalization constants
  assert abs(x_train.mean() / 255 - 0.1307) < 1e-4 and abs(x_test.mean() / 255 - 0.1325) < 1e-4
  assert x_train.max() == 255 and x_train.min() == 0
  assert int(x_train[0].sum(dtype=np.int64)) == 27525 and int(x_test[0].sum(dtype=np.int64)) == 18454
  # the same sums computed by fusegrad
  assert X_train[0].cast(dtypes.int32).sum().item() == 27525
  assert X_test[:3].float().sum(axis=(1, 2, 3)).tolist() == x_test[:3].reshape(3, -1).sum(1).astype(np.float32).tolist()

def test_device_argument():
  other = "PYTHON" if Device.DEFAULT != "PYTHON" else "CPU"
  X_train, Y_train, X_test, Y_test = mnist(device=other)
  assert all(t.device == other for t in (X_train, Y_train, X_test, Y_test))
  assert Y_test[:10].tolist() == MNIST_FIRST_TEST

# *** where the files come from ***

def test_directory_argument(folder, offline):
  _, Y_train, _, Y_test = mnist(directory=folder)
  assert Y_train[:10].tolist() == MNIST_FIRST_TRAIN and Y_test[:10].tolist() == MNIST_FIRST_TEST
  _, _, _, Y_test = mnist(directory=str(folder))  # a string works too
  assert Y_test[:10].tolist() == MNIST_FIRST_TEST

def test_directory_is_read_first(folder):
  corrupt(folder / "t10k-labels-idx1-ubyte.gz", 100)  # the bundled copy is fine: the error shows the folder was used
  with pytest.raises(ValueError, match=f"{folder}.*t10k-labels.*corrupt"): mnist(directory=folder)

def test_uncompressed_files(folder, offline):
  for name in NAMES[2:]:
    (folder / name).write_bytes(gzip.decompress((folder / f"{name}.gz").read_bytes()))
    (folder / f"{name}.gz").unlink()
  _, _, X_test, Y_test = mnist(directory=folder)
  assert Y_test[:10].tolist() == MNIST_FIRST_TEST and X_test.shape == (10000, 1, 28, 28)

def test_mnist_dir_in_context(folder, offline):
  with Context(MNIST_DIR=str(folder)):
    _, Y_train, _, _ = mnist()
  assert Y_train[:10].tolist() == MNIST_FIRST_TRAIN

SUBPROCESS = """
import pathlib, sys
from unittest import mock
import fusegrad.nn.datasets as datasets
def no_download(*args, **kwargs): raise OSError("no network in this test")
with mock.patch.object(datasets, "BUNDLED", pathlib.Path("/nonexistent")), \
     mock.patch.object(datasets, "fetch", no_download):
  try: _, Y_train, _, Y_test = datasets.mnist()
  except Exception as e: sys.exit(f"{type(e).__name__}: {e}")
print(Y_train[:10].tolist(), Y_test.shape)
"""

def run_with_mnist_dir(folder: pathlib.Path, tmp: pathlib.Path) -> subprocess.CompletedProcess:
  env = {**os.environ, "MNIST_DIR": str(folder), "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp)}
  return subprocess.run([sys.executable, "-c", SUBPROCESS], env=env, capture_output=True, text=True, timeout=300)

def test_mnist_dir_environment_variable(folder, tmp_path_factory):
  ret = run_with_mnist_dir(folder, tmp_path_factory.mktemp("cache"))
  assert ret.returncode == 0, ret.stderr
  assert ret.stdout.strip() == f"{MNIST_FIRST_TRAIN} (10000,)"

def test_mnist_dir_environment_variable_missing_file(folder, tmp_path_factory):
  (folder / "train-labels-idx1-ubyte.gz").unlink()
  ret = run_with_mnist_dir(folder, tmp_path_factory.mktemp("cache"))
  assert ret.returncode != 0 and "Traceback" not in ret.stderr, ret.stderr
  assert "FileNotFoundError" in ret.stderr and "train-labels-idx1-ubyte" in ret.stderr and str(folder) in ret.stderr

# *** Fashion-MNIST ***

needs_fashion = pytest.mark.skipif(not FASHION_FILES.is_dir(),
                                   reason=f"Fashion-MNIST is not installed in {FASHION_FILES}")

@needs_fashion
def test_fashion():
  X_train, Y_train, X_test, Y_test = mnist(fashion=True)
  assert X_train.shape == (60000, 1, 28, 28) and X_test.shape == (10000, 1, 28, 28)
  assert all(t.dtype == dtypes.uint8 for t in (X_train, Y_train, X_test, Y_test))
  y_train, y_test = Y_train.numpy(), Y_test.numpy()
  assert y_train[:10].tolist() == FASHION_FIRST_TRAIN and y_test[:10].tolist() == FASHION_FIRST_TEST
  assert np.bincount(y_train).tolist() == [6000] * 10 and np.bincount(y_test).tolist() == [1000] * 10
  x_test = X_test.numpy()
  np.testing.assert_array_equal(x_test[:, 0], read_idx(FASHION_FILES / "t10k-images-idx3-ubyte.gz"))
  assert abs(X_train.numpy().mean() / 255 - 0.2860) < 1e-4

@needs_fashion
def test_fashion_dir_in_context(tmp_path):
  for name in NAMES: shutil.copy(FASHION_FILES / f"{name}.gz", tmp_path / f"{name}.gz")
  corrupt(tmp_path / "t10k-images-idx3-ubyte.gz", 100)
  with Context(FASHION_MNIST_DIR=str(tmp_path)), pytest.raises(ValueError, match=f"{tmp_path}.*t10k-images.*corrupt"):
    mnist(fashion=True)

def test_mnist_files_are_not_fashion(folder):
  with pytest.raises(ValueError, match="not the expected file"): mnist(fashion=True, directory=folder)

# *** errors ***

@pytest.mark.parametrize("name, offset", [("train-labels-idx1-ubyte", 1000), ("train-labels-idx1-ubyte", 0),
                                          ("t10k-images-idx3-ubyte", -6), ("t10k-labels-idx1-ubyte", 40)],
                         ids=["body", "gzip_magic", "gzip_crc", "stream_start"])
def test_corrupt_file(folder, offline, name, offset):
  corrupt(folder / f"{name}.gz", offset if offset >= 0 else (folder / f"{name}.gz").stat().st_size + offset)
  with pytest.raises(ValueError, match=f"{name}.gz is corrupt"): mnist(directory=folder)

def test_truncated_file(folder, offline):
  path = folder / "t10k-images-idx3-ubyte.gz"
  path.write_bytes(path.read_bytes()[:100000])
  with pytest.raises(ValueError, match="t10k-images-idx3-ubyte.gz is corrupt"): mnist(directory=folder)

def test_truncated_uncompressed_file(folder, offline):
  raw = gzip.decompress((folder / "t10k-labels-idx1-ubyte.gz").read_bytes())
  (folder / "t10k-labels-idx1-ubyte.gz").unlink()
  (folder / "t10k-labels-idx1-ubyte").write_bytes(raw[:-7])
  with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte is corrupt or not the expected file"):
    mnist(directory=folder)

@pytest.mark.parametrize("content", ["other_file", "empty", "text"])
def test_wrong_file(folder, offline, content):
  path = folder / "train-labels-idx1-ubyte.gz"
  if content == "other_file": shutil.copy(folder / "t10k-labels-idx1-ubyte.gz", path)
  else: path.write_bytes(b"" if content == "empty" else b"<html>404 Not Found</html>")
  with pytest.raises(ValueError, match="train-labels-idx1-ubyte.gz is corrupt or not the expected file"):
    mnist(directory=folder)

def test_missing_file_unreachable_download(folder, offline):
  (folder / "t10k-labels-idx1-ubyte.gz").unlink()
  with pytest.raises(FileNotFoundError, match=r"t10k-labels-idx1-ubyte.*not in.*download.*failed.*MNIST_DIR"):
    mnist(directory=folder)

def test_missing_file_download_raises(folder, offline):
  (folder / "train-images-idx3-ubyte.gz").unlink()
  def no_network(*args, **kwargs): raise ConnectionError("network is off")
  with mock.patch.object(datasets, "fetch", no_network):
    with pytest.raises(FileNotFoundError, match=r"train-images-idx3-ubyte.*network is off"): mnist(directory=folder)

def test_missing_everything(offline):
  with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"): mnist()

def test_corrupt_download_is_removed(folder, offline):
  """A download that fails its check is deleted, so calling again fetches it again instead of failing forever."""
  (folder / "t10k-labels-idx1-ubyte.gz").unlink()
  bad = offline / "downloaded.gz"
  def fake_fetch(*args, **kwargs) -> pathlib.Path:
    bad.write_bytes(gzip.compress(b"not mnist"))
    return bad
  with mock.patch.object(datasets, "fetch", fake_fetch):
    with pytest.raises(ValueError, match="not the expected file.*removed"): mnist(directory=folder)
  assert not bad.exists()
  good = MNIST_FILES / "t10k-labels-idx1-ubyte.gz"
  with mock.patch.object(datasets, "fetch", lambda *args, **kwargs: good):  # a working download
    _, _, _, Y_test = mnist(directory=folder)
  assert Y_test[:10].tolist() == MNIST_FIRST_TEST

def test_downloaded_file_used(folder, offline):
  (folder / "train-labels-idx1-ubyte.gz").unlink()
  urls = []
  def fake_fetch(url: str, *args, **kwargs) -> pathlib.Path:
    urls.append(url)
    return MNIST_FILES / "train-labels-idx1-ubyte.gz"
  with mock.patch.object(datasets, "fetch", fake_fetch):
    _, Y_train, _, _ = mnist(directory=folder)
  assert urls == ["http://127.0.0.1:9/train-labels-idx1-ubyte.gz"]
  assert Y_train[:10].tolist() == MNIST_FIRST_TRAIN

def test_loaded_tensors_are_usable(loaded):
  X_train, Y_train, _, _ = loaded
  x = X_train[:4].float() / 255
  assert x.shape == (4, 1, 28, 28) and x.dtype == dtypes.float32
  onehot = Y_train[:4].cast(dtypes.int32).one_hot(10)
  assert onehot.argmax(axis=1).tolist() == MNIST_FIRST_TRAIN[:4]
  assert isinstance(X_train, Tensor)
