"""The class archive of ``delayq-audit``'s Spark JVM (``delayq.spark_jobs.class_archive``).

The pure parts first: the install key, the check of an archive's header, the promotion
of a temporary file. Then real ``delayq-audit`` runs (the console script, as a user
runs it) on a SQLite store with a cache directory of their own:

1. the first run finds garbage under the archive's name: it removes it, runs without,
   and its JVM writes an archive when it exits, after delayq-audit;
2. the second run's JVM maps that archive (seen in ``/proc/<pid>/maps`` while it runs)
   and writes none; the figures are those of the first run;
3. ``--no-class-archive`` writes nothing.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import time
from pathlib import Path

import pytest

from delayq.spark_jobs import class_archive
from tests import spark_session
from tests.audit_helpers import AUDIT_SCRIPT, load_audit
from tests.test_audit_guards import said_by_audit, sqlite_store
from tests.test_audit_server import Run, user_env

REPO = Path(__file__).resolve().parents[1]
# The JVM writes its archive after delayq-audit has exited: 170 MB, and on a busy
# machine of two cores the classes it links first.
WRITTEN_WITHIN = 180
AUDIT_TIMEOUT = 240

# What the JVM would say of its class data sharing, were it not told to keep quiet.
CDS_TALK = re.compile(r"\bcds\b|shared archive|SharedArchiveFile|ArchiveClassesAtExit|"
                      r"dynamic archive", re.IGNORECASE)

pytestmark = pytest.mark.timeout(900)


# The pure parts


def jdk17_header(regions: list[tuple[int, int]], magic: int = class_archive.DYNAMIC_MAGIC
                 ) -> bytes:
    """A JDK 17 dynamic archive header declaring *regions* (file offset, used bytes)."""
    header = bytearray(class_archive.JDK17_FIRST_REGION
                       + class_archive.JDK17_REGIONS * class_archive.JDK17_REGION_SIZE)
    struct.pack_into("=IiI", header, 0, magic, 0, class_archive.JDK17_VERSION)
    for index, (offset, used) in enumerate(regions):
        struct.pack_into("=6i3Q", header, class_archive.JDK17_FIRST_REGION
                         + index * class_archive.JDK17_REGION_SIZE,
                         0, 0, 0, 0, 0, 0, offset, 0, used)
    return bytes(header)


def archive_bytes(size: int = 3 * 4096) -> bytes:
    """A file of *size* bytes whose header declares regions up to its end."""
    header = jdk17_header([(4096, 4096), (8192, size - 8192)])
    return header + bytes(size - len(header))


def fake_install(tmp_path: Path) -> tuple[Path, Path]:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_bytes(b"#!")
    jars = tmp_path / "jars"
    jars.mkdir()
    for name in ("spark-core.jar", "scala-library.jar"):
        (jars / name).write_bytes(b"PK")
    return java, jars


def test_the_key_changes_with_the_jars_and_the_java(tmp_path):
    java, jars = fake_install(tmp_path)
    key = class_archive.install_key(java, jars)
    assert key == class_archive.install_key(java, jars)
    assert len(key) == 16

    (jars / "extra.jar").write_bytes(b"PK")
    added = class_archive.install_key(java, jars)
    assert added != key
    (jars / "extra.jar").write_bytes(b"PK..")  # same name, another size
    assert class_archive.install_key(java, jars) != added
    stamp = (jars / "extra.jar").stat().st_mtime_ns
    os.utime(jars / "extra.jar", ns=(stamp, stamp + 10**9))  # same size, another time
    touched = class_archive.install_key(java, jars)
    assert touched != added

    java.write_bytes(b"#!..")
    assert class_archive.install_key(java, jars) != touched

    # Another class path: a SPARK_CONF_DIR of its own.
    assert (class_archive.install_key(java, jars, {"SPARK_CONF_DIR": "/etc/spark"})
            != class_archive.install_key(java, jars, {}))


def test_only_a_complete_archive_is_usable(tmp_path):
    path = tmp_path / "a.jsa"
    path.write_bytes(archive_bytes())
    assert class_archive.usable(path)
    # Cut short: the JVM would map past the end of the file (and die of SIGBUS).
    path.write_bytes(archive_bytes()[:-1])
    assert not class_archive.usable(path)
    # Still being written: the header, magic first, comes last.
    path.write_bytes(bytes(len(archive_bytes())))
    assert not class_archive.usable(path)
    for garbage in (b"", b"\xa8\xab", os.urandom(5000)):
        path.write_bytes(garbage)
        assert not class_archive.usable(path)
    assert not class_archive.usable(tmp_path / "missing.jsa")


def test_promotion_takes_complete_files_only(tmp_path):
    key, other = "0123456789abcdef", "fedcba9876543210"
    final = class_archive.archive_path(tmp_path, key)
    partial = class_archive.temporary_path(tmp_path, key)
    partial.write_bytes(bytes(3 * 4096))  # no magic: a JVM still writing, or killed

    class_archive.tidy(tmp_path, key)
    assert partial.exists() and not final.exists()

    # Hours later it is nobody's: removed.
    class_archive.tidy(tmp_path, key, now=time.time() + class_archive.PARTIAL_AGE + 60)
    assert not partial.exists()

    complete = class_archive.temporary_path(tmp_path, key)
    complete.write_bytes(archive_bytes())
    stale = class_archive.archive_path(tmp_path, other)  # another Java or Spark
    stale.write_bytes(archive_bytes())
    recent = class_archive.archive_path(tmp_path, "0" * 16)  # another, used lately
    recent.write_bytes(archive_bytes())
    week_ago = time.time() - class_archive.UNUSED_AGE - 60
    os.utime(stale, (week_ago, week_ago))
    unrelated = tmp_path / "notes.txt"
    unrelated.write_text("kept")
    class_archive.tidy(tmp_path, key)
    assert not complete.exists() and class_archive.usable(final)
    assert not stale.exists() and recent.exists()
    assert unrelated.read_text() == "kept"


def test_no_archive_for_a_class_path_with_a_directory_of_files(tmp_path, monkeypatch):
    # The JDK archives no class of such a class path (it says "non-empty directory"):
    # a JVM told to write one would only run slower.
    conf = tmp_path / "spark-conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    assert class_archive.prepare(tmp_path / "cache").java_options  # empty: no harm
    (conf / "spark-defaults.conf").write_text("spark.driver.memory 3g\n")
    plan = class_archive.prepare(tmp_path / "cache")
    assert plan.java_options == () and plan.archive is None and plan.writing is None
    assert "SPARK_CONF_DIR" in plan.note and str(conf) in plan.note


def test_no_archive_where_the_directory_cannot_be_written(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    plan = class_archive.prepare(blocked / "cache")
    assert plan.java_options == () and plan.note is not None
    assert "cannot write" in plan.note


# Real runs


def run(*argv: str, cwd: Path, env: dict[str, str] | None = None,
        watch: Path | None = None) -> tuple[Run, set[int]]:
    """Run the console script (on this checkout's delayq); with *watch*, also the ids
    of the processes that mapped that file while it ran."""
    env = {**user_env(), **(env or {}), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([str(AUDIT_SCRIPT), *argv], cwd=cwd, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    mappers: set[int] = set()
    deadline = time.monotonic() + AUDIT_TIMEOUT
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"delayq-audit {' '.join(argv)} ran over {AUDIT_TIMEOUT} s")
        if watch is not None:
            mappers |= processes_mapping(watch)
        time.sleep(0.2)
    # The JVM holds the pipes until it ends (and writes an archive first, if asked to).
    stdout, stderr = proc.communicate(timeout=WRITTEN_WITHIN)
    return Run(proc.returncode, stdout, stderr), mappers


def processes_mapping(path: Path) -> set[int]:
    """The ids of the processes that map *path* now."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            maps = (entry / "maps").read_text()
        except OSError:
            continue
        if f" {path}\n" in maps:
            found.add(int(entry.name))
    return found


def wait_for_archive(directory: Path) -> Path:
    """The complete temporary file the JVM of a first run wrote in *directory*."""
    deadline = time.monotonic() + WRITTEN_WITHIN
    while time.monotonic() < deadline:
        done = [path for path in directory.glob(f"{class_archive.PREFIX}*.part")
                if class_archive.usable(path)]
        if done:
            return done[0]
        time.sleep(0.5)
    raise AssertionError(f"no complete archive in {directory} after {WRITTEN_WITHIN} s: "
                         f"{sorted(p.name for p in directory.iterdir())}")


def figures(out: Path) -> dict:
    audit = load_audit(out)
    return {"delay": audit["delay"], "dead_letter": audit["dead_letter"],
            "events": audit["events"]}


def archive_lines(stderr: str) -> list[str]:
    return [line for line in said_by_audit(stderr) if "class archive" in line]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    spark_session.require_java()
    return sqlite_store(tmp_path_factory.mktemp("class-archive") / "store", 10)


def audit(store: Path, out: Path, *extra: str, **kwargs) -> tuple[Run, set[int]]:
    result = run("all", "--config-file", str(store), "--output", str(out),
                 "--master", "local[2]", *extra, cwd=store.parent, **kwargs)
    code, stderr = result[0].code, result[0].stderr
    assert code == 0, stderr
    jvm = [line for line in said_by_audit(stderr) if not line.startswith("delayq-audit: ")]
    assert not [line for line in jvm if CDS_TALK.search(line)], jvm
    return result


def test_the_first_run_replaces_garbage_with_an_archive_the_next_maps(store, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    key = class_archive.install_key(class_archive.java_executable(),
                                    class_archive.spark_jars())
    final = class_archive.archive_path(cache, key)
    final.write_bytes(os.urandom(1 << 20))
    first, _ = audit(store, tmp_path / "first", "--class-archive", str(cache))
    [line] = archive_lines(first.stderr)
    assert "none yet" in line and str(cache) in line
    assert not final.exists(), "the garbage was kept"
    written = wait_for_archive(cache)
    assert written.name.startswith(f"{class_archive.PREFIX}{key}")
    assert not final.exists(), "promoted before a run asked for it"
    second, mappers = audit(store, tmp_path / "second", "--class-archive", str(cache),
                            watch=final)
    assert mappers, "no process mapped the archive while the audit ran"
    [line] = archive_lines(second.stderr)
    assert line == f"delayq-audit: class archive: Spark's classes from {final}"
    before = final.stat()
    assert sorted(p.name for p in cache.iterdir()) == [final.name], "a JVM wrote another"
    assert (before.st_ino, before.st_mtime_ns) == (final.stat().st_ino,
                                                   final.stat().st_mtime_ns)
    assert figures(tmp_path / "second") == figures(tmp_path / "first")


def test_no_class_archive_writes_nothing(store, tmp_path):
    cache = tmp_path / "xdg"
    cache.mkdir()
    result, _ = audit(store, tmp_path / "out", "--no-class-archive",
                      env={"XDG_CACHE_HOME": str(cache)})
    assert archive_lines(result.stderr) == []
    assert list(cache.iterdir()) == []
    assert load_audit(tmp_path / "out")["events"] > 0
