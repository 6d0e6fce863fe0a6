#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: check that the CUDA device opens, run the CUDA backend's tests (test/test_cuda.py,
# whose GPU tests only run there), then the op test suite with DEV=CUDA, and print a summary.
#   bash test/cuda_gpu_check.sh [more test files]      (PYTHON=python3, TIMEOUT=300 seconds per file, LOG_DIR=...)
# Logs (one per file) go to $LOG_DIR (default: $OUT if set, else a temp folder); the exit status is 0 only if all pass.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG_DIR=${LOG_DIR:-${OUT:-$(mktemp -d)}}
mkdir -p "$LOG_DIR"
export PYTHONHASHSEED=0 PYTHONUNBUFFERED=1
export CACHEDB="$LOG_DIR/cache.db"  # a fresh kernel cache: every kernel is really compiled
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader

# the device must open (DEBUG=1 says why a device is skipped)
if ! "$PY" - <<'EOF'
from fusegrad import Device
ok, why = Device.get_available("CUDA")
if not ok: raise SystemExit(f"CUDA does not open: {why}")
dev = Device["CUDA"]
print(f"CUDA opens: arch {dev.arch}, compiler {type(dev.compiler).__name__} ({dev.compiler.cachekey}), DEFAULT={Device.DEFAULT}")
EOF
then exit 1; fi

files=(test/test_cuda.py test/test_ops.py "$@")
status=0
summary=()
for f in "${files[@]}"; do
  log="$LOG_DIR/$(basename "$f" .py).log"
  DEV=CUDA timeout "${TIMEOUT:-300}" "$PY" -m pytest -q -rfEs "$f" >"$log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && status=1
  last=$(grep -E "passed|failed|error|no tests ran" "$log" | tail -1)
  [ $rc -eq 124 ] && last="TIMED OUT after ${TIMEOUT:-300}s ($last)"
  summary+=("$f: ${last:-rc=$rc, see $log}")
  grep -E "^(FAILED|ERROR) " "$log" | head -40  # the failures, one line each
done

echo "=== CUDA summary (logs in $LOG_DIR) ==="
printf '%s\n' "${summary[@]}"
exit $status
