"""Ranks never diverge silently: the workers' weights compared at epoch ends (every one, unless that costs
more than 1% of the training time: kscale/callbacks/agreement.py).

Every worker fingerprints its weights (a CRC of each array's bytes: any difference, even in the last
bit, shows) and the backend gathers every worker's fingerprint to every worker, so all of them reach
the same verdict and stop together, with an error that names the ranks and weights that differ and the
likely causes. Framework-free: the backend reads the weights and gathers the numbers.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

import numpy as np

from kscale.errors import BackendError, DataError, RanksDivergedError

#: Rows of each array the data fingerprint reads: enough that two different orders of the same samples
#: (an unseeded shuffle) differ in it, few enough to cost nothing next to training on the arrays.
DATA_ROWS = 1024


def fingerprint(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Each array's CRC-32, as two 16-bit halves in float32 (exact in every collective's float sum)."""
    crcs = [zlib.crc32(np.ascontiguousarray(a).tobytes()) for a in arrays]
    return np.array([part for crc in crcs for part in (crc >> 16, crc & 0xFFFF)], np.float32)


def data_fingerprint(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """A fingerprint of arrays about to be cut into one part per worker: their shapes and dtypes, and
    `DATA_ROWS` rows of each, evenly spaced (every row where there are fewer)."""
    header = repr([(np.shape(a), np.asarray(a).dtype.str) for a in arrays]).encode()
    sampled = []
    for array in arrays:
        array = np.asarray(array)
        if array.ndim and len(array) > DATA_ROWS:
            array = array[np.linspace(0, len(array) - 1, DATA_ROWS).astype(np.int64)]
        if array.dtype == object:  # strings and the like: their bytes are pointers, their text is the data
            array = np.frombuffer(repr(array.tolist()).encode(), np.uint8)
        sampled.append(array)
    return fingerprint([np.frombuffer(header, np.uint8), *sampled])


def check_same_data(gathered: np.ndarray, what: str) -> None:
    """Raise DataError unless every worker passed the arrays the chief did (rows of `data_fingerprint`)."""
    differing = [rank for rank in range(1, len(gathered)) if not np.array_equal(gathered[rank], gathered[0])]
    if differing:
        raise DataError(
            f"the {what} differs between workers: rank(s) {', '.join(map(str, differing))} passed other "
            "arrays (or the same ones in another order) than rank 0. kscale cuts one set of arrays into a "
            "part per worker, so every worker must pass the same arrays: seed any shuffle or split before "
            "fit (np.random.seed or kscale.set_seed at the top; fit's own shuffle is already alike on every "
            "worker). If each worker loads its own part on purpose, pass data_policy='none' to "
            "kscale.distribute."
        )


def check(gathered: np.ndarray, names: Sequence[str], epoch: int) -> None:
    """Raise RanksDivergedError unless every worker's row of `gathered` equals the chief's."""
    differing = [rank for rank in range(1, len(gathered)) if not np.array_equal(gathered[rank], gathered[0])]
    if not differing:
        return
    rows = gathered.reshape(len(gathered), -1, 2)
    weights = [
        name for i, name in enumerate(names) if any((rows[r, i] != rows[0, i]).any() for r in differing)
    ]
    shown = ", ".join(weights[:5]) + (f" and {len(weights) - 5} more" if len(weights) > 5 else "")
    raise RanksDivergedError(
        f"after epoch {epoch + 1} the weights of rank(s) {', '.join(map(str, differing))} differ from rank 0's "
        f"({len(weights)} of {len(names)} arrays: {shown}). Every rank should hold the same model. Likely "
        "causes: an optimizer kscale did not reach (one your train_step creates or applies outside "
        "model.optimizer and the model's compile), randomness that differs per rank inside train_step, or "
        "a callback that changes weights on some ranks only. Fix that; to train on regardless, pass "
        "check_agreement=False to kscale.distribute()."
    )


def check_same_backup_record(
    gather: Callable[[np.ndarray], np.ndarray], found: bool, backup_dir: str, record: str
) -> None:
    """Raises unless every worker `found` (or not) the same `record` beside the backup in `backup_dir`: a
    backup inside an epoch resumes at its batch, with the epoch's metrics, only if every worker does."""
    agreed = gather(np.asarray([found], np.float32))[:, 0]
    if not np.all(agreed == agreed[0]):
        raise BackendError(
            f"BackupAndRestore: the processes do not read the same {record} beside the backup in "
            f"{backup_dir!r} (process(es) {np.flatnonzero(agreed != agreed[0]).tolist()} differ from process "
            "0), so they would resume at different batches or with other metrics. Put backup_dir on a file "
            "system every process sees the same (a shared folder)."
        )
