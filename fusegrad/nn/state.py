"""Saving and loading state dicts (models, optimizers), safetensors, PyTorch checkpoints and GGUF (docs/state.md)."""
from __future__ import annotations
import array, collections, io, itertools, json, mmap, pathlib, pickle, struct, tarfile, time, types, zipfile
from typing import Any, Callable, Iterator
from fusegrad.tensor import Tensor, _make_buffer
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import atomic_write, prod
from fusegrad.uop.ops import UOp
from fusegrad.nn.optim import _fresh, _own_buffer

Source = Tensor | str | pathlib.Path

def _read_source(fn: Source, who: str) -> tuple[memoryview, str]:
  """A file's bytes (mapped: read from disk when used) or a 1-D uint8 Tensor's, and a name for error messages."""
  if isinstance(fn, Tensor):
    if fn.dtype != dtypes.uint8 or fn.ndim != 1:
      raise ValueError(f"{who}: a Tensor source must be 1-D uint8, got {fn.shape} {fn.dtype}")
    return (fn.data() if fn.numel() else memoryview(b"")), "<tensor>"
  if not isinstance(fn, (str, pathlib.Path)):
    raise TypeError(f"{who}: expected a path or a uint8 Tensor, got {type(fn).__name__}")
  with open(fn, "rb") as f:  # (mmap refuses an empty file)
    return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if f.seek(0, 2) else b""), str(fn)

def _as_file(raw: memoryview) -> io.BytesIO:
  """raw as a file object; for a memoryview of a whole bytes object this shares its memory instead of copying it."""
  return io.BytesIO(raw.obj if isinstance(raw.obj, bytes) and raw.nbytes == len(raw.obj) else raw)

def _from_bytes(data: memoryview, dtype: DType, shape: tuple[int, ...]) -> Tensor:
  """A tensor in a new buffer holding a copy of data (raw, little-endian elements)."""
  return Tensor(_make_buffer(data, tuple(shape), dtype, None))

def _raw_bytes(t: Tensor) -> memoryview:
  """The elements of t as raw bytes, in order. (16-bit floats go through their bits: Tensor.data() turns bfloat16
  into float32 and can't produce float16 on every Python.)"""
  if t.numel() == 0: return memoryview(b"")
  src = t.bitcast(dtypes.uint16) if t.dtype in (dtypes.bfloat16, dtypes.float16) else t  # their values as raw bits
  return src.data().cast("B")

# *** state dicts ***
_NOT_CONTAINERS = (str, bytes, bytearray, int, float, complex, bool, type, types.ModuleType, types.FunctionType,
                   types.BuiltinFunctionType, types.MethodType)

def _children(obj: Any) -> Iterator[tuple[str, Any]] | None:
  """The named parts of obj that may hold tensors: attributes, list/tuple items, dict values."""
  if isinstance(obj, _NOT_CONTAINERS) or obj is None: return None
  if hasattr(obj, "_asdict") and isinstance(obj, tuple):  # namedtuple
    return iter(obj._asdict().items())  # type: ignore[attr-defined]
  if isinstance(obj, dict): return ((str(k), v) for k, v in obj.items())
  if isinstance(obj, (list, tuple)): return ((str(i), v) for i, v in enumerate(obj))
  return iter(list(vars(obj).items())) if hasattr(obj, "__dict__") else None

def _collect(obj: Any, prefix: str, tensor_type: type, out: dict[str, Any], active: set[int]) -> None:
  if isinstance(obj, tensor_type): out[prefix.rstrip(".")] = obj
  # (an obj in active is a reference cycle: a layer pointing back at its parent)
  elif id(obj) not in active and (children := _children(obj)) is not None:
    active.add(id(obj))
    for name, child in children: _collect(child, f"{prefix}{name}.", tensor_type, out, active)
    active.discard(id(obj))

def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
  """Every Tensor reachable from obj through attributes, lists, tuples and dicts, under dotted names like torch's
  ("layers.0.weight"), in attribute order. A tensor reachable by two paths appears under both names."""
  out: dict[str, Any] = {}
  _collect(obj, prefix, tensor_type, out, set())
  return out

def get_parameters(obj: Any) -> list[Tensor]:
  """Every Tensor reachable from obj (get_state_dict), each once, in a stable order: `SGD(get_parameters(model))`."""
  return list({id(t): t for t in get_state_dict(obj).values()}.values())  # a tensor under two names: once

class StateDictError(RuntimeError, KeyError, ValueError):
  """load_state_dict found missing or unexpected keys or wrong shapes. It is a RuntimeError like torch's error, and a
  KeyError / ValueError like tinygrad's, so code written for either catches it."""
  def __str__(self) -> str: return RuntimeError.__str__(self)

def _state_dict_problems(model_sd: dict[str, Tensor], state_dict: dict[str, Tensor], strict: bool) -> list[str]:
  problems, missing = [], [k for k in model_sd if k not in state_dict]
  # a BatchNorm without running statistics takes a checkpoint that counted batches, as tinygrad (its counter is unused)
  unexpected = [k for k in state_dict if k not in model_sd and not k.split(".")[-1] == "num_batches_tracked"]
  if strict and missing: problems.append(f"missing key(s): {', '.join(repr(k) for k in missing)}")
  if strict and unexpected: problems.append(f"unexpected key(s): {', '.join(repr(k) for k in unexpected)}")
  for k, v in model_sd.items():
    if k not in state_dict: continue
    src = state_dict[k]
    if not isinstance(src, Tensor): problems.append(f"{k!r} is a {type(src).__name__}, not a Tensor")
    elif src.shape != v.shape and {src.shape, v.shape} != {(), (1,)}:
      problems.append(f"Shape mismatch in layer `{k}`: Expected shape {v.shape}, but found {src.shape} in state dict.")
  return problems

