"""Fixtures shared by every test module."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from falcon import testing
from oslo_config import cfg

from tests.apps import HTTP_DRIVERS, http_client, sqlite_conf

# The Swift-only modules' drivers (make_driver, prefix, raw).
pytest_plugins = ("tests.swift_fixtures",)

# The delayq-audit runs of the tests keep the JVM's class archive (docs/audits.md) in a
# cache of the tests' own, not the user's: every run and worker of the suite on this
# machine shares it, and the user's cache is left as it was.
os.environ["XDG_CACHE_HOME"] = str(Path(tempfile.gettempdir()) / "delayq-tests-cache")


@pytest.fixture
def make_conf(tmp_path) -> Callable[..., cfg.ConfigOpts]:
    """A factory of ``sqlite_conf`` configurations in tmp_path."""
    return lambda **transport: sqlite_conf(tmp_path, **transport)


@pytest.fixture(params=HTTP_DRIVERS)
def client(request, make_conf) -> testing.TestClient:
    """An in-process HTTP client of the app on a fresh store of each driver (``http_client``)."""
    return http_client(request.param, make_conf())


@pytest.fixture
def headers() -> dict[str, str]:
    """Headers of one client in one project."""
    return {"Client-ID": str(uuid.uuid4()), "X-Project-ID": "project-a"}


# The longest test files, longest first. With two workers each taking whole files
# (``--dist loadfile``), files start in collection order: a long file collected last
# would run alone at the end while the other worker idles. Started first, they overlap
# with the many short ones.
LONGEST_FIRST = (
    "tests/test_swift_driver.py",
    "tests/contract/test_concurrency.py",
    "tests/test_worker_crash.py",
    "tests/test_audit_scenario.py",
    "tests/test_openapi.py",
    "tests/test_server_e2e_swift.py",
    "tests/test_swift_server.py",
)


def pytest_collection_modifyitems(session, config, items) -> None:
    """Put the files of ``LONGEST_FIRST`` first, in that order (the rest as collected)."""
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_sessionfinish(session, exitstatus) -> None:
    """Stop the Redis servers and the Swift the tests started; drop their MongoDB databases."""
    from tests.mongo_backend import MONGO
    from tests.redis_servers import SERVERS
    from tests.swift_server import SWIFT

    SERVERS.stop_all()
    SWIFT.stop_all()
    MONGO.drop_all()
