"""nn.state: state dicts, load_state_dict, safetensors (checked both ways against the safetensors package), PyTorch
checkpoints (zip and legacy) without torch, GGUF files (written here by the spec, and by the gguf package if present),
atomic writes and clear errors on corrupt files."""
import collections, json, os, pathlib, pickle, struct, subprocess, sys, zipfile
ROOT = pathlib.Path(__file__).resolve().parents[1]
from typing import NamedTuple
import numpy as np
import pytest
import torch
from fusegrad import Tensor, TinyJit, dtypes, Device, nn
from fusegrad.nn.optim import SGD, Adam
from test.helpers import two_devices
from fusegrad.nn.state import (get_state_dict, get_parameters, load_state_dict, StateDictError, safe_save, safe_load,
                               safe_load_metadata, torch_load, UnsafePickleError, gguf_load, tar_extract)

class Linear:
  def __init__(self, fan_in: int, fan_out: int, seed: int):
    r = np.random.default_rng(seed)
    self.weight = Tensor(r.standard_normal((fan_out, fan_in)).astype(np.float32))
    self.bias = Tensor(r.standard_normal(fan_out).astype(np.float32))
  def __call__(self, x: Tensor) -> Tensor: return x @ self.weight.T + self.bias

class Pair(NamedTuple):
  first: Tensor
  second: Tensor

class Net:
  def __init__(self, seed: int = 0):
    self.layers = [Linear(3, 4, seed), Linear(4, 2, seed + 1)]
    self.extra = {"scale": Tensor([2.0]), "pair": Pair(Tensor([1.0]), Tensor([2.0]))}
    self.name, self.step = "net", 3
  def __call__(self, x: Tensor) -> Tensor: return self.layers[1](self.layers[0](x).relu()) * self.extra["scale"]

NET_KEYS = ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias", "extra.scale", "extra.pair.first",
            "extra.pair.second"]

# *** state dicts ***

def test_get_state_dict_names_and_order():
  net = Net()
  sd = get_state_dict(net)
  assert list(sd) == NET_KEYS
  assert sd["layers.1.bias"] is net.layers[1].bias
  assert list(get_state_dict(net, prefix="model.")) == ["model." + k for k in NET_KEYS]
  assert get_state_dict([Tensor([1.0]), (Tensor([2.0]),)]).keys() == {"0", "1.0"}

def test_get_parameters_dedups_and_survives_cycles():
  net = Net()
  net.tied = net.layers[0].weight  # the same tensor by two paths
  net.layers[0].parent = net  # a reference cycle
  sd = get_state_dict(net)
  assert "tied" in sd and sd["tied"] is sd["layers.0.weight"]
  params = get_parameters(net)
  assert len(params) == len(NET_KEYS) and len({id(p) for p in params}) == len(params)
  assert params[0] is net.layers[0].weight

def test_get_state_dict_skips_non_tensors():
  class Holder:
    def __init__(self): self.fn, self.cls, self.mod, self.val, self.t = print, Net, np, 3.0, Tensor([1])
  assert list(get_state_dict(Holder())) == ["t"]

def buffer_of(t: Tensor):
  u = t.uop
  while u.src and u.op.name != "BUFFER": u = u.src[0]
  return u.arg

def test_load_state_dict_roundtrip_keeps_buffers():
  src, dst = Net(seed=1), Net(seed=2)
  x = Tensor(np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32))
  before = {k: buffer_of(v) for k, v in get_state_dict(dst).items()}
  loaded = load_state_dict(dst, get_state_dict(src), verbose=False)
  assert [id(t) for t in loaded] == [id(t) for t in get_state_dict(dst).values()]
  np.testing.assert_allclose(dst(x).numpy(), src(x).numpy(), rtol=1e-6)
  for k, v in get_state_dict(dst).items(): assert buffer_of(v) is before[k], f"{k} was rebound instead of written into"

def test_load_state_dict_into_unrealized_tensors():
  class Stats:
    def __init__(self): self.mean, self.var, self.noise = Tensor.zeros(3), Tensor.zeros(3), Tensor.rand(3)
  model, sd = Stats(), {"mean": Tensor([1.0, 2, 3]), "var": Tensor([4.0, 5, 6]), "noise": Tensor([7.0, 8, 9])}
  load_state_dict(model, sd, verbose=False)
  sd["mean"].assign(Tensor([0.0, 0, 0])).realize()  # the model has its own copies
  model.var.assign(model.var * 2).realize()  # and can update them in place
  np.testing.assert_array_equal(model.mean.numpy(), [1, 2, 3])
  np.testing.assert_array_equal(model.var.numpy(), [8, 10, 12])
  np.testing.assert_array_equal(model.noise.numpy(), [7, 8, 9])

def test_load_state_dict_into_equal_realized_tensors():
  class Biases:
    def __init__(self): self.a, self.b = Tensor.zeros(3).contiguous().realize(), Tensor.zeros(3).contiguous().realize()
  model = Biases()
  load_state_dict(model, {"a": Tensor([1.0, 2, 3]), "b": Tensor([4.0, 5, 6])}, verbose=False)
  np.testing.assert_array_equal(model.a.numpy(), [1, 2, 3])
  np.testing.assert_array_equal(model.b.numpy(), [4, 5, 6])

