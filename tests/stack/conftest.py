"""End-to-end tests that every lane runs on its own stack: what the lane supports is read from it."""

from __future__ import annotations

import sys
from pathlib import Path

from kscale import frameworks

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
KERAS = frameworks.process_keras()
HAS_HOROVOD = frameworks.is_installed("horovod")


def lane_backends() -> list[str]:
    """The ways this lane trains on two replicas, each launched as a user would."""
    if KERAS.generation == 2:
        return (["horovod"] if HAS_HOROVOD else []) + ["multi_worker", "multi_worker_2x2", "mirrored"]
    if KERAS.backend == "jax":
        return ["jax_processes", "jax_devices", "jax_rebuilt"]
    if KERAS.backend == "torch":
        return ["torch"]
    return ["mirrored", "multi_worker", "multi_worker_2x2"]


def kscale_run(engine: str, n: int, *command: str) -> list[str]:
    return [BIN / "kscale", "run", "--engine", engine, "-np", str(n), "--", sys.executable, *command]
