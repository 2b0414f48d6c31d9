#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run it all.
#
#   bash scripts/test.sh [pytest arguments]
#
# System packages come from apt (installed only when missing), Python packages go into
# .venv. Servers the tests need are started by the tests themselves on loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."

# chromium: the audit report tests render report.html in headless Chromium.
APT_PACKAGES=(python3 python3-venv python3-dev gcc redis-server redis-tools
              swift swift-proxy swift-account swift-container swift-object memcached
              faketime chromium)

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

# The audit tests run PySpark 4, which needs Java 17 or newer: the java of $JAVA_HOME when
# it is set (as PySpark does), else the one on PATH.
java_major() {
    local version
    version=$("${1:-${JAVA_HOME:+$JAVA_HOME/bin/}java}" -version 2>&1 \
              | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n 1) || true
    version=${version#1.}  # 1.8.0_402 is Java 8
    version=${version%%[!0-9]*}
    echo "${version:-0}"
}
need_java=false
[ "$(java_major)" -ge 17 ] || need_java=true

if [ "${#missing[@]}" -gt 0 ] || $need_java; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    if $need_java; then
        # Debian 12 has openjdk-17; elsewhere the default JRE may be new enough.
        if apt-cache show openjdk-17-jre-headless >/dev/null 2>&1; then
            missing+=(openjdk-17-jre-headless)
        else
            missing+=(default-jre-headless)
        fi
        # Slim images drop /usr/share/man, where the JRE's postinst links java.1.gz.
        $SUDO mkdir -p /usr/share/man/man1
    fi
    echo "==> apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
if $need_java && [ "$(java_major)" -lt 17 ]; then
    # An older Java still comes first ($JAVA_HOME, or the java alternative): point
    # JAVA_HOME at the JVM apt installed (Spark 4 is tested on 17 and 21), for PySpark.
    for home in /usr/lib/jvm/java-17-openjdk-*/ /usr/lib/jvm/default-java/ \
                $(ls -d /usr/lib/jvm/*/ 2>/dev/null | sort -V); do
        if [ "$(java_major "${home}bin/java")" -ge 17 ]; then
            export JAVA_HOME="${home%/}"
            break
        fi
    done
    [ "$(java_major)" -ge 17 ] \
        || echo "warning: no Java 17 or newer found; the PySpark audit tests will fail" >&2
fi

if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv"
    python3 -m venv .venv
fi
echo "==> installing delayq and its test dependencies"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'

echo "==> python-zaqarclient's functional suite"
# Fetched from PyPI once into .cache/ (git-ignored), here rather than in a test worker:
# tests/test_zaqarclient_functional.py runs it against delayq-server.
.venv/bin/python -m tests.zaqarclient_suite

echo "==> ruff"
.venv/bin/ruff check delayq tests benchmarks

echo "==> mypy"
.venv/bin/mypy

echo "==> pytest"
# Two pytest workers (pytest-xdist), each test file on one of them: much of the suite
# waits on Swift, Redis, Spark and real clocks rather than computing. A worker starts its
# own servers. DELAYQ_TEST_WORKERS=0 runs everything in one process.
exec .venv/bin/python -m pytest -n "${DELAYQ_TEST_WORKERS:-2}" --dist loadfile "$@"
