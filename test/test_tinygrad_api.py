"""tinygrad 0.14's public API against fusegrad's: every public name of tinygrad's Tensor, nn, nn.optim, nn.state,
dtypes, Device, helpers and top-level package must exist in fusegrad, except the names in EXCLUDED, each with its
reason. Then the names fusegrad has for this check behave as tinygrad's (tinygrad itself is the reference: a test
dependency, pinned, with no dependencies of its own).

A module's public names are those it defines (not the modules and typing helpers it imports); a class's are all its
public attributes."""
import importlib.metadata, os, types
import numpy as np
import pytest
import tinygrad
import tinygrad.nn, tinygrad.nn.optim, tinygrad.nn.state, tinygrad.helpers
import fusegrad
import fusegrad.nn, fusegrad.nn.optim, fusegrad.nn.state, fusegrad.helpers

@pytest.fixture(autouse=True)
def _environment_kept():
  """tinygrad writes DEV into os.environ when its Device.DEFAULT is read (DEV=CL where PoCL works): the tests that run
  after these in the same process, and the subprocesses they start, must not inherit it."""
  before = dict(os.environ)
  yield
  for k in set(os.environ) - set(before): del os.environ[k]
  os.environ.update(before)

_FLAG = "a setting of tinygrad's compiler or runtime with no counterpart here (fusegrad's settings are in helpers.py)"
_INTERNAL = "tinygrad internals (graph building, codegen, profiling, process plumbing), not for user code"
_BYTES = "ctypes / memoryview / bit plumbing of tinygrad's runtimes"
_FP8 = "fp8 dtypes: no fusegrad backend computes in fp8"
_WEAK = "tinygrad's weak dtypes for Python constants: fusegrad promotes Python numbers by rule instead (dtype.py)"
_IMAGE = "tinygrad's IMAGE path (Qualcomm textures): no such backend here"
_TYPING = "a type variable or annotation helper"

# "where.name" -> why fusegrad doesn't have it
EXCLUDED: dict[str, str] = {
  **{f"Tensor.{n}": _INTERNAL for n in ("alu", "ufix", "usum", "uprod", "as_param", "call", "callify", "custom_kernel",
                                        "invalids", "random_bits", "threefry")},
  **{f"Tensor.{n}": _IMAGE for n in ("image_conv2d", "image_dot")},
  "Tensor.decode_hevc_frame": "hardware HEVC video decoding (tinygrad's AMD/NV video engines)",
  "Tensor.keccak": "SHA-3 on tensors (tinygrad's SHA3 example): not implemented",
  "Tensor.hash": "tinygrad's content hash of a tensor built on keccak: not implemented",
  **{f"dtypes.{n}": _FP8 for n in ("fp8_fnuz", "fp8_ocp", "fp8e4m3", "fp8e4m3fnuz", "fp8e5m2", "fp8e5m2fnuz", "fp8s")},
  **{f"dtypes.{n}": _WEAK for n in ("weakfloat", "weakint", "weaks")},
  "Device.get_class": "the backend class behind a device name: " + _INTERNAL,
  **{f"nn.state.{n}": "not implemented: tinygrad's zip reader and file object over a tensor (torch_load reads zip "
     "checkpoints itself; use Python's zipfile; tar_extract is here)" for n in ("zip_extract", "TensorIO")},
  **{f"nn.state.{n}": "tinygrad's file system on a device (fs_load/fs_store): no counterpart" for n in
     ("fs_load", "fs_store", "accept_filename")},
  **{f"helpers.{n}": _FLAG for n in (
    "ALL2ALL", "ALLOW_DEVICE_USAGE", "ALLOW_TF32", "ALLREDUCE_CAST", "CACHELEVEL", "CAPTURE_PROCESS_REPLAY",
    "CCACHE", "CHECK_OOB",
    "DEBUG_RANGEIFY", "DEFAULT_INT", "DISABLE_FAST_IDIV", "DISALLOW_BROADCAST", "EMULATED_DTYPES", "FLOAT16",
    "FUSE_OPTIM", "IMAGE", "JIT_BATCH_SIZE", "LRU", "MAX_BUFFER_SIZE", "MAX_KERNEL_BUFFERS",
    "NOLOCALS", "NO_COLOR", "NULL_ALLOW_COPYOUT", "NUM_CPU_THREADS", "OPENPILOT_HACKS", "PARALLEL",
    "PCONTIG", "PROFILE", "RING", "SCACHE", "TC_OPT", "TC_SELECT", "TRACEMETA", "TRANSCENDENTAL", "TUPLE_ORDER",
    "USE_ATOMICS", "USE_TC", "VALIDATE_WITH_CPU", "WINO")},
  **{f"helpers.{n}": _INTERNAL for n in (
    "Metadata", "ProfileEvent", "ProfilePointEvent", "ProfileRangeEvent", "Target", "TracingKey", "amdgpu_disassemble",
    "ansipad", "canonicalize_strides", "capstone_flatdump", "colorize_float", "count", "cpu_objdump", "cpu_profile",
    "db_connection", "disable_gc", "diskcache", "diskcache_clear", "fetch_fw", "flat_to_grouped", "floordiv",
    "floormod", "fromimport", "get_shape", "get_stacktrace", "is_image_shape", "lines", "panic", "perf_counter_us",
    "polyN", "printable", "profile_marker", "resolve_pool_pads", "select_by_name", "select_first_inited", "size_to_str",
    "stderr_log", "strides_for_shape", "strip_parens", "suppress_finalizing", "system", "temp", "to_tuple", "wait_cond",
    "word_wrap")},
  **{f"helpers.{n}": _BYTES for n in ("data64", "data64_le", "flat_mv", "from_mv", "getbits", "hi32", "i2u", "lo32",
                                      "mv_address", "pad_bytes", "to_be32", "to_be64", "to_char_p_p", "to_mv")},
  "helpers.U": _TYPING,
  "helpers.CAPTURE_PROCESS_REPLAY": "tinygrad's process replay capture; fusegrad's is PROCESS_REPLAY (a file)",
}

