"""A real OpenStack Swift on loopback for the tests: one proxy, one account, one container
and one object server, one replica, tempauth, memcached.

It starts on first use (``SWIFT.auth()``, ``SWIFT.proxy_url``), on free loopback ports,
with every file in a temporary directory (on the RAM disk /dev/shm when it can hold
Swift's xattrs, see ``SwiftCluster``), and stops when the test session ends
(``SWIFT.stop_all()``, called from conftest and registered with atexit). Nothing here
depends on /etc/swift or touches a Swift the machine may already run. Start-up takes
about two seconds.

How it is started
-----------------
The servers are the Debian packages' (``swift``, ``swift-proxy``, ``swift-account``,
``swift-container``, ``swift-object``, plus ``memcached``), run by the system Python
(/usr/bin/python3, not the virtualenv), each one process (``workers = 0``) running as the
current user (root here), logging to stderr (``--verbose``), which goes to
``<tmp>/<server>.log``.

Swift 2.30 (Debian 12) reads swift.conf from the hard-coded /etc/swift/swift.conf: there
is no SWIFT_CONF_FILE environment variable, and ``swift_dir`` in a server's conf only
locates the rings. So each server is started by a small launcher (``LAUNCHER``) that calls
``swift.common.utils.set_swift_dir(<tmp>)`` and reloads the storage policies and the
constraints from ``<tmp>/swift.conf`` (with a random hash path prefix and suffix) before
it runs the packaged ``/usr/bin/swift-*-server`` script. The launcher also replaces
Swift's syslog handler by a null one: without /dev/log Swift would otherwise send every
log line over UDP to localhost:514. The rings (part power 8, 1 replica, 1 hour min part
hours, one device ``sdb1`` of ``<tmp>/devices``) are built with ``RingBuilder`` in one
system-Python process, which does what ``swift-ring-builder create 8 1 1 / add /
rebalance`` do, in a tenth of the time.

What the driver may rely on (checked on Swift 2.30.1, Debian 12; tests/test_swift_server.py
pins the main points)
----------------------------------------------------------------------------------------
* ``PUT`` of an object with ``If-None-Match: *`` answers 412 Precondition Failed when the
  object exists, and 201 when it does not, has been deleted, or has expired
  (``X-Delete-At`` passed). Any other If-None-Match value on a PUT is a 400.
  BUT IT IS NOT ATOMIC: the object server checks, then writes, with no lock between
  (swift/obj/server.py). 16 clients racing one exclusive PUT of the same name got two to
  ten 201s in 28 rounds out of 30, even here on one object server with one replica. The
  last write (highest X-Timestamp, set by the proxy, which ignores a client's
  X-Timestamp) is what stays. Reading the object back after a 201 and comparing a nonce
  in it picked exactly one winner in every round tried, but a racer whose check passed
  may still land later: If-None-Match alone is no exclusive claim.
* A ``GET``, ``HEAD`` or ``POST`` of an object that races a ``POST`` of the same object
  may answer 404 although the object exists: the object server lists the object's
  directory, and the other POST replaces the .meta file before it is opened
  (swift/obj/diskfile.py, ENOENT becomes DiskFileNotExist). Two threads POSTing one
  object while two others read it saw 8 GET and 12 HEAD 404s in 1064 reads each, and
  racing POSTs answer 404 or 409 now and then. A 404 is only proof of absence when asking
  again agrees.
* ``X-Delete-After`` / ``X-Delete-At``: once the time has passed, ``GET`` and ``HEAD`` of
  the object answer 404 with no object-expirer running (the object server compares
  X-Delete-At with its clock). The container listing still lists the object, and the
  container's object count and bytes still count it, until an object-expirer deletes it,
  which never happens here: a listing is no proof that an object is alive. X-Delete-After
  becomes X-Delete-At = int(now + after), whole seconds: ``X-Delete-After: 1`` vanished
  0.05 s after the PUT in one try; the object is gone once the clock reaches X-Delete-At.
  A ``POST`` with ``X-Delete-After`` moves X-Delete-At (the body stays); a ``POST`` of an
  expired object answers 404, as for one that never was.
* Server-side copy works both ways: ``PUT`` with ``X-Copy-From: /container/object`` and
  ``COPY`` with ``Destination: /container/object`` (``Connection.copy_object``). The copy
  keeps the source's user metadata and its X-Delete-At. (The ``copy`` middleware is in the
  pipeline; this Swift would insert it anyway.)
* ``POST`` of an object replaces all its user metadata, and drops its X-Delete-At unless
  the POST sends one again.
* ``HEAD`` and ``GET`` of an object return ``X-Timestamp`` with five decimals (10 µs), e.g.
  ``1795318937.91584``; ``Last-Modified`` has whole seconds; a listing's
  ``last_modified`` has microseconds (``2026-11-22T03:42:19.139380``). The PUT response
  has no X-Timestamp (only ETag and Last-Modified).
* Container listings take ``prefix``, ``marker``, ``end_marker`` (exclusive), ``limit``
  (at most 10000), ``reverse=true``, ``delimiter`` and ``format=json`` (a JSON list of
  ``{"name", "hash", "bytes", "content_type", "last_modified"}``; swiftclient's
  ``get_container`` asks for JSON), in byte order of the names.
* Bulk delete works and the ``bulk`` middleware is in the pipeline:
  ``POST /v1/AUTH_test?bulk-delete`` with ``Content-Type: text/plain``, ``Accept:
  application/json`` and one URL-quoted ``/container/object`` a line (at most 10000)
  answers 200 with ``{"Number Deleted": 5, "Number Not Found": 1, "Errors": [],
  "Response Status": "200 OK", "Response Body": ""}``: a missing object is "not found",
  not an error; check "Response Status" and "Errors", not the HTTP status. With
  swiftclient: ``conn.post_account(headers=..., query_string="bulk-delete", data=...)``.
"""