def test_load_state_dict_under_jit_and_optimizer():
  net = Net(seed=1)
  forward = TinyJit(lambda x: net(x).realize())
  for i in range(3): forward(Tensor(np.full((2, 3), i, dtype=np.float32)))
  x = Tensor(np.ones((2, 3), dtype=np.float32))
  opt = SGD(get_parameters(net), lr=0.1)
  other = Net(seed=5)
  load_state_dict(net, get_state_dict(other), verbose=False)
  np.testing.assert_allclose(forward(x).numpy(), other(x).numpy(), rtol=1e-6)  # the replay reads the loaded values
  opt.zero_grad()
  net(x).sum().backward()
  with Tensor.train(): opt.step()  # the optimizer still updates the same tensors
  assert not np.allclose(net.layers[0].weight.numpy(), other.layers[0].weight.numpy())

def test_load_state_dict_errors():
  net = Net()
  sd = get_state_dict(Net(seed=4))
  del sd["layers.0.bias"]
  sd["unused"] = Tensor([1.0])
  sd["layers.1.weight"] = Tensor.zeros(3, 3)
  with pytest.raises(StateDictError) as e: load_state_dict(net, sd, verbose=False)
  msg = str(e.value)
  for part in ("missing", "'layers.0.bias'", "unexpected", "'unused'", "layers.1.weight", "(2, 4)", "(3, 3)"):
    assert part in msg
  assert isinstance(e.value, KeyError) and isinstance(e.value, RuntimeError) and isinstance(e.value, ValueError)
  with pytest.raises(StateDictError, match="Shape mismatch in layer `.*`: Expected shape"):
    load_state_dict(net, sd, strict=False, verbose=False)

def test_load_state_dict_not_strict_and_conversions():
  net = Net()
  old_bias = net.layers[0].bias.numpy()
  w = np.arange(12, dtype=np.float16).reshape(4, 3)
  sd = {"layers.0.weight": Tensor(w), "extra.scale": Tensor(5.0), "junk": Tensor([1])}
  load_state_dict(net, sd, strict=False, verbose=False)
  assert net.layers[0].weight.dtype == dtypes.float32
  np.testing.assert_array_equal(net.layers[0].weight.numpy(), w.astype(np.float32))
  np.testing.assert_array_equal(net.extra["scale"].numpy(), [5.0])  # () loads into (1,)
  np.testing.assert_array_equal(net.layers[0].bias.numpy(), old_bias)

def test_load_state_dict_consume(capsys):
  net, sd = Net(), get_state_dict(Net(seed=7))
  load_state_dict(net, sd, consume=True)
  assert sd == {} and "loaded 7 tensors" in capsys.readouterr().out

