"""Lazy access to the optional packages behind kscale.estimator: Horovod and tensorflow-estimator.

Nothing here runs at import time, so `import kscale` and `import kscale.estimator` never load Horovod or
tensorflow-estimator. A missing package is reported when a helper first needs it, with the command that
installs it.
"""

from __future__ import annotations

from types import ModuleType

from kscale import _optional, environment
from kscale._optional import ESTIMATOR_INSTALL, HOROVOD_INSTALL, is_available
from kscale.errors import KScaleError, MissingDependencyError, OptionError


def is_horovod_available() -> bool:
    """Whether the horovod package is installed (it may still lack its TensorFlow extension)."""
    return is_available("horovod")


def is_estimator_available() -> bool:
    """Whether tensorflow-estimator is installed."""
    return is_available("tensorflow_estimator")


def estimator_module() -> ModuleType:
    """`tf.estimator`, or a MissingDependencyError naming the install command."""
    if not is_estimator_available():
        raise MissingDependencyError(
            "tf.estimator needs the tensorflow-estimator package, which is not installed. "
            f"Fix: {ESTIMATOR_INSTALL}"
        )
    import tensorflow as tf

    return tf.estimator


def import_horovod() -> ModuleType:
    """`horovod.tensorflow`, imported (not initialised), or an error that says how to install it."""
    if not is_horovod_available():
        raise MissingDependencyError(
            f"this process was started as one of several workers, which needs Horovod; it is not installed. "
            f"Fix: {HOROVOD_INSTALL}"
        )
    return _optional.horovod_tensorflow("kscale.estimator with several workers")


def horovod() -> ModuleType | None:
    """Initialised `horovod.tensorflow` when this process is one of several workers; None when it runs alone.

    Returning None for a single process is what lets every estimator helper be a no-op there without
    importing Horovod at all.
    """
    env = environment.current()
    if not env.is_distributed:
        return None
    if env.launcher is environment.Launcher.TF_CONFIG:
        raise KScaleError(
            "kscale.estimator averages gradients with Horovod, but this process was started "
            f"through TF_CONFIG ({env.describe()}). Start the workers with "
            "`horovodrun -np N -H host:N python script.py` (or unset TF_CONFIG)."
        )
    hvd = import_horovod()
    if not hvd.is_initialized():
        hvd.init()
    if (hvd.rank(), hvd.size()) != (env.rank, env.world_size):
        raise KScaleError(
            f"Horovod says rank {hvd.rank()} of {hvd.size()} but the launcher's variables say "
            f"{env.describe()}; they must agree. Start every worker with the same launcher (horovodrun) "
            "and do not set HOROVOD_RANK/HOROVOD_SIZE by hand."
        )
    return hvd


def resolve_world_size(world_size: int | None) -> int:
    """`world_size` if given, else the launcher's; checked to be at least 1."""
    size = environment.current().world_size if world_size is None else world_size
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise OptionError(f"world_size must be an integer >= 1, got {size!r}.")
    return size