from __future__ import annotations

import atexit
import contextlib
import getpass
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.server import free_port

SYSTEM_PYTHON = "/usr/bin/python3"
SWIFT_BIN = Path("/usr/bin")
RAM_DISK = Path("/dev/shm")
ROOT_PREFIX = "delayq-swift-"
MEMCACHED = shutil.which("memcached") or "/usr/sbin/memcached"
START_TIMEOUT = 30.0
SERVERS = ("account", "container", "object")
DEVICE = "sdb1"

#: Runs one packaged Swift server script with swift.conf read from our directory.
#: argv: swift_dir, server script, conf file.
LAUNCHER = """
import logging, runpy, sys
swift_dir, script, conf = sys.argv[1:4]
from swift.common import constraints, storage_policy, utils
utils.set_swift_dir(swift_dir)
storage_policy.reload_storage_policies()
constraints.reload_constraints()
class NoSyslog(logging.NullHandler):
    def __init__(self, *args, **kwargs):
        super().__init__()
utils.ThreadSafeSysLogHandler = NoSyslog
sys.argv = [script, conf, "--verbose"]
runpy.run_path(script, run_name="__main__")
"""

#: Builds the account, container and object rings. argv: swift_dir, device, name=port...
RING_BUILDER = """
import os, sys
from swift.common.ring import RingBuilder
swift_dir, device = sys.argv[1:3]
for arg in sys.argv[3:]:
    name, port = arg.split("=")
    builder = RingBuilder(8, 1, 1)
    builder.add_dev({"region": 1, "zone": 1, "ip": "127.0.0.1", "port": int(port),
                     "device": device, "weight": 1.0})
    builder.rebalance()
    builder.save(os.path.join(swift_dir, name + ".builder"))
    builder.get_ring().save(os.path.join(swift_dir, name + ".ring.gz"))
"""

