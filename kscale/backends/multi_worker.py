"""Several processes, each on its own devices, tf.keras: `MultiWorkerMirroredStrategy`."""

from __future__ import annotations

import numpy as np

from kscale import agreement
from kscale.backends._strategy import MultiWorker
from kscale.errors import DataError
from kscale.keras2.family import Keras2Family


class MultiWorkerBackend(MultiWorker):
    name = "multi_worker"
    Family = Keras2Family

    def check_batch(self, arrays: list) -> None:
        """tf.keras' train_on_batch under this strategy takes the batch as the global one and gives each
        worker a share of it (TensorFlow's dataset sharding): a worker passing its own, other batch would
        silently train on parts of each. Every worker must pass the same batch (one gather of a CRC)."""
        if self.num_workers == 1:
            return
        rows = self.gather(agreement.fingerprint([np.asarray(a) for a in arrays]))
        if any(not np.array_equal(row, rows[0]) for row in rows[1:]):
            raise DataError(
                "under the multi_worker backend (tf.keras), train_on_batch and test_on_batch take the global "
                "batch: pass the same batch on every worker (TensorFlow gives each worker its share of it), "
                "not one batch per worker; or use fit() with kscale's sharding."
            )
