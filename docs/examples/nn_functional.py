# The examples of docs/tensor/nn_functional.md. Each `# %% NAME` cell is shown under NAME's API entry and runs when the
# site is built, after these lines (run, not shown: docs/hooks.py); test/test_docs.py checks that every op has one.
from fusegrad import Tensor, dtypes
import numpy as np
np.set_printoptions(precision=4, suppress=True)

# %% batchnorm
x = Tensor([[1.0, 10.0], [3.0, 30.0]])  # (batch, channels)
print(x.batchnorm(None, Tensor([0.0, 1.0]), mean=Tensor([2.0, 20.0]), invstd=Tensor([1.0, 0.1])).tolist())

# %% layernorm
print(Tensor([[1.0, 2.0, 3.0], [10.0, 10.0, 40.0]]).layernorm().numpy())

# %% normalize
print(Tensor([[3.0, 4.0], [1.0, 0.0]]).normalize().numpy(), Tensor([[3.0, 4.0]]).normalize(p=1).numpy())

# %% dropout
Tensor.manual_seed(0)
x = Tensor.ones(8)
print(x.dropout(0.5).tolist())  # outside training: unchanged
with Tensor.train(): print(x.dropout(0.5).tolist())

# %% scaled_dot_product_attention
q = k = Tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])  # (batch, length, features)
v = Tensor([[[1.0], [2.0], [3.0]]])
print(q.scaled_dot_product_attention(k, v)[0, :, 0].numpy())
print(q.scaled_dot_product_attention(k, v, is_causal=True)[0, :, 0].numpy())  # each query sees itself and before

# %% interpolate
x = Tensor([[[[1.0, 2.0], [3.0, 4.0]]]])  # (batch, channels, height, width)
print(x.interpolate((3, 3), align_corners=True).numpy(), x.interpolate((4, 4), mode="nearest").numpy(), sep="\n")

# %% einsum
a, b = Tensor([[1.0, 2.0], [3.0, 4.0]]), Tensor([[0.0, 1.0], [1.0, 0.0]])
print(Tensor.einsum("ij,jk->ik", a, b).tolist(), Tensor.einsum("ii->i", a).tolist(), Tensor.einsum("ij->", a).item())

# %% unfold
print(Tensor.arange(6).unfold(0, 3, 2).tolist())

# %% conv2d
x = Tensor.arange(16, dtype=dtypes.float32).reshape(1, 1, 4, 4)
edge = Tensor([[[[-1.0, 1.0]]]])  # (out channels, in channels, height, width): a horizontal difference
print(x.conv2d(edge).shape, x.conv2d(edge)[0, 0, 0].tolist(), x.conv2d(Tensor.ones(1, 1, 2, 2), stride=2).tolist())

# %% conv_transpose2d
x = Tensor([[[[1.0, 2.0], [3.0, 4.0]]]])
print(x.conv_transpose2d(Tensor.ones(1, 1, 2, 2), stride=2).tolist())

# %% conv1d
print(Tensor([[[1.0, 2.0, 3.0, 4.0]]]).conv1d(Tensor([[[1.0, 0.0, -1.0]]]), padding=1).tolist())

# %% max_pool2d
x = Tensor([[[[1.0, 5.0, 2.0, 0.0], [3.0, 4.0, 8.0, 1.0], [0.0, 1.0, 2.0, 3.0], [9.0, 1.0, 0.0, 1.0]]]])
print(x.max_pool2d().tolist(), x.max_pool2d(kernel_size=3, stride=1).tolist())

# %% max_unpool2d
x = Tensor([[[[1.0, 5.0, 2.0, 0.0], [3.0, 4.0, 8.0, 1.0]]]])
pooled, indices = x.max_pool2d(return_indices=True)
print(pooled.tolist(), indices.tolist(), pooled.max_unpool2d(indices).tolist())

# %% avg_pool2d
x = Tensor.arange(16, dtype=dtypes.float32).reshape(1, 1, 4, 4)
print(x.avg_pool2d().tolist())

# %% max_pool1d
x = Tensor([[[1.0, 3.0, 2.0, 5.0, 4.0]]])  # (batch, channels, length)
print(x.max_pool1d(2).tolist(), x.max_pool1d(2, stride=1).tolist())

# %% avg_pool1d
print(Tensor([[[1.0, 3.0, 2.0, 6.0]]]).avg_pool1d(2).tolist())

# %% nll_loss
logp = Tensor([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]).log()
print(logp.nll_loss(Tensor([0, 2])).numpy(), logp.nll_loss(Tensor([0, 2]), reduction="none").numpy())

# %% cross_entropy
logits = Tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
print(logits.cross_entropy(Tensor([0, 2])).numpy(), logits.cross_entropy(Tensor([0, 2]), label_smoothing=0.1).numpy())
print(logits.cross_entropy(Tensor([[1.0, 0.0, 0.0], [0.5, 0.0, 0.5]])).numpy())  # class probabilities

# %% sparse_categorical_crossentropy
logits = Tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 3.0]])
print(logits.sparse_categorical_crossentropy(Tensor([0, 2])).numpy(),
      logits.sparse_categorical_crossentropy(Tensor([0, -1])).numpy())  # label -1 is ignored

# %% binary_crossentropy
print(Tensor([0.9, 0.2]).binary_crossentropy(Tensor([1.0, 0.0])).numpy())

# %% binary_crossentropy_logits
print(Tensor([2.0, -1.0, 100.0]).binary_crossentropy_logits(Tensor([1.0, 0.0, 0.0]), reduction="none").numpy())

# %% sort
values, indices = Tensor([3.0, 1.0, 2.0, 1.0]).sort()
print(values.tolist(), indices.tolist(), Tensor([3, 1, 2]).sort(descending=True)[0].tolist())

# %% argsort
print(Tensor([[3, 1, 2], [0, 5, 4]]).argsort().tolist(), Tensor([3, 1, 2]).argsort(descending=True).tolist())

# %% topk
values, indices = Tensor([1.0, 7.0, 3.0, 9.0, 5.0]).topk(2)
print(values.tolist(), indices.tolist(), Tensor([1, 7, 3]).topk(1, largest=False)[0].tolist())