def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = True,
                    consume: bool = False, realize: bool = True) -> list[Tensor]:
  """Copy the tensors of state_dict into the model's tensors of the same names (see get_state_dict), converting to
  their dtype and device. The values are assigned into the existing tensors, so optimizers and TinyJit holding them
  keep working. With strict=True every model tensor must be in state_dict and nothing else may be; shapes must always
  match. Raises StateDictError naming every problem. Returns the tensors loaded."""
  model_sd = get_state_dict(model)
  if problems := _state_dict_problems(model_sd, state_dict, strict):
    raise StateDictError(f"load_state_dict for {type(model).__name__}:\n  " + "\n  ".join(problems))
  start, loaded, done = time.perf_counter(), [], set()
  views: dict[UOp, Tensor] = {}
  for k, v in model_sd.items():
    if k not in state_dict: continue
    src = state_dict[k]
    if src is not v and id(v) not in done:
      value, dev = src.reshape(v.shape), v.device  # sharded as v is when v is sharded (tinygrad's rule)
      value = (value.shard(dev, v.uop.axis) if isinstance(dev, tuple) and value.device != dev else value.to(dev))
      value = value.cast(v.dtype)
      # write into v's own buffer when it has one. A constant or lazy v, or one that is the very same view of a buffer
      # as another (equal expressions realize into one buffer), gets a new buffer of its own (never src's).
      first_with_this_view = views.setdefault(v.uop, v) is v
      if _own_buffer(v) is not None and first_with_this_view: v.assign(value)
      else: v.replace(_fresh(value))
      done.add(id(v))
    loaded.append(v)
    if consume: del state_dict[k]
  if realize: Tensor.realize_all(loaded)
  if verbose:
    nbytes = sum(t.nbytes() for t in loaded)
    print(f"loaded {len(loaded)} tensors ({nbytes / 1e6:.2f} MB) in {(time.perf_counter() - start) * 1e3:.2f} ms")
  return loaded

