# The examples of docs/tensor/properties.md. Each `# %% NAME` cell is shown under NAME's API entry and runs when the
# site is built, after these lines (run, not shown: docs/hooks.py); test/test_docs.py checks that every op has one.
from fusegrad import Tensor, dtypes
import numpy as np
np.set_printoptions(precision=4, suppress=True)

# %% uop
y = Tensor([1.0, 2.0]) * 3 + 1
print(y.uop.op, [s.op for s in y.uop.src])  # the graph that realize() will compile

# %% lazydata
print((Tensor([1.0, 2.0]) * 3).lazydata.op)

# %% requires_grad
w = Tensor([1.0], requires_grad=True)
print(w.requires_grad, Tensor([1.0]).requires_grad, Tensor([1.0], requires_grad=False).requires_grad)

# %% requires_grad_
w = Tensor([2.0, 3.0]).requires_grad_()
(w * w).sum().backward()
print(w.requires_grad, w.grad.tolist())

# %% is_param
print(Tensor([1.0]).is_param, Tensor([1.0], requires_grad=False).is_param)

# %% is_param_
running_mean = Tensor.zeros(4).is_param_(False)
print(running_mean.is_param, running_mean.requires_grad)

# %% shape
print(Tensor.zeros(2, 3).shape, Tensor(5).shape)

# %% dtype
print(Tensor([1, 2]).dtype, Tensor([1.0]).dtype, Tensor([True]).dtype, Tensor([1], dtype=dtypes.float16).dtype)

# %% device
print(Tensor([1, 2]).device)

# %% max_shape
print(Tensor.zeros(2, 3).max_shape)

# %% max_numel
print(Tensor.zeros(2, 3).max_numel())

# %% ndim
print(Tensor.zeros(2, 3, 4).ndim, Tensor(1.0).ndim)

# %% numel
print(Tensor.zeros(2, 3, 4).numel())

# %% element_size
print(Tensor([1.0]).element_size(), Tensor([1], dtype=dtypes.int8).element_size())

# %% nbytes
print(Tensor.zeros(2, 3).nbytes())

# %% size
x = Tensor.zeros(2, 3)
print(x.size(), x.size(-1))

# %% is_floating_point
print(Tensor([1.0]).is_floating_point(), Tensor([1]).is_floating_point())

# %% realize
x = Tensor([1, 2, 3]) * 2
print(x.uop.op)
x.realize()
print(x.uop.op, x.tolist())

# %% realize_all
a = Tensor([1.0, 2.0])
b, c = a.exp(), a.exp() + 1
Tensor.realize_all([b, c])  # one schedule: the shared exp is computed once
print(b.numpy(), c.numpy())

# %% schedule
x = Tensor([1.0, 2.0])
print(len((x.exp() * 2).sum().schedule()), len(x.exp().sort()[0].schedule()))  # kernels to run

# %% schedule_linear
items = (Tensor([1.0, 2.0]) + 1).schedule_linear()
print(len(items), type(items[0]).__name__)

# %% linear_with_vars
items, var_vals = (Tensor([1.0, 2.0]) + 1).linear_with_vars()
print(len(items), var_vals)

# %% data
print(Tensor([[1, 2], [3, 4]]).data().tolist(), Tensor([1.5]).data().format)

# %% item
print(Tensor([[7.5]]).item(), Tensor(3).item(), Tensor([True]).item())

# %% numpy
print(repr(Tensor([[1, 2], [3, 4]]).numpy()))

# %% to
x = Tensor([1, 2]).to("PYTHON")  # the Python interpreter backend, the reference for the others
print(x.device, (x + 1).tolist())

# %% to_
x = Tensor([1, 2])
x.to_("PYTHON")
print(x.device)

# %% shard
x = Tensor.arange(4).shard(("CPU:0", "CPU:1"), axis=0)
print(x.device, (x * 10).tolist())

# %% shard_
x = Tensor([1.0, 2.0]).shard_(("CPU:0", "CPU:1"))  # axis None: a copy on each device
print(x.device, x.sum().item())

# %% shard_like
w = Tensor.arange(8.0).reshape(4, 2).shard(("CPU:0", "CPU:1"), axis=0)
g = Tensor.ones(4, 2).shard_like(w)  # on w's devices, split along w's axis 0
print(g.device, (w + g).tolist())

# %% contiguous
x = Tensor.arange(6).reshape(2, 3).T.contiguous()  # the transposed values in their own buffer, in order
print(len(x.schedule()), x.tolist())  # one copying kernel

# %% contiguous_backward
x = Tensor([1.0, 2.0], requires_grad=True)
x.contiguous_backward().sum().backward()
print(x.grad.tolist())

# %% clone
x = Tensor([1, 2]).contiguous().realize()
copy = x.clone()
x.assign(Tensor([5, 6]))
print(x.tolist(), copy.tolist())

# %% detach
x = Tensor(3.0, requires_grad=True)
y = x * x.detach()  # the detached factor counts as a constant
y.backward()
print(x.grad.item())  # 3, not 2 * 3

# %% cast
print(Tensor([1.7, -1.7]).cast(dtypes.int32).tolist(), Tensor([1, 0]).cast("bool").tolist())

# %% bitcast
print(Tensor([1.0]).bitcast(dtypes.uint32).tolist(), hex(Tensor([-1.0]).bitcast(dtypes.uint32).item()))

# %% float
print(Tensor([1, 2]).float().tolist())

# %% half
x = Tensor([1 / 3]).half()
print(x.dtype, x.tolist())

# %% double
x = Tensor([1 / 3], dtype=dtypes.float64)
print(x.double().tolist(), Tensor([1 / 3]).double().tolist())

# %% int
print(Tensor([2.9, -2.9]).int().tolist())

# %% long
print(Tensor([2.5]).long().dtype)

# %% bool
print(Tensor([0.0, 0.5, -2.0]).bool().tolist())

# %% bfloat16
x = Tensor([1 / 3]).bfloat16()
print(x.dtype, x.tolist())

# %% short
print(Tensor([40000]).short().tolist())  # wraps like C's int16

# %% char
print(Tensor([100, 200]).char().tolist())

# %% byte
print(Tensor([255, 256, -1]).byte().tolist())

# %% assign
w = Tensor([1.0, 2.0]).contiguous().realize()
w.assign(w * 10).realize()
print(w.tolist())

# %% replace
x = Tensor([1, 2])
x.replace(Tensor([3, 4]))
print(x.tolist())

# %% const
print(Tensor.const(2.5).dtype, Tensor.const(2.5).shape, Tensor.const(7, dtypes.int8).item())

# %% const_like
print(Tensor([[1, 2]]).const_like(5).tolist())

# %% gradient
x, y = Tensor(2.0), Tensor(3.0)
dx, dy = (x * x * y).gradient(x, y)
print(dx.item(), dy.item())  # 2xy and x^2

# %% backward
x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
(x * x).sum().backward()
print(x.grad.tolist())

# %% train
Tensor.manual_seed(0)
with Tensor.train():
  print(Tensor.training, Tensor.ones(6).dropout(0.5).tolist())
print(Tensor.training)

# %% test
with Tensor.train():
  with Tensor.test():
    print(Tensor.training, Tensor.ones(4).dropout(0.5).tolist())
