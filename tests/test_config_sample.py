"""etc/delayq.conf.sample must match what oslo-config-generator makes of the code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATOR_CONFIG = ROOT / "etc" / "delayq-config-generator.conf"
SAMPLE = ROOT / "etc" / "delayq.conf.sample"
REGENERATE = "oslo-config-generator --config-file etc/delayq-config-generator.conf"


def test_config_sample_is_current(tmp_path):
    generator = Path(sys.executable).parent / "oslo-config-generator"
    assert generator.exists(), f"{generator} is missing: install oslo.config in this venv."
    fresh = tmp_path / "delayq.conf.sample"
    subprocess.run([str(generator), "--config-file", str(GENERATOR_CONFIG),
                    "--output-file", str(fresh)], cwd=ROOT, check=True)
    assert fresh.read_text() == SAMPLE.read_text(), (
        "etc/delayq.conf.sample is stale: the options in delayq/ changed. Regenerate it "
        f"from the repository root with `{REGENERATE}` and commit the result.")