def test_optimizer_checkpoint_resume(tmp_path):
  x = Tensor(np.random.default_rng(5).standard_normal((4, 3)).astype(np.float32))
  def make():
    net = Net(seed=1)
    return net, Adam(get_parameters(net), lr=0.05)
  def train(net, opt, steps):
    for _ in range(steps):
      opt.zero_grad()
      net(x).square().mean().backward()
      with Tensor.train(): opt.step()
  straight = make()
  train(*straight, 4)
  first = make()
  train(*first, 2)
  fn = tmp_path / "ckpt.safetensors"
  safe_save(get_state_dict({"model": first[0], "opt": first[1]}), fn)
  assert {"opt.lr", "opt.b1_t", "opt.m.0", "opt.v.6"} <= set(safe_load(fn))
  resumed = make()
  load_state_dict({"model": resumed[0], "opt": resumed[1]}, safe_load(fn), verbose=False)
  train(*resumed, 2)
  for k, v in get_state_dict(straight[0]).items():
    np.testing.assert_allclose(get_state_dict(resumed[0])[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)

# *** safetensors ***

ALL_DTYPES = [dtypes.bool, dtypes.uint8, dtypes.int8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
              dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
TORCH_DTYPES = {dtypes.bool: torch.bool, dtypes.uint8: torch.uint8, dtypes.int8: torch.int8, dtypes.int16: torch.int16,
                dtypes.uint16: torch.uint16, dtypes.int32: torch.int32, dtypes.uint32: torch.uint32,
                dtypes.int64: torch.int64, dtypes.uint64: torch.uint64, dtypes.float16: torch.float16,
                dtypes.bfloat16: torch.bfloat16,
                dtypes.float32: torch.float32, dtypes.float64: torch.float64}

NP_DTYPES = {dtypes.uint8: np.uint8, dtypes.int8: np.int8, dtypes.int16: np.int16, dtypes.uint16: np.uint16,
             dtypes.int32: np.int32, dtypes.uint32: np.uint32, dtypes.int64: np.int64, dtypes.uint64: np.uint64,
             dtypes.float16: np.float16,
             dtypes.bfloat16: np.float32, dtypes.float32: np.float32, dtypes.float64: np.float64}

def sample(dt, shape=(2, 3), seed=0) -> np.ndarray:
  """Values exactly representable in dt (as float32 for bfloat16), including negative ones where dt has them."""
  r = np.random.default_rng(seed)
  if dt == dtypes.bool: return r.integers(0, 2, shape).astype(bool)
  if dtypes.is_float(dt): return (r.integers(-64, 64, shape) / 8).astype(NP_DTYPES[dt])
  return r.integers(0 if dtypes.is_unsigned(dt) else -100, 100, shape).astype(NP_DTYPES[dt])

def fg_tensor(a: np.ndarray, dt) -> Tensor: return Tensor(a, dtype=dt)

def test_safetensors_roundtrip_all_dtypes(tmp_path):
  tensors = {f"t_{dt.name}": fg_tensor(sample(dt, seed=i), dt) for i, dt in enumerate(ALL_DTYPES)}
  tensors["scalar"], tensors["empty"] = Tensor(3.5), Tensor.zeros(0, 4)
  tensors["transposed"] = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).T
  fn = tmp_path / "all.safetensors"
  safe_save(tensors, fn, metadata={"format": "pt", "note": "hi"})
  loaded = safe_load(fn)
  assert list(loaded) == list(tensors)
  for k, t in tensors.items():
    assert loaded[k].dtype == t.dtype and loaded[k].shape == t.shape, k
    np.testing.assert_array_equal(loaded[k].numpy(), t.numpy(), err_msg=k)
  _, data_start, header = safe_load_metadata(fn)
  assert header["__metadata__"] == {"format": "pt", "note": "hi"} and data_start % 8 == 0
  assert list(tmp_path.iterdir()) == [fn], "no temp files left behind"

def test_safetensors_package_reads_ours(tmp_path):
  safetensors_torch = pytest.importorskip("safetensors.torch")
  from safetensors import safe_open
  arrays = {dt: sample(dt, (3, 2), seed=i) for i, dt in enumerate(ALL_DTYPES)}
  fn = tmp_path / "ours.safetensors"
  safe_save({dt.name: fg_tensor(a, dt) for dt, a in arrays.items()}, fn, metadata={"k": "v"})
  theirs = safetensors_torch.load_file(str(fn))
  for dt, a in arrays.items():
    t = theirs[dt.name]
    assert t.dtype == TORCH_DTYPES[dt], dt
    np.testing.assert_array_equal(t.float().numpy() if dt == dtypes.bfloat16 else t.numpy(), a, err_msg=str(dt))
  with safe_open(str(fn), framework="pt") as f: assert f.metadata() == {"k": "v"}

def test_we_read_safetensors_package_files(tmp_path):
  safetensors_torch = pytest.importorskip("safetensors.torch")
  arrays = {dt: sample(dt, (2, 2, 2), seed=10 + i) for i, dt in enumerate(ALL_DTYPES)}
  tensors = {dt.name: torch.tensor(a).to(TORCH_DTYPES[dt]) for dt, a in arrays.items()}
  tensors["scalar"] = torch.tensor(1.25)
  fn = tmp_path / "theirs.safetensors"
  safetensors_torch.save_file(tensors, str(fn), metadata={"who": "safetensors"})
  ours = safe_load(fn)
  for dt, a in arrays.items():
    assert ours[dt.name].dtype == dt and ours[dt.name].shape == (2, 2, 2)
    np.testing.assert_array_equal(ours[dt.name].numpy(), a, err_msg=str(dt))
  assert ours["scalar"].shape == () and ours["scalar"].item() == 1.25
  assert safe_load_metadata(fn)[2]["__metadata__"] == {"who": "safetensors"}
  # a uint8 Tensor of the bytes works as a source too
  from_tensor = safe_load(Tensor(np.frombuffer(fn.read_bytes(), dtype=np.uint8)))
  np.testing.assert_array_equal(from_tensor["float"].numpy(), arrays[dtypes.float32])

def test_safe_save_is_atomic(tmp_path, monkeypatch):
  fn = tmp_path / "ckpt.safetensors"
  safe_save({"a": Tensor([1.0, 2.0])}, fn)
  good = fn.read_bytes()
  import fusegrad.helpers
  def crash(fd): raise OSError("disk on fire")
  monkeypatch.setattr(fusegrad.helpers.os, "fsync", crash)
  with pytest.raises(OSError, match="disk on fire"): safe_save({"a": Tensor([3.0, 4.0, 5.0])}, fn)
  assert fn.read_bytes() == good and list(tmp_path.iterdir()) == [fn]

def safetensors_bytes(header: dict, data: bytes, header_len: int | None = None) -> bytes:
  text = json.dumps(header).encode()
  return struct.pack("<Q", len(text) if header_len is None else header_len) + text + data

@pytest.mark.parametrize("raw,match", [
  (b"\x01\x02", "too short"),
  (safetensors_bytes({}, b"", header_len=1000), "truncated"),
  (struct.pack("<Q", 4) + b"{{{{", "not valid JSON"),
  (safetensors_bytes({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8), "truncated"),
  (safetensors_bytes({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8), "needs 12"),
  (safetensors_bytes({"a": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}, b"\0"), "unsupported dtype"),
  (safetensors_bytes({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}, b""), "bad shape"),
  (safetensors_bytes({"a": {"dtype": "F32"}}, b""), "needs dtype, shape and data_offsets"),
  (safetensors_bytes([1, 2], b""), "not a JSON object")])
def test_safe_load_corrupt(tmp_path, raw, match):
  fn = tmp_path / "bad.safetensors"
  fn.write_bytes(raw)
  with pytest.raises(ValueError, match=match): safe_load(fn)

def test_safe_load_truncated_real_file(tmp_path):
  fn = tmp_path / "t.safetensors"
  safe_save({"a": Tensor(np.arange(64, dtype=np.float32))}, fn)
  fn.write_bytes(fn.read_bytes()[:-10])
  with pytest.raises(ValueError, match="'a'.*truncated"): safe_load(fn)

def test_safe_save_bad_input(tmp_path):
  with pytest.raises(TypeError, match="not a Tensor"): safe_save({"a": np.zeros(3)}, tmp_path / "x")
  with pytest.raises(ValueError, match="bad tensor name"): safe_save({"__metadata__": Tensor([1])}, tmp_path / "x")
  assert not (tmp_path / "x").exists()

# *** PyTorch checkpoints ***

def torch_sample_state() -> dict:
  base = torch.arange(24, dtype=torch.float32).reshape(4, 6) / 4
  return collections.OrderedDict(
    weight=base, half=base.half(), bf16=base.bfloat16(), double=base.double(), long=torch.arange(-3, 3),
    int=torch.arange(5, dtype=torch.int32), short=torch.arange(4, dtype=torch.int16),
    char=torch.arange(-2, 2, dtype=torch.int8), byte=torch.arange(4, dtype=torch.uint8),
    mask=torch.tensor([True, False, True]), transposed=base.T, sliced=base[1:3, ::2],
    expanded=torch.arange(3.0).expand(2, 3), scalar=torch.tensor(7.5), empty=torch.zeros(0, 3),
    param=torch.nn.Parameter(torch.ones(2, 2)), u16=torch.tensor([1, 65535], dtype=torch.uint16))

def assert_matches_torch(got, want: dict):
  for k, v in want.items():
    assert isinstance(got[k], Tensor), k
    expect = v.detach().float().numpy() if v.dtype == torch.bfloat16 else v.detach().numpy()
    assert got[k].shape == tuple(v.shape), k
    np.testing.assert_array_equal(got[k].numpy(), expect, err_msg=k)

@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
def test_torch_load(tmp_path, zipped):
  state = torch_sample_state()
  fn = tmp_path / "model.pt"
  torch.save(state, fn, _use_new_zipfile_serialization=zipped)
  assert_matches_torch(torch_load(fn), state)

@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
def test_torch_load_nested_checkpoint_and_shared_storage(tmp_path, zipped):
  w = torch.arange(6, dtype=torch.float32).reshape(2, 3)
  extras = {"epoch": 3, "name": "run", "sizes": (1, 2), "lrs": [0.1, 0.01], "blob": b"\x00\xff"}
  ckpt = {"model": {"w": w, "w_t": w.t(), "row": w[1]}, "device": torch.device("cpu"), **extras}
  fn = tmp_path / "ckpt.pth"
  torch.save(ckpt, fn, _use_new_zipfile_serialization=zipped)
  got = torch_load(fn)
  assert {k: got[k] for k in extras} == extras and got["device"] == "cpu"
  assert_matches_torch(got["model"], ckpt["model"])

def test_torch_load_into_model(tmp_path):
  net = Net(seed=1)
  sd = {k: torch.tensor(v.numpy()) for k, v in get_state_dict(Net(seed=9)).items()}
  torch.save(sd, tmp_path / "net.pt")
  load_state_dict(net, torch_load(tmp_path / "net.pt"), verbose=False)
  np.testing.assert_array_equal(net.layers[1].weight.numpy(), sd["layers.1.weight"].numpy())

def test_torch_load_does_not_import_torch(tmp_path):
  fn = tmp_path / "m.pt"
  torch.save({"a": torch.arange(4.0)}, fn)
  code = ("import sys; sys.modules['torch'] = None\n"  # any import of torch now fails
          "from fusegrad.nn.state import torch_load\n"
          f"print(torch_load({str(fn)!r})['a'].tolist())")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parent.parent)})
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == "[0.0, 1.0, 2.0, 3.0]"

