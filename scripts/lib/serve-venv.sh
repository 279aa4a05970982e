#!/usr/bin/env bash
# A Python with the `openai` client for the server's end-to-end tests (tools/serve/e2e.py), made
# once and reused: ~/.cache/tally/serve-venv (TALLY_SERVE_VENV overrides). Prints the
# interpreter's path. Cheap when it exists: one import check.
set -euo pipefail
venv="${TALLY_SERVE_VENV:-$HOME/.cache/tally/serve-venv}"
if "$venv/bin/python" -c "import openai" >/dev/null 2>&1; then
    echo "$venv/bin/python"
    exit 0
fi
command -v python3 >/dev/null 2>&1 || { echo "serve-venv: python3 not found" >&2; exit 1; }
command -v curl >/dev/null 2>&1 || need_curl=1
if ! python3 -c "import venv, ensurepip" >/dev/null 2>&1 || [ "${need_curl:-0}" = 1 ]; then
    sudo=""
    [ "$(id -u)" != 0 ] && sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv curl >/dev/null
fi
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
python3 -m venv "$venv" >&2
"$venv/bin/python" -m pip install -q --disable-pip-version-check "openai>=1.40,<4" >&2
"$venv/bin/python" -c "import openai" >&2
echo "$venv/bin/python"