# *** safetensors: 8-byte little-endian header length, a JSON header, then the raw data ***
SAFE_DTYPES: dict[str, DType] = {"BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "U16": dtypes.uint16,
  "I16": dtypes.int16, "U32": dtypes.uint32, "I32": dtypes.int32, "U64": dtypes.uint64, "I64": dtypes.int64,
  "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64}
_SAFE_NAMES = {v: k for k, v in SAFE_DTYPES.items()}

def _safe_header(raw: memoryview, name: str) -> tuple[int, dict[str, Any]]:
  """(where the data starts, the parsed header), with every entry checked against the file's size."""
  if len(raw) < 8: raise ValueError(f"safe_load: {name}: {len(raw)} bytes is too short for a safetensors file")
  n = int.from_bytes(raw[:8], "little")
  if n > len(raw) - 8:
    raise ValueError(f"safe_load: {name}: header of {n} bytes but the file has only {len(raw) - 8} after the length "
                     "(truncated?)")
  try: header = json.loads(bytes(raw[8:8 + n]).decode("utf-8"), object_pairs_hook=_no_duplicates)
  except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, a duplicate key, nested too deeply
    why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
    raise ValueError(f"safe_load: {name}: the header is not valid JSON ({why})") from None
  if not isinstance(header, dict): raise ValueError(f"safe_load: {name}: the header is not a JSON object")
  data_len, spans = len(raw) - 8 - n, []
  for key, info in header.items():
    if key == "__metadata__": continue
    _check_safe_entry(key, info, data_len, name)
    if info["data_offsets"][0] < info["data_offsets"][1]: spans.append((*info["data_offsets"], key))
  spans.sort()
  for (_, end, key), (begin, _, other) in zip(spans, spans[1:]):
    if begin < end: raise ValueError(f"safe_load: {name}: the data of tensors {key!r} and {other!r} overlap")
  return 8 + n, header

def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  """A JSON object as a dict; a key given twice is an error (which of the two is meant is ambiguous)."""
  ret = dict(pairs)
  if len(ret) != len(pairs):
    dups = sorted({k for k, _ in pairs if sum(k == j for j, _ in pairs) > 1})
    raise ValueError(f"duplicate key(s) {', '.join(map(repr, dups))}")
  return ret

def _check_safe_entry(key: str, info: Any, data_len: int, name: str) -> None:
  where = f"safe_load: {name}: tensor {key!r}"
  if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
    raise ValueError(f"{where}: entry needs dtype, shape and data_offsets")
  if not isinstance(info["dtype"], str) or info["dtype"] not in SAFE_DTYPES:
    raise ValueError(f"{where}: unsupported dtype {info['dtype']!r} (supported: {', '.join(SAFE_DTYPES)})")
  shape, offsets = info["shape"], info["data_offsets"]
  def is_int(x: Any) -> bool: return isinstance(x, int) and not isinstance(x, bool)
  if not isinstance(shape, list) or not all(is_int(s) and s >= 0 for s in shape):
    raise ValueError(f"{where}: bad shape {shape!r}")
  ints = isinstance(offsets, list) and len(offsets) == 2 and all(is_int(o) for o in offsets)
  if not ints or not 0 <= offsets[0] <= offsets[1]: raise ValueError(f"{where}: bad data_offsets {offsets!r}")
  want, have = prod(shape) * SAFE_DTYPES[info["dtype"]].itemsize, offsets[1] - offsets[0]
  if have != want: raise ValueError(f"{where}: data_offsets {offsets} hold {have} bytes, shape {shape} needs {want}")
  if offsets[1] > data_len:
    raise ValueError(f"{where}: data ends at {offsets[1]} but the file has {data_len} bytes of data (truncated?)")

def safe_load_metadata(fn: Source) -> tuple[Tensor, int, dict[str, Any]]:
  """(the file as a uint8 Tensor (on the disk device, for a path: `t[a:b].bitcast(dtype).to("CPU")`), where the data
  starts, the JSON header) of a .safetensors file; its header's "__metadata__" entry is the metadata saved with it."""
  raw, name = _read_source(fn, "safe_load_metadata")
  data_start, header = _safe_header(raw, name)
  return (fn if isinstance(fn, Tensor) else Tensor(pathlib.Path(fn))), data_start, header

def tar_extract(fn: Source) -> dict[str, Tensor]:
  """The files of a tar archive (path or uint8 Tensor) by name, each a uint8 Tensor: its slice of it (as tinygrad's)."""
  with tarfile.open(fileobj=_as_file(_read_source(fn, "tar_extract")[0])) as tar: files = [m for m in tar if m.isfile()]
  t = fn if isinstance(fn, Tensor) else Tensor(pathlib.Path(fn))
  return {m.name: t[m.offset_data:m.offset_data + m.size] for m in files}

def safe_load(fn: Source) -> dict[str, Tensor]:
  """The tensors of a .safetensors file (path or uint8 Tensor of its bytes) by name: `safe_load("x.safetensors")`."""
  raw, name = _read_source(fn, "safe_load")
  data_start, header = _safe_header(raw, name)
  data = raw[data_start:]
  return {key: _from_bytes(data[slice(*info["data_offsets"])], SAFE_DTYPES[info["dtype"]], tuple(info["shape"]))
          for key, info in header.items() if key != "__metadata__"}

def safe_save(tensors: dict[str, Tensor], fn: str | pathlib.Path, metadata: dict[str, Any] | None = None) -> None:
  """Write tensors to a .safetensors file, atomically; metadata (str -> str) goes in its "__metadata__"."""
  if metadata is not None and not isinstance(metadata, dict):
    raise TypeError(f"safe_save: metadata must be a dict, got {type(metadata).__name__}")
  header: dict[str, Any] = {} if metadata is None else {"__metadata__": metadata}
  offset = 0
  for key, t in tensors.items():
    if not isinstance(key, str) or key == "__metadata__": raise ValueError(f"safe_save: bad tensor name {key!r}")
    if not isinstance(t, Tensor): raise TypeError(f"safe_save: {key!r} is a {type(t).__name__}, not a Tensor")
    if t.dtype not in _SAFE_NAMES:
      raise ValueError(f"safe_save: {key!r} has dtype {t.dtype}, which safetensors can't store")
    header[key] = {"dtype": _SAFE_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes()]}
    offset += t.nbytes()
  text = json.dumps(header, separators=(",", ":")).encode("utf-8")
  text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
  out = bytearray(len(text).to_bytes(8, "little") + text)
  for t in tensors.values(): out += _raw_bytes(t)  # in header order, at their data_offsets
  atomic_write(fn, out)

# *** PyTorch checkpoints (zip and legacy formats), without torch: a pickle reader that only builds tensors ***
_TORCH_STORAGES = {"FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16,
  "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
  "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool,
  "UntypedStorage": dtypes.uint8}
_TORCH_DTYPES = {"float32": dtypes.float32, "float": dtypes.float32, "float64": dtypes.float64,
  "double": dtypes.float64, "float16": dtypes.float16, "half": dtypes.float16, "bfloat16": dtypes.bfloat16,
  "int64": dtypes.int64, "long": dtypes.int64, "int32": dtypes.int32, "int": dtypes.int32, "int16": dtypes.int16,
  "short": dtypes.int16, "int8": dtypes.int8, "uint8": dtypes.uint8, "bool": dtypes.bool, "uint16": dtypes.uint16,
  "uint32": dtypes.uint32, "uint64": dtypes.uint64}
_TORCH_MAGIC, _TORCH_LEGACY_PROTOCOL = 0x1950A86A20F9469CFC6C, 1001
_LOAD_FACTOR, _LOAD_SLACK = 4, 64 << 20  # the tensors of a checkpoint may take 4x its data bytes + 64 MiB

class UnsafePickleError(pickle.UnpicklingError, ValueError):
  """torch_load met a pickled global it does not allow (it never runs code from the file)."""

class _StorageType:
  def __init__(self, dtype: DType): self.dtype = dtype

class _Storage:
  """One storage of a checkpoint: its element type, size in elements, and bytes (None while they aren't located yet)."""
  def __init__(self, key: str, dtype: DType, numel: int, data: memoryview | None):
    self.key, self.dtype, self.numel, self.data = key, dtype, numel, data

