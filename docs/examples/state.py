# The examples of docs/state.md. Each `# %% NAME` cell is shown under NAME's API entry and runs when the site is
# built, after these lines (run, not shown: docs/hooks.py); test/test_docs.py checks that every name has one.
from fusegrad import Tensor, dtypes, nn
import numpy as np
np.set_printoptions(precision=4, suppress=True)

import os, tempfile

# %% get_state_dict
class Net:
  def __init__(self): self.layers, self.scale = [nn.Linear(2, 3), nn.Linear(3, 1)], Tensor([1.0])
print({name: t.shape for name, t in nn.state.get_state_dict(Net()).items()})

# %% get_parameters
print([t.shape for t in nn.state.get_parameters({"conv": nn.Conv2d(1, 2, 3), "norm": nn.LayerNorm(2)})])

# %% load_state_dict
layer = nn.Linear(2, 1)
nn.state.load_state_dict(layer, {"weight": Tensor([[1.0, 2.0]]), "bias": Tensor([0.5])}, verbose=False)
print(layer.weight.tolist(), layer(Tensor([[1.0, 1.0]])).tolist())

# %% StateDictError
try:
  nn.state.load_state_dict(nn.Linear(2, 1), {"weight": Tensor([[1.0, 2.0, 3.0]])})
except nn.state.StateDictError as e:
  print(e)

# %% safe_save
path = os.path.join(tempfile.mkdtemp(), "weights.safetensors")
nn.state.safe_save({"w": Tensor([[1.0, 2.0]]), "step": Tensor([7], dtype=dtypes.int64)}, path, metadata={"epoch": "3"})
print(os.path.getsize(path), "bytes")

# %% safe_load
path = os.path.join(tempfile.mkdtemp(), "weights.safetensors")
nn.state.safe_save({"w": Tensor([[1.0, 2.0]]), "step": Tensor([7], dtype=dtypes.int64)}, path)
print({k: (v.dtype, v.tolist()) for k, v in nn.state.safe_load(path).items()})

# %% safe_load_metadata
path = os.path.join(tempfile.mkdtemp(), "weights.safetensors")
nn.state.safe_save({"w": Tensor([[1.0, 2.0]])}, path, metadata={"epoch": "3"})
raw, data_start, header = nn.state.safe_load_metadata(path)
print(raw.shape, data_start, header)

# %% torch_load
import torch  # (only to write a checkpoint: torch_load itself never imports torch)
path = os.path.join(tempfile.mkdtemp(), "model.pt")
torch.save({"weight": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "step": 10}, path)
checkpoint = nn.state.torch_load(path)
print(checkpoint["weight"].tolist(), checkpoint["step"])

# %% UnsafePickleError
import torch
path = os.path.join(tempfile.mkdtemp(), "evil.pt")
torch.save({"weight": torch.ones(2), "hook": os.system}, path)  # a checkpoint that would call a function
try:
  nn.state.torch_load(path)
except nn.state.UnsafePickleError as e:
  print(e)

# %% gguf_load
import gguf  # (only to write a file)
path = os.path.join(tempfile.mkdtemp(), "tiny.gguf")
writer = gguf.GGUFWriter(path, "llama")
writer.add_uint32("llama.context_length", 128)
writer.add_tensor("token_embd.weight", np.arange(6, dtype=np.float32).reshape(2, 3))
writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.write_tensors_to_file()
writer.close()
kv, weights = nn.state.gguf_load(path)
print(kv["llama.context_length"], {k: v.tolist() for k, v in weights.items()})

# %% ggml_data_to_tensor
import struct
block = struct.pack("<e32b", 0.5, *range(-16, 16))  # one Q8_0 block: a float16 scale, then 32 int8 values
values = nn.state.ggml_data_to_tensor(Tensor(block), 32, 8)  # (ggml type 8 is Q8_0)
print(values[:6].tolist(), values.dtype)
