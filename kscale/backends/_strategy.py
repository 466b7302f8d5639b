"""What the two tf.distribute backends (mirrored, multi_worker) share: rebuild in scope, sync weights."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from kscale.backends.base import Backend
from kscale.model_rebuild import clone_compile_args, rebuild_in_scope


class StrategyBackend(Backend):
    """A backend whose replicas are driven by one `tf.distribute.Strategy` per process."""

    def __init__(self, env, devices=None):
        super().__init__(env, devices)
        self._strategy: tf.distribute.Strategy | None = None

    def make_strategy(self) -> tf.distribute.Strategy:
        raise NotImplementedError

    def setup(self) -> None:
        if self._strategy is None:
            self._strategy = self.make_strategy()

    @property
    def strategy(self) -> tf.distribute.Strategy:
        self.setup()
        return self._strategy

    @property
    def num_replicas(self) -> int:
        return self.strategy.num_replicas_in_sync

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(getattr(self.strategy.extended, "worker_devices", ()))

    def scope(self) -> contextlib.AbstractContextManager:
        return self.strategy.scope()

    def prepare_model(
        self, model: tf.keras.Model, make_optimizer: Callable[[], Any], compile_args: dict
    ) -> tf.keras.Model:
        if getattr(model, "distribute_strategy", None) is self.strategy:
            distributed = model  # built inside kscale.scope(): nothing to rebuild
        else:
            distributed = rebuild_in_scope(model, self.strategy)
        with self.strategy.scope():
            distributed.compile(optimizer=make_optimizer(), **clone_compile_args(compile_args))
        if self.num_workers > 1:
            broadcast_from_first_replica(self.strategy, distributed.weights)
        return distributed


def broadcast_from_first_replica(strategy: tf.distribute.Strategy, variables: list[tf.Variable]) -> None:
    """Give every worker the first worker's values: a sum where all replicas but the first add zero."""
    floats = [v for v in variables if v.dtype.is_floating]
    if not floats:
        return

    def first_replica_values():
        context = tf.distribute.get_replica_context()
        keep = tf.cast(tf.equal(context.replica_id_in_sync_group, 0), tf.float32)
        return context.all_reduce(
            tf.distribute.ReduceOp.SUM, [tf.identity(v) * tf.cast(keep, v.dtype) for v in floats]
        )

    summed = strategy.run(tf.function(first_replica_values))
    for variable, value in zip(floats, summed):
        variable.assign(strategy.experimental_local_results(value)[0])
