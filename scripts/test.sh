#!/usr/bin/env bash
# Sets up everything the tests need (Python packages in .venv, Debian peers), lints, type-checks,
# then runs the suite inside a private network namespace: SIP torture messages name hosts
# elsewhere, SIPp/baresip must only ever reach loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --test
.venv/bin/ruff check kefu tests loadtest
.venv/bin/ruff format --check kefu tests loadtest
.venv/bin/mypy
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
exec $sudo unshare -n sh -c 'ip link set lo up && KEFU_NETNS=1 exec .venv/bin/python -m pytest "$@"' \
  kefu-tests -p no:cacheprovider "$@"
