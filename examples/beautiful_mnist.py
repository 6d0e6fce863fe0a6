"""A small CNN trained on MNIST, reaching 98% test accuracy with the defaults.

Settings (environment variables): BS batch size (512), STEPS training steps (70), LR learning rate (Adam: 0.002),
SGD=1 or MUON=1 to replace Adam, FASHION=1 for Fashion-MNIST, TARGET_EVAL_ACC_PCT to fail (exit 1) below that accuracy,
SAVE=path.safetensors to save the trained weights (examples/webgpu/export_mnist.py exports them for the browser).
Data parallel: SHARD=n splits each batch over n devices of this machine (f"{Device.DEFAULT}:{i}", the model replicated
on each); DIST=1 under MPI splits it over the ranks, averaging gradients inside the TinyJit step and keeping the batch
norms' running statistics those of the global batch (SyncBatchNorm); only rank 0 prints:
  DIST=1 mpirun -n 2 python examples/beautiful_mnist.py      (as root: mpirun --allow-run-as-root ...)
"""
import sys
from fusegrad import Tensor, TinyJit, nn, GlobalCounters, Context, function, Device, distributed as dist
from fusegrad.helpers import getenv, colored, trange
from fusegrad.nn.datasets import mnist

class Model:
  def __init__(self, norm: type[nn.BatchNorm] = nn.BatchNorm):
    self.layers = [nn.Conv2d(1, 32, 5), Tensor.relu, nn.Conv2d(32, 32, 5), Tensor.relu,
                   norm(32), Tensor.max_pool2d,
                   nn.Conv2d(32, 64, 3), Tensor.relu, nn.Conv2d(64, 64, 3), Tensor.relu,
                   norm(64), Tensor.max_pool2d,
                   lambda x: x.flatten(1), nn.Linear(576, 10)]
  @function  # traced once; each call reuses the graph (and repeats the batch norms' running-statistics updates)
  def __call__(self, x: Tensor) -> Tensor: return x.sequential(self.layers)

def make_optimizer(params: list[Tensor]) -> nn.optim.Optimizer:
  if getenv("SGD", 0): return nn.optim.SGD(params, lr=getenv("LR", 0.01), momentum=0.9)
  if getenv("MUON", 0):  # Muon for the weight matrices and kernels, Adam for biases and norms
    return nn.optim.OptimizerGroup(nn.optim.Muon([p for p in params if p.ndim >= 2], lr=getenv("LR", 0.02),
                                                                 weight_decay=0.0),
                                   nn.optim.Adam([p for p in params if p.ndim < 2], lr=0.001))
  return nn.optim.Adam(params, lr=getenv("LR", 0.002))

def main() -> float:
  X_train, Y_train, X_test, Y_test = mnist(fashion=bool(getenv("FASHION", 0)))
  model = Model(dist.SyncBatchNorm if getenv("DIST", 0) else nn.BatchNorm)
  params, batch_size = nn.state.get_parameters(model), getenv("BS", 512)
  forward = model
  if devices := tuple(f"{Device.DEFAULT}:{i}" for i in range(getenv("SHARD", 0))):
    for t in nn.state.get_state_dict(model).values(): t.to_(devices).realize()  # the model replicated on each device
    X_test.shard_(devices, axis=0)  # the test set split across them
    Y_test.shard_(devices, axis=0)
    forward = lambda x: x.sequential(model.layers)  # noqa: E731 (`function` traces tensors on one device only)
  rank, ranks = 0, 1
  if getenv("DIST", 0):
    dist.init()
    rank, ranks = dist.rank(), dist.world_size()
    dist.broadcast_parameters(params)  # every rank starts from rank 0's weights
    forward = lambda x: x.sequential(model.layers)  # noqa: E731 (SyncBatchNorm all-reduces: `function` can't trace it)
  opt = make_optimizer(params)

  def loss_of_batch() -> Tensor:
    samples = Tensor.randint(batch_size, high=X_train.shape[0])
    samples = samples[rank * batch_size // ranks:(rank + 1) * batch_size // ranks]  # this rank's part of the batch
    x, y = X_train[samples], Y_train[samples]
    if devices: x, y = x.shard(devices, axis=0), y.shard(devices, axis=0)
    return forward(x).sparse_categorical_crossentropy(y).backward()

  @TinyJit
  @Context(TRAINING=1)
  def train_step() -> Tensor:
    opt.zero_grad()
    if ranks == 1: return loss_of_batch().realize(*opt.schedule_step())  # the loss and the step in one schedule
    loss = loss_of_batch().realize()
    dist.DataParallel(opt).step()  # the gradients averaged across ranks (captured by TinyJit too), then the step
    return loss

  @TinyJit
  def get_test_acc() -> Tensor: return (model(X_test).argmax(axis=1) == Y_test).mean() * 100

  acc, steps = float("nan"), getenv("STEPS", 70)
  for i in (bar := trange(steps, disable=rank != 0)):
    GlobalCounters.reset()  # so DEBUG=2 totals are per step
    loss = train_step()
    if i % 10 == 9 or i == steps - 1: acc = get_test_acc().item()
    bar.set_description(f"loss {loss.item():6.3f}  test accuracy {acc:5.2f}%")
  if (path := getenv("SAVE", "")) and rank == 0: nn.state.safe_save(nn.state.get_state_dict(model), path)
  return acc

if __name__ == "__main__":
  accuracy = main()
  if getenv("DIST", 0) and dist.rank() != 0: sys.exit(0)
  if (target := getenv("TARGET_EVAL_ACC_PCT", 0.0)) and not accuracy >= target:
    print(colored(f"test accuracy {accuracy:.2f}% is below the target {target}%", "red"))
    sys.exit(1)
