"""Several processes, each on its own devices, tf.keras: `MultiWorkerMirroredStrategy`."""

from __future__ import annotations

from kscale.backends._strategy import MultiWorker
from kscale.backends._tf_keras import TFKerasBackend


class MultiWorkerBackend(MultiWorker, TFKerasBackend):
    name = "multi_worker"