PAIRS = {  # where -> (tinygrad's object, the module whose own names count (None: all public attributes), fusegrad's)
  "Tensor": (tinygrad.Tensor, None, fusegrad.Tensor),
  "nn": (tinygrad.nn, "tinygrad.nn", fusegrad.nn),
  "nn.optim": (tinygrad.nn.optim, "tinygrad.nn.optim", fusegrad.nn.optim),
  "nn.state": (tinygrad.nn.state, "tinygrad.nn.state", fusegrad.nn.state),
  "dtypes": (tinygrad.dtypes, None, fusegrad.dtypes),
  "Device": (tinygrad.Device, None, fusegrad.Device),
  "helpers": (tinygrad.helpers, "tinygrad.helpers", fusegrad.helpers),
  "tinygrad": (tinygrad, None, fusegrad),
}

def public_names(obj, module: str | None) -> set[str]:
  """obj's public attributes; module: only those defined in it. Submodules don't count (nn has a pair of its own;
  whether `fusegrad.runtime` is an attribute depends on what has been imported)."""
  names = {n for n in dir(obj) if not n.startswith("_") and not isinstance(getattr(obj, n), types.ModuleType)}
  return names if module is None else {n for n in names if getattr(getattr(obj, n), "__module__", None) == module}

def test_pinned_version():
  assert importlib.metadata.version("tinygrad") == "0.14.0", "EXCLUDED was written for tinygrad 0.14.0"

@pytest.mark.parametrize("where", list(PAIRS))
def test_fusegrad_has_tinygrads_public_names(where):
  theirs, module, ours = PAIRS[where]
  names = public_names(theirs, module)
  assert len(names) > 3, f"no public names found in tinygrad's {where}"
  missing = sorted(n for n in names if not hasattr(ours, n) and f"{where}.{n}" not in EXCLUDED)
  assert not missing, f"fusegrad's {where} lacks tinygrad's {missing} (add them, or list them in EXCLUDED with why)"

def test_exclusions_are_current():
  """Every excluded name exists in tinygrad 0.14, is still missing from fusegrad (else it is a stale entry) and has a
  reason."""
  for key, why in EXCLUDED.items():
    where, name = key.rsplit(".", 1)
    assert why and hasattr(PAIRS[where][0], name), key
    assert not hasattr(PAIRS[where][2], name), f"fusegrad has {key} now: remove it from EXCLUDED"

# *** the names added for this check, against tinygrad's ***

