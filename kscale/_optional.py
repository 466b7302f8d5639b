"""Optional heavy packages, imported only when a feature needs them, with the command that installs them."""

from __future__ import annotations

import functools
import importlib
import importlib.util
from types import ModuleType

from kscale.errors import MissingDependencyError

HOROVOD_INSTALL = (
    "make venv (in the kscale repo), or: HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 "
    "HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 pip install --no-build-isolation horovod==0.28.1 "
    "(the version pip install 'kscale[horovod]' pins, compiled against the installed TensorFlow)"
)
ESTIMATOR_INSTALL = "pip install tensorflow-estimator==2.15.0 (or pip install 'kscale[estimator]')"


@functools.cache
def is_available(module: str) -> bool:
    """True if `module` can be imported (checked without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, install: str, feature: str) -> ModuleType:
    """Import `module`, or raise a MissingDependencyError that says how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingDependencyError(
            f"{feature} needs {module.split('.')[0]}, which is not importable here ({err}). Install it: {install}"
        ) from err


def horovod_tensorflow(feature: str = "the horovod backend") -> ModuleType:
    """`horovod.tensorflow` (the collectives on tf.Variables), built to talk to other workers, or a clear
    error with the one install command kscale gives everywhere."""
    hvd = require("horovod.tensorflow", HOROVOD_INSTALL, feature)
    if not hvd.gloo_built() and not hvd.mpi_built():
        raise MissingDependencyError(
            "horovod is installed without Gloo or MPI, so it cannot talk to other workers. Reinstall it: "
            + HOROVOD_INSTALL
        )
    return hvd


def horovod_keras() -> ModuleType:
    """`horovod.tensorflow.keras`, initialised-ready, or a clear error."""
    horovod_tensorflow()
    return require("horovod.tensorflow.keras", HOROVOD_INSTALL, "the horovod backend")
