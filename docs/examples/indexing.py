# The examples of docs/tensor/indexing.md. Each `# %% NAME` cell is shown under NAME's API entry and runs when the
# site is built, after these lines (run, not shown: docs/hooks.py); test/test_docs.py checks that every op has one.
from fusegrad import Tensor, dtypes
import numpy as np
np.set_printoptions(precision=4, suppress=True)

# %% __setitem__
x = Tensor.zeros(3, 3, dtype=dtypes.int32).contiguous()
x[1:, 0] = 5
x[0] = Tensor([1, 2, 3])
print(x.tolist())

# %% gather
x = Tensor([[1, 2], [3, 4]])
print(x.gather(1, Tensor([[0, 0], [1, 0]])).tolist())

# %% scatter
print(Tensor.zeros(2, 4).scatter(1, Tensor([[1], [3]]), 7.0).tolist())
print(Tensor.ones(4).scatter(0, Tensor([0, 0, 2]), Tensor([2.0, 3.0, 4.0]), reduce="multiply").tolist())

# %% scatter_add
print(Tensor.zeros(4).scatter_add(0, Tensor([0, 2, 0]), Tensor([1.0, 2.0, 3.0])).tolist())

# %% scatter_reduce
src, index = Tensor([1.0, 5.0, 2.0, 4.0]), Tensor([0, 0, 1, 1])
print(Tensor.zeros(2).scatter_reduce(0, index, src, "amax").tolist(),
      Tensor.zeros(2).scatter_reduce(0, index, src, "mean", include_self=False).tolist())

# %% masked_select
x = Tensor([[1, -2], [-3, 4]])
print(x.masked_select(x > 0).tolist())

# %% nonzero
print(Tensor([[0, 3], [5, 0]]).nonzero().tolist(), Tensor([0, 1, 0, 1]).nonzero(size=3, fill_value=-1).tolist())

# %% one_hot
print(Tensor([0, 2, 1]).one_hot(3).tolist())
