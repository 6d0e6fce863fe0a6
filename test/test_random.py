"""Random numbers: a counter-based Threefry generator, so a seed gives the same values on every device; the
distributions' statistics; the init helpers' bounds as torch.nn.init."""
import math
import pytest, torch
import numpy as np
from fusegrad import Tensor, dtypes, GlobalCounters
from fusegrad.uop.ops import Ops
from test.helpers import device_is

N = 2000 if device_is("PYTHON") else 20000  # samples for the statistical checks (the interpreter is slow)

def tol(sigma: float, n: int = N) -> float:
  """Five standard errors of a mean of n samples with standard deviation sigma: a correct generator fails ~never."""
  return 5 * sigma / math.sqrt(n)

def test_threefry_known_answers():
  # Random123's known-answer vectors for Threefry-2x32, 20 rounds: (counter, key) -> output, as (hi << 32 | lo)
  kat = [(0, 0, 0x99ba4efe_6b200159), (0xFFFFFFFF_FFFFFFFF, 0xFFFFFFFF_FFFFFFFF, 0xbb002be7_1cb996fc),
         (0x85a308d3_243f6a88, 0x03707344_13198a2e, 0x483df7a0_c4923a9c)]
  for dev in ["CPU", "PYTHON"]:
    ctr = Tensor([c for c, _, _ in kat], dtype=dtypes.uint64, device=dev)
    key = Tensor([k for _, k, _ in kat], dtype=dtypes.uint64, device=dev)
    out = Tensor(ctr.uop.alu(Ops.THREEFRY, key.uop))
    assert out.tolist() == [o for _, _, o in kat], dev

def test_seed_repeats():
  Tensor.manual_seed(1234)
  a, b = Tensor.rand(20).numpy(), Tensor.rand(20).numpy()
  Tensor.manual_seed(1234)
  a2, b2 = Tensor.rand(20).numpy(), Tensor.rand(20).numpy()
  np.testing.assert_equal(a, a2)
  np.testing.assert_equal(b, b2)
  assert not np.array_equal(a, b)  # the counter moves on between calls
  Tensor.manual_seed(1235)
  assert not np.array_equal(Tensor.rand(20).numpy(), a)

def test_same_values_on_every_device():
  fns = [lambda d: Tensor.rand(3, 5, device=d), lambda d: Tensor.randn(7, device=d), lambda d: Tensor.randint(6, low=-3, high=9, device=d),
         lambda d: Tensor.uniform(4, low=-2, high=3, device=d), lambda d: Tensor.normal(5, mean=1, std=3, device=d),
         lambda d: Tensor.kaiming_uniform(4, 3, device=d), lambda d: Tensor.rand(5, dtype=dtypes.float16, device=d)]
  results = {}
  for dev in ["CPU", "PYTHON"]:
    Tensor.manual_seed(7)
    results[dev] = [f(dev).numpy() for f in fns]
  for a, b in zip(results["CPU"], results["PYTHON"]):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)

def test_rand_is_lazy():
  GlobalCounters.reset()
  x = Tensor.rand(4, 4) * 2 + Tensor.randn(4, 4)
  assert GlobalCounters.kernel_count == 0
  x.realize()
  assert GlobalCounters.kernel_count >= 1

def test_rand_realized_once():
  x = Tensor.rand(10)
  np.testing.assert_equal(x.numpy(), x.numpy())  # the values of one tensor don't change when read twice
  y = x + 0
  np.testing.assert_equal(y.numpy(), x.numpy())

def test_rand_stats():
  Tensor.manual_seed(0)
  x = Tensor.rand(N).numpy()
  assert x.dtype == np.float32 and 0 <= x.min() and x.max() < 1
  assert abs(x.mean() - 0.5) < tol(1 / math.sqrt(12)) and abs(x.var() - 1 / 12) < tol(1 / math.sqrt(180))
  hist = np.histogram(x, 10, (0, 1))[0]
  assert hist.min() > N / 10 - 5 * math.sqrt(N * 0.09), hist  # spread over the whole interval

def test_rand_shapes_and_dtypes():
  assert Tensor.rand(2, 3).shape == (2, 3) and Tensor.rand((2, 3)).shape == (2, 3) and Tensor.rand().shape == ()
  assert Tensor.rand(0, 3).shape == (0, 3) and Tensor.rand(0).numpy().shape == (0,)
  for dt in [dtypes.float16, dtypes.float32, dtypes.float64]:
    x = Tensor.rand(200, dtype=dt)
    assert x.dtype == dt
    v = x.numpy()
    assert 0 <= v.min() and v.max() < 1, dt  # never rounds up to 1.0, even in half precision
  with pytest.raises((TypeError, ValueError)): Tensor.rand(3, dtype=dtypes.int32)

