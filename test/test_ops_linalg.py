"""Linear algebra (mixin/linalg.py): qr, svd and newton_schulz against torch.linalg (up to the signs of singular
vectors and of R's rows, which no two libraries need to agree on), by reconstruction, orthogonality and gradients."""
import numpy as np
import pytest
import torch
from fusegrad import Tensor, dtypes
from test.helpers import helper_test_op
from fusegrad.nn.optim import newton_schulz as optim_newton_schulz

def _rand(shape, seed=0): return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def _orthonormal_columns(q: np.ndarray, atol: float = 2e-6) -> None:
  k = q.shape[-1]
  np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(k), q.shape[:-2] + (k, k)), atol=atol)

@pytest.mark.parametrize("shape", [(4, 3), (3, 3), (3, 5), (2, 5, 4), (1, 1)])
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr_against_torch(shape, mode):
  a = _rand(shape)
  q, r = Tensor(a).qr(mode)
  tq, tr = torch.linalg.qr(torch.tensor(a), mode=mode)
  qn, rn = q.numpy(), r.numpy()
  assert qn.shape == tuple(tq.shape) and rn.shape == tuple(tr.shape)
  np.testing.assert_allclose(qn @ rn, a, atol=2e-6)
  _orthonormal_columns(qn)
  np.testing.assert_equal(np.triu(rn), rn)
  # Householder with LAPACK's sign choice: the same R as torch, up to the sign of each row
  k = min(shape[-2:])
  signs = np.sign(np.diagonal(rn, axis1=-2, axis2=-1)) * np.sign(np.diagonal(tr.numpy(), axis1=-2, axis2=-1))
  np.testing.assert_allclose(rn[..., :k, :] * signs[..., :, None], tr.numpy()[..., :k, :], atol=2e-6)
  np.testing.assert_allclose(qn[..., :, :k] * signs[..., None, :], tq.numpy()[..., :, :k], atol=2e-6)

def test_qr_grad_against_torch():  # R**2 doesn't depend on the row signs
  a, w = _rand((4, 3)), _rand((3, 3), 1)
  x, tx = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  (x.qr("reduced")[1].square() * Tensor(w)).sum().backward()
  (torch.linalg.qr(tx)[1].square() * torch.tensor(w)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-4, rtol=1e-4)

def test_qr_rank_deficient_and_errors():
  a = np.array([[1.0, 2.0, 0.0], [2.0, 4.0, 0.0], [3.0, 6.0, 0.0]], dtype=np.float32)  # a zero column: no nan
  q, r = Tensor(a).qr()
  assert np.isfinite(q.numpy()).all() and np.isfinite(r.numpy()).all()
  np.testing.assert_allclose(q.numpy() @ r.numpy(), a, atol=3e-6)
  with pytest.raises(RuntimeError): Tensor.ones(3).qr()
  with pytest.raises(ValueError): Tensor.ones(3, 3).qr("r")
  assert Tensor([[1, 2], [3, 4]]).qr()[0].dtype == dtypes.float32

@pytest.mark.parametrize("shape,full", [((4, 3), True), ((4, 3), False), ((3, 5), True), ((2, 3, 2), False), ((3, 3), True)])
def test_svd_against_torch(shape, full):
  a = _rand(shape, 2)
  u, s, vh = Tensor(a).svd(full_matrices=full)
  tu, ts, tvh = torch.linalg.svd(torch.tensor(a), full_matrices=full)
  un, sn, vhn = u.numpy(), s.numpy(), vh.numpy()
  assert un.shape == tuple(tu.shape) and sn.shape == tuple(ts.shape) and vhn.shape == tuple(tvh.shape)
  np.testing.assert_allclose(sn, ts.numpy(), atol=2e-6, rtol=1e-5)
  k = min(shape[-2:])
  np.testing.assert_allclose((un[..., :, :k] * sn[..., None, :]) @ vhn[..., :k, :], a, atol=3e-6)
  _orthonormal_columns(un)
  _orthonormal_columns(np.swapaxes(vhn, -1, -2))
  # singular vectors are torch's up to a sign per pair (the singular values here are distinct)
  signs = np.sign(np.sum(un[..., :, :k] * tu.numpy()[..., :, :k], axis=-2))
  np.testing.assert_allclose(un[..., :, :k] * signs[..., None, :], tu.numpy()[..., :, :k], atol=2e-5)
  np.testing.assert_allclose(vhn[..., :k, :] * signs[..., :, None], tvh.numpy()[..., :k, :], atol=2e-5)

