"""kscale: one line to scale Keras training from one device to many GPUs and hosts.

    model = kscale.distribute(model)   # then model.fit(...) as before

`import kscale` reads the launcher's environment once. Under a multi-process launcher it does what must
happen before the framework's first operation: uses tf_keras for Horovod and multi-worker TensorFlow on
TensorFlow >= 2.16, pins one GPU per process, creates the multi-worker strategy (TF_CONFIG) or joins the
keras.distribution job (Keras 3 on JAX). In one process that imported TensorFlow first and has several
GPUs (or asked for `KSCALE_BACKEND=mirrored`) it creates the MirroredStrategy, so that models built after
it are built in it. It never imports horovod or tensorflow_estimator, and in one process that has not
imported a framework, none.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from kscale import environment
from kscale.errors import (
    BackendError,
    DataError,
    EnvironmentDetectionError,
    KScaleError,
    LaunchError,
    MissingDependencyError,
    ModelError,
    OptionError,
    RanksDivergedError,
    SaveError,
)

if TYPE_CHECKING:
    from kscale.callbacks import chief_only
    from kscale.distributed_model import distribute
    from kscale.metric_states import combine_states
    from kscale.plan import Plan
    from kscale.seeding import set_seed

# TensorFlow-heavy names load on first use, so `kscale --help` and `kscale env` start fast.
_LAZY = {
    "distribute": "kscale.distributed_model",
    "combine_states": "kscale.metric_states",
    "chief_only": "kscale.callbacks",
    "Plan": "kscale.plan",
    "set_seed": "kscale.seeding",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kscale' has no attribute {name!r}")


def _backend():
    """The process's backend if one was created (distribute/scope), without creating one."""
    backends = sys.modules.get("kscale.backends")
    return backends._current if backends is not None else None


def scope(backend: str | None = None, devices: list[str] | None = None) -> contextlib.AbstractContextManager:
    """Build models here when they cannot be rebuilt later (subclassed models without get_config)."""
    from kscale import backends

    return backends.current(backend, devices=devices).scope()


def rank() -> int:
    """This worker's index (0 on the chief), under every backend."""
    current = _backend()
    return current.worker_index if current else environment.current().rank


def size() -> int:
    """The number of worker processes, under every backend."""
    current = _backend()
    return current.num_workers if current else environment.current().world_size


def local_rank() -> int:
    """This worker's index among the workers on its host."""
    return environment.current().local_rank


def num_replicas() -> int:
    """Replicas in sync (processes × devices each): what the learning rate is scaled by."""
    current = _backend()
    return current.num_replicas if current else environment.current().world_size


def is_chief() -> bool:
    """True on the one worker that logs, checkpoints and writes predictions."""
    return rank() == 0


def _is_launcher_process() -> bool:
    """The `kscale` command launches workers and never trains: it must not grab GPUs or join a cluster."""
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    argv = getattr(sys, "orig_argv", [])
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
    return program == "kscale" or module in ("kscale", "kscale.cli") or module.startswith("kscale.cli.")


def _startup() -> None:
    """Set up what must precede the framework's first operation, only when the environment asks for it."""
    env = environment.current()
    # Several processes; or one that may replicate over its devices (TensorFlow imported already, or a
    # backend asked for): backends.startup() decides. Otherwise nothing is imported.
    may_need = env.world_size > 1 or "tensorflow" in sys.modules or env.backend_override is not None
    if may_need and not _is_launcher_process():
        from kscale import backends

        backends.startup()
    if not _is_launcher_process():
        from kscale import tested_versions

        tested_versions.warn_once_if_untested()


_startup()

__all__ = [
    "BackendError",
    "DataError",
    "EnvironmentDetectionError",
    "KScaleError",
    "LaunchError",
    "MissingDependencyError",
    "ModelError",
    "OptionError",
    "Plan",
    "RanksDivergedError",
    "SaveError",
    "__version__",
    "chief_only",
    "combine_states",
    "distribute",
    "is_chief",
    "local_rank",
    "num_replicas",
    "rank",
    "scope",
    "set_seed",
    "size",
]
