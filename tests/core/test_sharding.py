"""kscale.sharding: equal, disjoint parts of array input, without any framework."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from kscale.errors import DataError
from kscale.sharding import (
    BatchShard,
    EverySampleBatches,
    FeedRequest,
    Shard,
    WorkerPart,
    _concatenated,
    array_part,
    every_sample_part,
    flatten,
    is_array_data,
    map_structure,
    one_process_feed,
    other_part,
    unknown_length,
)


def request(
    workers=2, index=0, per_replica=4, replicas_per_worker=1, steps=None, what="training data"
) -> FeedRequest:
    return FeedRequest(per_replica, False, steps, what, "shard", Shard(index, workers), replicas_per_worker)


def test_flatten_and_map_follow_nested_lists_tuples_and_dicts_in_key_order():
    Pair = collections.namedtuple("Pair", "a b")
    structure = {"b": [1, (2, 3)], "a": Pair(4, 5)}
    assert flatten(structure) == [4, 5, 1, 2, 3]
    doubled = map_structure(lambda v: 2 * v, structure)
    assert doubled == {"b": [2, (4, 6)], "a": Pair(8, 10)} and isinstance(doubled["a"], Pair)


def test_array_data_is_arrays_or_structures_of_them():
    assert is_array_data(np.zeros((3, 2))) and is_array_data({"x": np.zeros(3), "y": [np.zeros(3)]})
    assert not is_array_data([1, 2, 3]) and not is_array_data(None) and not is_array_data(np.float32(1.0))


@pytest.mark.parametrize("total", [8, 9, 11])
def test_two_workers_get_equal_strided_parts(total):
    x = np.arange(total)
    parts = [array_part(x, x * 10, None, request(index=r)) for r in range(2)]
    assert [p.length for p in parts] == [total // 2] * 2
    np.testing.assert_array_equal(parts[0].x, x[0 : total // 2 * 2 : 2])
    np.testing.assert_array_equal(parts[1].y, 10 * x[1 : total // 2 * 2 : 2])
    assert parts[0].notes == (
        [f"1 trailing sample(s) of {total} unused so workers stay even"] if total % 2 else []
    )


def test_fewer_samples_than_workers_is_a_data_error():
    with pytest.raises(DataError, match="has 1 sample"):
        array_part(np.zeros(1), None, None, request())


def test_a_worker_with_two_devices_takes_two_replicas_worth_per_step():
    part = array_part(np.zeros(40), None, None, request(workers=2, per_replica=4, replicas_per_worker=2))
    feed = one_process_feed(part, request(workers=2, per_replica=4, replicas_per_worker=2))
    assert (feed.batch_size, feed.epoch_steps) == (8, 3)  # 20 samples each, 8 per step


def test_steps_beyond_the_data_and_unsplittable_input_are_data_errors():
    part = array_part(np.zeros(16), None, None, request())
    with pytest.raises(DataError, match="asks each worker for 5 steps"):
        one_process_feed(part, request(steps=5))
    with pytest.raises(DataError, match="cannot split generator"):
        other_part((i for i in range(3)), None, None, request())
    assert other_part([1, 2], None, None, request(workers=1)).kind == "other"


@pytest.mark.parametrize("total", [10, 11, 101])
def test_uneven_parts_take_every_sample_once(total):
    x = np.arange(total)
    parts = [
        array_part(
            x, None, None, FeedRequest(4, False, None, "evaluation data", "shard", Shard(r, 2, even=False))
        )
        for r in range(2)
    ]
    assert sorted(np.concatenate([part.x for part in parts]).tolist()) == list(range(total))
    assert [part.length for part in parts] == [len(part.x) for part in parts]
    assert {part.longest for part in parts} == {(total + 1) // 2}  # what every worker's steps follow
    assert not any(part.notes for part in parts)  # nothing dropped, nothing to say


def test_uneven_batch_shard_keeps_the_trailing_batches():
    class Batches(BatchShard):
        pass

    parts = [Batches(list(range(7)), Shard(r, 3, even=False)) for r in range(3)]
    assert [[part[i] for i in range(len(part))] for part in parts] == [[0, 3, 6], [1, 4], [2, 5]]
    assert [len(Batches(list(range(7)), Shard(r, 3))) for r in range(3)] == [2, 2, 2]


class _DictBatches:
    """Batches of a dict input and a target: batch i holds samples i*size ... (the last one short)."""

    def __init__(self, total, size):
        self.total, self.size = total, size

    def __len__(self):
        return -(-self.total // self.size)

    def __getitem__(self, i):
        rows = np.arange(i * self.size, min(self.total, (i + 1) * self.size))
        return {"b": rows * 10, "a": rows}, rows

    def on_epoch_end(self):
        pass


@pytest.mark.parametrize(
    "total, workers, items, last",
    [
        (38, 2, 1, [[32, 33, 34], [35, 36, 37]]),  # 16, 16, 6: the 6 shared, as one process's last step
        (22, 2, 1, [[*range(11)], [*range(11, 22)]]),  # 16 + 6: 11 each, not a mean of 16 and of 6
        (54, 1, 2, [[*range(32, 43)], [*range(43, 54)]]),  # one worker of two replicas: 16 + 6 -> 11, 11
        (33, 2, 1, None),  # 16, 16, 1: one sample cannot go to two workers, the batch stays unused
    ],
)
def test_batch_shard_shares_the_last_step_evenly(total, workers, items, last):
    class Batches(BatchShard):
        pass

    parts = [Batches(_DictBatches(total, 16), Shard(r, workers), items) for r in range(workers)]
    slices = [part[i][1].tolist() for part in parts for i in range(len(part) - items, len(part))]
    if last is None:
        assert not parts[0].shares_last_step and len(parts[0]) == 1
        return
    assert slices == last
    x, y = parts[-1][len(parts[-1]) - 1]
    assert list(x) == ["b", "a"] and x["b"].tolist() == [10 * v for v in y.tolist()]  # structure kept


def test_batch_shard_pads_the_last_steps_batches_to_one_length():
    lengths = [3, 5, 2, 7, 4, 1, 6, 2, 3, 8, 2, 2, 9, 1]

    class Padded:  # batches of sequences padded to each batch's longest: 4, 4, 4, then 2
        def __len__(self):
            return 4

        def __getitem__(self, i):
            rows = lengths[4 * i : 4 * i + 4]
            x = np.zeros((len(rows), max(rows)), "float32")
            for row, n in enumerate(rows):
                x[row, :n] = 1
            return x, np.asarray(rows)

        def on_epoch_end(self):
            pass

    class Batches(BatchShard):
        pass

    last = [part[len(part) - 1] for part in (Batches(Padded(), Shard(r, 2)) for r in range(2))]
    assert [x.shape for x, _ in last] == [(3, 9), (3, 9)]
    words = [np.array([["a", "bb"]], dtype=object), np.array([["c"]], dtype=object)]
    assert _concatenated(words).tolist() == [["a", "bb"], ["c", ""]]  # strings padded with "", not 0
    assert _concatenated([np.array([["a"]]), np.array([["b", "c"]])]).tolist() == [["a", ""], ["b", "c"]]
    assert [x.sum(axis=1).tolist() for x, _ in last] == [[3, 8, 2], [2, 9, 1]]
    assert [y.tolist() for _, y in last] == [[3, 8, 2], [2, 9, 1]]


def test_batch_shard_shuffles_its_steps_alike_on_every_worker_and_anew_each_epoch():
    class Batches(BatchShard):
        pass

    def steps(part):  # the first sample of each item: which global step it came from
        return [int(part[i][1][0]) // 32 for i in range(len(part))]

    parts = [Batches(_DictBatches(320, 16), Shard(r, 2), shuffle=True) for r in range(2)]
    first = [steps(part) for part in parts]
    assert first[0] == first[1] and sorted(first[0]) == list(range(10)) and first[0] != list(range(10))
    for part in parts:
        part.on_epoch_end()
    assert steps(parts[0]) == steps(parts[1]) != first[0]
    feed = one_process_feed(WorkerPart("sequence", parts[0], length=len(parts[0])), request())
    assert feed.shuffle is False  # Keras would shuffle each worker's batches with its own `random`


def _every_sample_batches(workers, index, total=101, per_replica=8, replicas_per_worker=1, per_item=1):
    request = FeedRequest(
        per_replica,
        False,
        None,
        "training data",
        "every_sample",
        Shard(index, workers),
        replicas_per_worker,
        True,
    )
    x = np.arange(total, dtype="float32").reshape(total, 1)
    return EverySampleBatches(x, np.arange(total), None, request, per_item)


@pytest.mark.parametrize(
    "workers, replicas_per_worker, per_item", [(2, 1, 1), (1, 2, 1), (2, 2, 2), (3, 1, 1)]
)
def test_every_sample_batches_cover_every_sample_once_with_the_last_step_reweighted(
    workers, replicas_per_worker, per_item
):
    seen, weight_of = [], {}
    for index in range(workers):
        batches = _every_sample_batches(
            workers, index, replicas_per_worker=replicas_per_worker, per_item=per_item
        )
        global_batch = 8 * workers * replicas_per_worker
        assert (
            len(batches) == -(-101 // global_batch) * replicas_per_worker // per_item
        )  # the same everywhere
        for i in range(len(batches)):
            x, y, w = batches[i]
            assert len(x) == len(y) == len(w) == 8 * per_item  # full size: padded
            real = w > 0
            seen += y[real].tolist()
            weight_of.update(zip(y[real].tolist(), w[real].tolist()))
            assert (x[~real] == 0).all()
    assert sorted(seen) == list(range(101))
    last = 101 - (101 // global_batch) * global_batch  # real samples in the last global step
    assert sorted(set(weight_of.values())) == pytest.approx(sorted({1.0, global_batch / last}))


def test_every_sample_batches_shuffle_alike_on_every_worker_and_anew_each_epoch():
    parts = [_every_sample_batches(2, index) for index in range(2)]
    for part in parts:
        part.shuffle = True
        part.on_epoch_end()
    first = sorted(
        y for part in parts for i in range(len(part)) for y, w in zip(part[i][1], part[i][2]) if w > 0
    )
    assert first == list(range(101))  # still disjoint and complete: the workers drew the same permutation
    order = [parts[0][i][1].tolist() for i in range(len(parts[0]))]
    parts[0].on_epoch_end()
    assert [parts[0][i][1].tolist() for i in range(len(parts[0]))] != order


def test_every_sample_refuses_input_it_cannot_pad():
    request = FeedRequest(8, False, None, "training data", "every_sample", Shard(0, 2), 1, True)
    with pytest.raises(DataError, match="every_sample"):
        every_sample_part(iter([]), None, None, request, EverySampleBatches, 1)


def test_unknown_length_advice_names_both_ways_that_keep_training():
    # Advice followed literally must train every epoch: steps without repeat() ends after the first.
    message = str(unknown_length("training data"))
    assert "assert_cardinality(n)" in message
    assert "repeat() the dataset and pass steps_per_epoch" in message


def test_class_weight_becomes_sample_weights_as_keras_reads_the_labels():
    from kscale.sharding import class_weighted

    weights = {0: 0.5, 1: 4.0}
    np.testing.assert_array_equal(class_weighted(np.array([0, 1, 1, 2]), None, weights), [0.5, 4, 4, 1])
    one_hot = np.array([[1, 0], [0, 1]], "float32")
    np.testing.assert_array_equal(class_weighted(one_hot, None, weights), [0.5, 4.0])
    column = np.array([[0.0], [1.0]])  # binary labels as a column
    np.testing.assert_array_equal(class_weighted(column, np.array([2.0, 3.0]), weights), [1.0, 12.0])


def test_class_weight_with_several_outputs_is_refused_as_keras_refuses_it():
    from kscale.sharding import class_weighted

    with pytest.raises(DataError, match="one output"):
        class_weighted({"a": np.zeros(2), "b": np.zeros(2)}, None, {0: 1.0})
