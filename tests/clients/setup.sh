#!/usr/bin/env bash
# Installs the official MCP SDK clients the end-to-end tests drive, once, into a cache folder:
#   Python `mcp` (PyPI) in a venv, and the TypeScript `@modelcontextprotocol/sdk` (npm); the
#   official ACP SDK (PyPI `agent-client-protocol`) in the same venv for the ACP test agent.
# Prints two lines: PYTHON=<venv python> and TSDIR=<folder with node_modules>.
set -euo pipefail
cache=${TUIC_MCP_CLIENTS_CACHE:-$HOME/.cache/tuic-mcp-clients}
py_version=${TUIC_MCP_PY_VERSION:-2.3.0}
ts_version=${TUIC_MCP_TS_VERSION:-1.32.2}
mkdir -p "$cache"
# Tests run as parallel processes: the first use installs, the others wait for it here
# (two installs at once break each other's venv and node_modules).
exec 9>"$cache/.install.lock"
flock 9
if ! "$cache/venv/bin/python" -c "import mcp.client.client" 2>/dev/null; then
  python3 -m venv "$cache/venv" >&2
  "$cache/venv/bin/pip" install -q "mcp==$py_version" >&2
fi
# The official Prometheus text-format parser, for the /metrics tests.
if ! "$cache/venv/bin/python" -c "import prometheus_client.parser" 2>/dev/null; then
  "$cache/venv/bin/pip" install -q "prometheus_client==${TUIC_PROM_CLIENT_VERSION:-0.21.1}" >&2
fi
# Web Push's receiving half (RFC 8291 decryption, VAPID check) from PyPI, for the notify tests.
if ! "$cache/venv/bin/python" -c "import http_ece, cryptography" 2>/dev/null; then
  "$cache/venv/bin/pip" install -q "http_ece==${TUIC_HTTP_ECE_VERSION:-1.2.1}" >&2
fi
# The official ACP SDK (PyPI `agent-client-protocol`), for the ACP test agent (acp_test_agent.py).
if ! "$cache/venv/bin/python" -c "import acp" 2>/dev/null; then
  "$cache/venv/bin/pip" install -q "agent-client-protocol==${TUIC_ACP_PY_VERSION:-0.12.1}" >&2
fi
if [ ! -d "$cache/ts/node_modules/@modelcontextprotocol/sdk" ]; then
  mkdir -p "$cache/ts"
  (cd "$cache/ts" && npm init -y >/dev/null && npm install --no-audit --no-fund "@modelcontextprotocol/sdk@$ts_version" >&2)
fi
# The published ACP agents (npm), started without credentials by the ACP tests.
acp_dir="$cache/acp-agents"
if [ ! -x "$acp_dir/node_modules/.bin/codex-acp" ] || [ ! -x "$acp_dir/node_modules/.bin/claude-code-acp" ]; then
  mkdir -p "$acp_dir"
  (cd "$acp_dir" && npm init -y >/dev/null && npm install --no-audit --no-fund \
    "@zed-industries/codex-acp@${TUIC_CODEX_ACP_VERSION:-0.16.0}" \
    "@zed-industries/claude-code-acp@${TUIC_CLAUDE_CODE_ACP_VERSION:-0.16.2}" >&2)
fi
echo "PYTHON=$cache/venv/bin/python"
echo "TSDIR=$cache/ts"
echo "ACPDIR=$acp_dir"
