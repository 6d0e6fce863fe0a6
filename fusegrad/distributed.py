"""Data parallel training across processes and machines over MPI (Open MPI through mpi4py): every rank holds the
whole model and trains on its slice of the batch; gradients are averaged across ranks after backward(). The API, how
to run it and what a failure does: docs/devices.md."""
from __future__ import annotations
import sys, time, zlib
from typing import Any
import numpy as np
from fusegrad.device import Buffer
from fusegrad.tensor import Tensor, _is_training
from fusegrad.gradient import with_rule
from fusegrad import nn
from fusegrad.dtype import to_numpy
from fusegrad.engine import state
from fusegrad.engine.realize import ExecItem, run_exec_items
from fusegrad.engine.runner import Runner
from fusegrad.helpers import prod

TIMEOUT = 300.0  # seconds a collective waits for the other ranks before it raises
BUCKET_BYTES = 4 << 20  # gradients are averaged in buckets of about this many bytes
_comm: Any = None
_MPI: Any = None

def init(timeout: float | None = None) -> None:
  """Join the MPI job this process was started in (a single process is a job of one rank)."""
  global _comm, _MPI, TIMEOUT
  try: from mpi4py import MPI
  except ImportError as e:
    raise RuntimeError("fusegrad.distributed needs MPI: apt-get install openmpi-bin libopenmpi-dev, then "
                       f"pip install mpi4py ({e})") from None
  _MPI, _comm = MPI, MPI.COMM_WORLD
  if timeout is not None: TIMEOUT = timeout
  if _comm.Get_size() > 1: sys.excepthook = _abort_job

def _abort_job(kind: type, value: BaseException, tb: Any) -> None:
  """An uncaught error in one rank ends every rank (the others would wait for it forever)."""
  sys.__excepthook__(kind, value, tb)
  print(f"fusegrad.distributed: rank {rank()} failed; aborting the MPI job", file=sys.stderr, flush=True)
  _comm.Abort(1)

def _world() -> Any:
  if _comm is None: raise RuntimeError("fusegrad.distributed: call distributed.init() first")
  return _comm

def rank() -> int:
  """This process's number in the job, 0 .. world_size()-1."""; return _world().Get_rank()

def world_size() -> int:
  """The number of processes in the job."""; return _world().Get_size()

def _wait(request: Any, what: str) -> None:
  """Wait for a non-blocking collective, raising after TIMEOUT seconds (another rank failed or went missing)."""
  deadline, polls = time.monotonic() + TIMEOUT, 0
  while not request.Test():
    if time.monotonic() > deadline:
      raise RuntimeError(f"fusegrad.distributed: {what} on rank {rank()}: the other ranks didn't answer in "
                         f"{TIMEOUT:.0f}s (a rank failed or stopped)")
    polls += 1
    if polls > 1000: time.sleep(0.0001)  # a quick answer is polled for; a slow one lets the others run

class _Collective(Runner):
  """An MPI collective as a step of a realize, so TinyJit replays it (docs/devices.md): of a pair of calls on
  [dest, src], the first starts it on a host copy of src (op "sum", "mean", or an int: a broadcast from that rank), the
  second waits and writes dest."""
  def __init__(self, op: str | int, device: str, nbytes: int):
    super().__init__(f"mpi {'broadcast' if isinstance(op, int) else op} {nbytes:8d}", device)
    self.op, self.pending = op, list[tuple[Any, Any]]()
  def __call__(self, bufs: list[Buffer], var_vals: dict, wait: bool = False) -> float | None:
    dest, src = bufs
    if not self.pending:  # the first of the pair: start
      arr = np.empty(src.size, to_numpy(src.dtype))
      src.copyout(arr.data)
      self.pending.append((arr, _world().Ibcast(arr, root=self.op) if isinstance(self.op, int) else
                           _world().Iallreduce(_MPI.IN_PLACE, arr, op=_MPI.SUM)))
      return None
    arr, request = self.pending.pop()
    _wait(request, self.name)
    if self.op == "mean": arr = (arr / world_size()).astype(arr.dtype, copy=False)
    dest.copyin(arr.data)
    return None

def _start(t: Tensor, op: str | int, what: str) -> tuple[Tensor, ExecItem]:
  """A new tensor for the result of op on t across ranks, and the ExecItem that computes it (run it twice)."""
  if not state.is_realized(t.uop) or isinstance(t.device, tuple):
    raise ValueError(f"{what}: the tensor (shape {t.shape}) must be realized on one device: call .realize() first")
  _check_same(t, what)
  out = Tensor.empty(t.shape, dtype=t.dtype, device=t.device)
  item = ExecItem(_Collective(op, t.device, t.nbytes()), [out._buffer(), t._buffer()])
  run_exec_items([item])
  return out, item