def test_randn_stats():
  Tensor.manual_seed(1)
  x = Tensor.randn(N).numpy()
  assert x.dtype == np.float32 and np.isfinite(x).all()
  assert abs(x.mean()) < tol(1) and abs(x.var() - 1) < tol(math.sqrt(2))
  assert abs((np.abs(x) < 1).mean() - 0.6827) < tol(0.47)  # 68% within one sigma
  assert Tensor.randn(3, dtype=dtypes.float16).dtype == dtypes.float16 and Tensor.randn(2, 3).shape == (2, 3)

def test_randint():
  Tensor.manual_seed(2)
  x = Tensor.randint(N, low=-3, high=5).numpy()
  assert x.dtype == np.int32 and x.min() == -3 and x.max() == 4
  counts = np.bincount(x + 3)
  assert len(counts) == 8 and counts.min() > N / 8 - 5 * math.sqrt(N / 8)
  assert Tensor.randint(2, 3).shape == (2, 3) and Tensor.randint((2, 3), high=3).shape == (2, 3)
  assert Tensor.randint(5, high=3, dtype=dtypes.int64).dtype == dtypes.int64
  big = Tensor.randint(100, low=0, high=2 ** 31 - 1).numpy()
  assert big.min() >= 0 and big.max() > 2 ** 30  # a wide range is covered, not only its low part
  with pytest.raises(ValueError): Tensor.randint(3, low=5, high=5)
  assert Tensor.randint(4, low=np.int64(2), high=np.int32(3)).tolist() == [2, 2, 2, 2]  # numpy ints are ints
  for kw in [dict(low=0.1, high=3), dict(low=0, high=3.5)]:  # floats: TypeError in torch and tinygrad
    with pytest.raises(TypeError): torch.randint(size=(3, 4), **kw)
    with pytest.raises(TypeError): Tensor.randint((3, 4), **kw)
  with pytest.raises(TypeError): Tensor.randint((3, 4), low=0, high=3, dtype=dtypes.float32)  # tinygrad (torch allows)

def test_uniform():
  Tensor.manual_seed(3)
  x = Tensor.uniform(N, low=-2, high=6).numpy()
  assert -2 <= x.min() and x.max() < 6 and abs(x.mean() - 2) < tol(8 / math.sqrt(12))
  assert Tensor.uniform(2, 3, low=0, high=1, dtype=dtypes.float16).dtype == dtypes.float16

def test_normal():
  Tensor.manual_seed(4)
  x = Tensor.normal(N, mean=3, std=0.5).numpy()
  assert abs(x.mean() - 3) < tol(0.5) and abs(x.var() - 0.25) < tol(0.25 * math.sqrt(2))
  assert Tensor.normal(2, 3).shape == (2, 3)

def _torch_bound(fn, shape, **kw):
  """torch's init of a tensor of shape, from a fixed seed (unseeded, 288 draws fell short of 98% of the bound about
  once in 300 runs)."""
  w = torch.empty(shape)
  fn(w, generator=torch.Generator().manual_seed(0), **kw)
  return w

@pytest.mark.parametrize("shape", [(32, 16), (8, 4, 3, 3)])
def test_kaiming_uniform(shape):
  Tensor.manual_seed(5)
  for a in [0.01, math.sqrt(5)]:
    x = Tensor.kaiming_uniform(*shape, a=a).numpy()
    fan_in = math.prod(shape[1:])
    bound = math.sqrt(3) * math.sqrt(2 / (1 + a * a)) / math.sqrt(fan_in)
    # torch draws from the same interval
    assert abs(_torch_bound(torch.nn.init.kaiming_uniform_, shape, a=a).abs().max().item() - bound) < bound * 0.02
    assert x.shape == shape and np.abs(x).max() <= bound and np.abs(x).max() > bound * 0.95
    assert abs(x.mean()) < tol(bound / math.sqrt(3), x.size)

def test_kaiming_normal():
  Tensor.manual_seed(6)
  shape = (N // 50, 50)
  x = Tensor.kaiming_normal(*shape, a=0.0).numpy()
  std = math.sqrt(2 / 50)
  assert abs(x.var() - std ** 2) < tol(std ** 2 * math.sqrt(2), x.size) and abs(x.mean()) < tol(std, x.size)
  assert abs(_torch_bound(torch.nn.init.kaiming_normal_, shape, a=0.0).std().item() - std) < std * 0.05

@pytest.mark.parametrize("shape", [(32, 16), (16, 32), (8, 4, 3, 3)])
def test_glorot_uniform(shape):
  Tensor.manual_seed(7)
  x = Tensor.glorot_uniform(*shape).numpy()
  rf = math.prod(shape[2:])
  bound = math.sqrt(6 / (shape[1] * rf + shape[0] * rf))
  assert abs(_torch_bound(torch.nn.init.xavier_uniform_, shape).abs().max().item() - bound) < bound * 0.02
  assert x.shape == shape and np.abs(x).max() <= bound and np.abs(x).max() > bound * 0.95

def test_random_requires_grad():
  x = Tensor.rand(3, requires_grad=True)
  (x * x).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy(), rtol=1e-6)
  w = Tensor.kaiming_uniform(2, 3, requires_grad=True)
  assert w.requires_grad

