"""The DISK device (runtime/ops_disk.py): a file as a device, checked against the file's bytes read with numpy, as
tinygrad documents it (test/unit/test_disk_tensor.py there)."""
import os, pathlib, stat
import numpy as np
import pytest
from fusegrad import Tensor, Device, dtypes

@pytest.fixture
def data_file(tmp_path: pathlib.Path) -> pathlib.Path:
  (fn := tmp_path / "data.bin").write_bytes(bytes(range(256)) * 4)
  return fn

def test_device_names_carry_the_path(tmp_path):
  assert Device.canonicalize(f"disk:{tmp_path}/x") == f"DISK:{tmp_path}/x"
  assert Tensor.empty(3, device=f"disk:{tmp_path}/x").device == f"DISK:{tmp_path}/x"
  with pytest.raises(ValueError, match="needs a file"): Device["DISK"]

def test_reads_slices_and_bitcasts_as_numpy(data_file):
  ref = np.frombuffer(data_file.read_bytes(), np.uint8)
  t = Tensor.empty(32, 32, device=f"disk:{data_file}", dtype=dtypes.uint8)
  np.testing.assert_equal(t.numpy(), ref.reshape(32, 32))
  np.testing.assert_equal(t[3].to("CPU").numpy(), ref[96:128])
  np.testing.assert_equal(t.reshape(-1)[314:1000].to("CPU").numpy(), ref[314:1000])
  np.testing.assert_equal(t[1].bitcast(dtypes.uint16).to("CPU").numpy(), ref[32:64].view(np.uint16))
  np.testing.assert_equal(t.bitcast(dtypes.float32)[2:4].to("CPU").numpy(), ref.view(np.float32).reshape(32, 8)[2:4])
  np.testing.assert_equal(t[2:5].bitcast(dtypes.int8).numpy(), ref[64:160].view(np.int8).reshape(3, 32))
  np.testing.assert_equal((t[5].to("CPU").float() + 1).numpy(), ref[160:192] + 1.0)

def test_path_tensor_is_the_file_mapped(data_file):
  ref = np.frombuffer(data_file.read_bytes(), np.uint8)
  t = Tensor(data_file)
  assert t.shape == (1024,) and t.dtype == dtypes.uint8 and t.device == f"DISK:{data_file}"
  np.testing.assert_equal(Tensor(data_file, dtype=dtypes.int32).numpy(), ref.view(np.int32))
  np.testing.assert_equal(Tensor(data_file, device="CPU").numpy(), ref)
  with pytest.raises(FileNotFoundError): Tensor(data_file.parent / "missing")
  (empty := data_file.parent / "empty").write_bytes(b"")
  assert Tensor(empty).realize().shape == (0,) and Tensor(empty).tolist() == [] and empty.stat().st_size == 0

def test_copy_to_disk_writes_the_file(tmp_path):
  x = np.random.default_rng(0).standard_normal(100).astype(np.float32)
  Tensor(x).to(f"disk:{tmp_path}/w")  # written now: nothing else is asked of it
  assert (tmp_path / "w").read_bytes() == x.tobytes()
  np.testing.assert_equal(Tensor.empty(10, 10, device=f"disk:{tmp_path}/w").numpy(), x.reshape(10, 10))

def test_assign_and_setitem_write_into_the_file(tmp_path):
  t = Tensor.empty(10, device=f"disk:{tmp_path}/a", dtype=dtypes.int64)
  ref = np.zeros(10, np.int64)
  t.assign(Tensor.zeros(10, dtype=dtypes.int64))
  for i in range(5):
    t[2 * i:2 * i + 2].assign(np.array([i, 7 * i]))
    ref[2 * i:2 * i + 2] = [i, 7 * i]
  t[1:3] = [13, 12]
  ref[1:3] = [13, 12]
  np.testing.assert_equal(t.numpy(), ref)
  np.testing.assert_equal(np.frombuffer((tmp_path / "a").read_bytes(), np.int64), ref)
  t.reshape(2, 5)[1].assign(Tensor([1.5, 2, 3, 4, 5]) * 2)  # a value computed on the default device, cast
  ref[5:] = [3, 4, 6, 8, 10]
  np.testing.assert_equal(t.to("CPU").numpy(), ref)

def test_computing_on_disk_raises(data_file):
  t = Tensor(data_file).reshape(32, 32)
  for f in (lambda: (t + 1).numpy(), lambda: t.sum().item(), lambda: t.permute(1, 0).contiguous().realize()):
    with pytest.raises(RuntimeError, match="is a file and computes nothing: copy the tensor"): f()