def test_svd_grad_nuclear_norm():  # d sum(S) / dA = U V^T, free of the sign choice
  a = _rand((4, 3), 3)
  x, tx = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  x.svd(full_matrices=False)[1].sum().backward()
  torch.linalg.svdvals(tx).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=2e-5)

def test_svd_rank_deficient():
  a = np.outer([1.0, 2.0, 3.0], [1.0, -1.0, 2.0]).astype(np.float32)  # rank 1
  u, s, vh = Tensor(a).svd()
  np.testing.assert_allclose(s.numpy(), torch.linalg.svdvals(torch.tensor(a)).numpy(), atol=3e-6)
  np.testing.assert_allclose((u.numpy() * s.numpy()) @ vh.numpy(), a, atol=3e-6)

def np_newton_schulz(g, steps=5, a=3.4445, b=-4.7750, c=2.0315, eps=1e-7):
  x = g.T if g.shape[0] > g.shape[1] else g
  x = x / (np.linalg.norm(x) + eps)
  for _ in range(steps):
    gram = x @ x.T
    x = a * x + (b * gram + c * gram @ gram) @ x
  return x.T if g.shape[0] > g.shape[1] else x

@pytest.mark.parametrize("shape", [(3, 5), (6, 4), (2, 3, 4)])
def test_newton_schulz(shape):
  g = _rand(shape, 4)
  got = Tensor(g).newton_schulz(5, (3.4445, -4.7750, 2.0315)).numpy()
  want = np.stack([np_newton_schulz(m.astype(np.float64)) for m in g.reshape(-1, *shape[-2:])]).reshape(got.shape)
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)
  if len(shape) == 2: np.testing.assert_allclose(optim_newton_schulz(Tensor(g)).numpy(), got, atol=1e-6)
  # as Muon uses it: the singular values end up near 1 (the quintic's fixed band), the singular vectors g's
  sv = np.linalg.svd(got, compute_uv=False)
  assert ((sv > 0.5) & (sv < 1.3)).all(), sv

def test_newton_schulz_any_odd_polynomial():  # tinygrad's: X = sum_i p_i (X X^T)^i X, here with 4 coefficients
  g, p = _rand((3, 5), 5), (2.0, -1.4, 0.2, 0.2)
  x = g.astype(np.float64) / np.linalg.norm(g)
  for _ in range(3): x = sum(c * np.linalg.matrix_power(x @ x.T, i) @ x for i, c in enumerate(p))
  np.testing.assert_allclose(Tensor(g).newton_schulz(3, p, eps=0.0).numpy(), x, atol=1e-5, rtol=1e-4)

def test_qr_default_is_complete_as_tinygrad():  # torch.linalg.qr's default is "reduced"
  q, r = Tensor(_rand((5, 3))).qr()
  assert q.shape == (5, 5) and r.shape == (5, 3)
  np.testing.assert_allclose(q.numpy() @ q.numpy().T, np.eye(5), atol=2e-6)

@pytest.mark.parametrize("a,b", [((1024, 1024), (1024,)), ((1024,), (1024, 1024)), ((1, 1024), (1024, 1024))])
def test_matvec_bigger_than_the_cache(a, b):
  # operands over half the L2 cache with one output axis: the matmul heuristic's cache blocking has no rows to block
  helper_test_op([a, b], lambda x, y: x @ y, atol=1e-4, rtol=1e-4, forward_only=True)

@pytest.mark.parametrize("a,b", [((390, 512), (512, 544)), ((768, 768), (768, 768)), ((1030, 1024), (1024, 528))])
def test_matmul_bigger_than_the_cache(a, b):
  # operands over half the L2 cache: b packed in panels, the register tile as tall as the registers allow (rows 390 and
  # 768: 6 x 2 vectors with AVX2's 16 registers), 768's rows blocked to the L2 (run again with CPU_ISA=avx2 in CI);
  # 1030 rows: neither 6 nor 8 divide them, the tiles and the L2 blocks are padded (PADTO)
  helper_test_op([a, b], lambda x, y: x @ y, atol=1e-3, rtol=1e-4, forward_only=True)
