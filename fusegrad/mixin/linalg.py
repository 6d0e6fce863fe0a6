"""Linear algebra composed from matmuls and elementwise ops: QR, SVD, Newton-Schulz (docs/developer/tensor.md)."""
from __future__ import annotations
import itertools
from typing import TYPE_CHECKING
from fusegrad.dtype import dtypes, least_upper_float
from fusegrad.mixin.elementwise import ArgumentError, ShapeError

if TYPE_CHECKING: from fusegrad.tensor import Tensor

MUON_COEFFICIENTS = (3.4445, -4.7750, 2.0315)

def _circle_step(n: int) -> list[int]:
  """The column order after one move round the circle (top row 0..k-1, bottom row k..2k-1, top0 fixed): top becomes
  [top0, bot0, top1 .. top(k-2)], bottom [bot1 .. bot(k-1), top(k-1)]. Position i takes column ret[i]."""
  k = n // 2
  top, bot = list(range(k)), list(range(k, n))
  return [top[0], bot[0]] + top[1:k - 1] + bot[1:] + [top[k - 1]] if k > 1 else list(range(n))

def _rotate(x: Tensor, c: Tensor, s: Tensor, k: int) -> Tensor:
  """Columns i and k + i of x rotated by (c[i], s[i]); s holds (-sin, +sin) for the (first, second) column."""
  x3 = x.reshape(*x.shape[:-1], 2, k)
  return (c * x3 + s * x3.flip(-2)).reshape(x.shape)

def _unrotate_order(n: int, rounds: int) -> list[int]:
  """Where each original column ends up after `rounds` circle steps: position order[j] holds column j."""
  cols, step = list(range(n)), _circle_step(n)
  for _ in range(rounds): cols = [cols[i] for i in step]
  return sorted(range(n), key=lambda i: cols[i])

