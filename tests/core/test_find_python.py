"""scripts/find-python: the Makefile's way to a working pythonX.Y (pyenv shims included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "find-python"


def test_finds_a_working_interpreter_of_the_running_version():
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    found = subprocess.run([str(SCRIPT), version], capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stderr
    path = found.stdout.strip()
    reported = subprocess.run(
        [path, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    )
    assert reported.stdout.strip() == str(tuple(sys.version_info[:2]))


def test_a_missing_version_says_how_to_install_it():
    missing = subprocess.run([str(SCRIPT), "2.1"], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and missing.stdout == ""
    assert "pyenv install 2.1" in missing.stderr and "PYTHON21=" in missing.stderr
