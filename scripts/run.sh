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

# Debian's python3 lacks venv/ensurepip until python3-venv is installed.
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' 2>/dev/null
then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "==> apt-get install python3 python3-venv" >&2
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3 python3-venv
fi

if [ ! -x "$REPO/.venv/bin/python" ]; then
    echo "==> creating $REPO/.venv" >&2
    python3 -m venv "$REPO/.venv"
fi
echo "==> installing delayq into $REPO/.venv" >&2
"$REPO/.venv/bin/python" -m pip install -q -e "$REPO"

exec "$REPO/.venv/bin/delayq-server" "$@"