class LinalgMixin:
  __slots__ = ()
  def _matrix_float(self: Tensor, op: str) -> Tensor:
    if self.ndim < 2: raise ShapeError(f"{op}: needs a matrix (at least 2 dims), got shape {self.shape}")
    return self.cast(least_upper_float(self.dtype))

  def qr(self: Tensor, mode: str = "complete") -> tuple[Tensor, Tensor]:
    """Q, R with self = Q @ R, Q's columns orthonormal and R upper triangular, as torch.linalg.qr (Householder
    reflections, so R's diagonal has LAPACK's signs). mode "complete" (tinygrad's, the default): Q (m, m), R (m, n);
    "reduced" (torch's default): Q (m, k), R (k, n) with k = min(m, n).
    `Tensor([[3.0, 1.0], [4.0, 2.0]]).qr()[1].tolist()` is about [[-5.0, -2.2], [0.0, -0.4]]."""
    if mode not in ("reduced", "complete"): raise ArgumentError(f"qr: mode must be 'reduced' or 'complete': {mode!r}")
    r = self._matrix_float("qr")
    (m, n), batch = r.shape[-2:], r.shape[:-2]
    q = type(self).eye(m, dtype=r.dtype, device=r.device).reshape((1,) * len(batch) + (m, m)).expand(*batch, m, m)
    for j in range(min(m - 1, n)):
      x = r[..., j:, j]  # the column below (and on) the diagonal
      norm = x.square().sum(-1, keepdim=True).sqrt()
      alpha = -(x[..., :1] >= 0).where(norm, -norm)  # -sign(x0) ||x||: no cancellation in x0 - alpha
      v = x - alpha * (type(self).arange(m - j, device=r.device) == 0)
      vnorm = v.square().sum(-1, keepdim=True).sqrt()
      v = (vnorm > 0).where(v / (vnorm > 0).where(vnorm, 1.0), 0.0).pad(((0, 0),) * len(batch) + ((j, 0),))
      # H = I - 2 v v^T applied on the left of R and on the right of Q
      r = r - 2 * v.unsqueeze(-1) * (v.unsqueeze(-2) @ r)
      q = q - 2 * (q @ v.unsqueeze(-1)) * v.unsqueeze(-2)
    r = r.triu()
    return (q, r) if mode == "complete" or m <= n else (q[..., :, :n], r[..., :n, :])

  def svd(self: Tensor, full_matrices: bool = True, sweeps: int = 8) -> tuple[Tensor, Tensor, Tensor]:
    """U, S, Vh with self = U @ diag(S) @ Vh, S descending, as torch.linalg.svd (signs of singular vectors may
    differ), by `sweeps` rounds of one-sided Jacobi. full_matrices: U (m, m) and Vh (n, n), else U (m, k), Vh (k, n).
    `Tensor([[3.0, 0.0], [0.0, -4.0]]).svd()[1].tolist()` is [4.0, 3.0]."""
    a = self._matrix_float("svd")
    m, n = a.shape[-2:]
    if m < n:  # work on the tall transpose: A^T = U' S V'^T gives A = V' S U'^T
      u, s, vh = a.transpose(-1, -2).svd(full_matrices, sweeps)
      return vh.transpose(-1, -2), s, u.transpose(-1, -2)
    u, v = a._jacobi_columns(sweeps)
    s = u.square().sum(-2).sqrt()
    order = s.argsort(-1, descending=True)
    s = s.gather(-1, order)
    pick = order.unsqueeze(-2).expand(*order.shape[:-1], m, n)
    u = u.gather(-1, pick) / (s > 0).where(s, 1.0).unsqueeze(-2)
    v = v.gather(-1, pick[..., :n, :])
    if full_matrices and m > n: u = u.cat(u.qr("complete")[0][..., :, n:], dim=-1)  # complete U's basis
    return u, s, v.transpose(-1, -2)

  def _jacobi_columns(self: Tensor, sweeps: int) -> tuple[Tensor, Tensor]:
    """(U, V) with self @ V = U, V orthogonal and U's columns mutually orthogonal (docs/developer/tensor.md)."""
    n = self.shape[-1]
    a = self.pad(((0, 0),) * (self.ndim - 1) + ((0, 1),)) if n % 2 else self  # a zero column evens the pairs
    k, lead, dev = a.shape[-1] // 2, a.shape[:-2], a.device
    eye = type(self).eye(2 * k, dtype=a.dtype, device=dev).reshape((1,) * len(lead) + (2 * k, 2 * k))
    u, v = a, eye.expand(*lead, 2 * k, 2 * k)  # columns 0..k-1 on top, k..2k-1 at the bottom
    step = type(self).eye(2 * k, dtype=a.dtype, device=dev)[:, _circle_step(2 * k)]  # x @ step moves columns round
    sign = type(self)([[-1.0], [1.0]], dtype=a.dtype, device=dev)
    mant = dtypes.finfo(a.dtype)[1]
    for _ in range(sweeps * (2 * k - 1)):
      u3 = u.reshape(*u.shape[:-1], 2, k)  # (..., m, 2, k): [..., 0, i] and [..., 1, i] are pair i
      sq = u3.square().sum(-3)
      alpha, beta, gamma = sq[..., 0, :], sq[..., 1, :], (u3[..., 0, :] * u3[..., 1, :]).sum(-2)
      # the rotation that zeroes gamma: t = sign(zeta) / (|zeta| + sqrt(1 + zeta^2)), zeta = (beta - alpha) / 2gamma
      skip = gamma.abs() <= (alpha * beta).sqrt() * 2.0 ** -mant
      zeta = (beta - alpha) / (2 * skip.where(1.0, gamma))
      t = skip.where(0.0, (zeta >= 0).where(1.0, -1.0) / (zeta.abs() + (1 + zeta.square()).sqrt()))
      c = (1 + t.square()).rsqrt().unsqueeze(-2).unsqueeze(-2)  # (..., 1, 1, k): over rows and both columns
      s = sign * (c * t.unsqueeze(-2).unsqueeze(-2))  # (-s, +s) for the (top, bottom) columns
      u, v = (_rotate(x, c, s, k) @ step for x in (u, v))
    order = _unrotate_order(2 * k, sweeps * (2 * k - 1))
    return u[..., order][..., :n], v[..., order][..., :n, :n]

  def newton_schulz(self: Tensor, steps: int = 5, params: tuple[float, ...] = MUON_COEFFICIENTS,
                    eps: float = 1e-7) -> Tensor:
    """An approximate orthogonalization (U V^T) of the matrices in the last two axes by `steps` Newton-Schulz iterations
    of the odd polynomial with coefficients params, Muon's quintic by default (docs/developer/tensor.md)."""
    if self.ndim < 2: raise ShapeError(f"newton_schulz: needs a matrix, got shape {self.shape}")
    tall = self.shape[-2] > self.shape[-1]
    x = self.transpose(-1, -2) if tall else self
    x = x / (x.square().sum((-2, -1), keepdim=True).sqrt() + eps)
    for _ in range(steps):
      gram = x @ x.transpose(-1, -2)
      powers = list(itertools.accumulate([gram] * (len(params) - 1), lambda a, g: a @ g))  # A, A A, A A A ...
      x = params[0] * x + sum((p * a for p, a in zip(params[2:], powers[1:])), params[1] * gram) @ x
    return x.transpose(-1, -2) if tall else x