def _collective(t: Tensor, op: str | int, what: str) -> Tensor:
  out, item = _start(t, op, what)
  run_exec_items([item])
  return t.replace(out)

def _check_same(t: Tensor, what: str) -> None:
  """ValueError unless every rank passes a tensor of the same shape and dtype (one small Allreduce of a signature)."""
  mine = (tuple(t.shape), t.dtype.name)
  sig = np.array([len(t.shape), prod(t.shape), zlib.crc32(repr(mine).encode())], np.int64)
  both = np.concatenate([sig, -sig])
  _wait(_world().Iallreduce(_MPI.IN_PLACE, both, op=_MPI.MIN), what)
  if (both[:3] != -both[3:]).any():
    everyone = _world().allgather(mine)  # to name each rank's tensor: a small tuple of ints and a name
    raise ValueError(f"{what}: ranks pass different tensors: " + ", ".join(f"rank {i}: {s} {d}"
                                                                           for i, (s, d) in enumerate(everyone)))

def all_reduce(t: Tensor, op: str = "sum") -> Tensor:
  """t's values combined across ranks ("sum" or "mean"): t (returned) now holds them, in a buffer of its own. Inside a
  TinyJit step it is captured, and each replay reduces that call's values."""
  if op not in ("sum", "mean"): raise ValueError(f"all_reduce: op must be 'sum' or 'mean', not {op!r}")
  return _collective(t, op, "all_reduce")

def broadcast(t: Tensor, root: int = 0) -> Tensor:
  """Root's values of t on every rank: t (returned) now holds them, in a buffer of its own."""
  return _collective(t, root, "broadcast")

def broadcast_parameters(params: list[Tensor], root: int = 0) -> None:
  """Every rank starts from root's parameters."""
  Tensor.realize_all(params)
  for p in params: broadcast(p, root)

def average_gradients(params: list[Tensor], bucket_bytes: int = BUCKET_BYTES) -> None:
  """Replace each parameter's .grad by its mean over the ranks, in buckets of about bucket_bytes (each reduced while
  the next is gathered); works inside a TinyJit step."""
  grads = [p for p in params if p.grad is not None]
  Tensor.realize_all([p.grad for p in grads if p.grad is not None])
  buckets: list[list[Tensor]] = [[]]
  for p in grads:
    if buckets[-1] and sum(q.nbytes() for q in buckets[-1]) + p.nbytes() > bucket_bytes: buckets.append([])
    buckets[-1].append(p)
  started = [(b, *_start(Tensor.cat(*[p.grad.flatten().float() for p in b if p.grad is not None]).realize(), "mean",
                         "average_gradients")) for b in buckets if b]
  for bucket, flat, item in started:
    run_exec_items([item])
    for p, g in zip(bucket, flat.split([p.numel() for p in bucket])): p.grad = g.reshape(p.shape).cast(p.dtype)

def _summed(t: Tensor) -> Tensor:
  """t summed across ranks; the gradient of each rank's share is every rank's gradient of the sum, all-reduced."""
  total = all_reduce(t.detach().contiguous().realize())
  return t._new(with_rule((total + (t - t.detach())).uop, (t.uop,),
                          lambda g, n, t: (all_reduce(Tensor(g).contiguous().realize()).uop,)))

class SyncBatchNorm(nn.BatchNorm):
  """nn.BatchNorm over the global batch, as torch's SyncBatchNorm: in training the ranks' counts, sums and sums of
  squares are all-reduced, and so are their gradients (docs/devices.md)."""
  def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
    mean, var = super().calc_stats(x)
    if not _is_training(): return mean, var  # eval without running statistics: each rank's own (as torch)
    total = _summed(Tensor.stack(mean, var + mean.square(), mean.ones_like()).float() * (x.numel() // x.shape[1]))
    self._count, mean = total[2], total[0] / total[2]
    return mean, total[1] / total[2] - mean.square()
  def _update_running_stats(self, mean: Tensor, var: Tensor, n: int | Tensor) -> None:
    super()._update_running_stats(mean, var, self._count)  # the unbiased variance of the global batch

class DataParallel:
  """An optimizer whose step() first averages the gradients across ranks (average_gradients)."""
  def __init__(self, optimizer: Any, bucket_bytes: int = BUCKET_BYTES):
    self.optimizer, self.bucket_bytes = optimizer, bucket_bytes
    self.params: list[Tensor] = optimizer.params if hasattr(optimizer, "params") else \
      [p for o in optimizer.optimizers for p in o.params]
  def zero_grad(self) -> None: self.optimizer.zero_grad()
  def step(self) -> None:
    """Average the gradients, then take the wrapped optimizer's step."""
    average_gradients(self.params, self.bucket_bytes)
    self.optimizer.step()
