#!/usr/bin/env bash
# The whole test suite: lint (ruff), type check (mypy) and the docs build first, then every test on the CPU backend
# (and its op tests again for AVX2 on an AVX-512 host), then the backend-independent op tests on the PYTHON
# interpreter (the reference; SPEC=1 checks the kernel IR after every lowering pass there) and on OpenCL (PoCL) when
# an OpenCL device works here, and on WEBGPU (wgpu on Mesa's lavapipe) when a WebGPU adapter does.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONHASHSEED=0
OPS="test/test_ops.py test/test_ops_elementwise.py test/test_ops_movement.py test/test_ops_reduce.py test/test_ops_nn.py
     test/test_indexing.py test/test_creation.py test/test_tensor.py test/test_dtype.py test/test_schedule.py"
WEBGPU_OPS="test/test_ops.py test/test_ops_elementwise.py test/test_ops_movement.py test/test_ops_reduce.py
            test/test_ops_nn.py test/test_nn.py test/test_optim.py"
python -m ruff check fusegrad examples bench
python -m mypy fusegrad
# the documentation site: its examples run, its links resolve (strict); test/test_browser.py then opens it in chromium
python -m mkdocs build --strict -q
python -m pytest -n 2 -q test
# on an AVX-512 host, the CPU op tests again with AVX2 code (CPU_ISA): tiles sized for 16 registers instead of 32
if python -c "import sys; from fusegrad.runtime.ops_cpu import host_isas; sys.exit('avx512' not in host_isas())"; then
  CPU_ISA=avx2 python -m pytest -n 2 -q test/test_ops.py test/test_ops_nn.py test/test_compile.py
  CPU_ISA=avx2 python -m pytest -q test/test_ops_linalg.py -k "bigger_than_the_cache"
fi
DEV=PYTHON SPEC=1 python -m pytest -n 2 -q $OPS test/test_random.py test/test_nn.py test/test_optim.py
if python -c "from fusegrad import Device; Device['CL']" 2>/dev/null; then
  DEV=CL python -m pytest -n 2 -q $OPS test/test_cl.py
else
  echo "no OpenCL device here: skipping the DEV=CL run"
fi
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
if python -c "from fusegrad import Device; Device['WEBGPU']" 2>/dev/null; then
  DEV=WEBGPU python -m pytest -n 2 -q $WEBGPU_OPS
else
  echo "no WebGPU adapter here: skipping the DEV=WEBGPU run"
fi
