"""One local Spark session for every audit test of a pytest run (a JVM start is slow).

``spark()`` starts it on first use: ``local[2]``, four shuffle partitions, no UI, quiet
logs, its Python workers on this interpreter (whatever ``python3`` is on PATH may not
have pyspark or delayq). A test module turns it into a fixture with
``spark = pytest.fixture(scope="session")(spark_fixture)``.

The audits need Java 17 or newer (PySpark 4). The README test command
(``scripts/test.sh``) installs one; a machine without any Java skips the Spark tests with
the reason, and one with a Java too old fails them, saying so.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

MIN_JAVA = 17
SHUFFLE_PARTITIONS = 4

_session = None
_scratch: Path | None = None


def java_command() -> str | None:
    """The java PySpark starts: ``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else PATH's."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        return str(candidate) if candidate.exists() else None
    return shutil.which("java")


def java_major(java: str) -> int | None:
    """Java's major version (8 for 1.8.0_402, 17 for 17.0.15), None when unreadable."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True,
                             timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r'version "(?:1\.)?(\d+)', out)
    return int(found.group(1)) if found else None


def require_java() -> None:
    """Skip when there is no Java at all; fail when the Java is too old for PySpark 4."""
    java = java_command()
    if java is None:
        pytest.skip("no Java: the PySpark audit tests need Java 17+ (bash scripts/test.sh "
                    "installs openjdk-17-jre-headless)")
    major = java_major(java)
    if major is None or major < MIN_JAVA:
        pytest.fail(f"{java} is Java {major}; PySpark 4 needs Java {MIN_JAVA} or newer "
                    "(set JAVA_HOME to one, or run bash scripts/test.sh)", pytrace=False)


def scratch() -> Path:
    """A directory of this run's own for Spark's warehouse and local files."""
    global _scratch
    if _scratch is None:
        _scratch = Path(tempfile.mkdtemp(prefix="delayq-spark-"))
        atexit.register(shutil.rmtree, _scratch, True)
    return _scratch


LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def quiet_log4j(directory: Path) -> Path:
    """A log4j2 configuration that only lets errors through."""
    path = directory / "log4j2.properties"
    path.write_text(LOG4J2)
    return path


def spark():
    """The run's SparkSession, started on first use (and again if someone stopped it)."""
    global _session
    if _session is not None and _session.sparkContext._jsc is not None:
        return _session
    require_java()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    local = scratch()
    _session = (
        SparkSession.builder.master("local[2]")
        .appName("delayq-audit-tests")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.warehouse.dir", str(local / "warehouse"))
        .config("spark.driver.extraJavaOptions",
                f"-Dlog4j2.configurationFile={quiet_log4j(local)}")
        .getOrCreate())
    _session.sparkContext.setLogLevel("ERROR")
    atexit.register(stop)
    return _session


def stop() -> None:
    global _session
    if _session is not None:
        _session.stop()
        _session = None


def spark_fixture():
    """Body of a session-scoped ``spark`` fixture (see the module docstring)."""
    return spark()
