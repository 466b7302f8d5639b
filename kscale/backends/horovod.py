"""One process per device under horovodrun (or kscale run): Horovod's ring-allreduce over Gloo or MPI."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from kscale import _optional
from kscale.backends.base import Backend
from kscale.environment import Environment, Launcher
from kscale.model_rebuild import recompile


class HorovodBackend(Backend):
    name = "horovod"

    supports_gradient_options = True

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

    def prepare_model(
        self,
        model: tf.keras.Model,
        make_optimizer: Callable[[], Any],
        compile_args: dict,
        compression: str | None = None,
        backward_passes_per_step: int = 1,
    ) -> tf.keras.Model:
        hvd = self.hvd
        # Same weights everywhere from this moment on, also for evaluate()/predict() without fit().
        _optional.horovod_tensorflow().broadcast_variables(model.variables, root_rank=0)
        inner = make_optimizer()
        optimizer = hvd.DistributedOptimizer(
            inner,
            compression=hvd.Compression.fp16 if compression == "fp16" else hvd.Compression.none,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=True,
        )
        # Horovod subclasses the optimizer on the fly and names the class like the original "so that the
        # saved model could be easily restored without Horovod"; the .keras format also records the
        # module, which was horovod._keras. Give the class the original's module to finish that intent.
        type(optimizer).__module__ = type(inner).__module__
        return recompile(model, optimizer, compile_args)

    def callbacks(self) -> list[tf.keras.callbacks.Callback]:
        from kscale.callbacks.broadcast import BroadcastInitialState

        return [BroadcastInitialState(), self.hvd.callbacks.MetricAverageCallback()]

    def average(self, values: list[float]) -> list[float]:
        hvd_tf = _optional.horovod_tensorflow()
        averaged = hvd_tf.allreduce(tf.constant(values, tf.float64), op=hvd_tf.Average, name="kscale.average")
        return [float(v) for v in averaged.numpy()]
