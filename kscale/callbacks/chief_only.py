"""Which callbacks run on the chief (rank 0) only, and how a user marks their own."""

from __future__ import annotations

import tensorflow as tf

_MARK = "_kscale_chief_only"

#: Callbacks that write files or print progress. Under Horovod every rank would write the same file.
CHIEF_ONLY_TYPES: tuple[type, ...] = (
    tf.keras.callbacks.ModelCheckpoint,
    tf.keras.callbacks.TensorBoard,
    tf.keras.callbacks.CSVLogger,
    tf.keras.callbacks.RemoteMonitor,
    tf.keras.callbacks.ProgbarLogger,
)

#: Callbacks that tf.distribute's multi-worker strategy already makes safe on every worker (non-chief
#: copies write to a temporary folder that Keras deletes), and that must run everywhere because saving
#: can itself be a collective operation.
MULTI_WORKER_AWARE_TYPES: tuple[type, ...] = (
    tf.keras.callbacks.ModelCheckpoint,
    tf.keras.callbacks.TensorBoard,
    tf.keras.callbacks.BackupAndRestore,
)


def chief_only(callback: tf.keras.callbacks.Callback) -> tf.keras.callbacks.Callback:
    """Mark `callback` to run on the chief only (e.g. one that writes files or sends messages)."""
    setattr(callback, _MARK, True)
    return callback


def is_chief_only(callback: tf.keras.callbacks.Callback, multi_worker_strategy: bool = False) -> bool:
    if getattr(callback, _MARK, False):
        return True
    if multi_worker_strategy and isinstance(callback, MULTI_WORKER_AWARE_TYPES):
        return False
    return isinstance(callback, CHIEF_ONLY_TYPES)


def for_this_worker(
    callbacks: list[tf.keras.callbacks.Callback], is_chief: bool, multi_worker_strategy: bool = False
) -> list[tf.keras.callbacks.Callback]:
    """The callbacks this worker runs: all on the chief, the others without the chief-only ones."""
    if is_chief:
        return list(callbacks)
    return [cb for cb in callbacks if not is_chief_only(cb, multi_worker_strategy)]
