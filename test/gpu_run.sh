#!/usr/bin/env bash
# One device run (see README): machine facts, the CUDA tests, the op suites on DEV=CUDA, and the MNIST example with
# its defaults on the GPU, which must reach 98% (logs in $OUT).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 DEV=CUDA
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L; python3 --version
timeout 150 python3 -m pytest -q test/test_cuda.py -n 8 -p no:cacheprovider 2>&1 | tee "$OUT/test_cuda.log" | tail -4
if [ "${1:-}" != "mnist" ]; then
  timeout 300 python3 -m pytest -q -n 12 -p no:cacheprovider test/test_ops.py test/test_ops_elementwise.py test/test_ops_nn.py \
    test/test_schedule.py test/test_dtype.py test/test_jit.py test/test_optim.py test/test_nn.py 2>&1 | tee "$OUT/ops.log" | tail -4
fi
TARGET_EVAL_ACC_PCT=98 /usr/bin/time -f "mnist wall %e s" timeout 400 python3 examples/beautiful_mnist.py 2>&1 | tr '\r' '\n' | tail -3 | tee "$OUT/mnist.log"
