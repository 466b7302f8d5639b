"""Run a BackupAndRestore on every worker of a job without a tf.distribute strategy; only the chief writes."""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from kscale import _keras_private


class ChiefWritesBackup(_keras_private.AnswersBatchHooksOf, tf.keras.callbacks.Callback):
    """Forwards every hook to the user's `BackupAndRestore`, except that other workers never write.

    Every worker restores from the backup when training starts (so all resume at the same epoch with the
    same weights); the chief alone writes it at the end of an epoch and deletes it when training ends,
    while the others wait for that (`barrier`) before they finish. The user's object does the work and
    keeps its state.
    """

    def __init__(self, backup: tf.keras.callbacks.Callback, is_chief: bool, barrier: Callable[[], None]):
        super().__init__()
        self.backup = backup
        self.is_chief = is_chief
        self._barrier = barrier
        _keras_private.answer_batch_hooks_as(self, backup)  # Keras calls no batch hook the backup lacks

    def set_model(self, model):
        super().set_model(model)
        self.backup.set_model(model)

    def set_params(self, params):
        super().set_params(params)
        self.backup.set_params(params)

    def on_train_begin(self, logs=None):
        self.backup.on_train_begin(logs)

    def on_epoch_begin(self, epoch, logs=None):
        self.backup.on_epoch_begin(epoch, logs)

    def on_train_batch_begin(self, batch, logs=None):
        self.backup.on_train_batch_begin(batch, logs)

    def on_train_batch_end(self, batch, logs=None):
        if self.is_chief:
            self.backup.on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if self.is_chief:
            self.backup.on_epoch_end(epoch, logs)

    def on_train_end(self, logs=None):
        # The chief deletes the backup first; the others then find it gone and only clean up after it.
        if self.is_chief:
            self.backup.on_train_end(logs)
            self._barrier()
        else:
            self._barrier()
            self.backup.on_train_end(logs)
