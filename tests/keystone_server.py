"""A real OpenStack Keystone on loopback for the tests, with projects, users and roles.

Keystone is the PyPI package (a test dependency), on a SQLite database, with fernet
tokens, in a temporary directory, on a free loopback port. ``KeystoneServer.start()``:

1. writes ``keystone.conf`` and the fernet and credential key repositories (keys are
   what ``keystone-manage fernet_setup`` writes: a staged key ``0`` and a primary key
   ``1``, each a Fernet key; written here, each command would cost seconds of imports);
2. runs ``keystone-manage db_sync`` and ``keystone-manage bootstrap`` (the ``admin``
   user, project and role, the ``member`` and ``reader`` roles, the identity endpoint);
3. serves Keystone's WSGI app with ``KEYSTONE_LAUNCHER`` (Keystone parses ``sys.argv``
   as its own command line, so it runs behind a launcher of its own rather than a
   WSGI server's command line), threads per request;
4. creates what ``Directory`` lists: projects, users, their roles.

It takes about 15 seconds; ``stop()`` ends the server and removes the directory.

``KeystoneServer(token_expiration=N)`` issues tokens valid for *N* seconds (Keystone's
``[token] expiration``; its default is an hour, and it takes any value from 0): for
tests of what happens when a token expires. ``KEYSTONE`` keeps Keystone's default.
Keystone's own clients renew a token due to expire within two minutes
(keystoneauth1's ``MIN_TOKEN_LIFE_SECONDS``), so with short tokens each admin call
(``_populate``, keystonemiddleware's validations) gets a new one: slower, not wrong.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
from cryptography.fernet import Fernet
from keystoneauth1 import session
from keystoneauth1.identity import v3
from keystoneclient.v3 import client as keystone_client

from tests.server import free_port, write_config

BIN = Path(sys.executable).parent
START_TIMEOUT = 60.0
ADMIN_PASSWORD = "admin-secret"
DOMAIN = "default"

KEYSTONE_LAUNCHER = """
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

port = int(sys.argv[1])
sys.argv = sys.argv[:1]  # Keystone reads its options from the command line
from keystone.server import wsgi  # noqa: E402

application = wsgi.initialize_public_application()


class Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


make_server("127.0.0.1", port, application, server_class=Server,
            handler_class=Quiet).serve_forever()
"""


@dataclass(frozen=True)
class User:
    name: str
    password: str
    project: str
    roles: tuple[str, ...]


@dataclass(frozen=True)
class Directory:
    """What the tests find in Keystone besides bootstrap's admin."""

    projects: tuple[str, ...] = ("alpha", "beta")
    roles: tuple[str, ...] = ("producer", "consumer")
    users: tuple[User, ...] = (
        User("alice", "alice-secret", "alpha", ("member",)),
        User("bob", "bob-secret", "beta", ("member",)),
        User("pat", "pat-secret", "alpha", ("producer",)),
        User("cody", "cody-secret", "alpha", ("consumer",)),
        User("rita", "rita-secret", "alpha", ("reader",)),
    )


