"""Fast path: the Spark driver JVM's classes from a dynamic CDS archive (AppCDS).

Most of a small audit's wall time is the driver JVM starting and loading Spark's
classes. A session delayq-audit starts runs its JVM with a class archive of the JDK's
class data sharing (CDS): the classes a previous run loaded, parsed and verified, mapped
from one file instead of read out of hundreds of jars. On OpenJDK 17 the archive of a
JVM is written by the JVM itself when it exits (``-XX:ArchiveClassesAtExit``), so:

- a usable archive in the cache directory: the JVM maps it (``-XX:SharedArchiveFile``);
- none yet: the JVM writes one to a temporary file of its own when it exits (after
  delayq-audit's Python process: the JVM ends when its gateway's stdin closes), and
  the next run promotes it to the archive's name (``prepare``).

An archive belongs to one Java and one Spark install (``install_key``): its name holds
a hash of the ``java`` executable, the JVM library and the jars, and archives of other
keys are removed. The JVM checks the rest (its build, the class path, garbage
collector and heap layout) and quietly runs without an archive that does not fit; then
the archive is removed (``confirm``) and the next run writes another.

Safety, since a JVM mapping a damaged archive can crash (OpenJDK 17 checks a dynamic
archive's length against its header only for the static archive: a truncated dynamic
one dies of SIGBUS):

- JDK 17 writes a dynamic archive's header last (it seeks past the header, writes the
  regions, then writes the header at offset 0 and closes the file), so a temporary
  file that starts with the dynamic archive magic is complete; one without it is a
  JVM still writing, or killed while writing, and is removed once ``PARTIAL_AGE`` old.
  A complete one is renamed to the archive's name, atomically: a JVM that mapped the
  file it replaces keeps reading its old inode.
- Before an archive is handed to a JVM its header is read here (``usable``): the magic,
  and for JDK 17's header layout, that every region it declares lies within the file.
- Each run writes its own temporary file, so concurrent first runs never write the
  same file; the last rename wins, with a complete archive either way.

A cache directory that cannot be written means no archive (and one progress line): a
JVM told to write one where it cannot would print an error after the audit ended.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from delayq.spark_jobs.progress import Progress

# The first four bytes of an OpenJDK dynamic archive (CDS_DYNAMIC_ARCHIVE_MAGIC,
# 0xf00baba8, in the machine's byte order: the JVM writes its header struct as is).
DYNAMIC_MAGIC = 0xF00BABA8
# The archive header version of OpenJDK 17 (CURRENT_CDS_ARCHIVE_VERSION), whose layout
# ``regions_fit`` reads: magic, crc and version (three 4-byte ints, then 4 bytes of
# padding), then NUM_CDS_REGIONS regions of 72 bytes: six 4-byte ints, then
# file_offset, mapping_offset and used (8 bytes each), and three more 8-byte fields.
JDK17_VERSION = 11
JDK17_REGIONS = 7
JDK17_FIRST_REGION = 16
JDK17_REGION_SIZE = 72
JDK17_REGION = struct.Struct("=6i3Q")
HEADER = struct.Struct("=IiI")
# A temporary file without the magic this old is not being written any more: a JVM
# writes its archive in seconds, at exit (the file does not exist before).
PARTIAL_AGE = 3 * 3600
# An archive of another key (another Java, Spark or class path) unused this long is
# removed; one in use has its modification time renewed by each run that maps it.
UNUSED_AGE = 7 * 86400
# The environment Spark's launcher builds the driver's class path from, besides the
# jars: the JVM maps an archive only for the class path it was written with.
CLASS_PATH_ENVIRONMENT = ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR",
                          "SPARK_DIST_CLASSPATH", "SPARK_CLASSPATH")
PREFIX = "spark-classes-"
NAME = re.compile(PREFIX + r"(?P<key>[0-9a-f]{16})(?:-(?P<run>[0-9a-f]{16})\.part|\.jsa)")
# The JVM's CDS messages (an archive that does not fit, classes it cannot archive)
# would reach the terminal, the latter after delayq-audit has exited: none is the
# user's business, and the archive is checked and replaced without them.
QUIET = "-Xlog:cds*=off"
# Characters Spark's splitting of spark.driver.extraJavaOptions would take apart.
UNSPLITTABLE = re.compile(r"[\s\"'\\]")


@dataclass(frozen=True, slots=True)
class Plan:
    """What the driver JVM is told: use *archive*, or write *writing* when it exits;
    *note* says why neither, when neither."""

    java_options: tuple[str, ...] = ()
    archive: Path | None = None  # the archive the JVM maps
    inode: int | None = None  # the archive's, so a newer one under its name is kept
    writing: Path | None = None  # the temporary file the JVM writes at exit
    note: str | None = None  # why there is no archive, for the progress line


def default_directory() -> Path | None:
    """``$XDG_CACHE_HOME/delayq``, by default ``~/.cache/delayq``; None when there is
    no home directory to find."""
    cache = os.environ.get("XDG_CACHE_HOME") or ""
    if os.path.isabs(cache):  # the XDG specification ignores a relative one
        return Path(cache) / "delayq"
    try:
        return Path.home() / ".cache" / "delayq"
    except RuntimeError:
        return None


def java_executable() -> Path | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the first on
    PATH; its real path, None when there is none."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not found or not os.path.exists(found):
        return None
    return Path(os.path.realpath(found))


def spark_jars() -> Path:
    """The jars directory of the Spark install PySpark launches: ``$SPARK_HOME/jars``,
    else the one inside the pyspark package."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home) / "jars"
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def class_path_directories(jars: Path, environment: Mapping[str, str]) -> dict[str, Path]:
    """The directories Spark's launcher puts on the driver's class path, by the variable
    naming each: ``SPARK_CONF_DIR`` (default: ``conf`` beside *jars*),
    ``HADOOP_CONF_DIR`` and ``YARN_CONF_DIR``."""
    found = {"SPARK_CONF_DIR": Path(environment.get("SPARK_CONF_DIR")
                                    or jars.parent / "conf")}
    for name in ("HADOOP_CONF_DIR", "YARN_CONF_DIR"):
        if environment.get(name):
            found[name] = Path(environment[name])
    return found


