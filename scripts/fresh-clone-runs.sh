#!/usr/bin/env bash
# Runs the README's test command N times, each in a fresh clone of HEAD (as CI does), one after
# the other, and appends one line per run to a results file:
#   date<TAB>commit<TAB>rc<TAB>seconds<TAB>pytest's closing line
# Usage: scripts/fresh-clone-runs.sh [N=10] [RESULTS=fresh-clone-runs.tsv] [COMMIT=HEAD]
# COMMIT pins every run to one commit, so development can go on while a series runs.
# Logs of each run stay in the temporary folder printed at the start; clones are removed.
set -uo pipefail
cd "$(dirname "$0")/.."
runs="${1:-10}"
results="$(realpath -m "${2:-fresh-clone-runs.tsv}")"
repo="$(pwd)"
pin="$(git rev-parse "${3:-HEAD}")"
work="$(mktemp -d /tmp/kefu-fresh.XXXXXX)"
echo "logs in $work"
for i in $(seq 1 "$runs"); do
  clone="$work/clone"
  rm -rf "$clone"
  git clone -q "$repo" "$clone"
  git -C "$clone" checkout -q -B main "$pin"
  commit="$(git -C "$clone" rev-parse --short HEAD)"
  start=$(date +%s)
  (cd "$clone" && CI=true bash .ci/run </dev/null >"$work/run-$i.log" 2>&1)
  rc=$?
  took=$(( $(date +%s) - start ))
  summary="$(grep -E '(passed|failed).* in [0-9.]+s' "$work/run-$i.log" | tail -1 | tr -d '=')"
  printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$commit" "$rc" "$took" "$summary" \
    | tee -a "$results"
  rm -rf "$clone"
done
