"""How a worker ended, in words: the same sentence from every launcher; and the job's status when its
workers stopped for a preemption notice (kscale/preemption.py), whichever engine launched them."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Iterator

from kscale import environment

#: What `kscale run` exits with when its workers stopped for a preemption notice (128 + SIGTERM).
PREEMPTED = environment.PREEMPTED_EXIT_STATUS


def describe_exit(code: int) -> str:
    """'exited with status 3' or 'was killed by SIGKILL' (from a Popen returncode)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"


def describe_status(code: int) -> str:
    """The same for an exit status as a launcher reports it: 128 + N is death by signal N (the shell's way,
    and horovodrun's)."""
    if code > 128:
        try:
            return f"was killed by {signal.Signals(code - 128).name} (exit status {code})"
        except ValueError:
            pass
    return describe_exit(code)


#: The signals this process was sent while its workers ran (SIGINT, SIGTERM), as the launchers' handlers
#: record them: a job its launcher was told to stop is not restarted (`kscale run --max-restarts`).
signals_received: list[int] = []


@contextlib.contextmanager
def notices_held() -> Iterator[None]:
    """SIGTERM and SIGINT wait while the block runs, and reach their handler after it: a launcher that
    records a worker it just started and tells it of a notice that came while it started does one or the
    other, never both, and never neither. (Not around starting a process: it would inherit the mask.)"""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextlib.contextmanager
def preemption_marker() -> Iterator[str]:
    """While the workers run: the file a worker creates when it stops for a preemption notice, named in
    their environment (environment.PREEMPTED_MARKER_VARIABLE; every engine passes this process's
    environment on)."""
    with tempfile.TemporaryDirectory(prefix="kscale-run-") as folder:
        marker = os.path.join(folder, "preempted")
        before = os.environ.get(environment.PREEMPTED_MARKER_VARIABLE)
        os.environ[environment.PREEMPTED_MARKER_VARIABLE] = marker
        try:
            yield marker
        finally:
            if before is None:
                os.environ.pop(environment.PREEMPTED_MARKER_VARIABLE, None)
            else:
                os.environ[environment.PREEMPTED_MARKER_VARIABLE] = before


def job_status(code: int, marker: str) -> int:
    """The launch's status, or 143 where a worker of this host stopped for a preemption notice (horovodrun
    and torchrun exit 1 when a worker fails, whatever its status)."""
    if code == 0 or not os.path.exists(marker):
        return code
    print(
        f"kscale run: the workers stopped for a preemption notice, after their backup (exit status "
        f"{PREEMPTED}); run the same command again to resume from it.",
        file=sys.stderr,
        flush=True,
    )
    return PREEMPTED
