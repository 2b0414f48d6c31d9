"""python-zaqarclient's own functional suite (``tests/functional/queues/v2`` of its source,
``tests/zaqarclient_suite.py``) against the real ``delayq-server`` on SQLite.

The suite runs once, in a pytest subprocess pointed at the server (``ZAQAR_ENDPOINT``,
no Keystone: the client's ``noauth`` backend sends ``X-Project-ID``), and writes a JUnit
report; each of its tests is then one test here, passing, failing or skipped as it did
there, so that a failure names the client's test and shows its traceback.

Pools and flavors are Zaqar's admin API for its own storage layout, which delayq does not
have: those tests are not run (``NOT_RUN``). Two lists hold the tests expected to fail,
each with its reason; the marks are strict, so an entry whose test passes fails the run
and must go:

- ``WAITING_ON``: tests of a delayq feature still being built;
- ``FAILS_ON_ZAQAR``: tests whose expectation Zaqar itself (and this very client version)
  does not meet, so no Zaqar-compatible server can pass them. Each is backed by a test
  below that checks the reason against Zaqar's or the client's own code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.server import delayq_server
from tests.zaqarclient_suite import V2_DIR, ensure_suite

pytestmark = pytest.mark.timeout(300)

SUITE_TIMEOUT = 240.0
SIGNED_URL_KEY = "zaqarclient-functional-signing-key"

# Test modules of the suite not run against delayq, and why: one reason per module.
NOT_RUN = {
    "test_pool.py": "pools are Zaqar's admin API for its storage shards; delayq has none",
    "test_flavor.py": "flavors group Zaqar's pools; delayq has no pools, so no flavors",
}

# Tests that fail until a feature being built lands, with what they wait on. Keys are
# "module.py::Class::test". Remove an entry when its feature lands (it then XPASSes,
# which fails the run: the marks are strict).
WAITING_ON: dict[str, str] = {}

ENCRYPT_FLAG = "_enable_encrypt_messages"
_METADATA_REASON = (
    f"expects a queue's metadata without {ENCRYPT_FLAG}, which Zaqar's GET of a queue "
    f"adds (false when unset) since it can encrypt messages, as delayq does "
    f"(test_zaqar_answers_the_encryption_flag_with_the_metadata)")
FAILS_ON_ZAQAR = {
    "test_queues.py::QueuesV2QueueHttpFunctionalTest::test_queue_metadata_functional":
        _METADATA_REASON,
    "test_queues.py::QueuesV2QueueHttpFunctionalTest::test_queue_metadata_reload_functional":
        _METADATA_REASON,
    "test_queues.py::QueuesV2QueueHttpFunctionalTest::test_queue_exists_functional":
        "expects Queue.exists() to raise InvalidOperation, as when the client had no "
        "v2 queue_exists; this client sends HEAD and answers a bool, so the test fails "
        "on any server (test_the_client_checks_a_queue_with_head)",
}

# The server as the suite needs it. The subscription tests subscribe made-up hosts
# (http://trigger.me), which do not resolve here and must never be pushed to: this server
# only serves the API (no pushes), and takes every subscriber without resolving it.
SERVER_CONFIG = {
    "drivers:transport:wsgi": {"workers": 1},
    "signed_url": {"secret_key": SIGNED_URL_KEY},  # test_signed_url
    "notification": {"push": "false", "allowed_webhook_networks": "0.0.0.0/0, ::/0"},
}


PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass(frozen=True)
class Outcome:
    status: str  # PASSED, FAILED or SKIPPED
    detail: str = ""


def _suite_env(endpoint: str | None = None) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("PYTEST_", "ZAQAR"))}
    # Run the functional tests without Keystone (tox's [testenv:functional] also sets
    # ZAQARCLIENT_AUTH_FUNCTIONAL, which reads a devstack clouds.yaml).
    env["ZAQARCLIENT_TEST_FUNCTIONAL"] = "1"
    # The suite's base module reads these at import; without ZAQAR_SERVICE_HOST it looks
    # up this host's IPv4 address.
    env["ZAQAR_SERVICE_HOST"] = "127.0.0.1"
    if endpoint is not None:
        env["ZAQAR_ENDPOINT"] = endpoint
    return env


def _pytest_argv(root: Path, *args: str) -> list[str]:
    # An empty config file: the suite's tests are run as the client's tox would, not with
    # delayq's pytest options (pyproject.toml is found above the cache otherwise).
    return [sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(root),
            "-p", "no:cacheprovider", *args]


def _collect() -> list[str]:
    """Ids ("module.py::Class::test") of the suite's v2 tests, as its pytest collects them."""
    root = ensure_suite()
    run = subprocess.run(_pytest_argv(root, "--collect-only", "-q", V2_DIR), cwd=root,
                         env=_suite_env(), capture_output=True, text=True, timeout=120)
    prefix = f"{V2_DIR}/"
    ids = [line.removeprefix(prefix) for line in run.stdout.splitlines()
           if line.startswith(prefix) and "::" in line]
    if run.returncode != 0 or not ids:
        raise RuntimeError(f"collecting python-zaqarclient's functional suite failed "
                           f"({run.returncode}):\n{run.stdout}\n{run.stderr}")
    return ids


