"""MNIST training, fusegrad against PyTorch in one run: the same model, optimizer, batch size and number of steps.

Prints the first-step time (fusegrad: includes compiling; later runs hit the kernel cache), the steady per-step time
of each, their ratio, and the final test accuracy of each. The recipe is examples/beautiful_mnist.py's (raw uint8
pixels in, Adam). Settings: BS (512), STEPS (70), LR (0.002), THREADS (all cores).
"""
import os, statistics, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np
from fusegrad import Tensor, TinyJit, nn, Device
from fusegrad.helpers import getenv
from fusegrad.nn.datasets import mnist
from examples.beautiful_mnist import Model

BS, STEPS, LR = getenv("BS", 512), getenv("STEPS", 70), getenv("LR", 0.002)
THREADS = getenv("THREADS", os.cpu_count() or 1)

def bench_fusegrad(X_train: Tensor, Y_train: Tensor, X_test: Tensor, Y_test: Tensor) -> tuple[list[float], float]:
  Tensor.manual_seed(0)
  model = Model()
  opt = nn.optim.Adam(nn.state.get_parameters(model), lr=LR)
  @TinyJit
  def step() -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      idx = Tensor.randint(BS, high=X_train.shape[0])
      loss = model(X_train[idx]).sparse_categorical_crossentropy(Y_train[idx]).backward()
      opt.step()
      return loss
  times = []
  for _ in range(STEPS):
    st = time.perf_counter()
    step().item()
    times.append(time.perf_counter() - st)
  acc = (model(X_test).argmax(axis=1) == Y_test).mean().item() * 100
  return times, acc

def bench_torch(X_train: np.ndarray, Y_train: np.ndarray, X_test: np.ndarray,
                Y_test: np.ndarray) -> tuple[list[float], float]:
  import torch
  torch.set_num_threads(THREADS)
  torch.manual_seed(0)
  model = torch.nn.Sequential(
    torch.nn.Conv2d(1, 32, 5), torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 5), torch.nn.ReLU(),
    torch.nn.BatchNorm2d(32), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3), torch.nn.ReLU(),
    torch.nn.BatchNorm2d(64), torch.nn.MaxPool2d(2),
    torch.nn.Flatten(), torch.nn.Linear(576, 10))
  opt = torch.optim.Adam(model.parameters(), lr=LR)
  xt, yt = torch.from_numpy(X_train), torch.from_numpy(Y_train).long()
  times = []
  for _ in range(STEPS):
    st = time.perf_counter()
    idx = torch.randint(0, xt.shape[0], (BS,))
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(xt[idx].float()), yt[idx])
    loss.backward()
    opt.step()
    loss.item()
    times.append(time.perf_counter() - st)
  model.eval()
  with torch.no_grad():
    pred = model(torch.from_numpy(X_test).float()).argmax(1)
    acc = (pred == torch.from_numpy(Y_test).long()).float().mean().item() * 100
  return times, acc

def steady(times: list[float]) -> float: return statistics.median(times[3:]) if len(times) > 3 else times[-1]

if __name__ == "__main__":
  X_train, Y_train, X_test, Y_test = mnist()
  arrays = [t.numpy() for t in (X_train, Y_train, X_test, Y_test)]
  print(f"MNIST CNN, batch {BS}, {STEPS} steps, {THREADS} threads, fusegrad device {Device.DEFAULT}")
  fg_times, fg_acc = bench_fusegrad(X_train, Y_train, X_test, Y_test)
  th_times, th_acc = bench_torch(*arrays)
  print(f"{'':10s} {'first step':>12s} {'per step':>12s} {'accuracy':>10s}")
  print(f"{'fusegrad':10s} {fg_times[0]:10.2f} s {steady(fg_times) * 1e3:9.1f} ms {fg_acc:9.2f}%")
  print(f"{'pytorch':10s} {th_times[0]:10.2f} s {steady(th_times) * 1e3:9.1f} ms {th_acc:9.2f}%")
  print(f"per-step time ratio fusegrad/pytorch: {steady(fg_times) / steady(th_times):.2f}x")