def test_any_view_of_a_file_is_read(data_file):
  # as torch's views: a permute, a strided slice or a flip of a file's tensor reads the run of the file under it (copied
  # as it is) and makes the view on the device it goes to; a run (x[1], x[2:5]) is still read alone
  t, ref = Tensor(data_file).reshape(4, 16, 16), np.frombuffer(data_file.read_bytes(), np.uint8).reshape(4, 16, 16)
  views = [(lambda x: x.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1)), (lambda x: x[1:3, ::3], None),
           (lambda x: x[2].T, None), (lambda x: x.flip(1)[1:, :, 2:5], lambda x: x[:, ::-1][1:, :, 2:5]),
           (lambda x: x[1:3].reshape(32, 16)[::2], None)]
  for f, g in views:
    want = (g or f)(ref)
    np.testing.assert_equal(f(t).to("CPU").numpy(), want)
    np.testing.assert_equal(f(t).numpy(), want)
    assert f(t).tolist() == want.tolist()
    np.testing.assert_equal((f(t).to("CPU") + 1).numpy(), want + 1)

def test_read_only_file(data_file):
  os.chmod(data_file, stat.S_IRUSR)
  try:
    if os.access(data_file, os.W_OK): pytest.skip("root writes read-only files")
    np.testing.assert_equal(Tensor(data_file)[:4].numpy(), [0, 1, 2, 3])
  finally: os.chmod(data_file, stat.S_IRUSR | stat.S_IWUSR)

def test_safetensors_read_through_the_file(tmp_path):
  from fusegrad.nn.state import safe_save, safe_load, safe_load_metadata
  x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
  safe_save({"x": Tensor(x), "i": Tensor([5, -6], dtype=dtypes.int16)}, fn := tmp_path / "m.safetensors")
  t, start, header = safe_load_metadata(fn)
  assert t.device == f"DISK:{fn}"
  a, b = header["x"]["data_offsets"]
  np.testing.assert_equal(t[start + a:start + b].bitcast(dtypes.float32).reshape(3, 4).to("CPU").numpy(), x)
  loaded = safe_load(fn)
  fn.write_bytes(b"\0" * fn.stat().st_size)  # what safe_load gave is its own copy
  np.testing.assert_equal(loaded["x"].numpy(), x)
  assert loaded["i"].tolist() == [5, -6] and loaded["x"].device == Device.DEFAULT

def test_load_state_dict_from_files(tmp_path):
  from fusegrad import nn
  from fusegrad.nn.state import load_state_dict
  w, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.ones(3, np.float32)
  Tensor(w).to(f"disk:{tmp_path}/w")
  Tensor(b).to(f"disk:{tmp_path}/b")
  layer = nn.Linear(4, 3)
  load_state_dict(layer, {"weight": Tensor.empty(3, 4, device=f"disk:{tmp_path}/w"),
                          "bias": Tensor.empty(3, device=f"disk:{tmp_path}/b")}, verbose=False)
  assert layer.weight.device == Device.DEFAULT
  np.testing.assert_equal(layer(Tensor.ones(1, 4)).numpy(), np.ones((1, 4), np.float32) @ w.T + b)

def test_bfloat16_file_reads_as_float32(tmp_path):
  x = np.array([10000, -1, -1000, -10000, 20], np.float32)
  (fn := tmp_path / "bf").write_bytes((x.view(np.uint32) >> 16).astype(np.uint16).tobytes())  # truncated to bfloat16
  ref = ((x.view(np.uint32) >> 16) << 16).view(np.float32)  # [9984, -1, -1000, -9984, 20], tinygrad's test's values
  t = Tensor.empty(5, dtype=dtypes.bfloat16, device=f"disk:{fn}")
  np.testing.assert_equal(t.numpy(), ref)
  assert t.tolist() == ref.tolist() and t.to("CPU").float().tolist() == ref.tolist()

def test_copy_to_disk_of_a_tensor_with_grad(tmp_path):
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  (x * x).sum().backward()
  d = x.to(f"disk:{tmp_path}/g")  # the file holds the values (a copy of the gradient there would share the file)
  assert d.grad is None and d.tolist() == [1.0, 2.0, 3.0] and x.grad.tolist() == [2.0, 4.0, 6.0]

def test_read_only_file_maps_read_only_and_refuses_to_grow(tmp_path, monkeypatch):
  """A file that can't be opened for writing (simulated: root may write any file) is mapped read-only; a buffer larger
  than it raises a clear error naming the file, instead of failing in ftruncate."""
  import os
  from fusegrad.runtime.ops_disk import DiskAllocator
  (p := tmp_path / "ro.bin").write_bytes(b"abcd")
  real_open = os.open
  def no_write(path, flags, *args):
    if flags & os.O_RDWR: raise PermissionError(path)
    return real_open(path, flags, *args)
  monkeypatch.setattr(os, "open", no_write)
  assert bytes(DiskAllocator(str(p)).alloc(4)) == b"abcd"
  with pytest.raises(ValueError, match="read-only and holds 4 bytes"): DiskAllocator(str(p)).alloc(8)
