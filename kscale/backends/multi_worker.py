"""Several processes, each on its own devices, in sync through `MultiWorkerMirroredStrategy`."""

from __future__ import annotations

import tensorflow as tf

from kscale.backends._strategy import StrategyMixin
from kscale.backends._tf_keras import TFKerasBackend
from kscale.backends.base import log_value
from kscale.environment import Environment, Launcher
from kscale.errors import BackendError


class MultiWorkerBackend(StrategyMixin, TFKerasBackend):
    name = "multi_worker"
    create_at_import = True  # TensorFlow accepts MultiWorkerMirroredStrategy only before its first op
    # Saving reads variables that are synchronised on read, a collective: every worker saves, as
    # TensorFlow requires; the chief's copy is kept, the others are written to scratch and deleted.
    saves_are_collective = True

    @classmethod
    def detect(cls, env: Environment) -> bool:
        return env.launcher in (Launcher.TF_CONFIG, Launcher.SLURM) and env.world_size > 1

    def reduce_results(self, model: tf.keras.Model, logs: dict) -> dict:
        """The metrics' results read from their states (summed over every replica of every worker when read
        outside a replica), not the step's returned numbers: Keras 2 sums those over workers as well
        ("auto" reduction is "sum" under MultiWorkerMirroredStrategy), which makes *_on_batch report N times
        the loss and a precision above 1."""
        results = model.get_metrics_result()
        return {name: log_value(results[name]) if name in results else logs[name] for name in logs}

    def make_strategy(self) -> tf.distribute.Strategy:
        resolver = None
        if self.env.launcher is Launcher.SLURM:
            # TensorFlow's own resolver turns SLURM's node list into a cluster spec.
            resolver = tf.distribute.cluster_resolver.SlurmClusterResolver()
        try:
            return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
        except RuntimeError as err:
            if "program startup" not in str(err):
                raise
            raise BackendError(
                "TensorFlow's MultiWorkerMirroredStrategy must be created before TensorFlow runs its first "
                "operation, but a model or tensor already exists in this process. Put `import kscale` at "
                "the top of your script, before building the model: kscale then sets the strategy up at "
                "import time (it does so whenever TF_CONFIG names several workers)."
            ) from err
