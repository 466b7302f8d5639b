"""Which Keras a model or a process uses: Keras 2 (tf.keras: TensorFlow's own, or tf_keras) or Keras 3 (on
JAX, TensorFlow or torch). Backends are chosen per generation; each lane's code imports only its own.

Asked without importing TensorFlow or JAX where the answer is in package metadata, so `import kscale`
and the `kscale` command stay fast.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import importlib.util
import json
import os
import sys
from typing import Any

from kscale import environment

#: TensorFlow from this version on ships Keras 3 as tf.keras; Keras 2 is the tf_keras package.
_FIRST_TF_WITH_KERAS_3 = (2, 16)


@dataclasses.dataclass(frozen=True)
class KerasInfo:
    generation: int  # 2: tf.keras (Keras 2), 3: Keras 3
    backend: str  # "tensorflow" for Keras 2; Keras 3's backend ("jax", "tensorflow", "torch")


@functools.cache
def is_installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def version_of(distribution: str) -> tuple[int, ...] | None:
    """The installed version of a distribution as numbers (2, 18, 1), or None."""
    try:
        text = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    numbers = []
    for part in text.split("."):
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def tensorflow_version() -> tuple[int, ...] | None:
    """The installed TensorFlow's version, whichever build is installed (CPU, macOS, nightly), or None."""
    for distribution in ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly"):
        found = version_of(distribution)
        if found:
            return found
    return None


def tf_keras_is_keras_2() -> bool:
    """Whether `tf.keras` is Keras 2 in this process: TF < 2.16, or TF_USE_LEGACY_KERAS with tf_keras.

    Where TensorFlow has already decided what tf.keras is, its decision (the variable may have been set
    after it: Ray's TensorflowTrainer sets it in workers whose tf.keras is Keras 3 all the same)."""
    tf_version = tensorflow_version()
    if tf_version is None:
        return False
    if tf_version[:2] < _FIRST_TF_WITH_KERAS_3:
        return True
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        from kscale import _tensorflow_private

        decided = _tensorflow_private.tf_keras_decided(tf)
        if decided is not None:
            return decided == "tf_keras"
    return bool(environment.current().legacy_keras) and is_installed("tf_keras")


def process_keras() -> KerasInfo:
    """The Keras this process builds models with when nothing says otherwise (before any model exists)."""
    keras_version = version_of("keras")
    if tf_keras_is_keras_2() or not keras_version or keras_version[0] < 3:
        return KerasInfo(2, "tensorflow")
    return KerasInfo(3, keras_3_backend())


def keras_3_backend() -> str:
    """Keras 3's backend as Keras decides it: KERAS_BACKEND, else keras.json in KERAS_HOME (~/.keras)."""
    env = environment.current()
    if env.keras_backend:
        return env.keras_backend
    config = os.path.join(env.keras_home or os.path.expanduser("~/.keras"), "keras.json")
    try:
        with open(config) as f:
            return str(json.load(f).get("backend") or "tensorflow")
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def legacy_keras_needed() -> bool:
    """Horovod and MultiWorkerMirroredStrategy need Keras 2 here: TF >= 2.16 with tf_keras installed (and
    TF_USE_LEGACY_KERAS not set to something else)."""
    tf_version = tensorflow_version()
    return (
        tf_version is not None
        and tf_version[:2] >= _FIRST_TF_WITH_KERAS_3
        and is_installed("tf_keras")
        and environment.current().legacy_keras is not False
    )


def keras_of(model: Any) -> KerasInfo | None:
    """The Keras generation and backend of `model`'s class, or None if it is no Keras model.

    Only modules already imported are asked: a model's Keras is imported by the time the model exists.
    """
    keras = sys.modules.get("keras")
    keras_3 = keras is not None and int(getattr(keras, "__version__", "0").split(".")[0]) >= 3
    if keras_3 and isinstance(model, keras.Model):
        return KerasInfo(3, keras.config.backend())
    for name in ("tf_keras", "keras"):
        module = sys.modules.get(name)
        if module is not None and isinstance(model, getattr(module, "Model", ())):
            return KerasInfo(2, "tensorflow")
    tf = sys.modules.get("tensorflow")
    if tf is not None and tf_keras_is_keras_2() and isinstance(model, tf.keras.Model):
        return KerasInfo(2, "tensorflow")
    return None


def use_legacy_keras_under_launchers(env: environment.Environment) -> bool:
    """Set TF_USE_LEGACY_KERAS=1 for a multi-process TensorFlow job on TF >= 2.16 where tf_keras is installed.

    Horovod and MultiWorkerMirroredStrategy work with Keras 2 only on those TensorFlows (Keras 3 with
    Horovod never averages gradients; with MultiWorkerMirroredStrategy its fit fails, keras#20585), and
    Horovod's `horovod.tensorflow.keras` reads `tf.keras` when it is imported: so this must happen before
    TensorFlow is imported, i.e. at `import kscale`. An explicit TF_USE_LEGACY_KERAS=0 is respected.
    Returns whether it set the variable.
    """
    launchers = (environment.Launcher.HOROVOD, environment.Launcher.MPI, environment.Launcher.TF_CONFIG)
    if env.legacy_keras is not None or env.launcher not in launchers or env.world_size < 2:
        return False
    if not legacy_keras_needed():
        return False
    if "tensorflow" in sys.modules:
        return False  # too late to change what tf.keras is; distribute() explains if it matters
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    environment.reset()
    return True
