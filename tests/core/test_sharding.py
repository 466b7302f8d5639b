"""kscale.sharding and the modules it feeds (kscale.feeds, kscale.batch_shards, kscale.structures): disjoint
parts of array input that together hold every sample, without any framework."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from kscale.batch_shards import ArrayBatches, BatchShard, other_part
from kscale.errors import DataError
from kscale.feeds import FeedRequest, Kind, LastStep, WorkerPart, array_part, one_process_feed, unknown_length
from kscale.sharding import Shard
from kscale.step_weights import Weighted, WholeStep
from kscale.structures import _concatenated, flatten, is_array_data, map_structure


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
def test_two_workers_get_strided_parts_of_every_sample(total):
    x = np.arange(total)
    parts = [array_part(x, x * 10, None, request(index=r)) for r in range(2)]
    usable = {8: 8, 9: 8, 11: 11}[total]
    assert [p.length for p in parts] == [(usable + 1) // 2, usable // 2]
    np.testing.assert_array_equal(parts[0].x, x[:usable:2])
    np.testing.assert_array_equal(parts[1].y, 10 * x[1:usable:2])
    # 8 per step (4 per replica): the last step's samples, 1 or 3, go to the replicas with their shares
    last = {8: None, 9: None, 11: LastStep(3, 2)}[total]
    assert parts[0].last_step == last
    assert parts[0].notes == (
        [
            "1 trailing sample(s) of 9 unused so no replica is left without a sample (fewer than the 2 "
            "replicas in the last step)"
        ]
        if total == 9
        else [
            "every sample once per epoch: the last step's 3 samples cut in 2 slices, each replica's "
            "gradient weighted by its slice's share"
        ]
        if total == 11
        else []
    )
    if total == 9:  # the ninth sample alone would leave a replica without one: left out, and said
        assert sorted([*parts[0].x, *parts[1].x]) == list(range(8))


def test_a_replicas_weight_is_its_share_of_the_last_step():
    last = LastStep(samples=11, replicas=2)
    assert (last.weight(6), last.weight(5)) == pytest.approx((12 / 11, 10 / 11))
    losses = np.random.default_rng(0).random(11)
    replicas_mean = (last.weight(6) * losses[:6].mean() + last.weight(5) * losses[6:].mean()) / 2
    assert replicas_mean == pytest.approx(losses.mean())  # one process's mean over the 11


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
    with pytest.raises(DataError, match="cannot split dict"):  # no batches kscale can cut
        other_part({"rows": [1, 2, 3]}, None, None, request())
    assert other_part([1, 2], None, None, request(workers=1)).kind is Kind.OTHER


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
    feed = one_process_feed(WorkerPart(Kind.SEQUENCE, parts[0], length=len(parts[0])), request())
    assert feed.shuffle is False  # Keras would shuffle each worker's batches with its own `random`


def _array_batches(
    workers, index, total=101, per_replica=8, replicas_per_worker=1, equal=False, weights=True
):
    feed = FeedRequest(
        per_replica, False, None, "training data", "shard", Shard(index, workers), replicas_per_worker, equal
    )
    x = np.arange(total, dtype="float32").reshape(total, 1)
    w = np.full(total, 2.0, np.float32) if weights else None
    part = array_part(x, np.arange(total), w, feed)
    return ArrayBatches(part, feed)


@pytest.mark.parametrize("workers, replicas_per_worker", [(2, 1), (3, 1)])
def test_array_batches_take_every_sample_once_with_the_last_steps_weights(workers, replicas_per_worker):
    replicas = workers * replicas_per_worker
    global_batch = 8 * replicas
    last = 101 % global_batch
    seen, factors = [], []
    for index in range(workers):
        batches = _array_batches(workers, index, replicas_per_worker=replicas_per_worker)
        assert len(batches) == -(-101 // global_batch)  # the same on every worker
        for i in range(len(batches)):
            item = batches[i]
            (_x, y, w), factor = item if isinstance(item, Weighted) else (item, np.ones(1))
            seen += y.tolist()
            assert (w == 2.0).all()  # the user's weights
            factors.append((len(y), float(factor[0])))
    assert sorted(seen) == list(range(101))
    in_last = [(rows, f) for rows, f in factors if rows < 8 * replicas_per_worker]
    assert sum(rows for rows, _ in in_last) == last  # no padding: each replica's weight is its share, R·m_r/m
    assert all(f == pytest.approx(replicas * rows / last) for rows, f in in_last)


@pytest.mark.parametrize("workers, replicas_per_worker", [(2, 1), (2, 2)])
def test_equal_batches_take_the_whole_last_step_on_every_worker(workers, replicas_per_worker):
    """Keras 3 on JAX: one array of every device's batch, so no share of a short last step: the whole of
    it, the same on every worker (WholeStep), laid out on every device."""
    global_batch = 8 * workers * replicas_per_worker
    last = 101 % global_batch
    seen, wholes = [], []
    for index in range(workers):
        batches = _array_batches(workers, index, replicas_per_worker=replicas_per_worker, equal=True)
        assert len(batches) == -(-101 // global_batch)
        for i in range(len(batches)):
            item = batches[i]
            if isinstance(item, WholeStep):
                wholes.append(item.batch[1].tolist())
            else:
                seen += item[1].tolist()
                assert len(item[1]) == 8 * replicas_per_worker
    assert len(wholes) == workers and all(rows == wholes[0] for rows in wholes)  # the same everywhere
    assert len(wholes[0]) == last and sorted(seen + wholes[0]) == list(range(101))


def test_array_batches_without_weights_need_none():
    batch = _array_batches(2, 1, weights=False)[0]
    assert len(batch) == 2  # (x, y): a full step's batch as the user gave it
    assert len(_array_batches(2, 1, replicas_per_worker=1, equal=True, weights=False)[0]) == 2


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


def _generator(rows=4):
    start = 0
    while True:
        yield np.arange(start, start + rows, dtype="float32")[:, None], np.arange(start, start + rows)
        start += rows


@pytest.mark.parametrize("workers, replicas_per_worker, joined", [(2, 1, False), (2, 2, False), (2, 2, True)])
def test_a_generator_gives_each_replica_every_rth_batch(workers, replicas_per_worker, joined):
    replicas = workers * replicas_per_worker
    seen = []
    for index in range(workers):
        feed = request(workers=workers, index=index, replicas_per_worker=replicas_per_worker, steps=3)
        part = other_part(_generator(), None, None, feed)
        assert part.kind is Kind.GENERATOR and "replica i mod" in part.notes[0]
        part.x.joined = joined
        per_step = 1 if joined else replicas_per_worker
        batches = [next(part.x) for _ in range(3 * per_step)]
        seen.append([b[1].tolist() for b in batches])
        # every worker read the same first step, and says which targets it saw
        assert [a.tolist() for a in part.fingerprint] == [
            list(range(4 * i, 4 * i + 4)) for i in range(replicas)
        ]
    for step in range(3):  # step s: batches s·R .. s·R+R-1 of the generator, in the replicas' order
        rows = [
            r for worker in seen for r in worker[step * (len(worker) // 3) : (step + 1) * (len(worker) // 3)]
        ]
        flat = sorted(v for batch in rows for v in batch)
        assert flat == list(range(step * 4 * replicas, (step + 1) * 4 * replicas))


def test_a_generator_of_samples_or_without_steps_is_a_data_error():
    def samples():
        while True:
            yield np.zeros(4, "float32"), np.float32(1.0)

    with pytest.raises(DataError, match="not a batch"):
        other_part(samples(), None, None, request(steps=2))
    with pytest.raises(DataError, match="needs steps_per_epoch"):
        other_part(_generator(), None, None, request())
    assert other_part(_generator(), None, None, request(workers=1)).kind is Kind.OTHER  # one process: Keras'
