"""The dead-letter audit over encrypted bodies: a SQLite store written through the API
(an encrypted queue whose messages are dead-lettered), audited by ``delayq-audit dlq``
with the store's configuration. With the keys, the top body keys and values are the
bodies' own; without them, the bodies show nothing (never ciphertext) while the moves
still count."""

from __future__ import annotations

import uuid

import pytest

from delayq import encryption
from tests import spark_session
from tests.apps import http_client
from tests.audit_helpers import load_audit, rows

spark = pytest.fixture(scope="session")(spark_session.spark_fixture)

HEADERS = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": "crypt-audit"}
BODIES = [{"reason": "timeout", "order": {"kind": "refund"}},
          {"reason": "timeout", "order": {"kind": "sale"}}]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The SQLite file, and a configuration file naming it with and without the key."""
    directory = tmp_path_factory.mktemp("crypt-audit")
    from delayq import conf as delayq_conf

    conf = delayq_conf.load([])
    path = directory / "delayq.sqlite"
    conf.set_override("path", str(path), group="drivers:message_store:sqlite")
    conf.set_override("push", False, group="notification")
    conf.set_override("message_encryption_key", ["audit-key"], group="transport")
    client = http_client("sqlite", conf)
    resp = client.simulate_put("/v2/queues/work", headers=HEADERS, json={
        "_enable_encrypt_messages": True, "_max_claim_count": 1, "_dead_letter_queue": "dlq"})
    assert resp.status_code == 201, resp.text
    resp = client.simulate_post("/v2/queues/work/messages", headers=HEADERS,
                                json={"messages": [{"body": b} for b in BODIES]})
    assert resp.status_code == 201, resp.text
    made = client.simulate_post("/v2/queues/work/claims", headers=HEADERS, json={})
    client.simulate_delete(made.headers["location"], headers=HEADERS)
    moved = client.simulate_post("/v2/queues/work/claims", headers=HEADERS, json={})
    assert moved.status_code == 204  # the second claim moved both to dlq
    assert encryption.SEALED.encode() in path.read_bytes() + _wal(path)
    base = (f"[drivers]\nmessage_store = sqlite\n"
            f"[drivers:message_store:sqlite]\npath = {path}\n")
    keyed = directory / "keyed.conf"
    keyed.write_text(base + "[transport]\nmessage_encryption_key = new-key,audit-key\n")
    keyless = directory / "keyless.conf"
    keyless.write_text(base)
    return keyed, keyless


def _wal(path):
    wal = path.with_name(path.name + "-wal")
    return wal.read_bytes() if wal.is_file() else b""


def audit(config, out) -> dict:
    from delayq.spark_jobs.cli import main

    try:
        code = main(["dlq", "--config-file", str(config), "--output", str(out)])
    except SystemExit as exc:
        code = exc.code
    assert (code or 0) == 0, f"delayq-audit exited with {code}"
    (row,) = rows(load_audit(out), "dead_letter")
    return row


def test_the_audit_reads_encrypted_bodies_with_the_keys(spark, store, tmp_path):
    keyed, _ = store
    row = audit(keyed, tmp_path / "out")
    assert (row["queue"], row["source"], row["moved"]) == ("dlq", "work", 2)
    keys = {k["key"]: k["count"] for k in row["top_keys"]}
    assert keys == {"reason": 2, "order": 2, "order.kind": 2}
    values = {(v["key"], v["value"]): v["count"] for v in row["top_values"]}
    assert values == {("reason", '"timeout"'): 2, ("order.kind", '"refund"'): 1,
                      ("order.kind", '"sale"'): 1}


def test_without_the_keys_the_bodies_show_nothing(spark, store, tmp_path):
    _, keyless = store
    out = tmp_path / "out"
    row = audit(keyless, out)
    assert row["moved"] == 2
    assert row["top_keys"] == [] and row["top_values"] == []
    written = "".join(p.read_text() for p in out.iterdir() if p.is_file())
    assert encryption.SEALED not in written
    assert encryption.ALGORITHM not in written
