"""Broadcast the model's weights (and, after the first step, the optimizer's state) from rank 0."""

from __future__ import annotations

import tensorflow as tf

from kscale import _optional


def _optimizer_variables(optimizer) -> list:
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


class BroadcastInitialState(tf.keras.callbacks.Callback):
    """Horovod's BroadcastGlobalVariablesCallback, fixed for Keras >= 2.11 optimizers and the first step.

    Horovod 0.28's callback broadcasts only at the end of the first batch (so step one runs from
    different weights on each rank) and calls `optimizer.variables()`, a list property on the new Keras
    optimizers. This one broadcasts the model's variables before the first step and the optimizer's
    slots (which exist only after a step) once, after the first batch.
    """

    def __init__(self, root_rank: int = 0):
        super().__init__()
        self.root_rank = root_rank
        self._optimizer_done = False

    def on_train_begin(self, logs=None):
        hvd = _optional.horovod_tensorflow()
        hvd.broadcast_variables(self.model.variables, root_rank=self.root_rank)
        self._optimizer_done = False

    def on_train_batch_end(self, batch, logs=None):
        if self._optimizer_done:
            return
        hvd = _optional.horovod_tensorflow()
        variables = _optimizer_variables(self.model.optimizer)
        if variables:
            hvd.broadcast_variables(variables, root_rank=self.root_rank)
        self._optimizer_done = True
