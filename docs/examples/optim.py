# The examples of docs/optim.md. Each `# %% NAME` cell is shown under NAME's API entry and runs when the site is
# built, after these lines (run, not shown: docs/hooks.py); test/test_docs.py checks that every name has one.
from fusegrad import Tensor, nn
import numpy as np
np.set_printoptions(precision=4, suppress=True)

# %% Optimizer
class Halve(nn.optim.Optimizer):  # a new rule: only schedule_step (the new values) is needed
  def schedule_step(self):
    return [p.assign(p * 0.5) for p in self.params]
w = Tensor([4.0, -2.0], requires_grad=True)
Halve([w], lr=0.0).step()
print(w.tolist())

# %% OptimizerGroup
w, b = Tensor([[3.0, 1.0], [1.0, 3.0]], requires_grad=True), Tensor([1.0, -1.0], requires_grad=True)
opt = nn.optim.OptimizerGroup(nn.optim.Muon([w], lr=0.1), nn.optim.AdamW([b], lr=0.1))
with Tensor.train():
  opt.zero_grad()
  ((w * w).sum() + (b * b).sum()).backward()
  opt.step()
print(w.numpy(), b.numpy())

# %% SGD
w = Tensor([3.0, -2.0], requires_grad=True)
opt = nn.optim.SGD([w], lr=0.1, momentum=0.9)
with Tensor.train():
  for _ in range(3):
    opt.zero_grad()
    (w * w).sum().backward()
    opt.step()
    print(w.numpy())

# %% LARS
w = Tensor([3.0, -2.0], requires_grad=True)
opt = nn.optim.LARS([w], lr=0.1)
with Tensor.train():
  for _ in range(3):
    opt.zero_grad()
    (w * w).sum().backward()
    opt.step()
    print(w.numpy())

# %% Adam
w = Tensor([3.0, -2.0], requires_grad=True)
opt = nn.optim.Adam([w], lr=0.5)
with Tensor.train():
  for _ in range(3):
    opt.zero_grad()
    (w * w).sum().backward()
    opt.step()
    print(w.numpy())

# %% AdamW
w = Tensor([3.0, -2.0], requires_grad=True)
opt = nn.optim.AdamW([w], lr=0.5, weight_decay=0.1)
with Tensor.train():
  for _ in range(3):
    opt.zero_grad()
    (w * w).sum().backward()
    opt.step()
    print(w.numpy())

# %% LAMB
w = Tensor([3.0, -2.0], requires_grad=True)
opt = nn.optim.LAMB([w], lr=0.5)
with Tensor.train():
  for _ in range(3):
    opt.zero_grad()
    (w * w).sum().backward()
    opt.step()
    print(w.numpy())

# %% Muon
w = Tensor([[3.0, 0.0], [0.0, 1.0]], requires_grad=True)
opt = nn.optim.Muon([w], lr=0.5, weight_decay=0.0)
with Tensor.train():
  opt.zero_grad()
  (w * w).sum().backward()
  opt.step()  # about lr along each singular direction of the gradient, whatever its scale there
print(w.numpy())

# %% newton_schulz
g = Tensor([[3.0, 0.0], [0.0, 0.1]])
print(nn.optim.newton_schulz(g).numpy())  # the singular values 3 and 0.1 both pushed near 1
