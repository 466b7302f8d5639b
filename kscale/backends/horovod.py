"""One process per device under horovodrun (or kscale run): Horovod's ring-allreduce over Gloo or MPI."""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from kscale import _optional
from kscale.backends._tf_keras import TFKerasBackend
from kscale.callbacks import AverageMetrics, BroadcastInitialState, ChiefWritesBackup
from kscale.environment import Environment, Launcher
from kscale.errors import OptionError


@dataclasses.dataclass(frozen=True)
class HorovodOptions:
    """`distribute()` options of the horovod backend: how gradients travel between workers."""

    #: None, or 'fp16': gradients are sent as float16 (half the bytes; Horovod's Compression.fp16).
    compression: str | None = None
    #: Gradients of this many batches are accumulated locally before one allreduce (Horovod's own option).
    backward_passes_per_step: int = 1

    def __post_init__(self) -> None:
        if self.compression == "none":
            object.__setattr__(self, "compression", None)
        if self.compression not in (None, "fp16"):
            raise OptionError(f"compression={self.compression!r} is not valid; use None or 'fp16'.")
        passes = self.backward_passes_per_step
        if not isinstance(passes, int) or isinstance(passes, bool) or passes < 1:
            raise OptionError(
                f"backward_passes_per_step={passes!r} must be an integer >= 1 (the number of batches whose "
                "gradients are accumulated before one allreduce)."
            )


class HorovodBackend(TFKerasBackend):
    name = "horovod"
    Options = HorovodOptions

    def __init__(self, env: Environment, devices: list[str] | None = None):
        super().__init__(env, devices)
        self._hvd = None

    @classmethod
    def detect(cls, env: Environment) -> bool:
        return env.launcher in (Launcher.HOROVOD, Launcher.MPI)

    @property
    def hvd(self):
        self.setup()
        return self._hvd

    def setup(self) -> None:
        if self._hvd is not None:
            return
        hvd = _optional.horovod_keras()
        hvd.init()
        self._hvd = hvd

    @property
    def num_workers(self) -> int:
        return self.hvd.size()

    @property
    def worker_index(self) -> int:
        return self.hvd.rank()

    def place_model(self, model: tf.keras.Model) -> tf.keras.Model:
        # Same weights everywhere from this moment on, also for evaluate()/predict() without fit().
        _optional.horovod_tensorflow().broadcast_variables(model.variables, root_rank=0)
        return model

    def optimizer_for(self, optimizer: Any, learning_rate: Any, options: HorovodOptions) -> Any:
        hvd = self.hvd
        inner = super().optimizer_for(optimizer, learning_rate, options)
        distributed = hvd.DistributedOptimizer(
            inner,
            compression=hvd.Compression.fp16 if options.compression == "fp16" else hvd.Compression.none,
            backward_passes_per_step=options.backward_passes_per_step,
            average_aggregated_gradients=True,
        )
        # Horovod subclasses the optimizer on the fly and names the class like the original "so that the
        # saved model could be easily restored without Horovod"; the .keras format also records the
        # module, which was horovod._keras. Give the class the original's module to finish that intent.
        type(distributed).__module__ = type(inner).__module__
        return distributed

    def own_callbacks(self) -> list:
        # kscale's own metric averaging: Horovod's MetricAverageCallback imports `keras` directly, which
        # is Keras 3 (not the tf.keras being trained) on TensorFlow >= 2.16.
        return [BroadcastInitialState(), AverageMetrics(self.average)]

    def user_callbacks(self, callbacks: list) -> list:
        # Without a tf.distribute strategy every rank's BackupAndRestore would write the same files:
        # all ranks restore from the backup, the chief alone writes it.
        return [
            ChiefWritesBackup(cb, self.is_chief, self._barrier)
            if isinstance(cb, tf.keras.callbacks.BackupAndRestore)
            else cb
            for cb in super().user_callbacks(callbacks)
        ]

    def average(self, values: list[float]) -> list[float]:
        hvd_tf = _optional.horovod_tensorflow()
        averaged = hvd_tf.allreduce(tf.constant(values, tf.float64), op=hvd_tf.Average, name="kscale.average")
        return [float(v) for v in averaged.numpy()]

    def _barrier(self) -> None:
        """Wait until every rank gets here (Horovod 0.28's TensorFlow API has no barrier)."""
        hvd_tf = _optional.horovod_tensorflow()
        hvd_tf.allreduce(tf.constant(0.0), op=hvd_tf.Sum, name="kscale.barrier")
