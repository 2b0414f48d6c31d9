"""``delayq-audit``: the delay and dead-letter audits of a delayq store, on Spark.

::

    delayq-audit {delay,dlq,all} (--config-file F | --uri U) --output DIR
                 [--project P] [--queues a,b] [--as-of T] [--master URL] [--partitions N]
                 [--state DIR] [--class-archive DIR | --no-class-archive]

Writes DIR/audit.json, DIR/delay.parquet, DIR/dead_letter.parquet (for the audits run)
and DIR/report.html; progress goes to stderr. Exit status: 0 done, 1 the store or Spark
failed, 2 bad arguments (an unwritable DIR, an --as-of the store's clock has not
reached, a --state DIR of another store or a newer delayq), 3 nothing audited (no queue
matched, or no event): the outputs say so too.

Everything that can be checked without Spark is checked before it starts: the output
directory, the store, the audit time, what matches. Paths are made absolute first, so
Spark's processes read the same store whatever their working directory; when nothing
matches, Spark is not started at all.

Spark: a session already active in the process is used and left running (so a test or
a notebook can call ``main``); otherwise delayq-audit starts one with ``--master``, the
master spark-submit was given, or ``local[*]``, and stops it at the end. A session it
starts logs Spark's errors only (LOG4J2), not its start-up chatter, and its JVM maps
Spark's classes from a class archive of the cache directory, or writes one when it
exits (``class_archive``).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import NoReturn

from pyspark.sql import SparkSession

from delayq.spark_jobs import (
    class_archive,
    job,
    output,
    report,
    small_trail,
    source,
    state,
    store,
)
from delayq.spark_jobs.output import AUDITS, DEAD_LETTER, DELAY
from delayq.spark_jobs.progress import Progress
from delayq.spark_jobs.scope import Scope
from delayq.spark_jobs.store import StoreError, StoreLocation

PROG = "delayq-audit"
COMMANDS = {"delay": (DELAY,), "dlq": (DEAD_LETTER,), "all": AUDITS}
DEFAULT_MASTER = "local[*]"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOTHING = 0, 1, 2, 3
LOG4J2 = Path(__file__).with_name("log4j2.properties")
# A line of an error report naming the exception: "package.SomeError: what happened".
EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception)\b[^:\n]*: .+$", re.MULTILINE)


class UsageError(Exception):
    """Bad arguments: reported with the usage, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of exiting, so main() can return 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def parse_as_of(text: str) -> float:
    """POSIX seconds from ``--as-of``: a number of seconds or an RFC 3339 time."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is neither POSIX seconds nor an RFC 3339 time such as "
                "2026-05-09T07:35:25Z") from None
        if moment.tzinfo is None:
            raise argparse.ArgumentTypeError(
                f"{text!r} has no UTC offset; add Z or one like +02:00") from None
        return moment.timestamp()
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"{text!r} is not a time")
    return seconds


def positive_int(text: str) -> int | None:
    """``--partitions``: an integer of at least 1; None when empty (the default)."""
    try:
        return source.parse_partitions(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def queue_list(text: str) -> tuple[str, ...]:
    """``--queues``: comma-separated queue names."""
    try:
        return source.parse_queues(text) or ()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=(
        "Audit delays and dead-lettering from a delayq store's event trail, on Spark. "
        "Writes audit.json, Parquet files and report.html into --output."))
    parser.add_argument("command", choices=list(COMMANDS),
                        help="delay: the delay audit; dlq: the dead-letter audit; all: both")
    store = parser.add_mutually_exclusive_group(required=True)
    store.add_argument("--config-file", metavar="F",
                       help="the delayq configuration file of the store (any driver)")
    store.add_argument("--uri", metavar="U", help="the store as sqlite:///path, "
                       "redis://host:port[/db] or mongodb://...")
    parser.add_argument("--output", metavar="DIR", required=True,
                        help="directory for the outputs (created if needed)")
    parser.add_argument("--project", metavar="P", help="audit this project only")
    parser.add_argument("--queues", metavar="a,b", type=queue_list,
                        help="report these queues only (comma-separated)")
    parser.add_argument("--as-of", metavar="T", type=parse_as_of,
                        help="audit time: POSIX seconds or RFC 3339 (default: the store's "
                             "clock at start); later events are ignored")
    parser.add_argument("--master", metavar="URL",
                        help=f"Spark master (default: spark-submit's, else {DEFAULT_MASTER})")
    parser.add_argument("--partitions", metavar="N", type=positive_int,
                        help="Spark partitions to read the store with (default: Spark's "
                             "default parallelism)")
    parser.add_argument("--state", metavar="DIR",
                        help="keep what is read in DIR and read from the store only what "
                             "came after it the next time (created if needed)")
    archive = parser.add_mutually_exclusive_group()
    archive.add_argument("--class-archive", metavar="DIR", type=archive_directory,
                         default=None,
                         help="keep the archive of Spark's classes that makes the JVM start "
                              "faster in DIR (default: $XDG_CACHE_HOME/delayq, else "
                              "~/.cache/delayq; about 170 MB, written by the first run)")
    archive.add_argument("--no-class-archive", action="store_true",
                         help="start Spark's JVM without a class archive, and write none")
    return parser


def archive_directory(text: str) -> Path:
    """``--class-archive``: an absolute path (a directory, or one to make)."""
    return Path(text).expanduser().absolute()


def class_archive_directory(args: argparse.Namespace) -> Path | None:
    """Where the class archive is kept; None: no archive (``--no-class-archive``, or
    no home directory to hold a cache)."""
    if args.no_class_archive:
        return None
    return args.class_archive or class_archive.default_directory()


def request_from(args: argparse.Namespace) -> job.Request:
    """The request of *args*, its store location made absolute; ValueError for a bad
    one."""
    location = store.absolute(StoreLocation(config_file=args.config_file, uri=args.uri))
    return job.Request(location=location,
                       scope=Scope(project=args.project, queues=args.queues or None),
                       audits=COMMANDS[args.command], as_of=args.as_of,
                       partitions=args.partitions,
                       state=None if args.state is None else state_directory(args.state))


def state_directory(text: str) -> Path:
    """``--state``: an absolute path that is a directory or can become one."""
    path = Path(text).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise ValueError(f"--state {text} exists and is not a directory")
    return path


def reason(exc: BaseException) -> str:
    """One line saying why *exc* happened, out of a Spark or Python error report."""
    text = str(exc).strip()
    named = list(EXCEPTION_LINE.finditer(text))
    if named:  # the last one is the root cause in a Python traceback
        return named[-1].group(0).strip()[:500]
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return (first or type(exc).__name__)[:500]


def _under_spark_submit() -> bool:
    # spark-submit starts the JVM first and tells the Python driver where it is.
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(master: str | None, progress: Progress,
                  java_options: Sequence[str] = (),
                  archive: Path | None = None) -> tuple[SparkSession, bool]:
    """The session to run on, and whether delayq-audit started it (and must stop it);
    *java_options* go to the driver's JVM when delayq-audit starts it, and so does the
    class archive of the directory *archive* (None: none)."""
    from pyspark import SparkContext

    active = SparkSession.getActiveSession()
    if active is None and SparkContext._active_spark_context is not None:
        active = SparkSession.builder.getOrCreate()  # a session of another thread
    if active is not None:
        if master is not None:
            progress.say(f"--master {master} ignored: using the Spark session already "
                         "running in this process")
        return active, False
    chosen = master or (None if _under_spark_submit() else DEFAULT_MASTER)
    builder = (SparkSession.builder.appName(PROG)
               .config("spark.ui.showConsoleProgress", "true"))
    plan = class_archive.Plan()
    if chosen is not None:
        if archive is not None:
            plan = class_archive.prepare(archive)
        options = " ".join([f"-Dlog4j2.configurationFile={LOG4J2}", *java_options,
                            *plan.java_options])
        builder = builder.master(chosen).config("spark.driver.extraJavaOptions", options)
    if chosen is not None and chosen.startswith("local"):
        # Local Python workers must run this interpreter (it has delayq and pyspark);
        # whatever python3 is first on PATH may have neither.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        # Everything runs on this machine: no need to look for a network address (and
        # warn when the host name resolves to a loopback one).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # A local audit ends with its report; the web UI's server costs a second of
        # start-up that no one sees.
        builder = builder.config("spark.ui.enabled", "false")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    class_archive.confirm(plan, progress)
    return spark, True


def write_outputs(request: job.Request, plan: job.Plan, outcome: job.Outcome,
                  progress: Progress, directory: Path) -> None:
    """audit.json, the Parquet files of the audits run, and report.html."""
    with progress.step(f"writing {directory}") as note:
        held = (None if outcome.state is None or request.state is None
                else state.report(request.state, outcome.state,
                                  outcome.read_from_store or 0))
        doc = output.document(
            as_of=plan.as_of, driver=plan.driver, scope=request.scope, rows=outcome.rows,
            generated_at=time.time(), events=outcome.events,
            nothing_audited=outcome.nothing_audited, missing_queues=plan.missing,
            state=held)
        written = [output.write_json(directory, doc)]
        for audit in request.audits:
            written.append(output.write_parquet(directory, audit, outcome.rows[audit],
                                                job.ROW_SCHEMAS[audit]))
        written.append(output.write_text(directory, output.REPORT_HTML, report.render(doc)))
        note(", ".join(p.name for p in written))


def finish(request: job.Request, plan: job.Plan, outcome: job.Outcome,
           progress: Progress, directory: Path) -> int:
    """Write the outputs and say how it went; the exit status."""
    write_outputs(request, plan, outcome, progress, directory)
    if outcome.nothing_audited is not None:
        sys.stderr.write(f"{PROG}: nothing audited: {outcome.nothing_audited}\n")
        return EXIT_NOTHING
    progress.say(f"done in {progress.elapsed:.1f}s")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Run delayq-audit with *argv* (default: the command line); the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        request = request_from(args)
        directory = output.prepare(args.output)
    except (UsageError, ValueError) as exc:
        sys.stderr.write(f"{parser.format_usage()}{PROG}: error: {exc}\n")
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    progress = Progress()
    try:
        plan = job.make_plan(request)
    except ValueError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return EXIT_USAGE
    except (StoreError, NotImplementedError) as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return EXIT_FAILED
    except Exception as exc:  # the store failing while listing its queues
        sys.stderr.write(f"{PROG}: error: cannot read {store.describe(request.location)}: "
                         f"{store.cause(exc)}\n")
        return EXIT_FAILED
    if plan.missing:
        progress.say(f"not in the store (no messages or events): {', '.join(plan.missing)}")
    if plan.nothing_audited is not None:
        return finish(request, plan, job.nothing(request, plan.nothing_audited), progress,
                      directory)
    progress.say(f"store: {plan.driver}, {plan.queue_count} queue(s) to read, "
                 f"as of {output.rfc3339(plan.as_of)}")
    try:
        small = small_trail.fits(request.location, request.scope.project, plan.read_queues)
    except Exception as exc:  # the store failing while its trail is read
        sys.stderr.write(f"{PROG}: error: cannot read {store.describe(request.location)}: "
                         f"{store.cause(exc)}\n")
        return EXIT_FAILED
    try:
        spark, owned = spark_session(args.master, progress,
                                     small_trail.JAVA_OPTIONS if small else (),
                                     class_archive_directory(args))
    except Exception as exc:  # no Java, a master that does not answer, ...
        sys.stderr.write(f"{PROG}: error: cannot start Spark: {reason(exc)}\n")
        return EXIT_FAILED
    try:
        progress.say(f"Spark {spark.version}, master {spark.conf.get('spark.master', '?')}")
        outcome = job.run(spark, request, plan, progress)
        return finish(request, plan, outcome, progress, directory)
    except Exception as exc:  # a store failing mid-read, Spark errors: one line, not pages
        sys.stderr.write(f"{PROG}: error: the audit failed: {reason(exc)}\n")
        return EXIT_FAILED
    finally:
        if owned:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
