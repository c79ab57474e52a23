#!/bin/sh
# Kamailio's dispatcher set 1 = the kefu nodes, built from the StatefulSet's stable DNS
# names kefu-0.kefu-headless.<namespace>.svc.<cluster domain>, kefu-1..., resolved to
# addresses (with hostNetwork: the nodes' IPs).
#
#   dispatcher-sync.sh init   write the list once (init container), waiting up to
#                             INIT_WAIT_S for at least one node to have a name
#   dispatcher-sync.sh sync   rewrite it every SYNC_INTERVAL_S when a node appears, goes
#                             away or moves to another node, and tell Kamailio to reload
#                             (kamcmd dispatcher.reload over the ctl socket)
#
# Whether a listed node gets calls is Kamailio's decision (OPTIONS probes, 2xx only): a
# node that is loading or draining stays listed, answers 503, and is skipped.
# Addresses, not names, go into the list: Kamailio resolves names only when it loads the
# list, and the ctl reload after a change is what keeps it current.
set -u

LIST=${DS_LIST_FILE:-/run/kamailio/dispatcher.list}
CTL=${CTL_SOCKET:-unix:/run/kamailio/kamailio_ctl}
NS=${POD_NAMESPACE:-kefu}
DOMAIN=${CLUSTER_DOMAIN:-cluster.local}
SERVICE=${KEFU_HEADLESS_SERVICE:-kefu-headless}
STS=${KEFU_STATEFULSET:-kefu}
MAX=${KEFU_MAX_NODES:-16}
PORT=${KEFU_SIP_PORT:-5060}
INTERVAL=${SYNC_INTERVAL_S:-10}
INIT_WAIT_S=${INIT_WAIT_S:-120}

log() { echo "dispatcher-sync: $*" >&2; }

# One line per kefu node that has an address: "1 sip:IP:PORT 0 0 duid=kefu-N". Flags 0
# (active until a probe says otherwise), not 9 (inactive + probing): a reload resets every
# node to these flags, and with 9 each reload would leave Kamailio without any node for up
# to a probe interval. With 0 a draining or dead node looks active for at most that long,
# and the INVITEs it gets then fail over (503, or no answer within FR_TIMER).
# Ordinals 0..MAX-1 are tried (a StatefulSet's pods are numbered from 0); the trailing dot
# makes each name absolute, so a missing one costs one lookup, not one per search domain.
build() {
  i=0
  while [ "$i" -lt "$MAX" ]; do
    ip=$(getent ahostsv4 "$STS-$i.$SERVICE.$NS.svc.$DOMAIN." 2>/dev/null | awk 'NR == 1 { print $1 }')
    if [ -n "$ip" ]; then
      printf '1 sip:%s:%s 0 0 duid=%s-%s\n' "$ip" "$PORT" "$STS" "$i"
    fi
    i=$((i + 1))
  done
}

case "${1:-}" in
  init)
    waited=0
    while :; do
      build > "$LIST.new"
      if [ -s "$LIST.new" ] || [ "$waited" -ge "$INIT_WAIT_S" ]; then
        break
      fi
      sleep 2
      waited=$((waited + 2))
    done
    mv "$LIST.new" "$LIST"
    if [ -s "$LIST" ]; then
      log "$(wc -l < "$LIST") kefu node(s):"
      cat "$LIST" >&2
    else
      log "no kefu node has a name yet; Kamailio starts with an empty set (503 to new calls) and the sync container adds the nodes as they come"
    fi
    ;;
  sync)
    pending=0
    while :; do
      sleep "$INTERVAL"
      build > "$LIST.new"
      if ! cmp -s "$LIST.new" "$LIST"; then
        mv "$LIST.new" "$LIST"
        log "kefu nodes changed:"
        cat "$LIST" >&2
        pending=1
      fi
      if [ "$pending" = 1 ]; then
        if kamcmd -s "$CTL" dispatcher.reload >/dev/null 2>&1; then
          log "Kamailio reloaded the list"
          pending=0
        else
          log "kamcmd dispatcher.reload failed (Kamailio not up yet?); trying again in ${INTERVAL}s"
        fi
      fi
    done
    ;;
  *)
    echo "usage: $0 init|sync" >&2
    exit 2
    ;;
esac
