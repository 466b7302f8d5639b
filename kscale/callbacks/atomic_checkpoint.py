"""ModelCheckpoint that never leaves a half-written checkpoint behind."""

from __future__ import annotations

import tensorflow as tf

from kscale.checkpoint_io import atomic_save


class AtomicModelCheckpoint(tf.keras.callbacks.ModelCheckpoint):
    """Keras' ModelCheckpoint, writing each checkpoint beside its target and renaming it into place.

    A crash or a killed job during saving leaves the previous checkpoint intact instead of a truncated
    file that fails to load on restart.
    """

    def _save_handler(self, filepath):
        atomic_save(filepath, lambda path: super(AtomicModelCheckpoint, self)._save_handler(path))

    @classmethod
    def from_checkpoint(cls, callback: tf.keras.callbacks.ModelCheckpoint) -> AtomicModelCheckpoint:
        """The same callback, with the same settings and state, saving atomically."""
        if isinstance(callback, cls):
            return callback
        atomic = cls.__new__(cls)
        atomic.__dict__.update(callback.__dict__)
        return atomic