FUNCTIONAL_TESTS = _collect()


def _module(test_id: str) -> str:
    return test_id.split("::", 1)[0]


def _params() -> list[object]:
    params = []
    for test_id in FUNCTIONAL_TESTS:
        marks: list[pytest.MarkDecorator] = []
        if _module(test_id) in NOT_RUN:
            marks.append(pytest.mark.skip(reason=NOT_RUN[_module(test_id)]))
        elif test_id in WAITING_ON:
            marks.append(pytest.mark.xfail(reason=WAITING_ON[test_id], strict=True))
        elif test_id in FAILS_ON_ZAQAR:
            marks.append(pytest.mark.xfail(reason=FAILS_ON_ZAQAR[test_id], strict=True))
        params.append(pytest.param(test_id, id=test_id, marks=marks))
    return params


def _outcomes(report: Path) -> dict[str, Outcome]:
    """Each test's outcome in a JUnit report, by "module.py::Class::test"."""
    outcomes = {}
    for case in ET.parse(report).iter("testcase"):
        # classname is "functional.queues.v2.test_claims.QueuesV2ClaimsHttpFunctionalTest"
        *_, module, cls = case.get("classname", "").split(".")
        outcome = Outcome(PASSED)
        for child in case:
            if child.tag in ("failure", "error"):
                # The text is the whole traceback; the message only its start.
                outcome = Outcome(FAILED, child.text or child.get("message", ""))
                break
            if child.tag == "skipped":
                outcome = Outcome(SKIPPED, child.get("message", ""))
        outcomes[f"{module}.py::{cls}::{case.get('name')}"] = outcome
    return outcomes


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    """Run the suite (all but ``NOT_RUN``) once against a fresh server."""
    root = ensure_suite()
    cwd = tmp_path_factory.mktemp("zaqarclient-functional")
    report = cwd / "junit.xml"
    deselect = [arg for test_id in FUNCTIONAL_TESTS if _module(test_id) in NOT_RUN
                for arg in ("--deselect", f"{V2_DIR}/{test_id}")]
    with delayq_server(cwd / "server", config=SERVER_CONFIG) as server:
        run = subprocess.run(
            _pytest_argv(root, "-q", f"--junitxml={report}", *deselect, V2_DIR),
            cwd=root, env=_suite_env(server.url), capture_output=True, text=True,
            timeout=SUITE_TIMEOUT)
    if not report.exists():
        pytest.fail(f"python-zaqarclient's functional suite wrote no report "
                    f"({run.returncode}):\n{run.stdout}\n{run.stderr}")
    return _outcomes(report)


@pytest.mark.parametrize("test_id", _params())
def test_functional(outcomes: dict[str, Outcome], test_id: str) -> None:
    outcome = outcomes.get(test_id)
    if outcome is None:
        pytest.fail(f"{test_id} did not run")
    if outcome.status == SKIPPED:
        pytest.skip(outcome.detail)
    if outcome.status == FAILED:
        pytest.fail(outcome.detail, pytrace=False)


def test_every_listed_test_is_in_the_suite() -> None:
    """An entry naming no collected test (renamed upstream, mistyped) marks nothing."""
    modules = {_module(test_id) for test_id in FUNCTIONAL_TESTS}
    assert set(NOT_RUN) <= modules
    assert set(WAITING_ON) | set(FAILS_ON_ZAQAR) <= set(FUNCTIONAL_TESTS)


def test_zaqar_answers_the_encryption_flag_with_the_metadata() -> None:
    """Zaqar's GET of a queue fills in its reserved metadata, the encryption flag
    among them: the metadata tests of ``FAILS_ON_ZAQAR`` fail on Zaqar too."""
    with warnings.catch_warnings():
        # Zaqar's WSGI modules import eventlet, which warns that it is deprecated.
        warnings.simplefilter("ignore")
        from zaqar.transport.wsgi.v2_0 import queues

    class Limits:
        def get_limit_conf_value(self, name: str) -> int:
            return 0

    assert queues._get_reserved_metadata(Limits())[ENCRYPT_FLAG] is False


def test_the_client_checks_a_queue_with_head() -> None:
    """The client knows queue_exists (HEAD), so it never raises InvalidOperation for it:
    whatever the server answers, test_queue_exists_functional fails."""
    from zaqarclient.queues.v2 import api

    assert api.V2.schema["queue_exists"]["method"] == "HEAD"
