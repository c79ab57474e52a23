#!/usr/bin/env bash
# A local kefu cluster on 127.0.0.1: Redis, N kefu nodes and Kamailio in front of them
# (loadtest/cluster.py; deploy/kamailio/kamailio.cfg).
#
#   scripts/cluster.sh start --nodes N [--media-mode echo|prompt|ai] [--sip-port P]
#   scripts/cluster.sh status
#   scripts/cluster.sh stop
#
# State, logs and cluster.json live in ${KEFU_CLUSTER_DIR:-$HOME/.local/state/kefu/cluster}.
# `start` prints one JSON line (Kamailio's SIP address, the nodes, PIDs) and returns while the
# cluster keeps running; `stop` ends what `start` started, by the recorded PIDs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
command="$1"
shift
dir="${KEFU_CLUSTER_DIR:-$HOME/.local/state/kefu/cluster}"
exec .venv/bin/python -m loadtest.cluster "$command" --dir "$dir" "$@"