def _torch_device(kind: str, index: int | None = None) -> str:
  """torch.device("cuda", 0) as the string "cuda:0"."""; return str(kind) if index is None else f"{kind}:{index}"

def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
  """_codecs.encode as protocol-2 pickles use it to store bytes."""
  if encoding not in ("latin1", "latin-1"):
    raise UnsafePickleError(f"torch_load: refusing _codecs.encode with encoding {encoding!r}")
  return text.encode("latin1")

class _TorchUnpickler(pickle.Unpickler):
  """Unpickles a checkpoint, allowing only what tensors and plain containers need; storages come from `find_data`."""
  def __init__(self, file: io.BytesIO, name: str, find_data: Callable[[str, DType, int], memoryview | None],
               declared: int = 0):
    super().__init__(file)
    self.name, self.find_data = name, find_data
    # the bytes the tensors may take in all: a few times the data the file holds (shared storages, expanded views)
    self.declared, self.budget = declared, _LOAD_FACTOR * declared + _LOAD_SLACK
    self.storages: dict[str, _Storage] = {}
    rebuild = {"_rebuild_tensor": self.rebuild_tensor, "_rebuild_tensor_v2": self.rebuild_tensor,
               "_rebuild_tensor_v3": self.rebuild_tensor_v3, "_rebuild_parameter": self.rebuild_parameter,
               "_rebuild_parameter_with_state": self.rebuild_parameter}  # (from torch._utils)
    self.allowed: dict[tuple[str, str], Any] = {
      ("collections", "OrderedDict"): collections.OrderedDict, ("builtins", "set"): set,
      ("builtins", "frozenset"): frozenset, ("_codecs", "encode"): _latin1_encode, ("torch", "Size"): tuple,
      ("torch", "device"): _torch_device, **{("torch._utils", k): f for k, f in rebuild.items()},
      **{("torch", k): dt for k, dt in _TORCH_DTYPES.items()},
      **{(m, k): _StorageType(dt) for k, dt in _TORCH_STORAGES.items() for m in ("torch", "torch.storage")}}

  def find_class(self, module: str, name: str) -> Any:
    if (module, name) not in self.allowed:
      raise UnsafePickleError(f"torch_load: {self.name}: refusing to unpickle {module}.{name}: only torch tensors and "
                              "plain containers are allowed (other objects could run code when loaded)")
    return self.allowed[(module, name)]

  def persistent_load(self, pid: Any) -> _Storage:
    if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage" or not isinstance(pid[1], _StorageType):
      raise UnsafePickleError(f"torch_load: {self.name}: unsupported persistent id {str(pid)[:80]}")
    key, numel = str(pid[2]), pid[4]
    if key not in self.storages:
      self.storages[key] = _Storage(key, pid[1].dtype, numel, self.find_data(key, pid[1].dtype, numel))
    storage = self.storages[key]
    return self._storage_view(storage, pid[5]) if len(pid) > 5 and pid[5] is not None else storage

  def _storage_view(self, storage: _Storage, view: Any) -> _Storage:
    """A legacy-format view of a storage: (view key, offset, size) in elements."""
    (_, offset, size), item = view, storage.dtype.itemsize
    data = None if storage.data is None else storage.data[offset * item:(offset + size) * item]
    return _Storage(storage.key, storage.dtype, size, data)

  def rebuild_tensor(self, storage: _Storage, offset: int, size: Any, stride: Any, *args: Any) -> Tensor | None:
    return self.rebuild_tensor_v3(storage, offset, size, stride, None, None, storage.dtype)

  def rebuild_tensor_v3(self, storage: _Storage, offset: int, size: Any, stride: Any, requires_grad: Any, hooks: Any,
                        dtype: DType, *args: Any) -> Tensor | None:
    if not isinstance(dtype, DType): raise ValueError(f"torch_load: {self.name}: bad dtype {dtype!r}")
    size, stride = tuple(size), tuple(stride)
    if not all(isinstance(x, int) and x >= 0 for x in (offset, *size, *stride)) or len(size) != len(stride):
      raise ValueError(f"torch_load: {self.name}: bad tensor layout size={size} stride={stride} offset={offset}")
    if storage.data is not None:
      self.budget -= prod(size) * dtype.itemsize
      if self.budget < 0:
        raise ValueError(f"torch_load: {self.name}: its tensors would take more than {_LOAD_FACTOR} times the "
                         f"{self.declared} bytes of data the file holds (plus {_LOAD_SLACK >> 20} MiB): a corrupt or "
                         f"malicious file (a tensor of size {size} with strides {stride})")
    return _strided_tensor(storage, dtype, offset, size, stride, self.name)

  def rebuild_parameter(self, data: Tensor | None, requires_grad: Any = None, *args: Any) -> Tensor | None: return data

