"""Nested data as Keras takes it: the leaves of lists, tuples and dicts of arrays, in Keras' order, how many
samples they hold, and batches of one structure joined into one. Framework-free (numpy only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kscale.errors import DataError


def flatten(structure: Any) -> list[Any]:
    """The leaves of nested lists, tuples and dicts (dicts in key order, as tf.nest and keras.tree do)."""
    if isinstance(structure, dict):
        return [leaf for key in sorted(structure) for leaf in flatten(structure[key])]
    if isinstance(structure, list | tuple):
        return [leaf for item in structure for leaf in flatten(item)]
    return [structure]


def map_structure(function: Callable[[Any], Any], structure: Any) -> Any:
    """`structure` with `function` applied to every leaf."""
    if isinstance(structure, dict):
        return {key: map_structure(function, value) for key, value in structure.items()}
    if isinstance(structure, list | tuple):
        mapped = [map_structure(function, item) for item in structure]
        return type(structure)(mapped) if not hasattr(structure, "_fields") else type(structure)(*mapped)
    return function(structure)


def _is_array(leaf: Any) -> bool:
    """numpy arrays and array-likes Keras slices itself: TensorFlow, JAX and torch tensors."""
    return isinstance(leaf, np.ndarray) or (
        hasattr(leaf, "shape")
        and hasattr(leaf, "dtype")
        and hasattr(leaf, "__array__")
        and len(leaf.shape) > 0
    )


def is_array_data(x: Any) -> bool:
    """True for numpy arrays / tensors, or lists, tuples and dicts of them (what Keras slices itself)."""
    leaves = flatten(x)
    return bool(leaves) and all(_is_array(leaf) for leaf in leaves)


def num_samples(*structures: Any) -> int:
    """The common first dimension of every array in `structures` (None entries are ignored)."""
    lengths = {int(leaf.shape[0]) for s in structures if s is not None for leaf in flatten(s)}
    if len(lengths) != 1:
        raise DataError(
            f"the arrays given to fit have different numbers of samples {sorted(lengths)}; x, y and "
            "sample_weight must have the same first dimension."
        )
    return lengths.pop()


def leaves_in_order(structure: Any) -> list[Any]:
    """The leaves of `structure` in the order map_structure visits them."""
    leaves: list[Any] = []
    map_structure(leaves.append, structure)
    return leaves


def rows(batch: Any) -> int:
    """The samples in a batch (its first array's first dimension; 0 for what is no batch of arrays)."""
    shape = np.shape(next((leaf for leaf in leaves_in_order(batch) if leaf is not None), 0))
    return int(shape[0]) if shape else 0


def joined(batches: list[Any]) -> Any:
    """Batches of one structure as one batch: each leaf's rows, batch after batch, padded with zeros to
    their common shape where they differ (batches padded each to its own longest sequence; one process at
    the global batch pads them all to the longest)."""
    columns = list(zip(*(leaves_in_order(batch) for batch in batches), strict=True))
    joined = iter(
        None if column[0] is None else _concatenated([np.asarray(a) for a in column]) for column in columns
    )
    return map_structure(lambda _: next(joined), batches[0])


def _concatenated(arrays: list[np.ndarray]) -> np.ndarray:
    common = np.max([a.shape[1:] for a in arrays], axis=0) if arrays[0].ndim > 1 else ()
    return np.concatenate(
        [
            np.pad(
                a,
                [(0, 0), *((0, int(n - m)) for n, m in zip(common, a.shape[1:]))],
                constant_values=_blank(a),
            )
            for a in arrays
        ]
    )


def _blank(array: np.ndarray) -> Any:
    """What padding holds: 0, False, or an empty string (np.pad's 0 would be "0"), also in object arrays."""
    if array.dtype == object and array.size and isinstance(array.flat[0], str | bytes):
        return type(array.flat[0])()
    return np.zeros((), array.dtype).item()
