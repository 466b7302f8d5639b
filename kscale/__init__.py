"""kscale: one line to scale Keras training from one device to many GPUs and hosts.

    model = kscale.distribute(model)   # then model.fit(...) as before

`import kscale` reads the launcher's environment once, pins one GPU per process under multi-process
launchers and, under a multi-worker TF_CONFIG, creates the strategy (TensorFlow allows both only
before its first operation). It never imports horovod or tensorflow_estimator.
"""

from __future__ import annotations

import contextlib

__version__ = "0.1.0"

from kscale import backends as _backends
from kscale import environment
from kscale.callbacks import chief_only
from kscale.distributed_model import DistributedModel, distribute
from kscale.errors import (
    BackendError,
    DataError,
    EnvironmentDetectionError,
    KScaleError,
    LaunchError,
    MissingDependencyError,
    ModelError,
    OptionError,
)
from kscale.plan import Plan


def scope(backend: str | None = None, devices: list[str] | None = None) -> contextlib.AbstractContextManager:
    """Build models here when they cannot be rebuilt later (subclassed models without get_config)."""
    return _backends.current(backend, devices=devices).scope()


def rank() -> int:
    """This worker's index (0 on the chief), in every mode."""
    return _backends._current.worker_index if _backends._current else environment.current().rank


def size() -> int:
    """The number of worker processes, in every mode."""
    return _backends._current.num_workers if _backends._current else environment.current().world_size


def local_rank() -> int:
    """This worker's index among the workers on its host."""
    return environment.current().local_rank


def num_replicas() -> int:
    """Replicas in sync (processes × devices each): what the learning rate is scaled by."""
    return _backends._current.num_replicas if _backends._current else environment.current().world_size


def is_chief() -> bool:
    """True on the one worker that logs, checkpoints and writes predictions."""
    return rank() == 0


_backends.startup()

__all__ = [
    "BackendError",
    "DataError",
    "DistributedModel",
    "EnvironmentDetectionError",
    "KScaleError",
    "LaunchError",
    "MissingDependencyError",
    "ModelError",
    "OptionError",
    "Plan",
    "__version__",
    "chief_only",
    "distribute",
    "is_chief",
    "local_rank",
    "num_replicas",
    "rank",
    "scope",
    "size",
]
