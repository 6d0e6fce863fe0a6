"""Run by test/test_distributed.py under `mpirun -n 2`: gradients averaged across ranks equal the one-process
gradients of the whole batch; all_reduce and broadcast; with FAIL_RANK set, that rank raises half way."""
import os, signal, time
import numpy as np
from fusegrad import Tensor, TinyJit, nn, distributed as dist
from fusegrad.nn.optim import SGD
from fusegrad.nn.state import get_parameters

dist.init(timeout=float(os.environ.get("DIST_TIMEOUT", "60")))
rank, world = dist.rank(), dist.world_size()
x = np.random.default_rng(0).standard_normal((8, 5), dtype=np.float32)
y = np.array([0, 1, 2, 1, 0, 2, 2, 1])

def grads(xs: np.ndarray, ys: np.ndarray, seed: int) -> tuple[list[Tensor], list[np.ndarray]]:
  Tensor.manual_seed(seed)
  model = [nn.Linear(5, 4), Tensor.relu, nn.Linear(4, 3)]
  params = get_parameters(model)
  Tensor(xs).sequential(model).sparse_categorical_crossentropy(Tensor(ys)).backward()
  return params, [p.grad.numpy() for p in params]

_, want = grads(x, y, seed=1)  # the whole batch in one process
params, _ = grads(x[:1], y[:1], seed=1 + rank)  # different starting values on each rank ...
dist.broadcast_parameters(params)  # ... made rank 0's
for p in params: p.grad = None
part = slice(rank * 8 // world, (rank + 1) * 8 // world)
Tensor(x[part]).sequential([lambda t: t.linear(params[0].T, params[1]), Tensor.relu,
                            lambda t: t.linear(params[2].T, params[3])]).sparse_categorical_crossentropy(
  Tensor(y[part])).backward()
if os.environ.get("FAIL_RANK") == str(rank):  # in the middle of a step, before the gradients are averaged
  if os.environ.get("FAIL_HOW") == "kill": os.kill(os.getpid(), signal.SIGKILL)
  if os.environ.get("FAIL_HOW") == "hang": time.sleep(3600)  # the other rank's collective times out
  raise RuntimeError("this rank fails on purpose")
dist.average_gradients(params, bucket_bytes=64)  # several buckets
for p, w in zip(params, want): np.testing.assert_allclose(p.grad.numpy(), w, atol=1e-5, rtol=1e-5)
t = dist.all_reduce(Tensor([float(rank + 1), 1.0]).realize(), "sum")
assert t.tolist() == [world * (world + 1) / 2, world], t.tolist()
b = dist.broadcast(Tensor([rank * 10 + 7]).realize(), root=world - 1)
assert b.tolist() == [(world - 1) * 10 + 7]
try:
  dist.all_reduce(Tensor.ones(rank + 1).contiguous().realize())
  raise AssertionError("all_reduce of differently shaped tensors didn't raise")
except ValueError as e: assert "ranks pass different tensors" in str(e), e
try:
  dist.all_reduce(Tensor.ones(2) + 1)
  raise AssertionError("all_reduce of a lazy tensor didn't raise")
except ValueError as e: assert "must be realized" in str(e), e

# TinyJit train steps that all-reduce the gradients inside them (each replay calls MPI on the captured buffers): the
# parameters after 4 steps on this rank's half of each batch equal those of 4 full-batch steps in one process
batches = np.random.default_rng(1).standard_normal((4, 8, 5), dtype=np.float32)
def jit_train(part: slice, reduce: str) -> list[np.ndarray]:
  Tensor.manual_seed(1)
  model = [nn.Linear(5, 4), Tensor.relu, nn.Linear(4, 3)]
  params = get_parameters(model)
  opt = SGD(params, lr=0.5)
  @TinyJit
  def step(xb: Tensor, yb: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = xb.sequential(model).sparse_categorical_crossentropy(yb).backward()
      if reduce == "all_reduce":
        for p in params: dist.all_reduce(p.grad.realize(), "mean")
      if reduce == "DataParallel": dist.DataParallel(opt, bucket_bytes=64).step()
      else: opt.step()
    return loss.realize()
  for b in batches: step(Tensor(b[part]).realize(), Tensor(y[part]).realize())
  assert step.captured is not None and (not reduce or any("mpi" in ei.runner.name for ei in step.jit_cache))
  return [p.numpy() for p in params]
want = jit_train(slice(None), "")
for how in ("all_reduce", "DataParallel"):
  for w, g in zip(want, jit_train(part, how)): np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5, err_msg=how)

# SyncBatchNorm: running statistics after training forwards on this rank's half of each batch (eager, then in a
# TinyJit step) equal those of nn.BatchNorm on the whole batches in one process
def bn_stats(bn: nn.BatchNorm, data: np.ndarray, jit: bool) -> list[np.ndarray]:
  Tensor.manual_seed(2)
  lin = nn.Linear(5, 4)
  def forward(xb: Tensor) -> Tensor:
    with Tensor.train(): out = bn(lin(xb).relu()).sum()
    Tensor.realize_all([out, bn.running_mean, bn.running_var, bn.num_batches_tracked])
    return out
  step = TinyJit(forward) if jit else forward
  for b in data: step(Tensor(b).realize())
  return [bn.running_mean.numpy(), bn.running_var.numpy(), bn.num_batches_tracked.numpy()]
whole = np.concatenate([batches[:, :4], batches[:, 4:] * 2], axis=1)  # the ranks' halves differ in mean and variance
for momentum in (0.1, None):
  want = bn_stats(nn.BatchNorm(4, momentum=momentum), whole, False)
  for jit in (False, True):
    got = bn_stats(dist.SyncBatchNorm(4, momentum=momentum), whole[:, part], jit)
    for w, g in zip(want, got): np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5, err_msg=f"jit={jit}")

