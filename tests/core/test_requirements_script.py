"""scripts/requirements: what each venv of the Makefile installs before kscale itself (setup.cfg's extras)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = [sys.executable, str(REPO / "scripts" / "requirements")]


def _requirements(*extras: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SCRIPT, *extras], capture_output=True, text=True, timeout=60)


def test_every_venv_of_the_makefile_gets_its_extras_requirements():
    calls = re.findall(r"^\t\$\(call install-kscale,[^,]+,([^)]+)\)", (REPO / "Makefile").read_text(), re.M)
    assert len(calls) == 5  # lanes A, B, C-jax, C-tf, C-torch
    for extras in calls:
        done = _requirements(*extras.split())
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert "numpy" in lines and "pytest-timeout" in lines and not any(x.startswith("#") for x in lines)
    assert "tensorflow-cpu==2.15.1" in _requirements("cpu").stdout.splitlines()


def test_an_unknown_extra_is_named_with_those_there_are():
    done = _requirements("cpu", "no-such-extra")
    assert done.returncode != 0 and "no extra no-such-extra" in done.stderr and "tf218" in done.stderr
