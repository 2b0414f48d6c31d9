"""Which ``appendfsync`` setting keeps acknowledged writes through a Redis process crash.

The operator guide's persistence table rests on this. For each ``--modes`` setting it
starts a private ``redis-server`` with ``appendonly yes`` (a free loopback port, never
6379, its data in ``--dir``), and ``--rounds`` times:

1. a client increments one counter as fast as Redis answers, remembering the last value
   Redis acknowledged;
2. after a random 0.5–1.5 s, ``redis-server`` is killed with SIGKILL — the process only:
   the OS keeps everything Redis had written to its AOF;
3. ``redis-server`` starts again on its AOF, and the counter is read back. A stored value
   below the last acknowledged one means acknowledged writes were lost.

``--disk-load`` keeps the disk busy meanwhile: a thread writes 128 MiB to a file beside
the AOF and fsyncs it, again and again, as a backup, a database checkpoint or another
tenant of a shared machine does. Redis's own fsync then waits behind those writes, and
under ``everysec`` Redis postpones its AOF write while that background fsync runs (up to
2 s) — but still answers its clients. Under ``always`` it writes (and fsyncs) before
answering.

Keep ``--dir`` on the disk Redis would use: on tmpfs every fsync is instant and nothing
is ever postponed.

Reported per setting: rounds, rounds that lost acknowledged writes, writes acknowledged
and writes lost in all, and the largest loss of one crash. Written as JSON to
``benchmarks/results/redis_aof_loss.json`` (or ``--output``).

Usage::

    python benchmarks/redis_aof_loss.py [--modes everysec,always] [--rounds 30]
                                        [--disk-load] [--dir PATH] [--seed 1]
                                        [--output PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import redis

try:
    import backlog
except ModuleNotFoundError:  # imported from elsewhere than benchmarks/
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import backlog

RESULTS = Path(__file__).resolve().parent / "results" / "redis_aof_loss.json"
COUNTER = "aof-loss:counter"
DISK_LOAD_BLOCK = 1024 * 1024
DISK_LOAD_BURST = 128  # blocks written before each fsync: a large backlog of dirty pages


@dataclass
class Outcome:
    """What one ``appendfsync`` setting kept through ``rounds`` crashes."""

    mode: str
    rounds: int = 0
    rounds_with_loss: int = 0
    acknowledged: int = 0
    lost: int = 0
    largest_loss: int = 0


class DiskLoad:
    """A thread that writes bursts to *path*, each ended by an fsync, until stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DiskLoad:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join()
        self.path.unlink(missing_ok=True)

    def _run(self) -> None:
        block = os.urandom(DISK_LOAD_BLOCK)
        while not self.stopped.is_set():
            with open(self.path, "wb") as file:
                for _ in range(DISK_LOAD_BURST):
                    if self.stopped.is_set():
                        break
                    file.write(block)
                file.flush()
                os.fsync(file.fileno())


def increment_until_gone(port: int, last_acknowledged: list[int]) -> None:
    """INCR the counter until Redis goes away; keep the last value it answered."""
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
    try:
        while True:
            last_acknowledged[0] = client.incr(COUNTER)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
        pass
    finally:
        client.close()


def stored_counter(port: int) -> int:
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        return int(client.get(COUNTER) or 0)
    finally:
        client.close()


def crash_rounds(mode: str, rounds: int, directory: Path, rng: random.Random) -> Outcome:
    """*rounds* SIGKILLs of a ``redis-server`` running ``appendfsync`` *mode*."""
    outcome = Outcome(mode)
    server = backlog.RedisServer(backlog.free_port(), directory,
                                 ["--appendonly", "yes", "--appendfsync", mode])
    server.start()
    try:
        for _ in range(rounds):
            before = stored_counter(server.port)
            last_acknowledged = [before]
            writer = threading.Thread(target=increment_until_gone,
                                      args=(server.port, last_acknowledged))
            writer.start()
            time.sleep(rng.uniform(0.5, 1.5))
            server.proc.kill()
            server.proc.wait()
            writer.join()
            server.start()
            lost = max(0, last_acknowledged[0] - stored_counter(server.port))
            outcome.rounds += 1
            outcome.acknowledged += last_acknowledged[0] - before
            outcome.lost += lost
            outcome.rounds_with_loss += lost > 0
            outcome.largest_loss = max(outcome.largest_loss, lost)
            print(f"  {mode:<9} round {outcome.rounds:>3}: "
                  f"{last_acknowledged[0] - before:>7} acknowledged, {lost:>6} lost",
                  flush=True)
    finally:
        server.stop()
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="everysec,always",
                        help="appendfsync settings to try, comma-separated")
    parser.add_argument("--rounds", type=int, default=30, help="crashes per setting")
    parser.add_argument("--disk-load", action="store_true",
                        help="keep the disk busy with bursts of writes beside the AOF")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the AOF goes (default: a new temporary directory)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="delayq-aof-", dir=args.dir))
    print(f"AOF directory: {workdir}" + (" (with disk load)" if args.disk_load else ""))
    outcomes: list[Outcome] = []
    try:
        for mode in args.modes.split(","):
            load = DiskLoad(workdir / "disk-load") if args.disk_load else nullcontext()
            with load:
                outcomes.append(crash_rounds(mode, args.rounds, workdir / mode, rng))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"\n{'appendfsync':<12} {'rounds':>6} {'with loss':>9} {'acknowledged':>12} "
          f"{'lost':>7} {'largest':>7}")
    for outcome in outcomes:
        print(f"{outcome.mode:<12} {outcome.rounds:>6} {outcome.rounds_with_loss:>9} "
              f"{outcome.acknowledged:>12} {outcome.lost:>7} {outcome.largest_loss:>7}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "disk_load": args.disk_load, "seed": args.seed,
        "outcomes": [asdict(outcome) for outcome in outcomes]}, indent=2) + "\n")
    print(f"\nwritten to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