class Evil:
  def __reduce__(self): return (os.system, ("touch pwned",))

class Custom:
  pass

@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
def test_torch_load_refuses_arbitrary_globals(tmp_path, zipped, monkeypatch):
  monkeypatch.chdir(tmp_path)
  for obj, name in [(Evil(), "system"), (Custom(), "Custom")]:
    fn = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(2), "x": obj}, fn, _use_new_zipfile_serialization=zipped)
    with pytest.raises(UnsafePickleError, match=f"refusing to unpickle .*{name}"): torch_load(fn)
    assert not (tmp_path / "pwned").exists()
  with pytest.raises(pickle.UnpicklingError): torch_load(fn)  # also a ValueError, as other corrupt files

@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
def test_torch_load_truncated(tmp_path, zipped):
  fn = tmp_path / "t.pt"
  torch.save({"w": torch.arange(100.0)}, fn, _use_new_zipfile_serialization=zipped)
  raw = fn.read_bytes()
  for cut in (len(raw) - 40, len(raw) // 2, 10):
    fn.write_bytes(raw[:cut])
    with pytest.raises(ValueError, match="torch_load"): torch_load(fn)

def test_torch_load_not_a_checkpoint(tmp_path):
  fn = tmp_path / "x.pt"
  fn.write_bytes(b"hello world")
  with pytest.raises(ValueError, match="not a PyTorch checkpoint"): torch_load(fn)
  with zipfile.ZipFile(fn, "w") as zf: zf.writestr("readme.txt", "hi")
  with pytest.raises(ValueError, match="data.pkl"): torch_load(fn)

# *** GGUF ***

def gguf_string(s: str) -> bytes: return struct.pack("<Q", len(s.encode())) + s.encode()

GGUF_TYPES = {"u8": (0, "B"), "i8": (1, "b"), "u16": (2, "H"), "i16": (3, "h"), "u32": (4, "I"), "i32": (5, "i"),
              "f32": (6, "f"), "bool": (7, "?"), "u64": (10, "Q"), "i64": (11, "q"), "f64": (12, "d")}

def gguf_value(kind: str, v) -> bytes:
  if kind == "str": return struct.pack("<I", 8) + gguf_string(v)
  if kind.startswith("arr_"):
    inner = kind[4:]
    if inner == "str": return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(gguf_string(s) for s in v)
    code, fmt = GGUF_TYPES[inner]
    return struct.pack("<IIQ", 9, code, len(v)) + struct.pack(f"<{len(v)}{fmt}", *v)
  code, fmt = GGUF_TYPES[kind]
  return struct.pack("<I", code) + struct.pack(f"<{fmt}", v)

def write_gguf(kv: dict, tensors: list, alignment: int = 32, version: int = 3) -> bytes:
  """A GGUF file by the spec: kv maps key -> (kind, value); tensors are (name, numpy shape, ggml type, raw bytes)."""
  out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv))
  for key, (kind, v) in kv.items(): out += gguf_string(key) + gguf_value(kind, v)
  offset, blobs = 0, b""
  for name, shape, ggml_type, data in tensors:
    out += gguf_string(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *reversed(shape))
    out += struct.pack("<IQ", ggml_type, offset)
    padded = data + b"\0" * (-len(data) % alignment)
    blobs, offset = blobs + padded, offset + len(padded)
  return out + b"\0" * (-len(out) % alignment) + blobs