def _strided_tensor(storage: _Storage, dtype: DType, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
                    name: str) -> Tensor | None:
  """The tensor torch describes as (storage, offset, size, stride), copied out of the storage's bytes."""
  if storage.data is None: return None  # the legacy format's first pass: the data isn't located yet
  item, n = dtype.itemsize, prod(size)
  if len(storage.data) % item:
    raise ValueError(f"torch_load: {name}: storage {storage.key} of {len(storage.data)} bytes can't hold {dtype}")
  if n == 0: return _from_bytes(memoryview(b""), dtype, size)
  last = offset + sum((s - 1) * st for s, st in zip(size, stride))
  if (last + 1) * item > len(storage.data):
    raise ValueError(f"torch_load: {name}: a tensor of size {size} reads past the end of storage {storage.key} "
                     "(corrupt file?)")
  dims = [d for d in range(len(size)) if size[d] != 1]
  order = sorted(dims, key=lambda d: -stride[d])  # the dims from outermost to innermost in memory
  inner = [prod(size[d] for d in order[j + 1:]) for j in range(len(order))]
  if [stride[d] for d in order] == inner:  # a permutation of a contiguous block: copy the block, permute the view
    block = _from_bytes(storage.data[offset * item:(offset + n) * item], dtype, tuple(size[d] for d in order))
    return block.permute([order.index(d) for d in dims]).reshape(size) if order != dims else block.reshape(size)
  return _from_bytes(_gather(storage.data, item, offset, size, stride), dtype, size)

def _gather(data: memoryview, item: int, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> memoryview:
  """The elements at offset + sum(i_k * stride_k), in order (for overlapping or gapped layouts): one strided slice
  copy per row of the innermost dimension, so memory is the output's size."""
  fmt = {1: "B", 2: "H", 4: "I" if array.array("I").itemsize == 4 else "L", 8: "Q"}[item]
  src, out = data.cast("B").cast(fmt), memoryview(bytearray(prod(size) * item)).cast(fmt)
  dims = [(s, st) for s, st in zip(size, stride) if s != 1] or [(1, 1)]
  (inner, step), outer = dims[-1], dims[:-1]
  for row, ks in enumerate(itertools.product(*(range(s) for s, _ in outer))):
    start = offset + sum(k * st for k, (_, st) in zip(ks, outer))
    out[row * inner:(row + 1) * inner] = (src[start:start + (inner - 1) * step + 1:step] if step else
                                          memoryview(array.array(fmt, [src[start]]) * inner))
  return out.cast("B")

def _zip_members(raw: memoryview, name: str) -> dict[str, memoryview]:
  """The members of a zip file, as views of raw (stored members) or decompressed copies."""
  def member(zf: zipfile.ZipFile, zi: zipfile.ZipInfo) -> memoryview:
    if zi.compress_type != zipfile.ZIP_STORED: return memoryview(zf.read(zi))
    local = raw[zi.header_offset:zi.header_offset + 30]
    if len(local) < 30 or bytes(local[:4]) != b"PK\x03\x04": raise ValueError(f"bad local header for {zi.filename}")
    start = zi.header_offset + 30 + int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")
    if start + zi.file_size > len(raw): raise ValueError(f"{zi.filename} is truncated")
    return raw[start:start + zi.file_size]
  try:
    zf = zipfile.ZipFile(_as_file(raw))
    return {zi.filename: member(zf, zi) for zi in zf.infolist()}
  except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError) as e:
    raise ValueError(f"torch_load: {name}: corrupt zip archive ({e})") from None

def _torch_load_zip(raw: memoryview, name: str) -> Any:
  members = _zip_members(raw, name)
  pkl = next((m for m in members if m.endswith("data.pkl") and m.count("/") == 1), None)
  if pkl is None:
    raise ValueError(f"torch_load: {name}: zip file without a <name>/data.pkl (not a PyTorch checkpoint?)")
  base = pkl.split("/")[0]
  if bytes(members.get(f"{base}/byteorder", b"little")) != b"little":
    raise ValueError(f"torch_load: {name}: big-endian checkpoints are not supported")
  def find_data(key: str, dtype: DType, numel: int) -> memoryview:
    data = members.get(f"{base}/data/{key}")
    if data is None: raise ValueError(f"torch_load: {name}: storage {key} is missing from the archive")
    if len(data) < numel * dtype.itemsize:
      raise ValueError(f"torch_load: {name}: storage {key} has {len(data)} bytes, needs {numel * dtype.itemsize}")
    return data[:numel * dtype.itemsize]
  declared = sum(len(v) for k, v in members.items() if k.startswith(f"{base}/data/"))
  return _unpickle(_TorchUnpickler(io.BytesIO(members[pkl]), name, find_data, declared), name)

def _unpickle(unpickler: _TorchUnpickler, name: str) -> Any:
  try: return unpickler.load()
  except (UnsafePickleError, ValueError): raise
  except (pickle.UnpicklingError, EOFError, TypeError, IndexError, KeyError, AttributeError, struct.error) as e:
    raise ValueError(f"torch_load: {name}: corrupt pickle data ({type(e).__name__}: {e})") from None

