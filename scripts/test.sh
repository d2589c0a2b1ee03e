#!/usr/bin/env bash
# Install rlightning with every plugin in plugins/ and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev,docs]" $(for p in plugins/*/; do printf -- '-e %s ' "$p"; done)
python -m pytest tests plugins/*/tests -q --durations=15 "$@"