@dataclass
class KeystoneServer:
    directory: Directory = field(default_factory=Directory)
    token_expiration: int | None = None  # seconds; None: Keystone's default
    root: Path | None = None
    port: int | None = None
    project_ids: dict[str, str] = field(default_factory=dict)
    _process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        assert self.port is not None, "Keystone is not started"
        return f"http://127.0.0.1:{self.port}/v3"

    def start(self) -> KeystoneServer:
        if self._process is not None:
            return self
        self.root = Path(tempfile.mkdtemp(prefix="delayq-keystone-"))
        self.port = free_port()
        conf = self._write_config()
        env = {"OS_KEYSTONE_CONFIG_FILES": str(conf), "PYTHONWARNINGS": "ignore"}
        self._manage(conf, "db_sync")
        self._manage(conf, "bootstrap", "--bootstrap-password", ADMIN_PASSWORD,
                     "--bootstrap-region-id", "RegionOne",
                     "--bootstrap-public-url", self.url,
                     "--bootstrap-internal-url", self.url)
        log = open(self.root / "keystone.log", "wb")  # noqa: SIM115
        self._process = subprocess.Popen(
            [sys.executable, "-c", KEYSTONE_LAUNCHER, str(self.port)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
            env={**_environ(), **env})
        log.close()
        self._wait()
        self._populate()
        return self

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
            self._process = None
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def session(self, user: str, password: str, project: str) -> session.Session:
        """A keystoneauth1 session of *user* scoped to *project* (names)."""
        auth = v3.Password(auth_url=self.url, username=user, password=password,
                           user_domain_id=DOMAIN, project_name=project,
                           project_domain_id=DOMAIN)
        return session.Session(auth=auth)

    def token(self, user: User) -> str:
        return self.session(user.name, user.password, user.project).get_token()

    def token_expiring(self, user: User) -> tuple[str, datetime]:
        """A new token of *user* and when Keystone says it expires (aware, UTC)."""
        sess = self.session(user.name, user.password, user.project)
        token = sess.get_token()
        # The access info of that very token: get_access() would get a new token
        # when this one expires within two minutes.
        access = sess.auth.auth_ref  # type: ignore[union-attr]
        assert access is not None and token is not None
        return token, access.expires

    def user(self, name: str) -> User:
        return next(u for u in self.directory.users if u.name == name)

    def log_tail(self, lines: int = 40) -> str:
        assert self.root is not None
        with contextlib.suppress(OSError):
            return "\n".join((self.root / "keystone.log").read_text(
                errors="replace").splitlines()[-lines:])
        return "(no log)"

    def _write_config(self) -> Path:
        assert self.root is not None
        for repository in ("fernet-keys", "credential-keys"):
            keys = self.root / repository
            keys.mkdir(mode=0o700)
            for name in ("0", "1"):
                (keys / name).write_bytes(Fernet.generate_key())
        token: dict[str, object] = {"provider": "fernet"}
        # Every user is created and logs in with a password, and with short tokens every
        # admin call logs in again (see the module doc): bcrypt's fewest rounds (its
        # default is 12) make each hash milliseconds, not a second.
        identity: dict[str, object] = {"password_hash_rounds": 4}
        if self.token_expiration is not None:
            token["expiration"] = self.token_expiration
        return write_config(self.root / "keystone.conf", {
            "DEFAULT": {"log_file": self.root / "keystone-app.log"},
            "identity": identity,
            "database": {"connection": f"sqlite:///{self.root / 'keystone.db'}"},
            "token": token,
            "fernet_tokens": {"key_repository": self.root / "fernet-keys"},
            "fernet_receipts": {"key_repository": self.root / "fernet-keys"},
            "credential": {"key_repository": self.root / "credential-keys"},
        })

    def _manage(self, conf: Path, *args: str) -> None:
        done = subprocess.run([str(BIN / "keystone-manage"), "--config-file", str(conf),
                               *args], capture_output=True, text=True, timeout=120,
                              env=_environ())
        if done.returncode != 0:
            raise RuntimeError(f"keystone-manage {args[0]} failed:\n{done.stderr[-3000:]}")

    def _wait(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"Keystone exited with {self._process.returncode}:\n"
                                   f"{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url, timeout=5).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Keystone did not answer within {START_TIMEOUT:.0f} s:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.1)

    def _populate(self) -> None:
        admin = keystone_client.Client(session=self.session("admin", ADMIN_PASSWORD,
                                                            "admin"))
        for name in self.directory.projects:
            self.project_ids[name] = admin.projects.create(name, domain=DOMAIN).id
        roles = {role.name: role for role in admin.roles.list()}
        for name in self.directory.roles:
            roles[name] = admin.roles.create(name)
        for user in self.directory.users:
            created = admin.users.create(user.name, domain=DOMAIN, password=user.password)
            for role in user.roles:
                admin.roles.grant(roles[role], user=created,
                                  project=self.project_ids[user.project])


def _environ() -> dict[str, str]:
    return {**os.environ, "PYTHONWARNINGS": "ignore"}


KEYSTONE = KeystoneServer()
atexit.register(KEYSTONE.stop)