def _torch_load_legacy(raw: memoryview, name: str) -> Any:
  """The pre-1.6 format: pickles of the magic number, protocol, system info, the object, the storage keys, then each
  storage as an int64 element count and its bytes."""
  f = _as_file(raw)
  def no_data(key: str, dtype: DType, numel: int) -> None: return None
  header = [_unpickle(_TorchUnpickler(f, name, no_data), name) for _ in range(3)]
  if header[0] != _TORCH_MAGIC or header[1] != _TORCH_LEGACY_PROTOCOL:
    raise ValueError(f"torch_load: {name}: not a PyTorch checkpoint (bad magic number or protocol)")
  if isinstance(header[2], dict) and not header[2].get("little_endian", True):
    raise ValueError(f"torch_load: {name}: big-endian checkpoints are not supported")
  start = f.tell()
  first = _TorchUnpickler(f, name, no_data)  # first pass: learn each storage's type and size
  _unpickle(first, name)
  keys = _unpickle(_TorchUnpickler(f, name, no_data), name)
  located: dict[str, memoryview] = {}
  pos = f.tell()
  for key in keys if isinstance(keys, list) else []:
    if (storage := first.storages.get(str(key))) is None:
      raise ValueError(f"torch_load: {name}: storage {key} is not used by the checkpoint")
    if pos + 8 > len(raw): raise ValueError(f"torch_load: {name}: truncated before storage {key}")
    numel = int.from_bytes(raw[pos:pos + 8], "little")
    nbytes = numel * storage.dtype.itemsize
    if numel != storage.numel or pos + 8 + nbytes > len(raw):
      raise ValueError(f"torch_load: {name}: storage {key} is truncated or corrupt")
    located[str(key)] = raw[pos + 8:pos + 8 + nbytes]
    pos += 8 + nbytes
  def find_data(key: str, dtype: DType, numel: int) -> memoryview:
    if key not in located: raise ValueError(f"torch_load: {name}: no data for storage {key}")
    return located[key]
  f.seek(start)
  return _unpickle(_TorchUnpickler(f, name, find_data, sum(len(v) for v in located.values())), name)

def torch_load(fn: Source) -> Any:
  """A PyTorch checkpoint (torch.save's zip format, or the legacy format) with every tensor as a fusegrad Tensor,
  without importing torch. Only tensors, parameters and plain containers are unpickled; anything else raises
  UnsafePickleError. `load_state_dict(model, torch_load("model.pt"))`."""
  raw, name = _read_source(fn, "torch_load")
  if bytes(raw[:4]) == b"PK\x03\x04": return _torch_load_zip(raw, name)
  if bytes(raw[:1]) == b"\x80": return _torch_load_legacy(raw, name)
  raise ValueError(f"torch_load: {name}: not a PyTorch checkpoint (neither a zip archive nor a pickle)")

# *** GGUF v3 (llama.cpp / ggml): metadata, tensor infos, aligned tensor data ***
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGUF_MAX_DEPTH = 16  # arrays of arrays: real files nest one or two deep
# ggml type -> (elements per block, bytes per block)
GGML_BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 12: (256, 144),
  13: (256, 176), 14: (256, 210), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 30: (1, 2), 39: (32, 17)}
_GGML_PLAIN = {0: dtypes.float32, 1: dtypes.float16, 24: dtypes.int8, 25: dtypes.int16, 26: dtypes.int32,
               27: dtypes.int64, 28: dtypes.float64, 30: dtypes.bfloat16}
_GGML_NAMES = {2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K",
               13: "Q5_K", 14: "Q6_K", 39: "MXFP4"}

class _Reader:
  """Little-endian values read from a memoryview, with a clear error when the data runs out."""
  def __init__(self, raw: memoryview, name: str): self.raw, self.pos, self.name = raw, 0, name
  def error(self, msg: str) -> ValueError: return ValueError(f"gguf_load: {self.name}: {msg}")
  def take(self, n: int, what: str) -> memoryview:
    if n < 0 or self.pos + n > len(self.raw): raise self.error(f"truncated while reading {what} at byte {self.pos}")
    self.pos += n
    return self.raw[self.pos - n:self.pos]
  def scalar(self, fmt: str, what: str) -> Any: return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]
  def string(self, what: str) -> str:
    try: return bytes(self.take(self.scalar("<Q", what), what)).decode("utf-8")
    except UnicodeDecodeError: raise self.error(f"{what} is not valid UTF-8") from None
  def value(self, vtype: int, what: str, depth: int = 0) -> Any:
    if vtype in _GGUF_SCALARS: return self.scalar(_GGUF_SCALARS[vtype], what)
    if vtype == _GGUF_STRING: return self.string(what)
    if vtype != _GGUF_ARRAY: raise self.error(f"{what}: unknown value type {vtype}")
    if depth >= _GGUF_MAX_DEPTH: raise self.error(f"{what}: arrays nested more than {_GGUF_MAX_DEPTH} deep")
    etype, count = self.scalar("<I", what), self.scalar("<Q", what)
    if etype not in _GGUF_SCALARS and etype not in (_GGUF_STRING, _GGUF_ARRAY):
      raise self.error(f"{what}: unknown array type {etype}")
    min_size = struct.calcsize(_GGUF_SCALARS[etype]) if etype in _GGUF_SCALARS else 8
    if count * min_size > len(self.raw) - self.pos: raise self.error(f"{what}: array of {count} items is truncated")
    if etype in _GGUF_SCALARS:
      return list(struct.unpack(f"<{count}{_GGUF_SCALARS[etype][1]}", self.take(count * min_size, what)))
    return [self.value(etype, what, depth + 1) for _ in range(count)]

def _ggml_f16(b: Tensor, i: int) -> Tensor:
  """(blocks, 1) float16 values from bytes i and i + 1 (little-endian) of each block, as float32."""
  lo, hi = b[:, i].cast(dtypes.uint16), b[:, i + 1].cast(dtypes.uint16)
  return (lo | (hi << 8)).bitcast(dtypes.float16).cast(dtypes.float32).unsqueeze(1)

