#!/usr/bin/env bash
# Install rlightning with every plugin in plugins/ and run the whole test suite.
# The tests run in parallel, one pytest-xdist worker per logical CPU (at most 4), a test file per worker at a
# time (its module fixtures, e.g. a Ray cluster, are built once); pass `-n 0` to run them in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev,docs]" $(for p in plugins/*/; do printf -- '-e %s ' "$p"; done)
python -m pytest tests plugins/*/tests -q -n logical --maxprocesses=4 --dist loadfile --durations=15 "$@"
