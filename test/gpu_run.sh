#!/usr/bin/env bash
# One device run: facts about the machine, then the CUDA tests and the op suites on DEV=CUDA (logs in $OUT).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 DEV=CUDA
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L; python3 --version
python3 -c "from fusegrad import Device; d = Device['CUDA']; print('opened', d.device, d.arch if hasattr(d, 'arch') else '', type(d.compiler).__name__)"
python3 -c "
from fusegrad import Tensor
import numpy as np
a = np.random.rand(64, 48).astype(np.float32); b = np.random.rand(48, 32).astype(np.float32)
print('matmul max err', np.abs((Tensor(a) @ Tensor(b)).numpy() - a @ b).max(), 'sum', Tensor(a).sum().item(), a.sum())"
timeout 150 python3 -m pytest -q -x test/test_cuda.py -n 4 -p no:cacheprovider 2>&1 | tee "$OUT/test_cuda.log" | tail -5
timeout 300 python3 -m pytest -q -n 12 -p no:cacheprovider test/test_ops.py test/test_ops_elementwise.py test/test_ops_nn.py test/test_schedule.py \
  test/test_dtype.py test/test_jit.py test/test_optim.py 2>&1 | tee "$OUT/ops.log" | tail -25
