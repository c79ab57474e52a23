#!/usr/bin/env bash
# Sets up kefu in .venv and runs it on its embedded defaults (extra arguments go to `kefu serve`).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/kefu serve "$@"
