"""How a worker ended, in words: the same sentence from every launcher."""

from __future__ import annotations

import signal


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
