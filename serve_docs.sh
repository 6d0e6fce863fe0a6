#!/usr/bin/env bash
# Serve the documentation site at http://127.0.0.1:8000 (rebuilt on change; code blocks run at build time).
# Needs the docs extra: pip install -e ".[docs]"
set -euo pipefail
cd "$(dirname "$0")"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec python -m mkdocs serve -a "${DOCS_ADDR:-127.0.0.1:8000}" "$@"