def quantize_q8_0(x: np.ndarray) -> tuple[bytes, np.ndarray]:
  """Blocks of 32: a float16 scale d = max|x| / 127, then 32 int8 values round(x / d).
  Returns the bytes and the values they stand for."""
  blocks = x.reshape(-1, 32).astype(np.float32)
  d = (np.abs(blocks).max(axis=1, keepdims=True) / 127).astype(np.float16)
  q = np.round(blocks / np.where(d == 0, 1, d.astype(np.float32))).clip(-128, 127).astype(np.int8)
  raw = b"".join(d[i].tobytes() + q[i].tobytes() for i in range(len(blocks)))
  return raw, (q.astype(np.float32) * d.astype(np.float32)).reshape(x.shape)

def quantize_q4(x: np.ndarray, with_min: bool) -> tuple[bytes, np.ndarray]:
  """Q4_0 (value = (q - 8) * d) or Q4_1 (value = q * d + m); byte j of a block holds elements j (low nibble) and
  j + 16 (high nibble)."""
  blocks = x.reshape(-1, 32).astype(np.float32)
  if with_min:
    m = blocks.min(axis=1, keepdims=True).astype(np.float16)
    d = ((blocks.max(axis=1, keepdims=True) - m.astype(np.float32)) / 15).astype(np.float16)
    step = np.where(d == 0, 1, d.astype(np.float32))
    q = np.round((blocks - m.astype(np.float32)) / step).clip(0, 15).astype(np.uint8)
    values = q * d.astype(np.float32) + m.astype(np.float32)
  else:
    d = (np.abs(blocks).max(axis=1, keepdims=True) / 8).astype(np.float16)
    q = (np.round(blocks / np.where(d == 0, 1, d.astype(np.float32))) + 8).clip(0, 15).astype(np.uint8)
    values = (q.astype(np.float32) - 8) * d.astype(np.float32)
  packed = q[:, :16] | (q[:, 16:] << 4)
  heads = [d[i].tobytes() + (m[i].tobytes() if with_min else b"") for i in range(len(blocks))]
  raw = b"".join(h + packed[i].tobytes() for i, h in enumerate(heads))
  return raw, values.reshape(x.shape)

GGUF_KV = {"general.architecture": ("str", "tiny"), "general.alignment": ("u32", 64), "a.u8": ("u8", 200),
           "a.i8": ("i8", -5), "a.u16": ("u16", 60000), "a.i16": ("i16", -300), "a.i32": ("i32", -70000),
           "a.u64": ("u64", 2 ** 40), "a.i64": ("i64", -2 ** 40), "a.f32": ("f32", 0.5), "a.f64": ("f64", 0.1),
           "a.bool": ("bool", True), "a.ints": ("arr_i32", [1, -2, 3]), "a.strs": ("arr_str", ["x", "yz", ""]),
           "a.floats": ("arr_f32", [0.25, -1.5])}

def test_gguf_load_spec_file(tmp_path):
  r = np.random.default_rng(0)
  f32, f16 = r.standard_normal((2, 3)).astype(np.float32), r.standard_normal((4,)).astype(np.float16)
  q8_raw, q8_vals = quantize_q8_0(r.standard_normal((2, 64)).astype(np.float32))
  q4_raw, q4_vals = quantize_q4(r.standard_normal((3, 32)).astype(np.float32), with_min=False)
  q41_raw, q41_vals = quantize_q4(r.standard_normal((32,)).astype(np.float32), with_min=True)
  i32 = np.arange(-3, 3, dtype=np.int32).reshape(3, 2)
  tensors = [("f32", f32.shape, 0, f32.tobytes()), ("f16", f16.shape, 1, f16.tobytes()), ("q8", (2, 64), 8, q8_raw),
             ("q4", (3, 32), 2, q4_raw), ("q41", (32,), 3, q41_raw), ("i32", i32.shape, 26, i32.tobytes())]
  fn = tmp_path / "tiny.gguf"
  fn.write_bytes(write_gguf(GGUF_KV, tensors, alignment=64))
  kv, weights = gguf_load(fn)
  for key, (kind, v) in GGUF_KV.items():
    if kind in ("f32", "arr_f32"): assert kv[key] == pytest.approx(v), key
    else: assert kv[key] == v, key
  got_dtypes = (weights["f16"].dtype, weights["i32"].dtype, weights["q8"].dtype)
  assert got_dtypes == (dtypes.float16, dtypes.int32, dtypes.float32)
  for name, want in [("f32", f32), ("f16", f16), ("q8", q8_vals), ("q4", q4_vals), ("q41", q41_vals), ("i32", i32)]:
    assert weights[name].shape == want.shape, name
    np.testing.assert_allclose(weights[name].numpy(), want, rtol=1e-6, atol=1e-6, err_msg=name)
  kv2, weights2 = gguf_load(Tensor(np.frombuffer(fn.read_bytes(), dtype=np.uint8)))  # from a Tensor of the bytes
  assert kv2 == kv and np.array_equal(weights2["q4"].numpy(), weights["q4"].numpy())