def _nibbles(q: Tensor) -> Tensor:
  """(nb, 16) bytes -> (nb, 32) 4-bit values: byte j holds element j (low nibble) and element j + 16 (high nibble)."""
  return (q & 0xF).cat(q >> 4, dim=1)

def _fifth_bits(qh: Tensor) -> Tensor:
  """(nb, k) bytes -> (nb, k, 8) bits, bit j of byte i at [:, i, j], moved to value 16 (fifth bits of 4-bit values)."""
  shifts = Tensor([0, 1, 2, 3, 4, 5, 6, 7], dtype=dtypes.uint8, device=qh.device)
  return ((qh.unsqueeze(2) >> shifts) & 1) << 4

# each takes the (blocks, bytes per block) uint8 tensor and returns (blocks, elements per block) float32 values
def _dequant_q4_0(b: Tensor) -> Tensor:  # d f16, 16 bytes of nibbles: (q - 8) * d
  return (_nibbles(b[:, 2:18]).cast(dtypes.float32) - 8) * _ggml_f16(b, 0)
def _dequant_q4_1(b: Tensor) -> Tensor:  # d f16, m f16, 16 bytes of nibbles: q * d + m
  return _nibbles(b[:, 4:20]).cast(dtypes.float32) * _ggml_f16(b, 0) + _ggml_f16(b, 2)
def _dequant_q5_0(b: Tensor) -> Tensor:  # d f16, 4 bytes of fifth bits, 16 bytes of nibbles: (q - 16) * d
  return ((_nibbles(b[:, 6:22]) | _fifth_bits(b[:, 2:6]).flatten(1)).cast(dtypes.float32) - 16) * _ggml_f16(b, 0)
def _dequant_q5_1(b: Tensor) -> Tensor:  # d f16, m f16, 4 bytes of fifth bits, 16 bytes of nibbles: q * d + m
  q = (_nibbles(b[:, 8:24]) | _fifth_bits(b[:, 4:8]).flatten(1)).cast(dtypes.float32)
  return q * _ggml_f16(b, 0) + _ggml_f16(b, 2)
def _dequant_q8_0(b: Tensor) -> Tensor:  # d f16, 32 int8: q * d
  return b[:, 2:].bitcast(dtypes.int8).cast(dtypes.float32) * _ggml_f16(b, 0)

def _dequant_q4_k(b: Tensor, qh: Tensor | None = None) -> Tensor:
  """256 values: d, dmin f16, 12 bytes of 6-bit scales and mins of 8 sub-blocks of 32, (Q5_K: 32 bytes qh, bit s of byte
  l the fifth bit of value l of sub-block s), 128 bytes of nibbles (byte l of chunk j: sub-block 2j low, 2j+1 high)."""
  nb = b.shape[0]
  d, dmin = _ggml_f16(b, 0).reshape(nb, 1, 1), _ggml_f16(b, 2).reshape(nb, 1, 1)
  s = b[:, 4:16]
  scales = (s[:, 0:4] & 63).cat((s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4), dim=1)  # sub-blocks 0-3, then 4-7
  mins = (s[:, 4:8] & 63).cat((s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4), dim=1)
  q = b[:, -128:].reshape(nb, 4, 1, 32)
  vals = (q & 0xF).cat(q >> 4, dim=2).reshape(nb, 8, 32)
  if qh is not None: vals = vals | _fifth_bits(qh).transpose(1, 2)  # (Q5_K)
  scales, mins = scales.cast(dtypes.float32).unsqueeze(2), mins.cast(dtypes.float32).unsqueeze(2)
  return (d * scales * vals.cast(dtypes.float32) - dmin * mins).reshape(nb, 256)

def _dequant_q6_k(b: Tensor) -> Tensor:
  """256 values in two halves of 128: 64 bytes of low nibbles, 32 bytes of 2-bit high parts, 16 int8 scales (one per
  16 values), then d f16: d * scale * (q - 32). In a half, element 32k + l takes the nibble of byte l (k = 0, 2) or
  l + 32 (k = 1, 3), low for k < 2, and bits 2k..2k+1 of high byte l."""
  nb = b.shape[0]
  ql, qh = b[:, 0:128].reshape(nb, 2, 1, 64), b[:, 128:192].reshape(nb, 2, 1, 32)
  low = (ql & 0xF).cat(ql >> 4, dim=2).reshape(nb, 2, 4, 32)  # k = 0, 1 from the low nibbles; 2, 3 from the high
  shifts = Tensor([0, 2, 4, 6], dtype=dtypes.uint8, device=b.device).reshape(1, 1, 4, 1)
  q = (low | (((qh >> shifts) & 3) << 4)).cast(dtypes.float32) - 32
  scales = b[:, 192:208].bitcast(dtypes.int8).cast(dtypes.float32).reshape(nb, 2, 4, 2, 1).expand(nb, 2, 4, 2, 16)
  return (_ggml_f16(b, 208).reshape(nb, 1, 1, 1) * scales.reshape(nb, 2, 4, 32) * q).reshape(nb, 256)

