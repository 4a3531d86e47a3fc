#!/usr/bin/env bash
# Runs the chaos scenarios against real binaries in network namespaces (needs root).
#   chaos/run.sh                 short version, every scenario (what CI runs via nextest)
#   chaos/run.sh long            10,000 mail messages across every scenario
#   chaos/run.sh long partition  one scenario (node-kill hub-kill partition delay loss)
#   chaos/run.sh cleanup         removes namespaces (and their processes) left by a killed run
# CHAOS_PROFILE=release uses release binaries (default: the dev profile).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "chaos needs root (network namespaces); try: sudo $0 $*" >&2
  exit 2
fi
need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

profile=()
[ "${CHAOS_PROFILE:-dev}" = release ] && profile=(--release)
# The harness starts the tuic-hub and tuic-node binaries built beside it.
cargo build "${profile[@]}" --bins -p tuic-node -p tuic-hub -p tuic-chaos
dir=debug
[ "${CHAOS_PROFILE:-dev}" = release ] && dir=release
exec "target/$dir/chaos" "${@:-short}"