# *** randperm / multinomial ***
def test_randperm():
  Tensor.manual_seed(7)
  a = Tensor.randperm(50)
  assert a.dtype == dtypes.int32 and a.shape == (50,) and sorted(a.tolist()) == list(range(50))
  b = Tensor.randperm(50)
  assert a.tolist() != b.tolist()  # the counter moves on between calls
  Tensor.manual_seed(7)
  assert Tensor.randperm(50).tolist() == a.tolist()
  Tensor.manual_seed(8)
  assert Tensor.randperm(50).tolist() != a.tolist()
  assert Tensor.randperm(6, dtype=dtypes.int64).dtype == dtypes.int64 and Tensor.randperm(1).tolist() == [0]
  assert Tensor.randperm(0).shape == (0,)
  with pytest.raises(ValueError, match="randperm"): Tensor.randperm(-1)
  with pytest.raises(TypeError, match="randperm"): Tensor.randperm(3, low=2)

def test_randperm_uniform():
  # a uniform permutation is uncorrelated with the identity (Spearman's rho has standard error 1 / sqrt(n - 1)),
  # and each half of it holds about half of the small numbers
  Tensor.manual_seed(3)
  n = 400
  perm = Tensor.randperm(n).numpy().astype(np.float64)
  assert abs(np.corrcoef(perm, np.arange(n))[0, 1]) < 5 / math.sqrt(n - 1)
  assert abs((perm[: n // 2] < n // 2).mean() - 0.5) < tol(0.5, n // 2)

P = np.array([0.1, 0.2, 0.3, 0.4])

def test_multinomial_with_replacement():
  Tensor.manual_seed(0)
  s = Tensor(P * 3).multinomial(N, replacement=True)  # weights need not sum to 1
  assert s.shape == (N,) and s.dtype == dtypes.int32
  np.testing.assert_allclose(np.bincount(s.numpy(), minlength=4) / N, P, atol=tol(0.5))
  rows = Tensor([[0.0, 1.0, 0.0, 3.0], [5.0, 0.0, 0.0, 0.0]]).multinomial(N // 2, replacement=True).numpy()
  assert rows.shape == (2, N // 2) and set(rows[0]) <= {1, 3} and set(rows[1]) == {0}
  np.testing.assert_allclose((rows[0] == 3).mean(), 0.75, atol=tol(0.5, N // 2))

def test_multinomial_without_replacement():
  Tensor.manual_seed(1)
  s = Tensor(P).reshape(1, 4).expand(N // 2, 4).multinomial(2).numpy()
  assert s.shape == (N // 2, 2) and (s[:, 0] != s[:, 1]).all()
  # first draw ~ p; second draw j ~ sum over i != j of p_i * p_j / (1 - p_i)
  second = np.array([sum(P[i] * P[j] / (1 - P[i]) for i in range(4) if i != j) for j in range(4)])
  np.testing.assert_allclose(np.bincount(s[:, 0], minlength=4) / (N // 2), P, atol=tol(0.5, N // 2))
  np.testing.assert_allclose(np.bincount(s[:, 1], minlength=4) / (N // 2), second, atol=tol(0.5, N // 2))
  full = Tensor([[0.5, 0.0, 0.2, 0.3], [1.0, 1.0, 1.0, 1.0]]).multinomial(4).numpy()
  assert sorted(full[0]) == [0, 1, 2, 3] and full[0][-1] == 1 and sorted(full[1]) == [0, 1, 2, 3]  # zero weight last

def test_multinomial_seeded_and_errors():
  Tensor.manual_seed(5)
  a = Tensor(P).multinomial(20, replacement=True).tolist()
  Tensor.manual_seed(5)
  assert Tensor(P).multinomial(20, replacement=True).tolist() == a
  assert Tensor(P).multinomial().shape == (1,) and Tensor([[1.0, 2.0]]).multinomial().shape == (1, 1)
  with pytest.raises(ValueError, match=r"multinomial.*5.*4"): Tensor(P).multinomial(5)
  with pytest.raises(ValueError, match="multinomial"): Tensor(P).multinomial(0, replacement=True)
  with pytest.raises(ValueError, match=r"multinomial.*\(1, 2, 4\)"): Tensor.ones(1, 2, 4).multinomial()

# *** Kolmogorov-Smirnov over many seeds: each seed's sample against the exact distribution. Under the null each test
# fails with probability ALPHA, so the number of failures is Binomial(SEEDS, ALPHA); more than its 99.9% quantile
# means the generator (or the transform on top of it) is off. ***
SEEDS, ALPHA, KS_N = 40, 0.05, 1000 if device_is("PYTHON") else 2000  # the interpreter is slow

def _ks_failures(draw, cdf) -> tuple[int, int, list[float]]:
  from scipy import stats
  samples = []
  for seed in range(SEEDS):
    Tensor.manual_seed(seed)
    samples.append(draw())
  Tensor.realize(*samples)
  pvalues = [stats.kstest(s.numpy().astype(np.float64).ravel(), cdf).pvalue for s in samples]
  allowed = int(stats.binom.ppf(0.999, SEEDS, ALPHA))
  return sum(p < ALPHA for p in pvalues), allowed, pvalues

def _uniform_cdf(lo, hi):
  from scipy import stats
  return stats.uniform(loc=lo, scale=hi - lo).cdf

def _normal_cdf(mean, std):
  from scipy import stats
  return stats.norm(loc=mean, scale=std).cdf

KS_CASES = {
  "rand": (lambda: Tensor.rand(KS_N), lambda: _uniform_cdf(0, 1)),
  "rand_2d": (lambda: Tensor.rand(40, KS_N // 40), lambda: _uniform_cdf(0, 1)),
  "randn": (lambda: Tensor.randn(KS_N), lambda: _normal_cdf(0, 1)),
  "uniform": (lambda: Tensor.uniform(KS_N, low=-3.0, high=5.0), lambda: _uniform_cdf(-3.0, 5.0)),
  "normal": (lambda: Tensor.normal(KS_N, mean=2.0, std=0.5), lambda: _normal_cdf(2.0, 0.5)),
  "randn_float16": (lambda: Tensor.randn(KS_N, dtype=dtypes.float16), lambda: _normal_cdf(0, 1)),
  "kaiming_uniform": (lambda: Tensor.kaiming_uniform(KS_N // 50, 50, a=0.01),
                      lambda: _uniform_cdf(-math.sqrt(6 / (1 + 0.01 ** 2) / 50), math.sqrt(6 / (1 + 0.01 ** 2) / 50))),
  "kaiming_normal": (lambda: Tensor.kaiming_normal(KS_N // 50, 50, a=0.01), lambda: _normal_cdf(0, math.sqrt(2 / (1 + 0.01 ** 2) / 50))),
  "glorot_uniform": (lambda: Tensor.glorot_uniform(KS_N // 50, 50), lambda: _uniform_cdf(-math.sqrt(6 / (KS_N // 50 + 50)), math.sqrt(6 / (KS_N // 50 + 50)))),
}

@pytest.mark.parametrize("name", list(KS_CASES))
def test_kolmogorov_smirnov_many_seeds(name):
  draw, cdf = KS_CASES[name]
  failures, allowed, pvalues = _ks_failures(draw, cdf())
  assert failures <= allowed, f"{name}: {failures} of {SEEDS} seeds fail KS at alpha={ALPHA} (allowed {allowed}): {pvalues}"
  from scipy import stats
  assert stats.kstest(pvalues, "uniform").pvalue > 1e-3, f"{name}: the p-values aren't uniform: {sorted(pvalues)}"

def test_kolmogorov_smirnov_large_sample():  # one big draw sees biases a 2000-sample test can't
  from scipy import stats
  Tensor.manual_seed(1234)
  n = 20_000 if device_is("PYTHON") else 200_000
  u, z = Tensor.rand(n), Tensor.randn(n)
  assert stats.kstest(u.numpy().astype(np.float64), "uniform").pvalue > 1e-3
  assert stats.kstest(z.numpy().astype(np.float64), "norm").pvalue > 1e-3

def test_randint_over_a_wide_range_uses_every_bit_and_checks_the_dtype():
  # one float's 24 random bits made every value a multiple of 64 for high=2**30 (and none odd for 2**25 + 1)
  Tensor.manual_seed(0)
  r = Tensor.randint(20000, low=0, high=2 ** 30).numpy()
  assert 0 <= r.min() and r.max() < 2 ** 30 and 0.45 < (r % 2).mean() < 0.55 and (r % 64).max() > 0
  r = Tensor.randint(2, 3, low=-2 ** 40, high=2 ** 40, dtype=dtypes.int64).numpy()
  assert r.shape == (2, 3) and np.abs(r).max() < 2 ** 40
  for low, high, dt in [(0, 200, dtypes.int8), (-5, 5, dtypes.uint8)]:
    with pytest.raises(RuntimeError, match="exceeds"): Tensor.randint(5, low=low, high=high, dtype=dt)
