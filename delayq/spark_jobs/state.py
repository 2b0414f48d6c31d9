"""The state of incremental re-audits: ``delayq-audit ... --state DIR``.

DIR keeps what earlier audits read from one store: its trail up to a *watermark* (a
time of the store's clock), grouped per message (``trail.partials``), as Parquet. The
next audit with the same DIR reads from the store only the events after the watermark,
merges them in (``trail.merged``) and audits the whole history.

::

    DIR/state.json       the layers that are current and what they hold (``Saved``)
    DIR/layer-<hex>/     one layer: the Parquet files of some messages' partials

The partials are in layers, oldest first, each of the events of one run: those after
the previous watermark, up to its own. A message with events in several layers has a
row in each, and the rows merge when the state is read (``trail.merged``): a re-audit
writes only what it read from the store, so writing the state costs what is new, not
the size of the state. Once there are MAX_LAYERS, they are written again as one.

A run writes its layer beside the current ones, then replaces ``state.json`` in one
step (``os.replace``): a run that dies before leaves the previous layers current, one
that dies after leaves the new ones. Layers ``state.json`` does not name are removed
once it names others (left over by a run that died, they go at the next one).

A state belongs to one store and one ``--project`` (all projects when none): a run
given another is refused, as is a state written by a newer format of delayq, which
this one cannot read; one of an older format is read again from the store.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import tempfile
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from delayq import __version__
from delayq.spark_jobs import trail
from delayq.spark_jobs.output import rfc3339

STATE_FILE = "state.json"
LAYER_PREFIX = "layer-"
TEMPORARY_PREFIX = ".state-"
# Layers past which a run writes the state again as one: the layers after the first are
# merged into it by regrouping their messages, whose count grows with each layer.
MAX_LAYERS = 8
# The layout of DIR and what its layers mean; a change either way makes it 3. Format 1
# layers replaced a message's rows in the layers before them.
FORMAT = 2
# How far the watermark stays behind the store's clock at the start of a run, in
# seconds. A driver may add an event with a time just before its clock's now: MongoDB
# and Swift write a request's events after its change, and a write may take its time
# from the clock before it commits. Events this recent are read from the store again
# by the next run instead of being held in the state, where a late one would be missed.
LAG = 300.0


class StateError(ValueError):
    """A state directory that cannot be used for this audit (a bad argument): says
    why."""


@dataclass(frozen=True, slots=True)
class Saved:
    """What ``state.json`` says."""

    format: int
    delayq: str  # the version that wrote it, for people
    store: str  # store.identity of the store read
    project: str | None  # the --project read; None: every project
    watermark: float  # the partials hold every event at or before it
    events: int  # how many events the partials hold
    layers: list[str]  # the directories of the partials in DIR, oldest first


@dataclass(frozen=True, slots=True)
class State:
    """A state directory, for one store and project."""

    directory: Path
    store: str
    project: str | None

    def load(self) -> Saved | None:
        """The current generation; None when there is none yet, or when it is of an
        older format (read again from the store). Raises StateError when it belongs to
        another store or project, is of a newer format, or cannot be read."""
        path = self.directory / STATE_FILE
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise StateError(f"cannot read {path}: {exc}") from exc
        try:
            saved = Saved(**doc)
        except TypeError as exc:
            raise StateError(f"{path} is not a delayq-audit state") from exc
        if saved.format > FORMAT:
            raise StateError(
                f"{self.directory} was written by delayq {saved.delayq}, whose state "
                f"format ({saved.format}) this delayq ({__version__}) cannot read: use "
                "that delayq, or another --state directory")
        if saved.store != self.store:
            raise StateError(f"{self.directory} holds the trail of {saved.store}, not of "
                             f"{self.store}: use another --state directory")
        if saved.project != self.project:
            raise StateError(f"{self.directory} holds {_projects(saved.project)}, not "
                             f"{_projects(self.project)}: use another --state directory")
        if saved.format < FORMAT:
            return None
        return saved

    def partials(self, spark: SparkSession, layers: list[str],
                 recent: DataFrame | None = None) -> DataFrame:
        """The partials of the events *layers* hold, and of those *recent* (partials of
        events after them) has, when given: one row per message.

        The first layer, which holds most messages, is read twice (the messages the
        others touch are regrouped, the rest pass as they are); the others, and
        *recent*, are small.
        """
        first, *later = [spark.read.parquet(str(self.directory / layer))
                         for layer in layers]
        if recent is not None:
            later.append(recent)
        if not later:
            return first
        return trail.merged(first, functools.reduce(DataFrame.unionByName, later))

    def write(self, partials: DataFrame, files: int) -> str:
        """Write *partials* as a new layer in at most *files* Parquet files (a Spark
        job); the layer's name."""
        self.directory.mkdir(parents=True, exist_ok=True)
        layer = f"{LAYER_PREFIX}{uuid.uuid4().hex[:12]}"
        partials.coalesce(max(1, files)).write.parquet(str(self.directory / layer))
        return layer

    def commit(self, layers: list[str], watermark: float, events: int) -> Saved:
        """Make *layers* the current ones, holding *events* events up to *watermark*,
        and remove the others."""
        saved = Saved(format=FORMAT, delayq=__version__, store=self.store,
                      project=self.project, watermark=watermark, events=events,
                      layers=layers)
        handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=TEMPORARY_PREFIX)
        try:
            with os.fdopen(handle, "w") as out:
                json.dump(asdict(saved), out, indent=2)
                out.write("\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.directory / STATE_FILE)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        self.remove_others(layers)
        return saved

    def remove_others(self, current: list[str]) -> None:
        """Remove the layers not in *current*, and temporary files a run that died
        left."""
        for entry in self.directory.iterdir():
            if entry.name.startswith(LAYER_PREFIX) and entry.name not in current:
                shutil.rmtree(entry, ignore_errors=True)
            elif entry.name.startswith(TEMPORARY_PREFIX):
                with contextlib.suppress(OSError):
                    entry.unlink()


def _projects(project: str | None) -> str:
    return "every project" if project is None else f"project {project}"


def watermark(as_of: float, clock: float) -> float:
    """The watermark of a run auditing as of *as_of* on a store whose clock read *clock*
    when it started: LAG behind the clock, never after the audit time."""
    return min(as_of, clock - LAG)


def report(directory: Path, saved: Saved, read_from_store: int) -> dict[str, Any]:
    """The ``state`` of audit.json: the directory, its watermark and the events it
    holds, and how many events of the audit were read from the store."""
    return {"directory": str(directory), "watermark": saved.watermark,
            "watermark_text": rfc3339(saved.watermark), "events_held": saved.events,
            "events_read_from_store": read_from_store}
