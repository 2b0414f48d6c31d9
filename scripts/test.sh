#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run it all.
#
#   bash scripts/test.sh [pytest arguments]
#
# System packages come from apt (installed only when missing), Python packages go into
# .venv. Servers the tests need are started by the tests themselves on loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(python3 python3-venv python3-dev gcc redis-server redis-tools
              swift swift-proxy swift-account swift-container swift-object memcached)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$pkg")
done
# A Python built outside Debian (pyenv, say) already has venv: skip its Debian packages.
if python3 -c 'import venv, ensurepip' 2>/dev/null; then
    missing=("${missing[@]/python3-venv}")
    missing=("${missing[@]/python3-dev}")
    missing=("${missing[@]/python3}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ "${#missing[@]}" -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "==> apt-get install ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv"
    python3 -m venv .venv
fi
echo "==> installing delayq and its test dependencies"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'

echo "==> ruff"
.venv/bin/ruff check delayq tests benchmarks

echo "==> pytest"
exec .venv/bin/python -m pytest "$@"
