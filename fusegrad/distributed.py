"""Data parallel training across processes and machines over MPI (Open MPI through mpi4py).

Every process (rank) holds the whole model and trains on its slice of the global batch; after backward() the
gradients are averaged across ranks, so every rank takes the same optimizer step and the parameters stay equal:

```python
from fusegrad import distributed as dist
dist.init()
dist.broadcast_parameters(params)          # everyone starts from rank 0's values
opt = dist.DataParallel(nn.optim.Adam(params))
loss = model(x[dist.rank()::dist.world_size()]).sparse_categorical_crossentropy(...).backward()
opt.step()                                 # gradients averaged in buckets, then the wrapped step
```
Run with `mpirun -n 2 python train.py` (as root add `--allow-run-as-root`, more ranks than cores `--oversubscribe`).
Tensors travel as their buffers' bytes through mpi4py's buffer calls (`Iallreduce`, `Bcast`), never pickled. A rank
that raises aborts the whole job (MPI_Abort), and a collective that waits longer than TIMEOUT seconds for the others
raises in the ranks still waiting: a failure is an error everywhere, never a silent hang.
"""
from __future__ import annotations
import sys, time, zlib
from typing import Any
from fusegrad.tensor import Tensor
from fusegrad.dtype import to_numpy
from fusegrad.engine import state
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
  sys.stderr.write(f"fusegrad.distributed: rank {rank()} failed; aborting the MPI job\n")
  sys.stderr.flush()
  _comm.Abort(1)

def _world() -> Any:
  if _comm is None: raise RuntimeError("fusegrad.distributed: call distributed.init() first")
  return _comm

def rank() -> int:
  """This process's number in the job, 0 .. world_size()-1."""
  return _world().Get_rank()

def world_size() -> int:
  """The number of processes in the job."""
  return _world().Get_size()

def _wait(request: Any, what: str) -> None:
  """Wait for a non-blocking collective, raising after TIMEOUT seconds (another rank failed or went missing)."""
  deadline, polls = time.monotonic() + TIMEOUT, 0
  while not request.Test():
    if time.monotonic() > deadline:
      raise RuntimeError(f"fusegrad.distributed: {what} on rank {rank()}: the other ranks didn't answer in "
                         f"{TIMEOUT:.0f}s (a rank failed or stopped)")
    polls += 1
    if polls > 1000: time.sleep(0.0001)  # a quick answer is polled for; a slow one lets the others run

def _host_copy(t: Tensor, what: str) -> Any:
  """The realized values of t as a numpy array (a copy of its buffer's bytes); ValueError for a lazy tensor."""
  if not state.is_realized(t.uop) or isinstance(t.device, tuple):
    raise ValueError(f"{what}: the tensor (shape {t.shape}) must be realized on one device: call .realize() first")
  return t.numpy()

def _from_host(arr: Any, like: Tensor) -> Tensor:
  """arr's bytes copied into a new buffer shaped like the tensor like (one copy, no kernel)."""
  ret = Tensor.empty(like.shape, dtype=like.dtype, device=like.device)
  if like.numel(): ret._buffer().copyin(memoryview(arr).cast("B"))
  return ret

def _check_same(t: Tensor, what: str) -> None:
  """ValueError unless every rank passes a tensor of the same shape and dtype: one small Allreduce of a signature (its
  minimum and maximum over the ranks differ when a rank's does)."""
  import numpy as np
  mine = (tuple(t.shape), t.dtype.name)
  sig = np.array([len(t.shape), prod(t.shape), zlib.crc32(repr(mine).encode())], np.int64)
  both = np.concatenate([sig, -sig])
  _wait(_world().Iallreduce(_MPI.IN_PLACE, both, op=_MPI.MIN), what)
  if (both[:3] != -both[3:]).any():
    everyone = _world().allgather(mine)  # to name each rank's tensor: a small tuple of ints and a name
    raise ValueError(f"{what}: ranks pass different tensors: " + ", ".join(f"rank {i}: {s} {d}"
                                                                           for i, (s, d) in enumerate(everyone)))

def all_reduce(t: Tensor, op: str = "sum") -> Tensor:
  """t's values combined across ranks ("sum" or "mean"): t (returned) now holds them, in a buffer of its own."""
  if op not in ("sum", "mean"): raise ValueError(f"all_reduce: op must be 'sum' or 'mean', not {op!r}")
  _check_same(t, "all_reduce")
  arr = _host_copy(t, "all_reduce")
  _wait(_world().Iallreduce(_MPI.IN_PLACE, arr, op=_MPI.SUM), "all_reduce")
  if op == "mean": arr = (arr / world_size()).astype(to_numpy(t.dtype), copy=False)
  return t.replace(_from_host(arr, t))

def broadcast(t: Tensor, root: int = 0) -> Tensor:
  """Root's values of t on every rank: t (returned) now holds them, in a buffer of its own."""
  _check_same(t, "broadcast")
  arr = _host_copy(t, "broadcast")
  _wait(_world().Ibcast(arr, root=root), "broadcast")
  return t.replace(_from_host(arr, t))

def broadcast_parameters(params: list[Tensor], root: int = 0) -> None:
  """Every rank starts from root's parameters."""
  Tensor.realize_all(params)
  for p in params: broadcast(p, root)

def average_gradients(params: list[Tensor], bucket_bytes: int = BUCKET_BYTES) -> None:
  """Replace each parameter's .grad by its mean over the ranks. The gradients go in buckets of about bucket_bytes:
  each bucket's reduction starts as soon as its bytes are copied out, while the next bucket is gathered."""
  grads = [p for p in params if p.grad is not None]
  Tensor.realize_all([p.grad for p in grads if p.grad is not None])
  buckets: list[list[Tensor]] = [[]]
  for p in grads:
    if buckets[-1] and sum(q.nbytes() for q in buckets[-1]) + p.nbytes() > bucket_bytes: buckets.append([])
    buckets[-1].append(p)
  pending = []
  for bucket in [b for b in buckets if b]:
    flat = Tensor.cat(*[p.grad.flatten().float() for p in bucket if p.grad is not None]).realize()
    _check_same(flat, "average_gradients")
    arr = flat.numpy()
    pending.append((bucket, arr, _world().Iallreduce(_MPI.IN_PLACE, arr, op=_MPI.SUM)))
  for bucket, arr, request in pending:
    _wait(request, "average_gradients")
    arr /= world_size()
    at = 0
    for p in bucket:
      assert p.grad is not None
      n = prod(p.shape)
      p.grad = _from_host(arr[at:at + n].astype(to_numpy(p.grad.dtype), copy=False), p.grad)
      at += n

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