def _dequant_mxfp4(b: Tensor) -> Tensor:  # exponent E, 16 bytes of nibbles (e2m1 codes, doubled): value * 2^(E-128)
  kv = Tensor([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=dtypes.float32, device=b.device)
  e = b[:, 0:1].cast(dtypes.int32)  # 2^(E-128) by its bits (subnormal for E < 2)
  return kv[_nibbles(b[:, 1:17]).cast(dtypes.int32)] * (e < 2).where(0x200000 << e, e - 1 << 23).bitcast(dtypes.float32)

_DEQUANT: dict[int, Callable[[Tensor], Tensor]] = {2: _dequant_q4_0, 3: _dequant_q4_1, 6: _dequant_q5_0,
  7: _dequant_q5_1, 8: _dequant_q8_0, 12: _dequant_q4_k, 13: lambda b: _dequant_q4_k(b, b[:, 16:48]), 14: _dequant_q6_k,
  39: _dequant_mxfp4}

def ggml_data_to_tensor(t: Tensor, n: int, ggml_type: int) -> Tensor:
  """n values of ggml type ggml_type from the uint8 tensor t, as a 1-D tensor: plain types (F32, F16, BF16, F64, I8-I64)
  keep their dtype; the quantized Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K and MXFP4 become float32 (lazily)."""
  if ggml_type not in GGML_BLOCKS:
    raise ValueError(f"gguf_load: ggml type {_GGML_NAMES.get(ggml_type, ggml_type)} is not supported")
  block, nbytes = GGML_BLOCKS[ggml_type]
  if n % block or t.shape[0] < n // block * nbytes:
    raise ValueError(f"ggml_data_to_tensor: {t.shape[0]} bytes don't hold {n} values of type {ggml_type}")
  if ggml_type in _GGML_PLAIN: return _from_bytes(t[:n * nbytes].data(), _GGML_PLAIN[ggml_type], (n,))
  return _DEQUANT[ggml_type](t[:n // block * nbytes].reshape(n // block, nbytes)).flatten()

def _gguf_tensor_infos(r: _Reader, count: int) -> list[tuple[str, tuple[int, ...], int, int]]:
  infos = []
  for i in range(count):
    name = r.string(f"the name of tensor {i}")
    ndims = r.scalar("<I", f"the dims of {name!r}")
    if ndims > 8: raise r.error(f"tensor {name!r} has {ndims} dims")
    dims = [r.scalar("<Q", f"the dims of {name!r}") for _ in range(ndims)]
    ggml_type, offset = r.scalar("<I", f"the type of {name!r}"), r.scalar("<Q", f"the offset of {name!r}")
    infos.append((name, tuple(reversed(dims)), ggml_type, offset))  # ggml lists the fastest-varying dim first
  return infos

def gguf_load(tensor: Source) -> tuple[dict[str, Any], dict[str, Tensor]]:
  """The metadata and tensors of a GGUF file (v2 or v3): `kv, weights = gguf_load("model.gguf")`. F32, F16, BF16, F64
  and integer tensors keep their dtype; Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K and MXFP4 become float32."""
  raw, name = _read_source(tensor, "gguf_load")
  r = _Reader(raw, name)
  if bytes(r.take(4, "the magic")) != b"GGUF": raise r.error("not a GGUF file (bad magic)")
  if (version := r.scalar("<I", "the version")) not in (2, 3):
    raise r.error(f"GGUF version {version} is not supported (only 2 and 3)")
  n_tensors, n_kv = r.scalar("<Q", "the tensor count"), r.scalar("<Q", "the metadata count")
  kv = {}
  for i in range(n_kv):
    key = r.string(f"metadata key {i}")
    kv[key] = r.value(r.scalar("<I", f"the type of {key!r}"), repr(key))
  if n_tensors * 24 > len(raw) - r.pos: raise r.error(f"{n_tensors} tensor infos don't fit in the file (truncated?)")
  infos = _gguf_tensor_infos(r, n_tensors)
  alignment = kv.get("general.alignment", 32)
  if not isinstance(alignment, int) or alignment <= 0: raise r.error(f"bad general.alignment {alignment!r}")
  data_start = r.pos + (-r.pos % alignment)
  return kv, {info[0]: _gguf_tensor(raw, name, data_start, *info) for info in infos}

def _gguf_tensor(raw: memoryview, name: str, data_start: int, tname: str, shape: tuple[int, ...], ggml_type: int,
                 offset: int) -> Tensor:
  where = f"gguf_load: {name}: tensor {tname!r}"
  if ggml_type not in GGML_BLOCKS:
    raise ValueError(f"{where} has ggml type {_GGML_NAMES.get(ggml_type, ggml_type)}, which is not supported")
  (block, block_bytes), n = GGML_BLOCKS[ggml_type], prod(shape)
  if n % block: raise ValueError(f"{where} of {n} elements isn't a whole number of {block}-element blocks")
  start, nbytes = data_start + offset, n // block * block_bytes
  if start + nbytes > len(raw):
    raise ValueError(f"gguf_load: {name}: the data of tensor {tname!r} runs past the end of the file (truncated?)")
  data = raw[start:start + nbytes]
  if ggml_type in _GGML_PLAIN: return _from_bytes(data, _GGML_PLAIN[ggml_type], shape)
  return ggml_data_to_tensor(_from_bytes(data, dtypes.uint8, (nbytes,)), n, ggml_type).reshape(shape)

__all__ = ["get_state_dict", "get_parameters", "load_state_dict", "StateDictError", "safe_load", "safe_save",
           "safe_load_metadata", "torch_load", "UnsafePickleError", "gguf_load", "ggml_data_to_tensor"]
