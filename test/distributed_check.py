"""Run by test/test_distributed.py under `mpirun -n 2`: gradients averaged across ranks equal the one-process
gradients of the whole batch; all_reduce and broadcast; with FAIL_RANK set, that rank raises half way."""
import os
import numpy as np
from fusegrad import Tensor, nn, distributed as dist
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
if os.environ.get("FAIL_RANK") == str(rank): raise RuntimeError("this rank fails on purpose")
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
print(f"rank {rank}: ok")