def test_helpers_match_tinygrad():
  tg, fg = tinygrad.helpers, fusegrad.helpers
  for a, b in [(-7, 2), (7, -2), (7, 2), (-8, 4), (5, 0)]:
    assert fg.cdiv(a, b) == tg.cdiv(a, b) and fg.cmod(a, b) == tg.cmod(a, b), (a, b)
  for x in [0, 1, 2, 3, 5, 64, 65]: assert fg.next_power2(x) == tg.next_power2(x), x
  for a, b in [(7, 4), (8, 4), (-7, 4), (0, 3)]: assert fg.round_down(a, b) == tg.round_down(a, b), (a, b)
  for n in [0, 1, 2]: assert fg.pluralize("kernel", n) == tg.pluralize("kernel", n)
  nested = [[1, [2, 3]], (4,), 5]
  assert fg.fully_flatten(nested) == tg.fully_flatten(nested) == [1, 2, 3, 4, 5]
  arr = np.arange(6).reshape(2, 3)
  assert fg.fully_flatten(arr) == tg.fully_flatten(arr)
  assert fg.get_single_element([7]) == tg.get_single_element([7]) == 7
  with pytest.raises(ValueError, match="single element"): fg.get_single_element([1, 2])
  ds = [{"a": 1}, {"b": 2}, {"a": 1}]
  assert fg.merge_dicts(ds) == tg.merge_dicts(ds) == {"a": 1, "b": 2}
  with pytest.raises(RuntimeError): tg.merge_dicts([{"a": 1}, {"a": 2}])
  with pytest.raises(RuntimeError, match="'a'"): fg.merge_dicts([{"a": 1}, {"a": 2}])
  obj = types.SimpleNamespace(layers=[{"w": 3}, types.SimpleNamespace(bias=4)])
  for key in ("layers.0.w", "layers.1.bias"): assert fg.get_child(obj, key) == tg.get_child(obj, key)

def test_dtype_pairs_and_device_match_tinygrad():
  for n in ("int8s", "int16s", "int32s", "int64s"):  # (unsigned, signed) of one size
    for lib in (fusegrad, tinygrad):
      pair = getattr(lib.dtypes, n)
      assert [d.itemsize * 8 for d in pair] == [int(n[3:-1])] * 2 and [lib.dtypes.is_unsigned(d) for d in pair] == \
        [True, False], (lib.__name__, n)
  devices = fusegrad.Device.get_available_devices()
  assert "CPU" in devices and "PYTHON" in devices and fusegrad.Device.DEFAULT in devices
  assert fusegrad.Device.default is fusegrad.Device[fusegrad.Device.DEFAULT]

def test_tensor_const_and_max_shape():
  for v, dt in [(2.5, None), (3, None), (True, None), (2, "half")]:
    ours, theirs = fusegrad.Tensor.const(v, dt), tinygrad.Tensor.const(v, None if dt is None else tinygrad.dtypes.half)
    assert ours.shape == theirs.shape == () and ours.item() == v
    # tinygrad gives a Python number a weak dtype, fusegrad the one its promotion rules give it (dtypes.from_py)
    assert ours.dtype == (fusegrad.dtypes.from_py(v) if dt is None else fusegrad.dtypes.half) and \
      theirs.dtype in ((tinygrad.dtypes.half,) if dt else (*tinygrad.dtypes.weaks, tinygrad.dtypes.bool))
  x = fusegrad.Tensor.empty(2, 3)
  assert x.max_shape == tinygrad.Tensor.empty(2, 3).max_shape == (2, 3) and x.max_numel() == 6
  assert len(fusegrad.Tensor.empty(4).add(1).schedule_linear()) == 1
  with fusegrad.helpers.Profiling(sort="tottime", frac=0.5) as prof: fusegrad.Tensor([1.0, 2.0]).add(1).tolist()
  assert prof.profile.getstats(), "nothing was profiled"
  i = fusegrad.Variable("i", 0, 2).bind(1)
  with pytest.raises(RuntimeError, match="linear_with_vars"): fusegrad.Tensor.empty(4, 2)[i:i + 2].schedule_linear()

def test_pooling_with_dilation_0_samples_as_tinygrad():
  """max_pool2d(stride=2, dilation=0): every window is k copies of one element, a strided sample (tinygrad's
  autoencoder example pools so); torch refuses a zero dilation, and so does fusegrad's conv2d. Values and max_pool2d's
  gradient are tinygrad's."""
  data = np.random.default_rng(0).standard_normal((2, 3, 7, 6)).astype(np.float32)
  for kw in ({"stride": 2, "dilation": 0}, {"kernel_size": 3, "stride": (2, 1), "dilation": (0, 1)}):
    for op in ("max_pool2d", "avg_pool2d"):
      ours, theirs = fusegrad.Tensor(data), tinygrad.Tensor(data)  # (each fills .grad of every float tensor)
      a, b = getattr(ours, op)(**kw), getattr(theirs, op)(**kw)
      np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)
      a.square().sum().backward()
      b.square().sum().backward()
      np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-6)
  with pytest.raises(fusegrad.mixin.elementwise.ArgumentError, match="dilation"):
    fusegrad.Tensor.ones(1, 3, 5, 5).conv2d(fusegrad.Tensor.ones(4, 3, 3, 3), dilation=0)
