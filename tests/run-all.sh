#!/usr/bin/env bash
# Runs every test of the workspace: unit, service, end-to-end (real binaries, real PTYs,
# real sockets) and, as they land, browser and short chaos tests. Installs the Debian
# packages the tests need when they are missing. Dev profile only; no release build.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
# Chaos scenarios drop packets with nft rules inside their namespaces.
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
command -v git >/dev/null 2>&1 || need+=(git)
command -v tar >/dev/null 2>&1 || need+=(tar)
# `tuic attach` is checked inside a real tmux pane (detach gives the pane back as it was).
command -v tmux >/dev/null 2>&1 || need+=(tmux)
# install-service's units are checked with systemd's own verifier.
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
# The official MCP SDK clients and conformance suite come from PyPI and npm.
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v python3 >/dev/null 2>&1 || need+=(python3)
# The phone screenshots run vim, htop and mc (tests/tests/screen_browser.rs).
command -v vim >/dev/null 2>&1 || need+=(vim)
command -v htop >/dev/null 2>&1 || need+=(htop)
command -v mc >/dev/null 2>&1 || need+=(mc)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing test packages: ${need[*]}"
  sudo_cmd=()
  [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${need[@]}"
fi
command -v cargo-nextest >/dev/null 2>&1 || cargo install --locked cargo-nextest

cargo fmt --all --check
# Chromium's first start on a fresh machine builds its caches (fonts, the binary read from
# disk) and can take most of chromedriver's 60 s start limit; pay that once here instead of in
# whichever browser test happens to run first.
timeout 120 chromium --headless=new --no-sandbox --disable-gpu --dump-dom about:blank \
  >/dev/null 2>&1 || echo "note: chromium warm-up did not finish cleanly"
# End-to-end tests start the real binaries, which nextest does not build by itself.
cargo build --workspace --bins
cargo nextest run --workspace --no-fail-fast "$@"
