"""kscale.agreement: the fingerprint sees any difference, and the verdict names the ranks and weights."""

from __future__ import annotations

import numpy as np
import pytest

from kscale import agreement
from kscale.errors import BackendError, DataError, KScaleError, RanksDivergedError


def test_equal_weights_pass_and_a_last_bit_difference_is_seen():
    weights = [np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4), np.ones(4, np.float32)]
    same = agreement.fingerprint(weights)
    agreement.check(np.stack([same, agreement.fingerprint([w.copy() for w in weights])]), ["k", "b"], 0)
    nudged = [weights[0].copy(), weights[1]]
    nudged[0].view(np.int32)[1, 2] ^= 1  # one bit of one number
    with pytest.raises(RanksDivergedError) as raised:
        agreement.check(np.stack([same, same, agreement.fingerprint(nudged)]), ["kernel", "bias"], 2)
    message = str(raised.value)
    assert "epoch 3" in message and "rank(s) 2 " in message and "1 of 2 arrays: kernel)" in message
    assert "check_agreement=False" in message and isinstance(raised.value, KScaleError)


def test_fingerprints_are_exact_in_float32_sums():
    """Each CRC travels as two 16-bit halves: integers a float32 holds exactly, so a sum with zeros (the
    strategies' gather) gives them back unchanged."""
    printed = agreement.fingerprint([np.arange(1000, dtype=np.float64)])
    assert printed.dtype == np.float32 and printed.shape == (2,)
    assert (printed < 2**16).all() and (printed == np.round(printed)).all()
    assert np.array_equal(printed + np.zeros_like(printed), printed)


def test_the_data_fingerprint_sees_another_order_and_nothing_else():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(5000, 3)).astype("float32"), rng.integers(0, 2, 5000)
    same = agreement.data_fingerprint([x.copy(), y.copy()])
    assert np.array_equal(agreement.data_fingerprint([x, y]), same)
    order = rng.permutation(len(x))
    assert not np.array_equal(agreement.data_fingerprint([x[order], y[order]]), same)
    assert not np.array_equal(agreement.data_fingerprint([x[:4999], y[:4999]]), same)  # one sample fewer
    assert not np.array_equal(agreement.data_fingerprint([x.astype("float64"), y]), same)
    words = np.array(
        ["a", "bb", None], dtype=object
    )  # bytes of an object array are pointers: its text counts
    assert np.array_equal(agreement.data_fingerprint([words]), agreement.data_fingerprint([words.copy()]))


def test_workers_passing_other_arrays_get_a_data_error_naming_them():
    rows = np.stack([agreement.data_fingerprint([np.arange(10.0)])] * 3)
    agreement.check_same_data(rows, "training data")  # all alike: nothing to say
    rows[2] = agreement.data_fingerprint([np.arange(10.0)[::-1]])
    with pytest.raises(
        DataError, match=r"training data differs between workers: rank\(s\) 2 .*data_policy='none'"
    ):
        agreement.check_same_data(rows, "training data")


def test_metric_states_combine_by_their_aggregation_not_only_by_sum():
    import types

    from kscale.metric_states import reduce_by_aggregation

    states = [types.SimpleNamespace(aggregation=a) for a in ("sum", "mean", "only_first_replica", None)]
    rows = [np.array([[1.0, 2.0], [3.0, 4.0]]) for _ in states]  # two processes' values of each state
    states[3] = types.SimpleNamespace()  # no aggregation said: Keras' default, a sum
    total, mean, first, default = reduce_by_aggregation(states, rows)
    assert total.tolist() == [4.0, 6.0] and mean.tolist() == [2.0, 3.0]
    assert first.tolist() == [1.0, 2.0] and default.tolist() == [4.0, 6.0]


def test_a_metric_result_that_is_its_own_state_is_read_before_the_state_is_put_back():
    """Keras 3 on torch: `TruePositives().result()` is `accumulator[0]`, a view of its variable. The result
    computed from the workers' summed counts must be kept as it was then, not read after this worker's own
    counts are assigned back (each rank reported its own counts)."""
    import types

    from kscale.metric_states import results_from_states

    class Variable:
        def __init__(self, values):
            self.value = np.array(values, np.float32)

        def numpy(self):
            return self.value

        def assign(self, values):
            np.copyto(self.value, values)  # in place, as torch's variables are

    counts, thresholds = Variable([3.0]), Variable([1.0, 2.0])
    metrics = [types.SimpleNamespace(variables=[counts]), types.SimpleNamespace(variables=[thresholds])]
    model = types.SimpleNamespace(
        metrics=metrics,
        get_metrics_result=lambda: {"true_positives": counts.value[0:1].reshape(()), "at": thresholds.value},
    )
    logs = {"true_positives": 3.0, "at": np.array([1.0, 2.0]), "other": 5.0}
    exact = results_from_states(
        model,
        logs,
        lambda variables, reductions: [2 * v.numpy() for v in variables],
        lambda values: [v + 1 for v in values],
    )
    assert exact["true_positives"] == 6.0 and exact["at"].tolist() == [2.0, 4.0] and exact["other"] == 6.0
    assert counts.value.tolist() == [3.0] and thresholds.value.tolist() == [1.0, 2.0]  # put back


def test_a_metric_class_declares_how_its_states_combine_and_every_other_user_class_is_named():
    import types

    import pytest

    from kscale import combine_states
    from kscale.errors import OptionError
    from kscale.metric_states import (
        declared_reductions,
        reduce_by_aggregation,
        user_metrics_declaring_nothing,
    )

    @combine_states(peak="max", low="min")
    class Peaks:
        def __init__(self, name):
            self.name = name
            self.peak, self.low, self.count = (types.SimpleNamespace(aggregation="sum") for _ in range(3))
            self.variables = [self.peak, self.low, self.count]

    class Plain(Peaks):  # inherits the declaration
        pass

    class Undeclared:
        name, variables = "undeclared", [types.SimpleNamespace()]

    peaks = Peaks("peaks")
    container = types.SimpleNamespace(name="compile_metrics", metrics=[peaks, Undeclared()], variables=[])
    declared = declared_reductions([container])
    assert declared == {id(peaks.peak): "max", id(peaks.low): "min"}
    rows = [np.array([[1.0], [3.0]]) for _ in peaks.variables]
    peak, low, count = reduce_by_aggregation(peaks.variables, rows, ["max", "min", "sum"])
    assert (peak.tolist(), low.tolist(), count.tolist()) == ([3.0], [1.0], [4.0])
    assert user_metrics_declaring_nothing([container, Plain("plain")]) == ["undeclared (Undeclared)"]
    with pytest.raises(OptionError, match="'median' is not a way to combine states"):
        combine_states(peak="median")


def test_workers_that_read_another_record_beside_a_backup_stop_with_an_error_naming_them():
    def three_workers(mine):  # what a gather gives when the middle worker found no record
        return np.asarray([[1.0], [0.0], [1.0]], np.float32)

    with pytest.raises(BackendError, match=r"process\(es\) \[1\] differ from process 0.*shared folder"):
        agreement.check_same_backup_record(three_workers, True, "/backup", "kscale_inside_epoch.json")
    agreement.check_same_backup_record(lambda mine: np.asarray([[0.0], [0.0]]), False, "/b", "record")