def unarchivable(jars: Path, environment: Mapping[str, str]) -> str | None:
    """Why no archive can be written for the driver's class path, None when one can:
    the JDK archives no class of a class path holding a directory with files in it
    (a ``spark-defaults.conf`` in ``SPARK_CONF_DIR`` is one)."""
    for name, directory in class_path_directories(jars, environment).items():
        with contextlib.suppress(OSError):
            if directory.is_dir() and any(directory.iterdir()):
                return (f"{name} {directory} is on Spark's class path and holds files, "
                        "with which the JVM archives no class")
    return None


def _stat_line(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return f"{path} -"
    return f"{path} {st.st_size} {st.st_mtime_ns} {st.st_ino}"


def install_key(java: Path, jars: Path, environment: Mapping[str, str] | None = None) -> str:
    """A short hash of a Java and a Spark install: the ``java`` executable and the JVM
    library beside it (a JDK update replaces them), the jars' names, sizes and
    modification times (a Spark upgrade or an added jar changes them), and the
    CLASS_PATH_ENVIRONMENT of *environment* (default: this process's), which adds to
    the class path (a benchmark's own ``SPARK_CONF_DIR`` is another class path)."""
    environment = os.environ if environment is None else environment
    lines = [f"{name}={environment.get(name, '')}" for name in CLASS_PATH_ENVIRONMENT]
    lines.append(_stat_line(java))
    home = java.parent.parent
    lines += [_stat_line(home / "lib" / "server" / name)
              for name in ("libjvm.so", "classes.jsa")]
    with contextlib.suppress(OSError):
        for entry in sorted(os.scandir(jars), key=lambda e: e.name):
            st = entry.stat()
            lines.append(f"{entry.name} {st.st_size} {st.st_mtime_ns}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def archive_path(directory: Path, key: str) -> Path:
    """The archive of *key* in *directory*."""
    return directory / f"{PREFIX}{key}.jsa"


def temporary_path(directory: Path, key: str) -> Path:
    """A temporary file of *key* no other run uses, for a JVM to write at exit."""
    return directory / f"{PREFIX}{key}-{secrets.token_hex(8)}.part"


def regions_fit(header: bytes, size: int) -> bool:
    """Whether every region a JDK 17 archive *header* declares lies within *size*
    bytes (the JVM maps them without checking, and dies reading past the end)."""
    for index in range(JDK17_REGIONS):
        start = JDK17_FIRST_REGION + index * JDK17_REGION_SIZE
        fields = JDK17_REGION.unpack_from(header, start)
        offset, used = fields[6], fields[8]
        if used and offset + used > size:
            return False
    return True


def usable(path: Path) -> bool:
    """Whether *path* is a complete dynamic archive: written to the end (the magic is
    written last) and, for a JDK 17 header, not cut short."""
    length = JDK17_FIRST_REGION + JDK17_REGIONS * JDK17_REGION_SIZE
    try:
        with open(path, "rb") as f:
            header = f.read(length)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return False
    if len(header) < HEADER.size:
        return False
    magic, _crc, version = HEADER.unpack_from(header)
    if magic != DYNAMIC_MAGIC:
        return False
    if version == JDK17_VERSION:
        return len(header) == length and regions_fit(header, size)
    # Another JDK's layout: the magic, written last, says the file is complete.
    return True


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def tidy(directory: Path, key: str, now: float | None = None) -> None:
    """Promote *key*'s complete temporary files to its archive; remove archives of other
    keys unused for ``UNUSED_AGE``, and temporary files that were never finished
    (``PARTIAL_AGE`` old)."""
    now = time.time() if now is None else now
    final = archive_path(directory, key)
    for entry in os.scandir(directory):
        match = NAME.fullmatch(entry.name)
        if match is None:
            continue
        path = Path(entry.path)
        if match["run"] is None:
            with contextlib.suppress(OSError):
                if match["key"] != key and now - entry.stat().st_mtime > UNUSED_AGE:
                    path.unlink()
            continue
        if match["key"] == key and usable(path):
            # Another run may have promoted it a moment ago: then it is gone.
            with contextlib.suppress(OSError):
                os.replace(path, final)
            continue
        with contextlib.suppress(OSError):
            if now - entry.stat().st_mtime > PARTIAL_AGE:
                path.unlink()


def writable(directory: Path) -> str | None:
    """None when a file can be created in *directory* (made if needed), else why not."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".probe-{secrets.token_hex(8)}"
        probe.touch(exist_ok=False)
        probe.unlink()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def prepare(directory: Path) -> Plan:
    """The driver JVM's options for the archive in *directory*: map it when there is a
    usable one, else write one at exit; none when the directory cannot be written."""
    try:
        return _prepare(directory)
    except Exception as exc:  # the archive only saves time: it never fails an audit
        return Plan(note=f"{type(exc).__name__}: {exc}")


def _prepare(directory: Path) -> Plan:
    java = java_executable()
    if java is None:
        return Plan(note="no java found")  # Spark will fail to start and say so
    if UNSPLITTABLE.search(str(directory)):
        return Plan(note=f"its directory {directory} has spaces or quotes in its path")
    jars = spark_jars()
    why = unarchivable(jars, os.environ)
    if why is not None:
        return Plan(note=why)
    why = writable(directory)
    if why is not None:
        return Plan(note=f"cannot write to {directory} ({why})")
    key = install_key(java, jars)
    try:
        tidy(directory, key)
    except OSError as exc:
        return Plan(note=f"cannot read {directory} ({exc.strerror})")
    final = archive_path(directory, key)
    if usable(final):
        with contextlib.suppress(OSError):
            os.utime(final)  # in use: kept however long other keys' runs go on
        return Plan((QUIET, f"-XX:SharedArchiveFile={final}"), archive=final,
                    inode=_inode(final))
    _remove(final)  # garbage or cut short: the JVM would ignore it, or crash
    part = temporary_path(directory, key)
    return Plan((QUIET, f"-XX:ArchiveClassesAtExit={part}"), writing=part)


def mapped(pid: int, path: Path) -> bool | None:
    """Whether process *pid* maps *path*; None where the system does not say (no
    ``/proc``)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None
    # A file renamed over since it was mapped shows as "path (deleted)".
    return any(line.endswith((f" {path}", f" {path} (deleted)"))
               for line in maps.splitlines())


def _processes() -> dict[int, tuple[int, list[str]]]:
    """Every process /proc shows: pid -> (parent pid, command line arguments)."""
    found: dict[int, tuple[int, list[str]]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(entry.path, "stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            argv = Path(entry.path, "cmdline").read_bytes().decode(errors="replace")
            found[int(entry.name)] = (parent, argv.split("\0"))
    return found


def started_jvm(option: str) -> int | None:
    """The process id of the JVM below this process that was started with *option* (the
    archive option of its plan); None when none was (its JVM was already running, in a
    process that stopped a session and starts another) or /proc does not say."""
    try:
        processes = _processes()
    except OSError:
        return None
    below, frontier = set(), [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _) in processes.items() if ppid == parent]
        below.update(children)
        frontier += children
    return next((pid for pid in sorted(below) if option in processes[pid][1]), None)


def confirm(plan: Plan, progress: Progress) -> None:
    """Say in one line what the JVM started with *plan* does with the archive; remove an
    archive it did not map (it does not fit this JVM) so the next run writes one that
    does."""
    if plan.writing is not None:
        progress.say(f"class archive: none yet; Spark's JVM writes one to "
                     f"{plan.writing.parent} when it exits (about 170 MB)")
        return
    if plan.archive is None:
        if plan.note is not None:
            progress.say(f"class archive: not used, {plan.note}")
        return
    pid = started_jvm(plan.java_options[-1])
    if pid is None:  # no JVM of this run's to look at, or no /proc to look in
        return
    if mapped(pid, plan.archive) is False:
        if _inode(plan.archive) == plan.inode:  # not one another run put there since
            _remove(plan.archive)
        progress.say(f"class archive: {plan.archive} does not fit this JVM; removed, "
                     "the next run writes another")
        return
    progress.say(f"class archive: Spark's classes from {plan.archive}")
