# The examples of docs/nn.md. Each `# %% NAME` cell is shown under NAME's API entry and runs when the site is
# built, after these lines (run, not shown: docs/hooks.py); test/test_docs.py checks that every name has one.
from fusegrad import Tensor, dtypes, nn
import numpy as np
np.set_printoptions(precision=4, suppress=True)

# %% Linear
Tensor.manual_seed(0)
layer = nn.Linear(3, 2)  # y = x @ weight.T + bias
print(layer.weight.shape, layer.bias.shape, layer(Tensor.ones(4, 3)).shape)

# %% Conv1d
Tensor.manual_seed(0)
conv = nn.Conv1d(2, 4, kernel_size=3, padding=1)
print(conv.weight.shape, conv(Tensor.ones(1, 2, 10)).shape)

# %% Conv2d
Tensor.manual_seed(0)
conv = nn.Conv2d(3, 8, kernel_size=3, stride=2)
print(conv.weight.shape, conv(Tensor.ones(1, 3, 9, 9)).shape)

# %% ConvTranspose1d
Tensor.manual_seed(0)
up = nn.ConvTranspose1d(4, 2, kernel_size=2, stride=2)
print(up.weight.shape, up(Tensor.ones(1, 4, 5)).shape)

# %% ConvTranspose2d
Tensor.manual_seed(0)
up = nn.ConvTranspose2d(4, 2, kernel_size=2, stride=2)
print(up.weight.shape, up(Tensor.ones(1, 4, 3, 3)).shape)

# %% BatchNorm
bn = nn.BatchNorm(2)
x = Tensor([[1.0, 10.0], [3.0, 30.0]])
with Tensor.train(): print(bn(x).numpy())  # batch statistics; the running ones move toward them
print(bn.running_mean.numpy(), bn(x).numpy(), sep="\n")  # inference: the running statistics

# %% BatchNorm1d
bn = nn.BatchNorm1d(2)
with Tensor.train(): print(bn(Tensor([[[1.0, 3.0], [0.0, 4.0]]])).numpy())  # (batch, channels, length)

# %% BatchNorm2d
bn = nn.BatchNorm2d(1)
with Tensor.train(): print(bn(Tensor([[[[1.0, 2.0], [3.0, 4.0]]]])).numpy())  # (batch, channels, height, width)

# %% BatchNorm3d
bn = nn.BatchNorm3d(1)
with Tensor.train(): print(bn(Tensor.arange(8, dtype=dtypes.float32).reshape(1, 1, 2, 2, 2)).flatten().numpy())

# %% LayerNorm
ln = nn.LayerNorm(3)
print(ln(Tensor([[1.0, 2.0, 3.0], [2.0, 2.0, 5.0]])).numpy())

# %% LayerNorm2d
ln = nn.LayerNorm2d(2)  # normalizes over the channels of (batch, channels, height, width)
print(ln(Tensor([[[[1.0]], [[3.0]]]])).flatten().numpy())

# %% GroupNorm
gn = nn.GroupNorm(2, 4)  # 4 channels in 2 groups
print(gn(Tensor([[1.0, 3.0, 10.0, 20.0]]).reshape(1, 4, 1)).flatten().numpy())

# %% InstanceNorm
norm = nn.InstanceNorm(2)
print(norm(Tensor([[[1.0, 3.0], [10.0, 30.0]]])).numpy())

# %% RMSNorm
norm = nn.RMSNorm(2)
print(norm(Tensor([[3.0, 4.0]])).numpy())  # x / sqrt(mean(x^2))

# %% Embedding
Tensor.manual_seed(0)
emb = nn.Embedding(10, 3)
print(emb(Tensor([[1, 1, 7]])).shape, (emb(Tensor([1])) == emb.weight[1]).all().item())

# %% LSTMCell
Tensor.manual_seed(0)
cell = nn.LSTMCell(3, 4)
h, c = cell(Tensor.ones(2, 3))  # no state yet: starts from zeros
h, c = cell(Tensor.ones(2, 3), (h, c))
print(h.shape, c.shape)