#: Swift's timeouts suit dedicated servers: on a busy two-core test machine a server that
#: takes over half a second to accept a connection makes the proxy answer 503 (and then
#: shun that server, our only one, for a minute after ten such errors), and an object
#: server that takes over a second to update the container listing answers before the
#: object is listed. Patient settings keep load on the machine from looking like a
#: Swift outage or a listing lag the tests did not ask for.
PATIENT_BACKEND = {"conn_timeout": 5, "node_timeout": 30, "container_update_timeout": 30}
PATIENT_PROXY = {"conn_timeout": 5, "node_timeout": 30, "error_suppression_limit": 1000}

PIPELINE = (
    # listing_formats, copy, dlo and versioned_writes are required by the proxy, which
    # would insert them itself (and log that it did).
    "catch_errors gatekeeper healthcheck proxy-logging cache listing_formats bulk "
    "tempauth copy dlo versioned_writes proxy-logging proxy-server")

NOT_INSTALLED = (
    "OpenStack Swift is not installed ({missing} is missing); run the README test command "
    "(scripts/test.sh), which installs the swift, swift-proxy, swift-account, "
    "swift-container, swift-object and memcached packages.")


@dataclass(frozen=True)
class SwiftAuth:
    """Tempauth (v1) credentials of the test account ``AUTH_test``."""

    auth_url: str
    user: str = "test:tester"
    key: str = "testing"


@dataclass(frozen=True)
class SwiftAuth2(SwiftAuth):
    """The second account, ``AUTH_test2``."""

    user: str = "test2:tester2"
    key: str = "testing2"


def ini(sections: dict[str, dict[str, object]]) -> str:
    out = []
    for name, options in sections.items():
        out.append(f"[{name}]")
        out.extend(f"{key} = {value}" for key, value in options.items())
        out.append("")
    return "\n".join(out)


