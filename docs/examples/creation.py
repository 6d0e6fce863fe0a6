# The examples of docs/tensor/creation.md. Each `# %% NAME` cell is shown under NAME's API entry and runs when the
# site is built, after these lines (run, not shown: docs/hooks.py); test/test_docs.py checks that every op has one.
from fusegrad import Tensor, dtypes
import numpy as np
np.set_printoptions(precision=4, suppress=True)

# %% empty
x = Tensor.empty(2, 3, dtype=dtypes.int32)
print(x.shape, x.dtype)  # its values are whatever the memory held: write before reading

# %% zeros
print(Tensor.zeros(2, 3).tolist(), Tensor.zeros(2, dtype=dtypes.int32).tolist())

# %% ones
print(Tensor.ones(2, 2).tolist(), Tensor.ones(3, dtype=dtypes.bool).tolist())

# %% full
print(Tensor.full((2, 3), 7).tolist(), Tensor.full((2,), 0.5).dtype)

# %% arange
print(Tensor.arange(5).tolist(), Tensor.arange(2, 10, 3).tolist(), Tensor.arange(1.0, 0.0, -0.25).tolist())

# %% linspace
print(Tensor.linspace(0, 1, 5).tolist(), Tensor.linspace(10, 0, 3).tolist())

# %% eye
print(Tensor.eye(3).tolist(), Tensor.eye(2, 3, dtype=dtypes.int32).tolist())

# %% zeros_like
print(Tensor([[1, 2], [3, 4]]).zeros_like().tolist())

# %% ones_like
x = Tensor([1.5, 2.5])
print(x.ones_like().tolist(), x.ones_like(dtype=dtypes.int32).tolist())

# %% full_like
print(Tensor([[1, 2], [3, 4]]).full_like(9).tolist())

# %% empty_like
x = Tensor([[1.0, 2.0, 3.0]]).empty_like()
print(x.shape, x.dtype)

# %% rand
Tensor.manual_seed(42)
print(Tensor.rand(2, 3).numpy())

# %% randn
Tensor.manual_seed(42)
x = Tensor.randn(1000)
print(x[:4].numpy(), round(x.mean().item(), 2), round(x.std().item(), 2))

# %% randint
Tensor.manual_seed(42)
print(Tensor.randint(2, 5, low=1, high=7).tolist())  # dice

# %% randperm
Tensor.manual_seed(42)
print(Tensor.randperm(8).tolist())

# %% normal
Tensor.manual_seed(42)
x = Tensor.normal(1000, mean=5.0, std=0.5)
print(x[:4].numpy(), round(x.mean().item(), 2), round(x.std().item(), 2))

# %% uniform
Tensor.manual_seed(42)
print(Tensor.uniform(5, low=-1.0, high=1.0).numpy())

# %% scaled_uniform
Tensor.manual_seed(42)
print(Tensor.scaled_uniform(2, 2).numpy())  # in [-1, 1) / sqrt(4)

# %% glorot_uniform
Tensor.manual_seed(42)
x = Tensor.glorot_uniform(64, 32)
print(round(x.abs().max().item(), 4), round((6 / (64 + 32)) ** 0.5, 4))  # the largest value and the bound

# %% kaiming_uniform
Tensor.manual_seed(42)
x = Tensor.kaiming_uniform(256, 100, a=0)
print(round(x.abs().max().item(), 4), round((6 / 100) ** 0.5, 4))  # the largest value and the bound sqrt(6 / fan_in)

# %% kaiming_normal
Tensor.manual_seed(42)
print(round(Tensor.kaiming_normal(256, 100, a=0).std().item(), 3), round((2 / 100) ** 0.5, 3))  # std ~ sqrt(2 / fan_in)

# %% rand_like
Tensor.manual_seed(42)
print(Tensor.zeros(2, 2).rand_like().numpy())

# %% randn_like
Tensor.manual_seed(42)
print(Tensor.zeros(3).randn_like().numpy())

# %% multinomial
Tensor.manual_seed(42)
weights = Tensor([1.0, 0.0, 3.0])
print(weights.multinomial(8, replacement=True).tolist(), weights.multinomial(2).tolist())

# %% manual_seed
Tensor.manual_seed(7)
a = Tensor.rand(3).numpy()
Tensor.manual_seed(7)
print(a, Tensor.rand(3).numpy())  # the same numbers again

# %% from_blob
import ctypes
memory = (ctypes.c_float * 4)(1, 2, 3, 4)
x = Tensor.from_blob(ctypes.addressof(memory), (2, 2), dtype=dtypes.float32)
print(x.tolist())
x.assign(x * 10).realize()
print(list(memory))  # the tensor wrote into that memory

# %% from_url
import pathlib, tempfile
path = pathlib.Path(tempfile.mkdtemp()) / "hello.bin"
path.write_bytes(b"hi!")
print(Tensor.from_url(str(path)).tolist())  # a URL downloads once into the cache; a local path is read as is
