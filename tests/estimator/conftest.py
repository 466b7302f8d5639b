"""Launch real Horovod workers for the estimator tests."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kscale import environment

REPO = Path(__file__).resolve().parents[2]
#: Variables a launcher sets; a test started under one must not hand them to the workers it launches.


def run_horovod(script: Path, *args: str, np: int = 2, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run `horovodrun -np N -H localhost:N --gloo python script args...` and fail with its output if it fails."""
    bin_dir = Path(sys.executable).parent
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith((*environment.LAUNCHER_VARIABLE_PREFIXES, "KSCALE_"))
    }
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONUNBUFFERED="1",
    )
    command = [str(bin_dir / "horovodrun"), "-np", str(np), "-H", f"localhost:{np}", "--gloo"]
    command += [sys.executable, str(script), *args]
    try:
        proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"{' '.join(command)} ran over {timeout}s:\n{_tail(err.stdout)}\n{_tail(err.stderr)}")
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(command)} exited {proc.returncode}:\n{_tail(proc.stdout)}\n{_tail(proc.stderr)}"
        )
    return proc


def _tail(text: str | bytes | None, lines: int = 60) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join((text or "").splitlines()[-lines:])


@pytest.fixture(scope="session")
def horovodrun():
    """`horovodrun(script, *args, np=2, timeout=180)`: launch real workers, fail the test if they fail."""
    return run_horovod


@pytest.fixture
def fake_workers(monkeypatch):
    """Make kscale.environment see this process as rank `rank` of `size` (no Horovod is started)."""

    def set_rank(rank: int, size: int = 2) -> None:
        from kscale import environment

        monkeypatch.setenv("HOROVOD_RANK", str(rank))
        monkeypatch.setenv("HOROVOD_SIZE", str(size))
        monkeypatch.setenv("HOROVOD_LOCAL_RANK", str(rank))
        monkeypatch.setenv("HOROVOD_LOCAL_SIZE", str(size))
        environment.reset()

    yield set_rank
    from kscale import environment

    environment.reset()


@pytest.fixture
def kscale_log():
    """Messages sent to kscale's rank-aware logger during the test (it does not propagate to caplog)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = Collect(level=logging.DEBUG)
    logger = logging.getLogger("kscale")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)  # kscale.log sets INFO only when it adds its own handler
    yield messages
    logger.removeHandler(handler)
    logger.setLevel(level)