def test_gguf_package_files(tmp_path):
  gguf = pytest.importorskip("gguf")
  r = np.random.default_rng(1)
  arrays = {"f32": r.standard_normal((3, 4)).astype(np.float32), "f16": r.standard_normal((2, 8)).astype(np.float16),
            "q8": r.standard_normal((2, 64)).astype(np.float32), "q4": r.standard_normal((4, 32)).astype(np.float32)}
  fn = tmp_path / "pkg.gguf"
  writer = gguf.GGUFWriter(str(fn), "llama")
  writer.add_uint32("llama.context_length", 128)
  writer.add_array("tokenizer.ggml.tokens", ["<s>", "a", "b"])
  writer.add_tensor("f32", arrays["f32"])
  writer.add_tensor("f16", arrays["f16"])
  qtypes = {"q8": gguf.GGMLQuantizationType.Q8_0, "q4": gguf.GGMLQuantizationType.Q4_0}
  for name, qt in qtypes.items():
    writer.add_tensor(name, gguf.quants.quantize(arrays[name], qt), raw_dtype=qt)  # the shape comes from the bytes
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  kv, weights = gguf_load(fn)
  assert kv["general.architecture"] == "llama" and kv["llama.context_length"] == 128
  assert kv["tokenizer.ggml.tokens"] == ["<s>", "a", "b"]
  np.testing.assert_array_equal(weights["f32"].numpy(), arrays["f32"])
  np.testing.assert_array_equal(weights["f16"].numpy(), arrays["f16"])
  for name, qt in qtypes.items():
    want = gguf.quants.dequantize(gguf.quants.quantize(arrays[name], qt), qt).reshape(arrays[name].shape)
    np.testing.assert_allclose(weights[name].numpy(), want, rtol=1e-6, atol=1e-6, err_msg=name)
    assert np.abs(weights[name].numpy() - arrays[name]).max() < 0.3  # and close to the original

@pytest.mark.parametrize("qname", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "MXFP4"])
def test_gguf_dequantize_matches_gguf_package(tmp_path, qname):
  gguf = pytest.importorskip("gguf")
  qt = gguf.GGMLQuantizationType[qname]
  block, nbytes = gguf.GGML_QUANT_SIZES[qt]
  r = np.random.default_rng(qt.value)
  raw = r.integers(0, 256, (3, nbytes), dtype=np.uint8)  # random quants; the f16 scales made finite below
  scale_bytes = {"Q4_1": [0, 2], "Q5_1": [0, 2], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [nbytes - 2],
                 "MXFP4": []}.get(qname, [0])  # (MXFP4: one byte of exponent, no float16 scale)
  for pos in scale_bytes: raw[:, pos:pos + 2] = r.uniform(-2, 2, (3, 1)).astype(np.float16).view(np.uint8)
  fn = tmp_path / "q.gguf"
  fn.write_bytes(write_gguf({}, [("w", (3, block), qt.value, raw.tobytes())]))
  got = gguf_load(fn)[1]["w"]
  assert got.shape == (3, block) and got.dtype == dtypes.float32
  np.testing.assert_allclose(got.numpy(), gguf.quants.dequantize(raw, qt).reshape(3, block), rtol=1e-6, atol=1e-6)

def test_gguf_corrupt(tmp_path):
  good = write_gguf({"k": ("str", "v")}, [("w", (2, 32), 8, quantize_q8_0(np.ones((2, 32), np.float32))[0])])
  cases = [(b"GGML" + good[4:], "bad magic"), (good[:4] + struct.pack("<I", 1) + good[8:], "version 1"),
           (good[:30], "truncated"), (good[:-40], "past the end"),
           (good[:8] + struct.pack("<Q", 2 ** 40) + good[16:], "tensor infos don't fit"),
           (good[:16] + struct.pack("<Q", 2 ** 62) + good[24:], "truncated"),
           (write_gguf({}, [("w", (256,), 10, b"\0" * 84)]), "Q2_K"),
           (write_gguf({}, [("w", (3,), 8, b"\0" * 34)]), "blocks"),
           (good[:24] + struct.pack("<Q", 2 ** 62) + good[32:], "truncated")]
  for i, (raw, match) in enumerate(cases):
    fn = tmp_path / f"bad{i}.gguf"
    fn.write_bytes(raw)
    with pytest.raises(ValueError, match=match): gguf_load(fn)

# *** untrusted state files (issue 8.7) ***
DUP_HEADER = ('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
              '"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}').encode()