# SyncBatchNorm normalizes with the global batch's statistics: each rank's output and input gradient equal those of
# torch's BatchNorm2d on the whole batch in one process, and so do the weight and bias gradients summed over the ranks
# (eager, then in a TinyJit step over replays)
import torch  # noqa: E402
xs = np.random.default_rng(3).standard_normal((4, 4, 3, 3, 3), dtype=np.float32)
xs[:, 2:] = xs[:, 2:] * 3 + 1  # the ranks' halves differ in mean and variance
gs = np.random.default_rng(4).standard_normal(xs.shape, dtype=np.float32)
tbn = torch.nn.BatchNorm2d(3)
with torch.no_grad(): tbn.weight[:], tbn.bias[:] = torch.tensor([1.5, 0.5, 2.0]), torch.tensor([0.1, -0.2, 0.3])
def torch_step(xb: np.ndarray, gb: np.ndarray) -> list[np.ndarray]:
  tbn.zero_grad()
  (out := tbn(tx := torch.tensor(xb, requires_grad=True))).mul(torch.tensor(gb)).sum().backward()
  return [out.detach().numpy()[half], tx.grad.numpy()[half], tbn.weight.grad.numpy(), tbn.bias.grad.numpy()]
half = slice(rank * 4 // world, (rank + 1) * 4 // world)
for jit in (False, True):
  sbn = dist.SyncBatchNorm(3)
  sbn.weight.assign(Tensor([1.5, 0.5, 2.0])).realize(), sbn.bias.assign(Tensor([0.1, -0.2, 0.3])).realize()
  def sbn_step(xb: Tensor, gb: Tensor) -> list[Tensor]:
    sbn.weight.grad = sbn.bias.grad = None
    with Tensor.train(): out = sbn(xb.requires_grad_())
    (out * gb).sum().backward()
    summed = [dist.all_reduce(t.grad.realize(), "sum") for t in (sbn.weight, sbn.bias)]
    return [out.realize(), xb.grad.realize(), *summed]
  run = TinyJit(sbn_step) if jit else sbn_step
  for xb, gb in zip(xs, gs):
    got = [t.numpy() for t in run(Tensor(xb[half]).realize(), Tensor(gb[half]).realize())]
    for name, w, g in zip(("output", "x.grad", "weight.grad", "bias.grad"), torch_step(xb, gb), got):
      np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4, err_msg=f"SyncBatchNorm {name}, jit={jit}")
  assert not jit or any("mpi" in ei.runner.name for ei in run.jit_cache)
print(f"rank {rank}: ok")
