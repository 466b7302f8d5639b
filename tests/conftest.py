"""Suite-wide fixtures: every test starts from a clean kscale environment and may not leak env vars."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kscale import environment

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def _no_leaked_environment_variables():
    """Fail any test that leaves os.environ different from how it found it (use monkeypatch instead)."""
    # pytest's own bookkeeping, and what importing TensorFlow sets the first time a test imports it
    ignored = {"PYTEST_CURRENT_TEST", "TF2_BEHAVIOR", "TPU_ML_PLATFORM"}
    before = {k: v for k, v in os.environ.items() if k not in ignored}
    environment.reset()
    yield
    environment.reset()
    after = {k: v for k, v in os.environ.items() if k not in ignored}
    leaked = {k: after[k] for k in after.keys() - before.keys()}
    removed = sorted(before.keys() - after.keys())
    changed = {k: after[k] for k in before.keys() & after.keys() if before[k] != after[k]}
    for key in set(os.environ) - set(before) - ignored:
        del os.environ[key]
    os.environ.update(before)
    if leaked or removed or changed:
        pytest.fail(f"test leaked environment changes: added={leaked} removed={removed} changed={changed}")


@pytest.fixture
def clean_launcher_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove every launcher variable from os.environ for this test (restored afterwards)."""
    for name in list(os.environ):
        if name.startswith((*environment.LAUNCHER_VARIABLE_PREFIXES, "KSCALE_")):
            monkeypatch.delenv(name)
    environment.reset()


@pytest.fixture(scope="session")
def worker_env() -> Callable[..., dict[str, str]]:
    """`worker_env(**extra)`: the environment for a worker a test starts: this process's variables without
    a surrounding job's (or a test's) launcher ones, the repo importable, this venv's commands first."""

    def make(**extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith((*environment.LAUNCHER_VARIABLE_PREFIXES, "KSCALE_"))
        }
        env.update(PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2", PATH=f"{BIN}:{env.get('PATH', '')}")
        env["PYTHONPATH"] = f"{REPO}:{env.get('PYTHONPATH', '')}"
        env.update(extra)
        return env

    return make


@pytest.fixture(scope="session")
def launch(worker_env):
    """Run a command from the repo root; its output (stdout and stderr) and status."""

    def run(args: list[str], timeout: int = 240, **extra_env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(a) for a in args],
            env=worker_env(**extra_env),
            cwd=REPO,
            timeout=timeout,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

    return run


#: What a worker prints when it dies of a native error: the lines that say why, wherever they fall in output
#: whose tail is the launcher's summary of exit codes.
_CRASH_MARKS = (
    "terminate called",
    "what():",
    "Fatal Python error",
    "Traceback",
    "Error:",
    "Aborted",
    "Signal ",
)


def crash_report(output: str, tail: int = 2500) -> str:
    """A failed job's output for an assertion message: each line that says why a worker died, then the tail."""
    why = [line for line in output.splitlines() if any(mark in line for mark in _CRASH_MARKS)]
    return "\n".join(why[:40]) + "\n...\n" + output[-tail:]