@pytest.mark.parametrize("raw,match", [
  (struct.pack("<Q", len(DUP_HEADER)) + DUP_HEADER + b"\0" * 8, "duplicate key.*'a'"),
  (safetensors_bytes({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8), "'a' and 'b' overlap"),
  (safetensors_bytes({"b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
                      "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8), "'a' and 'b' overlap"),
  (safetensors_bytes({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, b"\0" * 4), "bad data_offsets"),
  (safetensors_bytes({"a": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4), "unsupported dtype"),
  (safetensors_bytes({"a": {"dtype": {"x": 1}, "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4), "unsupported"),
  (safetensors_bytes({"a": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, b"\0" * 4), "bad shape"),
  (struct.pack("<Q", 200_002) + b"[" * 100_001 + b"]" * 100_001, "nested too deeply"),
  (safetensors_bytes({"__metadata__": {"x": "y"}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                      "n": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
                      "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}}, b"\0" * 8), "'a' and 'b' overlap")])
def test_safe_load_hostile_headers(tmp_path, raw, match):
  fn = tmp_path / "bad.safetensors"
  fn.write_bytes(raw)
  with pytest.raises(ValueError, match=match): safe_load(fn)

def test_safe_load_any_header_order_and_empty_tensors(tmp_path):
  raw = safetensors_bytes({"b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
                           "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [4, 4]},
                           "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, struct.pack("<2f", 1.5, 2.5))
  (tmp_path / "ok.safetensors").write_bytes(raw)
  got = safe_load(tmp_path / "ok.safetensors")
  assert got["a"].tolist() == [1.5] and got["b"].tolist() == [2.5] and got["e"].shape == (0, 3)

def test_gguf_deeply_nested_arrays(tmp_path):
  nested = b"".join(struct.pack("<IQ", 9, 1) for _ in range(100_000)) + struct.pack("<IQ", 0, 0)
  raw = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("k") + struct.pack("<I", 9) + nested
  (tmp_path / "deep.gguf").write_bytes(raw)
  with pytest.raises(ValueError, match="nested more than 16 deep"): gguf_load(tmp_path / "deep.gguf")
  ok = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("k") + struct.pack("<IIQ", 9, 9, 1) + \
    struct.pack("<IQ", 0, 2) + b"\x01\x02"
  (tmp_path / "ok.gguf").write_bytes(ok)
  assert gguf_load(tmp_path / "ok.gguf")[0] == {"k": [[1, 2]]}

@pytest.mark.parametrize("mode", [0o644, 0o600, 0o640, 0o755])
def test_safe_save_keeps_the_mode_of_the_file_it_replaces(tmp_path, mode):
  fn = tmp_path / "m.safetensors"
  fn.write_bytes(b"old")
  os.chmod(fn, mode)
  safe_save({"a": Tensor([1.0])}, fn)
  assert fn.stat().st_mode & 0o7777 == mode and safe_load(fn)["a"].tolist() == [1.0]

@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_safe_save_new_file_mode_as_open(tmp_path, umask):
  old = os.umask(umask)
  try:
    safe_save({"a": Tensor([1.0])}, tmp_path / "new.safetensors")
    with open(tmp_path / "ref", "wb"): pass
  finally: os.umask(old)
  assert (tmp_path / "new.safetensors").stat().st_mode & 0o7777 == (tmp_path / "ref").stat().st_mode & 0o7777
  assert (tmp_path / "ref").stat().st_mode & 0o7777 == 0o666 & ~umask

def test_safe_save_writes_through_a_symlink(tmp_path):
  (tmp_path / "store").mkdir()
  target = tmp_path / "store" / "real.safetensors"
  safe_save({"a": Tensor([1.0])}, target)
  link = tmp_path / "link.safetensors"
  link.symlink_to(target)
  safe_save({"a": Tensor([2.0, 3.0])}, link)
  assert link.is_symlink() and os.readlink(link) == str(target)
  assert safe_load(target)["a"].tolist() == [2.0, 3.0]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["link.safetensors", "store"]
  assert [p.name for p in (tmp_path / "store").iterdir()] == ["real.safetensors"]

def test_safe_save_killed_midway_leaves_the_old_file_and_a_hidden_tmp(tmp_path):
  fn = tmp_path / "ckpt.safetensors"
  safe_save({"a": Tensor([1.0, 2.0])}, fn)
  code = ("import os, signal, fusegrad.helpers\n"
          "fusegrad.helpers.os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)\n"
          "from fusegrad import Tensor\nfrom fusegrad.nn.state import safe_save\n"
          f"safe_save({{'a': Tensor([9.0] * 1000)}}, {str(fn)!r})\n")
  proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True)
  assert proc.returncode == -9
  assert safe_load(fn)["a"].tolist() == [1.0, 2.0]
  leftovers = [p.name for p in tmp_path.iterdir() if p != fn]
  assert len(leftovers) == 1 and leftovers[0].startswith(".ckpt.safetensors.") and leftovers[0].endswith(".tmp")
  assert [p.name for p in tmp_path.glob("*.safetensors")] == ["ckpt.safetensors"]

def test_torch_load_expanded_views_are_bounded(tmp_path):
  big = torch.zeros(250_000).as_strided((60_000_000,), (0,))  # a 1 MB storage, one element repeated 60M times
  torch.save({"x": big}, tmp_path / "bomb.pt")
  assert (tmp_path / "bomb.pt").stat().st_size < 2 ** 21
  with pytest.raises(ValueError, match="more than 4 times the 1000000 bytes of data"): torch_load(tmp_path / "bomb.pt")
  shared = torch.arange(250_000, dtype=torch.float32)
  torch.save({f"v{i}": shared for i in range(100)}, tmp_path / "shared.pt")  # 100 tensors sharing one storage: ok
  assert len(torch_load(tmp_path / "shared.pt")) == 100
  torch.save({f"v{i}": shared[i:] for i in range(400)}, tmp_path / "many.pt")  # 400 MB from 1 MB: refused
  with pytest.raises(ValueError, match="corrupt or malicious"): torch_load(tmp_path / "many.pt")

@pytest.mark.parametrize("zipped", [True, False])
def test_torch_load_strided_views_match_torch(tmp_path, zipped):
  base = torch.arange(24, dtype=torch.float32)
  state = {"expand": torch.arange(3.0).expand(4, 3), "overlap": base.as_strided((3, 4), (2, 1)),
           "gapped": base.as_strided((2, 3, 2), (12, 4, 1), 1), "zero": base.as_strided((2, 3), (0, 0), 5),
           "ones": base.as_strided((1, 4, 1), (7, 5, 3), 2)}
  torch.save(state, tmp_path / "v.pt", _use_new_zipfile_serialization=zipped)
  got = torch_load(tmp_path / "v.pt")
  for k, v in state.items(): np.testing.assert_array_equal(got[k].numpy(), v.numpy(), err_msg=k)

def test_load_state_dict_tinygrads_messages_and_counter():
  """As tinygrad: the shape message names the layer and both shapes; a BatchNorm without running statistics ignores a
  checkpoint's num_batches_tracked (it has no counter to load it into)."""
  from fusegrad.nn import BatchNorm, Linear
  with pytest.raises(ValueError, match=r"Shape mismatch in layer `weight`: Expected shape \(2, 2\), but found \(4, 4\)"):
    load_state_dict(Linear(2, 2, bias=False), {"weight": Tensor.randn(4, 4)}, verbose=False)
  layer = BatchNorm(1, track_running_stats=False)
  load_state_dict(layer, {"weight": Tensor([2.0]), "bias": Tensor([3.0]), "num_batches_tracked": Tensor([1])},
                  verbose=False)
  assert layer.weight.tolist() == [2.0] and layer.bias.tolist() == [3.0]
  with pytest.raises(StateDictError, match="unexpected key"):
    load_state_dict(layer, {"weight": Tensor([2.0]), "bias": Tensor([3.0]), "other": Tensor([1])}, verbose=False)

def test_load_state_dict_realize_flag():
  """realize=False leaves the loaded weights lazy (uop.is_realized, tinygrad's name), realize=True computes them."""
  from fusegrad.nn import Linear
  src = Tensor.full((5, 3), 2, dtype=dtypes.uint8).contiguous().realize()
  for realize in (False, True):
    layer = Linear(3, 5, bias=False)
    load_state_dict(layer, {"weight": src.float() * 0.5}, realize=realize, verbose=False)
    assert layer.weight.uop.is_realized == realize
    np.testing.assert_array_equal(layer.weight.numpy(), np.ones((5, 3)))
  assert not Tensor.ones(3).uop.is_realized and Tensor([1.0]).reshape(1, 1).uop.is_realized

def test_load_state_dict_into_sharded_model_shards_as_the_model():  # tinygrad's rule: the model's sharding wins
  devices = two_devices()
  layer = nn.Linear(3, 4)
  layer.weight.shard_(devices, 0)
  layer.bias.shard_(devices, None)
  w, b = np.arange(12, dtype=np.float32).reshape(4, 3), np.arange(4, dtype=np.float32)
  load_state_dict(layer, {"weight": Tensor(w), "bias": Tensor(b)}, verbose=False)
  assert layer.weight.device == devices and layer.weight.uop.axis == 0
  assert layer.bias.device == devices and layer.bias.uop.axis is None
  np.testing.assert_equal(layer.weight.numpy(), w)
  np.testing.assert_equal(layer.bias.numpy(), b)

def test_load_state_dict_realize_false_allocates_nothing():
  """tinygrad's test: loading without realize allocates nothing (the layer's unused random init held no memory), and
  the realize allocates the weight alone."""
  from fusegrad import GlobalCounters
  layer = nn.Linear(64, 64, bias=False)
  sd = {"weight": Tensor.full((64, 64), 2, dtype=dtypes.uint8).contiguous().realize().float() * 0.5}
  mem = GlobalCounters.mem_used
  load_state_dict(layer, sd, realize=False, verbose=False)
  assert GlobalCounters.mem_used == mem
  load_state_dict(layer, sd, verbose=False)
  assert GlobalCounters.mem_used == mem + 64 * 64 * 4
  np.testing.assert_equal(layer.weight.numpy(), np.ones((64, 64)))

def test_tar_extract_gives_each_file_as_tarfile_reads_it(tmp_path):
  import io, tarfile
  files = {"a/x.bin": bytes(range(256)) * 3, "empty": b"", "very" * 40 + "_long_name.txt": b"hello", "b512": b"b" * 512}
  for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
      for name, data in files.items():
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo(name + ".lnk")  # links and folders are not files
        link.type, link.linkname = tarfile.SYMTYPE, name
        tar.addfile(link)
    (tmp_path / "t.tar").write_bytes(buf.getvalue())
    for src in (tmp_path / "t.tar", str(tmp_path / "t.tar"), Tensor(buf.getvalue())):
      got = tar_extract(src)
      assert set(got) == set(files)
      for name, data in files.items(): assert got[name].dtype == dtypes.uint8 and bytes(got[name].numpy()) == data
  with pytest.raises(tarfile.ReadError): tar_extract(Tensor(b"not a tar archive" * 40))
  with pytest.raises(FileNotFoundError): tar_extract(str(tmp_path / "missing.tar"))
