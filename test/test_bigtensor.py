"""Tensors of 2**31 + 16 elements: index math in 64 bits where an index can pass 2**31 (issue 8, section 3).

Each test builds one uint8 tensor of about 2 GiB as t[k] = k % 251 (with a 255 at BIG), so the expected values come
from that formula; they run on the CPU only (the PYTHON interpreter would take hours) and are marked slow.
"""
import numpy as np
import pytest
from fusegrad import Tensor, dtypes, Device

N = 2 ** 31 + 16
BIG = 2 ** 31 + 5  # where the largest value sits: past int32's reach
pytestmark = [pytest.mark.slow, pytest.mark.skipif(Device.DEFAULT != "CPU", reason="2 GiB tensors: CPU only")]

def expected(k: int) -> int: return 255 if k == BIG else k % 251

@pytest.fixture(scope="module")
def big() -> Tensor:
  k = Tensor.arange(N, dtype=dtypes.int64)
  return (k == BIG).where(255, k % 251).cast(dtypes.uint8).realize()

def test_arange_int64_last():
  assert Tensor.arange(N, dtype=dtypes.int64)[-1].item() == N - 1

def test_arange_values_past_2_31():
  a = Tensor.arange(N, dtype=dtypes.int64)
  np.testing.assert_equal(a[2 ** 31 - 2: 2 ** 31 + 2].numpy(), np.arange(2 ** 31 - 2, 2 ** 31 + 2))

def test_index_with_tensor(big):
  np.testing.assert_equal(big[Tensor([5])].numpy(), [5])
  for k in (BIG, N - 1, 2 ** 31 + 1):
    np.testing.assert_equal(big[Tensor([k], dtype=dtypes.int64)].numpy(), [expected(k)])
  np.testing.assert_equal(big[Tensor([-1, -N], dtype=dtypes.int64)].numpy(), [expected(N - 1), 0])

def test_gather(big):
  idx = [3, 2 ** 31 - 1, BIG, N - 1]
  np.testing.assert_equal(big.gather(0, Tensor(idx, dtype=dtypes.int64)).numpy(), [expected(k) for k in idx])

def test_argmax(big):
  assert big.argmax().item() == BIG
  assert big.argmin().item() == 0

def test_sum_and_max(big):
  q, r = divmod(N, 251)
  want = q * sum(range(251)) + sum(range(r)) - BIG % 251 + 255
  assert big.sum(dtype=dtypes.int64).item() == want
  assert big.max().item() == 255

def test_slicing_and_int_index(big):
  np.testing.assert_equal(big[2 ** 31:2 ** 31 + 8].numpy(), [expected(k) for k in range(2 ** 31, 2 ** 31 + 8)])
  assert big[-3].item() == expected(N - 3)
  np.testing.assert_equal(big[N - 7::3].numpy(), [expected(k) for k in range(N - 7, N, 3)])
  np.testing.assert_equal(big[::-1][:3].numpy(), [expected(N - 1 - k) for k in range(3)])

def test_copy(big):
  # a contiguous copy of a shifted view (a kernel over all 2**31 elements), read back in parts
  out = big[16:].contiguous().realize()
  for k in (0, 2 ** 31 - 20, BIG - 16, N - 24):
    np.testing.assert_equal(out[k:k + 8].numpy(), [expected(j + 16) for j in range(k, k + 8)])
  del out
  assert big.numpy()[-1] == expected(N - 1)  # copyout of the whole buffer

def test_cumsum_long_axis():
  # axes past 2**16 run in blocks of 16 (work 16n, not 256n: 2**31 elements take about 20 s of kernel time on 2 cores,
  # but their uint32 result and its intermediate need 16 GiB, too much for CI)
  a = np.random.default_rng(0).integers(0, 3, 2 ** 25 + 3, dtype=np.uint8)
  got = Tensor(a).cumsum().numpy()
  np.testing.assert_equal(got, np.cumsum(a, dtype=np.uint64))
  f = np.random.default_rng(1).standard_normal(2 ** 17 + 5).astype(np.float32)
  np.testing.assert_allclose(Tensor(f).cumsum().numpy(), np.cumsum(f.astype(np.float64)), atol=1e-2, rtol=1e-4)
  np.testing.assert_equal(Tensor(a.astype(np.int32)).cummax()[0].numpy(), np.maximum.accumulate(a.astype(np.int32)))
