#!/usr/bin/env bash
# Install delayq into .venv (on a fresh Debian machine too) and serve the API.
#
#   bash scripts/run.sh [delayq-server arguments]
#
# With no arguments it serves http://127.0.0.1:8888 from ./delayq.sqlite in the current
# working directory. Arguments go to delayq-server, e.g. --port 9000 --workers 4
# --config-file /etc/delayq/delayq.conf (the command line wins over the file).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"

install_venv_support() {
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "==> apt-get install python3 python3-venv" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3 python3-venv
}

if [ ! -x "$REPO/.venv/bin/pip" ]; then
    echo "==> creating $REPO/.venv" >&2
    rm -rf "$REPO/.venv"
    # Debian's python3 cannot make a venv (no ensurepip) until python3-venv is installed;
    # a failed attempt leaves a venv without pip behind, hence the rm.
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -m venv "$REPO/.venv" 2>/dev/null
    then
        rm -rf "$REPO/.venv"
        install_venv_support
        python3 -m venv "$REPO/.venv"
    fi
fi
echo "==> installing delayq into $REPO/.venv" >&2
"$REPO/.venv/bin/python" -m pip install -q -e "$REPO"

exec "$REPO/.venv/bin/delayq-server" "$@"
