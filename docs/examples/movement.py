# The examples of docs/tensor/movement.md. Each `# %% NAME` cell is shown under NAME's API entry and runs when the
# site is built, after these lines (run, not shown: docs/hooks.py); test/test_docs.py checks that every op has one.
from fusegrad import Tensor
import numpy as np
np.set_printoptions(precision=4, suppress=True)

# %% view
print(Tensor.arange(6).view(2, -1).tolist())

# %% expand_as
print(Tensor([[1], [2]]).expand_as(Tensor.zeros(2, 3)).tolist())

# %% shrink
x = Tensor.arange(12).reshape(3, 4)
print(x.shrink(((1, 3), (0, 2))).tolist(), x.shrink((None, (3, 4))).tolist())

# %% pad
x = Tensor([[1, 2], [3, 4]])
print(x.pad(((0, 1), (1, 0)), value=9).tolist())
print(Tensor([1.0, 2.0, 3.0]).pad((2, 2), mode="reflect").tolist())

# %% pad_to
print(Tensor([[1, 2]]).pad_to(2, 3).tolist())

# %% shrink_to
print(Tensor.arange(12).reshape(3, 4).shrink_to(2, None).tolist())

# %% flip
x = Tensor([[1, 2, 3], [4, 5, 6]])
print(x.flip(1).tolist(), x.flip(0, 1).tolist())

# %% transpose
print(Tensor.zeros(2, 3, 4).transpose(0, 2).shape, Tensor([[1, 2, 3]]).transpose().tolist())

# %% T
print(Tensor([[1, 2, 3], [4, 5, 6]]).T.tolist())

# %% flatten
x = Tensor.arange(8).reshape(2, 2, 2)
print(x.flatten().tolist(), x.flatten(1).tolist())

# %% unflatten
print(Tensor.arange(6).unflatten(0, (2, -1)).tolist())

# %% rearrange
x = Tensor.arange(6).reshape(2, 3)
print(x.rearrange("h w -> w h").tolist(), x.rearrange("h (w c) -> c h w", c=3).shape)
x = Tensor.zeros(2, 3, 4, 6)
print(x.rearrange("b c h w -> b (h w) c").shape, x.rearrange("b c h (w two) -> b (c two) h w", two=2).shape)
print(x.rearrange("b c h w -> 1 b c (h w)").shape, x.rearrange("b ... -> b (...)").shape)

# %% squeeze
x = Tensor.zeros(1, 3, 1)
print(x.squeeze().shape, x.squeeze(0).shape)

# %% repeat
print(Tensor([1, 2]).repeat(2).tolist(), Tensor([[1, 2]]).repeat(2, 2).tolist())

# %% repeat_interleave
print(Tensor([1, 2, 3]).repeat_interleave(2).tolist(), Tensor([[1, 2], [3, 4]]).repeat_interleave(2, dim=0).tolist())

# %% split
print([t.tolist() for t in Tensor.arange(5).split(2)], [t.tolist() for t in Tensor.arange(5).split([1, 4])])

# %% chunk
print([t.tolist() for t in Tensor.arange(7).chunk(3)])

# %% unbind
print([t.tolist() for t in Tensor([[1, 2], [3, 4]]).unbind(1)])

# %% roll
print(Tensor([1, 2, 3, 4]).roll(1).tolist(), Tensor([[1, 2], [3, 4]]).roll(1, 0).tolist())

# %% diagonal
x = Tensor.arange(9).reshape(3, 3)
print(x.diagonal().tolist(), x.diagonal(offset=1).tolist())

# %% diag
print(Tensor([1, 2]).diag().tolist(), Tensor([[1, 2], [3, 4]]).diag().tolist())

# %% meshgrid
ys, xs = Tensor([0, 1]).meshgrid(Tensor([5, 6, 7]))
print(ys.tolist(), xs.tolist())
