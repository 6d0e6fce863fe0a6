#!/usr/bin/env bash
# The whole test suite: every test on the CPU backend, and the backend-independent op tests on every other backend
# that works here (the PYTHON interpreter always does).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONHASHSEED=0
python -m pytest -n 2 -q test
DEV=PYTHON python -m pytest -n 2 -q test/test_ops.py
