"""python-zaqarclient's own functional suite, fetched once and cached in the checkout.

The client's wheel ships the suite's base classes (``zaqarclient.tests``) but not its test
modules (``tests/functional`` of its source tree): those come from the client's sdist on
PyPI, at the very version installed, so that the modules and their base classes match.
The sdist is checked against its SHA-256 and only ``tests/functional`` is kept, under
``.cache/`` (git-ignored), so later runs start at once.

``python -m tests.zaqarclient_suite`` fetches it (``scripts/test.sh`` does, before
pytest, so that no test worker has to); ``tests/test_zaqarclient_functional.py`` runs it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

DISTRIBUTION = "python-zaqarclient"
# The client version the suite is taken from: the one pinned in pyproject.toml's test
# extra. Move both together, with the hash of the new sdist (PyPI lists it).
VERSION = "4.7.0"
SDIST_SHA256 = "2220ce5e07ead62bfeef809f8909a1299287141c797742751e860851f57166f5"
SDIST_NAME = f"python_zaqarclient-{VERSION}.tar.gz"
# Within the sdist: the functional tests, and the v2 API's among them.
FUNCTIONAL_DIR = "tests/functional"
V2_DIR = f"{FUNCTIONAL_DIR}/queues/v2"

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "zaqarclient-functional"


def suite_root() -> Path:
    """Where the pinned version's ``tests/functional`` is extracted."""
    return CACHE / VERSION


def ensure_suite() -> Path:
    """The directory holding ``tests/functional`` of the pinned client version: the cached
    one, else fetched from PyPI now. Fails when the installed client is another version,
    whose base classes the pinned suite may not fit."""
    installed = importlib.metadata.version(DISTRIBUTION)
    if installed != VERSION:
        raise RuntimeError(
            f"{DISTRIBUTION} {installed} is installed but its functional suite is pinned "
            f"at {VERSION} (tests/zaqarclient_suite.py): install {VERSION}, or move the "
            f"pin and its SHA-256 to {installed}")
    root = suite_root()
    if (root / V2_DIR).is_dir():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        sdist = _download(Path(scratch))
        extracted = Path(scratch) / "extracted"
        _extract_functional(sdist, extracted)
        try:
            # A rename is atomic: a concurrent fetch either finds the whole suite or none.
            os.rename(extracted, root)
        except OSError:
            if not (root / V2_DIR).is_dir():
                raise
    return root


def _download(into: Path) -> Path:
    # --no-binary: the sdist, which has the tests (the wheel has not); --no-deps: nothing
    # else. pip still prepares the sdist's metadata, in an isolated build environment
    # with the client's build tools (pbr), which it fetches from PyPI too.
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--no-binary", ":all:", "--dest", str(into),
                    f"{DISTRIBUTION}=={VERSION}"], check=True)
    sdist = into / SDIST_NAME
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise RuntimeError(f"{sdist.name} has SHA-256 {digest}, not the pinned "
                           f"{SDIST_SHA256}")
    return sdist


def _extract_functional(sdist: Path, into: Path) -> None:
    """Extract the sdist's ``tests/functional`` (without its top directory) into *into*."""
    top = sdist.name.removesuffix(".tar.gz")
    prefix = f"{top}/{FUNCTIONAL_DIR}/"
    with tarfile.open(sdist) as archive:
        members = []
        for member in archive.getmembers():
            if member.name.startswith(prefix) and (member.isfile() or member.isdir()):
                member.name = member.name.removeprefix(f"{top}/")
                members.append(member)
        if not members:
            raise RuntimeError(f"{sdist.name} has no {FUNCTIONAL_DIR}/")
        into.mkdir()
        archive.extractall(into, members=members, filter="data")


if __name__ == "__main__":
    print(ensure_suite())
