"""Suite-wide fixtures: every test starts from a clean kscale environment and may not leak env vars."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
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
    ignored = {
        "PYTEST_CURRENT_TEST",
        "TF2_BEHAVIOR",
        "TPU_ML_PLATFORM",
        "TPU_ML_PLATFORM_VERSION",  # TensorFlow 2.21, imported by a test in the JAX and torch lanes
        "ENABLE_RUNTIME_UPTIME_TELEMETRY",
        "HDF5_PLUGIN_PATH",
    }
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


@pytest.fixture(scope="session")
def launch_with_progress(worker_env):
    """Run a command that does many things in turn and prints a line with `mark` after each: its output
    and status.

    Its time budget is per thing, not for the whole: the command is stopped (as a hang) only when
    `each` seconds pass without a new `mark` line, so a slower or busier machine makes it slower, never
    red, and a job of 40 programs gets 40 programs' time. `limit` caps the whole all the same."""

    def run(
        args: list[str], mark: str, each: float = 300, limit: float = 7200, **extra_env: str
    ) -> subprocess.CompletedProcess:
        process = subprocess.Popen(
            [str(a) for a in args],
            env=worker_env(**extra_env),
            cwd=REPO,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its workers too are stopped with it
        )
        lines: list[str] = []
        last = [time.monotonic()]

        def read() -> None:
            for line in process.stdout:
                lines.append(line)
                if mark in line:  # launchers prefix each line with its rank
                    last[0] = time.monotonic()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        start, why = time.monotonic(), ""
        while process.poll() is None:
            now = time.monotonic()
            if now - last[0] > each or now - start > limit:
                why = (
                    f"\n[test] stopped: no line with {mark!r} for {each} s"
                    if now - last[0] > each
                    else f"\n[test] stopped: running for more than {limit} s"
                )
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                break
            time.sleep(0.5)
        process.wait()
        reader.join(timeout=10)
        return subprocess.CompletedProcess(args, process.returncode, "".join(lines) + why)

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


def pytest_addoption(parser):
    parser.addoption(
        "--one-way-per-program",
        nargs="?",
        const=0,
        default=None,
        type=int,
        metavar="K",
        help="conformance and generated programs: each program under one of the lane's ways in turn, so "
        "every program and every way runs, not every pair; K (default 0) shifts which way takes which "
        "program, so that lanes A (K=1) and B (K=0) of tf.keras run two of each program's three ways "
        "between them (`make generated` runs every pair)",
    )
    parser.addoption(
        "--programs-share",
        default="0/1",
        metavar="I/N",
        help="conformance and generated programs: only the i-th of every n (by name), so that the two tf.keras "
        "lanes, A (0/2) and B (1/2), run every program between them, each half the CI time of all",
    )
