"""Shared test helpers: run the same computation in fusegrad and in torch (CPU) and compare, forward and backward.

Tests run on Device.DEFAULT, which the DEV environment variable picks (DEV=CPU, DEV=PYTHON, DEV=CL ...): the same
suite runs unchanged on every backend.
"""
from __future__ import annotations
from typing import Any, Callable, Sequence
import numpy as np
import torch
from fusegrad import Tensor, Device, dtypes
from fusegrad.dtype import DType, to_numpy

torch.set_num_threads(1)

def device_is(*names: str) -> bool: return Device.DEFAULT.split(":")[0] in names

def two_devices() -> tuple[str, str]:
  """Two devices of the default kind (f"{Device.DEFAULT}:1" and :2), or two CPU devices where the default has only one
  (a machine with one GPU)."""
  kind = Device.DEFAULT.split(":")[0] if Device.get_available(f"{Device.DEFAULT.split(':')[0]}:2")[0] else "CPU"
  return f"{kind}:1", f"{kind}:2"

def _torch_dtype(dt: DType) -> torch.dtype:
  return {dtypes.float32: torch.float32, dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16, dtypes.float64: torch.float64,
          dtypes.int8: torch.int8, dtypes.uint8: torch.uint8, dtypes.int16: torch.int16, dtypes.int32: torch.int32,
          dtypes.int64: torch.int64, dtypes.bool: torch.bool}[dt]

def make_inputs(shapes: Sequence[tuple[int, ...]] | None, vals: Sequence[Any] | None, low: float, high: float, dtype: DType,
                requires_grad: bool, seed: int) -> tuple[list[torch.Tensor], list[Tensor]]:
  """The same random (or given) inputs as torch tensors and fusegrad tensors."""
  rng = np.random.default_rng(seed)
  if vals is None:
    assert shapes is not None
    if dtypes.is_float(dtype): arrays = [rng.uniform(low, high, s).astype(np.float32) for s in shapes]
    elif dtype == dtypes.bool: arrays = [rng.integers(0, 2, s).astype(bool) for s in shapes]
    else: arrays = [rng.integers(int(low), int(high), s, endpoint=True).astype(to_numpy(dtype)) for s in shapes]
  else: arrays = [np.asarray(v) for v in vals]
  grad = requires_grad and dtypes.is_float(dtype)
  tt = [torch.tensor(a).to(_torch_dtype(dtype)).requires_grad_(grad) for a in arrays]
  ft = [Tensor(a.astype(np.float32) if dtype == dtypes.bfloat16 else a, dtype=dtype, requires_grad=grad) for a in arrays]
  return tt, ft

def compare(name: str, got: Any, want: Any, atol: float, rtol: float) -> None:
  got = got.numpy() if isinstance(got, Tensor) else np.asarray(got)
  want = want.detach().float().numpy() if isinstance(want, torch.Tensor) and want.dtype == torch.bfloat16 else \
    (want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want))
  assert got.shape == want.shape, f"{name}: shape {got.shape} != torch's {want.shape}"
  if want.dtype == bool or np.issubdtype(want.dtype, np.integer): np.testing.assert_equal(got, want, err_msg=name)
  else: np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=atol, rtol=rtol, err_msg=name, equal_nan=True)

def helper_test_op(shapes: Sequence[tuple[int, ...]] | None, torch_fxn: Callable, fg_fxn: Callable | None = None, atol: float = 1e-6,
                   rtol: float = 1e-3, grad_atol: float = 1e-4, grad_rtol: float = 1e-3, forward_only: bool = False,
                   vals: Sequence[Any] | None = None, low: float = -2, high: float = 2, dtype: DType = dtypes.float32, seed: int = 0) -> None:
  """Compare fg_fxn(*inputs) with torch_fxn(*inputs): values, then gradients of a non-trivial function of the output."""
  fg_fxn = fg_fxn or torch_fxn
  tt, ft = make_inputs(shapes, vals, low, high, dtype, not forward_only, seed)
  tout, fout = torch_fxn(*tt), fg_fxn(*ft)
  compare("forward", fout, tout, atol, rtol)
  if forward_only or not dtypes.is_float(dtype) or not isinstance(tout, torch.Tensor) or not tout.dtype.is_floating_point: return
  # a loss with a different weight for every output element, so every gradient entry is checked
  w = np.random.default_rng(seed + 1).uniform(0.5, 1.5, tuple(tout.shape)).astype(np.float32)
  (tout * torch.tensor(w).to(tout.dtype)).sum().backward()
  (fout * Tensor(w).cast(fout.dtype)).sum().backward()
  for i, (t, f) in enumerate(zip(tt, ft)):
    if t.grad is None: continue
    assert f.grad is not None, f"input {i} got no gradient"
    compare(f"grad of input {i}", f.grad, t.grad, grad_atol, grad_rtol)
