# The examples of docs/tensor/reductions.md. Each `# %% NAME` cell is shown under NAME's API entry and runs when the
# site is built, after these lines (run, not shown: docs/hooks.py); test/test_docs.py checks that every op has one.
from fusegrad import Tensor, dtypes
import numpy as np
np.set_printoptions(precision=4, suppress=True)

# %% prod
x = Tensor([[1, 2], [3, 4]])
print(x.prod().item(), x.prod(axis=0).tolist())

# %% min
x = Tensor([[3.0, 1.0], [2.0, 5.0]])
print(x.min().item(), x.min(axis=1).tolist(), x.min(axis=0, keepdim=True).tolist())

# %% amax
print(Tensor([[3, 1], [2, 5]]).amax(axis=0).tolist())

# %% amin
print(Tensor([[3, 1], [2, 5]]).amin(axis=1).tolist())

# %% var
x = Tensor([[1.0, 2.0, 3.0, 4.0]])
print(x.var().numpy(), x.var(axis=1, correction=0).numpy())

# %% std
x = Tensor([1.0, 2.0, 3.0, 4.0])
print(x.std().numpy(), x.std(correction=0).numpy())

# %% var_mean
var, mean = Tensor([[1.0, 3.0], [2.0, 6.0]]).var_mean(axis=1)
print(var.tolist(), mean.tolist())

# %% std_mean
std, mean = Tensor([1.0, 3.0, 5.0]).std_mean()
print(std.item(), mean.item())

# %% any
x = Tensor([[0, 0], [0, 3]])
print(x.any().item(), x.any(axis=1).tolist())

# %% all
x = Tensor([[1, 2], [0, 3]])
print(x.all().item(), x.all(axis=0).tolist())

# %% argmin
x = Tensor([[3.0, 1.0, 1.0], [0.0, 5.0, 2.0]])
print(x.argmin().item(), x.argmin(axis=1).tolist())

# %% logsumexp
print(Tensor([[0.0, 0.0], [1000.0, 1000.0]]).logsumexp(axis=1).numpy())

# %% softmin
print(Tensor([1.0, 2.0, 3.0]).softmin().numpy())

# %% log_softmax
print(Tensor([[1.0, 2.0, 3.0]]).log_softmax().numpy())

# %% cumsum
print(Tensor([1, 2, 3, 4]).cumsum().tolist(), Tensor([[1, 2], [3, 4]]).cumsum(axis=1).tolist())

# %% cumprod
print(Tensor([1, 2, 3, 4]).cumprod().tolist())

# %% cummax
values, indices = Tensor([1, 3, 2, 5, 5]).cummax()
print(values.tolist(), indices.tolist())

# %% cummin
values, indices = Tensor([4, 2, 3, 1]).cummin()
print(values.tolist(), indices.tolist())

# %% logcumsumexp
print(Tensor([0.0, 0.0, 1000.0]).logcumsumexp().numpy())

# %% triu
x = Tensor.ones(3, 3, dtype=dtypes.int32)
print(x.triu().tolist(), x.triu(1).tolist())

# %% tril
print(Tensor.ones(3, 3, dtype=dtypes.int32).tril().tolist())

# %% dot
a = Tensor([[1.0, 2.0], [3.0, 4.0]])
print(a.dot(Tensor([[0.0, 1.0], [1.0, 0.0]])).tolist(), a.dot(Tensor([1.0, 1.0])).tolist())

# %% linear
x, w, b = Tensor([[1.0, 2.0]]), Tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]), Tensor([0.5, 0.5, 0.5])
print(x.linear(w, b).tolist())

# %% sequential
print(Tensor([-1.0, 2.0]).sequential([lambda t: t * 2, Tensor.relu]).tolist())

# %% qr
a = Tensor([[3.0, 1.0], [4.0, 2.0]])
q, r = a.qr()
print(q.numpy(), r.numpy(), (q @ r).numpy(), sep="\n")

# %% svd
u, s, vh = Tensor([[3.0, 0.0], [4.0, 5.0]]).svd()
print(s.numpy(), (u @ s.diag() @ vh).numpy(), sep="\n")

# %% newton_schulz
o = Tensor([[2.0, 1.0], [0.0, 1.0]]).newton_schulz()
print(o.numpy(), o.svd()[1].numpy(), sep="\n")  # its singular values pushed toward 1
