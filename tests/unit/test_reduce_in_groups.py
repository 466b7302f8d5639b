"""kscale.backends.base.reduce_in_groups: one collective per key, every value back in its shape and dtype."""

import numpy as np

from kscale.backends.base import reduce_in_groups


def test_one_reduction_per_key_and_every_value_back_in_place():
    values = [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.array(7, dtype=np.int64),
        np.array([1.5, 2.5], dtype=np.float32),
        np.array([[3]], dtype=np.int64),
    ]
    calls = []

    def reduce(key, flat):
        calls.append((key, flat.copy()))
        return flat * 2

    reduced = reduce_in_groups(values, [v.dtype for v in values], reduce)

    assert [key for key, _ in calls] == [np.dtype(np.float32), np.dtype(np.int64)]
    np.testing.assert_array_equal(calls[0][1], [0, 1, 2, 3, 4, 5, 1.5, 2.5])
    np.testing.assert_array_equal(calls[1][1], [7, 3])
    for value, result in zip(values, reduced):
        assert result.shape == value.shape and result.dtype == value.dtype
        np.testing.assert_array_equal(result, value * 2)


def test_a_wider_reduction_comes_back_in_the_values_dtype():
    values = [np.array([0.1, 0.2], dtype=np.float32)]
    (result,) = reduce_in_groups(values, ["f"], lambda _, flat: flat.astype(np.float64))
    assert result.dtype == np.float32
    np.testing.assert_array_equal(result, values[0])