def distinct_free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def request(port: int, method: str, path: str, headers: dict[str, str] | None = None,
            body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, \
            response.read()
    finally:
        conn.close()


class SwiftCluster:
    """The session's Swift, started lazily.

    *in_memory* keeps its files on the RAM disk (``RAM_DISK``) when that takes user
    xattrs and TMPDIR does not say otherwise: an object PUT there takes about half the
    time it takes on disk (8 ms rather than 15-20 ms here, mostly fsync), which keeps the
    tests racing a real clock (a 1 s delay across a dozen Swift requests) clear of disk
    latency. The benchmarks measure a Swift on disk.
    """

    def __init__(self, *, in_memory: bool = False) -> None:
        self._in_memory = in_memory
        self._root: Path | None = None
        self._processes: dict[str, subprocess.Popen] = {}
        self._logs: dict[str, object] = {}
        self._proxy_port: int | None = None
        self.startup_seconds: float | None = None

    # -- public ---------------------------------------------------------------------

    @property
    def proxy_url(self) -> str:
        self.start()
        return f"http://127.0.0.1:{self._proxy_port}"

    def auth(self) -> SwiftAuth:
        """Credentials of ``test:tester`` (account ``AUTH_test``, an admin of it)."""
        return SwiftAuth(auth_url=f"{self.proxy_url}/auth/v1.0")

    def auth2(self) -> SwiftAuth:
        """Credentials of ``test2:tester2`` (account ``AUTH_test2``)."""
        return SwiftAuth2(auth_url=f"{self.proxy_url}/auth/v1.0")

    @property
    def directory(self) -> Path:
        self.start()
        assert self._root is not None
        return self._root

    def start(self) -> None:
        if self._proxy_port is not None:
            return
        began = time.monotonic()
        try:
            self._start()
        except BaseException:
            self.stop_all()
            raise
        self.startup_seconds = time.monotonic() - began

    @contextlib.contextmanager
    def proxy_stopped(self, seconds: float) -> Iterator[None]:
        """The proxy server stopped (SIGSTOP) for *seconds* from now: requests sent
        meanwhile wait, then are served. Resumed at the latest when the block ends."""
        self.start()
        proxy = self._processes["proxy"]
        proxy.send_signal(signal.SIGSTOP)
        timer = threading.Timer(seconds, proxy.send_signal, [signal.SIGCONT])
        timer.start()
        try:
            yield
        finally:
            timer.join()

    def stop_all(self) -> None:
        for process in self._processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self._processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in self._logs.values():
            log.close()
        self._processes, self._logs, self._proxy_port = {}, {}, None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    # -- start-up -------------------------------------------------------------------

    def _new_root(self) -> Path:
        """A new directory for every file of this Swift (see the class docstring)."""
        if self._in_memory and "TMPDIR" not in os.environ and os.access(RAM_DISK, os.W_OK):
            root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX, dir=RAM_DISK))
            try:
                os.setxattr(root, "user.delayq.test", b"1")
                return root
            except OSError:
                shutil.rmtree(root, ignore_errors=True)
        return Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))

    def _start(self) -> None:
        for path in [SYSTEM_PYTHON, MEMCACHED, *(SWIFT_BIN / f"swift-{name}-server"
                                                for name in (*SERVERS, "proxy"))]:
            if not Path(path).exists():
                raise RuntimeError(NOT_INSTALLED.format(missing=path))
        root = self._root = self._new_root()
        devices = root / "devices"
        (devices / DEVICE).mkdir(parents=True)
        try:
            os.setxattr(devices / DEVICE, "user.delayq.test", b"1")
        except OSError as exc:
            raise RuntimeError(f"Swift needs user xattrs, which {root} does not support "
                               f"({exc}); set TMPDIR to a directory on ext4 or xfs") from None
        user = getpass.getuser()
        memcached_port, proxy_port, *backend_ports = distinct_free_ports(2 + len(SERVERS))
        ports = dict(zip(SERVERS, backend_ports, strict=True))

        memcached = [MEMCACHED, "-l", "127.0.0.1", "-p", str(memcached_port), "-U", "0",
                     "-m", "64"]
        if os.geteuid() == 0:
            memcached += ["-u", user]
        self._spawn("memcached", memcached)

        rings = subprocess.run(
            [SYSTEM_PYTHON, "-c", RING_BUILDER, str(root), DEVICE,
             *(f"{name}={port}" for name, port in ports.items())],
            capture_output=True, text=True, timeout=60)
        if rings.returncode != 0:
            raise RuntimeError(f"building the Swift rings failed:\n{rings.stderr}")

        (root / "swift.conf").write_text(ini({
            "swift-hash": {"swift_hash_path_prefix": secrets.token_hex(8),
                           "swift_hash_path_suffix": secrets.token_hex(8)},
            "storage-policy:0": {"name": "Policy-0", "default": "yes"},
        }))
        common = {"bind_ip": "127.0.0.1", "workers": 0, "user": user,
                  "swift_dir": root, "devices": devices, "mount_check": "false",
                  "disable_fallocate": "true",
                  # Not INFO: every request's access lines cost each server 6-7 % more CPU
                  # (measured on the Swift fuzz tests), and no test reads them.
                  "log_level": "WARNING"}
        for name, port in ports.items():
            conf = root / f"{name}-server.conf"
            conf.write_text(ini({
                "DEFAULT": {**common, **PATIENT_BACKEND, "bind_port": port,
                            "log_name": f"{name}-server"},
                "pipeline:main": {"pipeline": f"{name}-server"},
                f"app:{name}-server": {"use": f"egg:swift#{name}"},
            }))
            self._spawn_swift(name, conf)

        conf = root / "proxy-server.conf"
        conf.write_text(ini({
            "DEFAULT": {**common, "bind_port": proxy_port, "log_name": "proxy-server"},
            "pipeline:main": {"pipeline": PIPELINE},
            "app:proxy-server": {"use": "egg:swift#proxy",
                                 "allow_account_management": "true",
                                 "account_autocreate": "true", **PATIENT_PROXY},
            "filter:tempauth": {"use": "egg:swift#tempauth",
                                "user_test_tester": "testing .admin",
                                "user_test2_tester2": "testing2 .admin"},
            "filter:cache": {"use": "egg:swift#memcache",
                             "memcache_servers": f"127.0.0.1:{memcached_port}"},
            **{f"filter:{name}": {"use": f"egg:swift#{name.replace('-', '_')}"}
               for name in ("catch_errors", "gatekeeper", "healthcheck", "proxy-logging",
                            "listing_formats", "bulk", "copy", "dlo", "versioned_writes")},
        }))
        self._spawn_swift("proxy", conf)

        deadline = time.monotonic() + START_TIMEOUT
        self._wait("memcached", lambda: accepts(memcached_port), deadline)
        for name, port in ports.items():
            self._wait(name, lambda port=port: accepts(port), deadline)
        self._wait("proxy", lambda: accepts(proxy_port)
                   and request(proxy_port, "GET", "/healthcheck")[0] == 200, deadline)
        self._proxy_port = proxy_port
        self._smoke_test(deadline)

    def _spawn(self, name: str, argv: list[str]) -> None:
        assert self._root is not None
        log = self._logs[name] = open(self._root / f"{name}.log", "wb")  # noqa: SIM115
        self._processes[name] = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=self._root)

    def _spawn_swift(self, name: str, conf: Path) -> None:
        script = SWIFT_BIN / f"swift-{name}-server"
        self._spawn(name, [SYSTEM_PYTHON, "-c", LAUNCHER, str(self._root), str(script),
                           str(conf)])

    def _log_tail(self, name: str, lines: int = 30) -> str:
        assert self._root is not None
        try:
            text = (self._root / f"{name}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _wait(self, name: str, ready, deadline: float) -> None:
        process = self._processes[name]
        while True:
            try:
                if ready():
                    return
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                state = (f"exited with status {process.returncode}"
                         if process.poll() is not None
                         else f"did not come up within {START_TIMEOUT:.0f} s")
                raise RuntimeError(f"Swift's {name} server {state}; the end of its log "
                                   f"({name}.log):\n{self._log_tail(name)}")
            time.sleep(0.05)

    def _smoke_test(self, deadline: float) -> None:
        """Log in, then put a container and an object, read it back and list it."""
        assert self._proxy_port is not None
        port, auth = self._proxy_port, self.auth()
        while True:
            status, headers, body = request(port, "GET", "/auth/v1.0", {
                "X-Auth-User": auth.user, "X-Auth-Key": auth.key})
            if status // 100 == 2 and headers.get("x-auth-token") \
                    and headers.get("x-storage-url"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"Swift's tempauth login answered {status} {body!r}; "
                                   f"the end of the proxy log:\n{self._log_tail('proxy')}")
            time.sleep(0.1)
        token = {"X-Auth-Token": headers["x-auth-token"]}
        path = "/" + headers["x-storage-url"].split("/", 3)[3] + "/delayq-smoke"
        steps = [("PUT", path, None, {201, 202}),
                 ("PUT", path + "/probe", b"ok", {201}),
                 ("GET", path + "/probe", None, {200}),
                 ("GET", path + "?format=json", None, {200}),
                 ("DELETE", path + "/probe", None, {204}),
                 ("DELETE", path, None, {204})]
        for method, target, data, expected in steps:
            status, _headers, body = request(port, method, target, token, data)
            if status not in expected:
                raise RuntimeError(
                    f"Swift smoke test: {method} {target} answered {status} {body[:200]!r}; "
                    + "".join(f"\nthe end of {name}.log:\n{self._log_tail(name, 10)}"
                              for name in ("proxy", *SERVERS)))
            if target.endswith("format=json"):
                names = [item["name"] for item in json.loads(body)]
                if names != ["probe"]:
                    raise RuntimeError(f"Swift smoke test: the listing is {names}")


SWIFT = SwiftCluster(in_memory=True)
atexit.register(SWIFT.stop_all)
