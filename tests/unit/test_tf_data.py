"""kscale.tf_data: every worker gets an equal, disjoint part, and together they see one global batch."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import tensorflow as tf

from kscale.errors import DataError
from kscale.sharding import Shard, require_samples, shard_arrays, split_validation
from kscale.structures import is_array_data, num_samples
from kscale.tf_data import ShardedSequence, dataset_batches, shard_dataset, shares_last_step, steps_joined
from kscale.tf_feeds import arrays_to_dataset, sequence_to_dataset


class Batches(tf.keras.utils.Sequence):
    """`count` batches; batch i is (x filled with i, y filled with -i)."""

    def __init__(self, count: int, batch: int = 2, as_list: bool = False):
        super().__init__()
        self.count, self.batch, self.as_list = count, batch, as_list
        self.epochs_ended = 0

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int):
        item = (np.full((self.batch, 3), i, "float32"), np.full((self.batch, 1), -i, "float32"))
        return list(item) if self.as_list else item

    def on_epoch_end(self) -> None:
        self.epochs_ended += 1


def first_values(dataset: tf.data.Dataset) -> list[list[int]]:
    return [batch.numpy().tolist() for batch in dataset]


# -- arrays ----------------------------------------------------------------------------------------------
def test_shard_arrays_is_strided_equal_and_drops_the_remainder():
    x = np.arange(10)
    parts = [shard_arrays(x, Shard(r, 3)).tolist() for r in range(3)]
    assert parts == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]  # sample 9 is the one remainder
    assert len({len(p) for p in parts}) == 1


def test_shard_arrays_cuts_every_array_of_a_structure_alike():
    x = {"a": np.arange(7), "b": np.arange(7) * 10}
    y = np.arange(7) * 100
    (xs, ys) = shard_arrays((x, y), Shard(1, 2))
    assert xs["a"].tolist() == [1, 3, 5]
    assert xs["b"].tolist() == [10, 30, 50]
    assert ys.tolist() == [100, 300, 500]


def test_one_shard_and_none_are_returned_unchanged():
    x = np.arange(5)
    assert shard_arrays(x, Shard(0, 1)) is x
    assert shard_arrays(None, Shard(1, 2)) is None


@pytest.mark.parametrize(("workers", "batch", "total"), [(2, 3, 24), (2, 4, 19), (3, 2, 20), (4, 1, 9)])
def test_shards_together_see_the_single_process_global_batch_at_every_step(workers, batch, total):
    # One process with batch N·b takes samples [N·b·k, N·b·(k+1)) at step k (no shuffle); the N shards,
    # each with batch b, must together take exactly those samples at the same step.
    samples = np.arange(total)
    shards = [shard_arrays(samples, Shard(r, workers)) for r in range(workers)]
    steps = len(shards[0]) // batch
    assert steps >= 1
    for k in range(steps):
        step_union = set()
        for shard in shards:
            step_union |= set(shard[batch * k : batch * (k + 1)].tolist())
        global_batch = workers * batch
        assert step_union == set(range(global_batch * k, global_batch * (k + 1)))


def test_two_workers_step_k_of_shard_r_lies_in_its_global_batch():
    b = 4
    samples = np.arange(64)
    for r in range(2):
        shard = shard_arrays(samples, Shard(r, 2))
        for k in range(len(shard) // b):
            step = shard[b * k : b * (k + 1)]
            assert set(step.tolist()) <= set(range(2 * b * k, 2 * b * k + 2 * b))


def test_num_samples_requires_one_first_dimension():
    assert num_samples(np.zeros((5, 2)), {"a": np.zeros(5)}, None) == 5
    with pytest.raises(DataError, match=r"different numbers of samples \[4, 5\]"):
        num_samples(np.zeros((5, 2)), np.zeros(4))


def test_require_samples_needs_one_per_worker():
    require_samples(2, Shard(0, 2), batch_size=8)
    with pytest.raises(DataError) as err:
        require_samples(1, Shard(0, 2), batch_size=8, what="validation data")
    message = str(err.value)
    assert "validation data has 1 sample(s), fewer than the 2 workers" in message
    assert "at least 2 samples (ideally 16" in message


def test_is_array_data():
    assert is_array_data(np.zeros(3))
    assert is_array_data({"a": np.zeros(3), "b": tf.zeros(3)})
    assert is_array_data((np.zeros(3), [np.zeros(3)]))
    assert not is_array_data([1, 2, 3])
    assert not is_array_data(tf.data.Dataset.range(3))
    assert not is_array_data(i for i in range(3))
    assert not is_array_data(None)


def keras_data_adapter():
    """The data adapter module of the Keras 2 that tf.keras is here (Keras 2.15's own, or tf_keras)."""
    package = tf.keras.Model.__module__.split(".src.")[0]
    return importlib.import_module(f"{package}.src.engine.data_adapter")


@pytest.mark.parametrize("fraction", [0.1, 0.2, 0.25, 0.3, 1 / 3, 0.5, 0.7])
@pytest.mark.parametrize("total", [7, 10, 33, 100])
def test_split_validation_matches_keras(fraction, total):
    x = np.arange(total * 2).reshape(total, 2)
    y = np.arange(total)
    (tx, ty, tw), (vx, vy, vw) = split_validation((x, y, None), fraction)
    (kx, ky), (kvx, kvy) = keras_data_adapter().train_validation_split((x, y), fraction)
    np.testing.assert_array_equal(tx, kx)
    np.testing.assert_array_equal(ty, ky)
    np.testing.assert_array_equal(vx, kvx)
    np.testing.assert_array_equal(vy, kvy)
    assert tw is None and vw is None
    assert vy[-1] == total - 1  # the last fraction, not shuffled


# -- datasets --------------------------------------------------------------------------------------------
def test_shard_dataset_gives_equal_batch_counts():
    dataset = tf.data.Dataset.range(12).batch(2)  # 6 batches
    shards = [shard_dataset(dataset, Shard(r, 3)) for r in range(3)]
    assert [dataset_batches(s) for s in shards] == [2, 2, 2]
    assert first_values(shards[1]) == [[2, 3], [8, 9]]


def test_shard_dataset_shares_the_fifth_of_five_batches():
    dataset = tf.data.Dataset.range(10).batch(2)  # 5 batches over 2 workers: the 5th is one sample each
    shards = [shard_dataset(dataset, Shard(r, 2)) for r in range(2)]
    assert first_values(shards[0]) == [[0, 1], [4, 5], [8]]
    assert first_values(shards[1]) == [[2, 3], [6, 7], [9]]
    assert [dataset_batches(s) for s in shards] == [3, 3]


def test_shard_dataset_shares_a_short_last_batch_evenly():
    # batch() keeps the remainder: one process at the global batch trains on it in its last step
    short = tf.data.Dataset.range(22).batch(16)  # 16 + 6: 11 each, as one process's batch of 22
    assert [first_values(shard_dataset(short, Shard(r, 2))) for r in range(2)] == [
        [list(range(11))],
        [list(range(11, 22))],
    ]
    # 4 replicas (2 workers of 2): 16, 16, 16, 6 -> 13 each (54 // 4; 2 samples unused)
    worker = shard_dataset(tf.data.Dataset.range(54).batch(16), Shard(1, 2), items_per_worker=2)
    assert first_values(worker) == [list(range(26, 39)), list(range(39, 52))]
    assert dataset_batches(worker) == 2


def test_shard_dataset_shares_an_odd_last_batch_whose_size_batch_gives():
    odd = tf.data.Dataset.range(38).batch(16).map(lambda b: b * 1).prefetch(1)  # 16, 16, 6: 3 each
    assert shares_last_step(odd, 3, 2)
    assert [first_values(shard_dataset(odd, Shard(r, 2))) for r in range(2)] == [
        [list(range(16)), [32, 33, 34]],
        [list(range(16, 32)), [35, 36, 37]],
    ]


def test_shard_dataset_leaves_trailing_batches_it_cannot_share():
    one = tf.data.Dataset.range(33).batch(16)  # 16, 16, 1: one sample, two workers
    shuffled = tf.data.Dataset.range(38).batch(16).shuffle(3)  # the short batch is anywhere
    for dataset in (one, shuffled):
        assert not shares_last_step(dataset, 3, 2)
        assert [dataset_batches(shard_dataset(dataset, Shard(r, 2))) for r in range(2)] == [1, 1]
    # drop_remainder=True: one process at the global batch (8) drops the fifth batch of 4 as well
    static = tf.data.Dataset.range(20).batch(4, drop_remainder=True)
    assert not shares_last_step(static, 5, 2)
    assert [dataset_batches(shard_dataset(static, Shard(r, 2))) for r in range(2)] == [2, 2]


def test_shard_dataset_pads_the_last_steps_padded_batches_to_one_length():
    # padded_batch: 4, 4, 4 and 2 sequences, each batch as long as its longest; one process at the global
    # batch pads the last 6 to the longest of them
    lengths = [3, 5, 2, 7, 4, 1, 6, 2, 3, 8, 2, 2, 9, 1]
    dataset = tf.data.Dataset.from_generator(
        lambda: ((np.ones(n, "int32"), n > 4, "ab"[: n % 3]) for n in lengths),
        output_signature=(
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([], tf.bool),
            tf.TensorSpec([], tf.string),
        ),
    )
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(len(lengths))).padded_batch(4)
    last = [list(shard_dataset(dataset, Shard(r, 2)))[-1] for r in range(2)]
    assert [ones.shape.as_list() for ones, _, _ in last] == [[3, 9], [3, 9]]
    assert [ones.numpy().sum(axis=1).tolist() for ones, _, _ in last] == [[3, 8, 2], [2, 9, 1]]
    assert [long.numpy().tolist() for _, long, _ in last] == [[False, True, False], [False, True, False]]


def test_steps_joined_gives_each_steps_batches_as_one_padded_batch():
    """One process on 2 devices (Keras 3 on JAX): each step's 2 batches (the last step's equal halves) as one
    batch, as one process at the global batch takes them; sequences padded to the step's longest."""
    lengths = [3, 5, 2, 7, 4, 1, 6, 2, 3, 8, 2, 2, 9, 1]  # 4 batches of 4, 4, 4 and 2
    dataset = tf.data.Dataset.from_generator(
        lambda: ((np.ones(n, "int32"), n) for n in lengths),
        output_signature=(tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.int64)),
    )
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(len(lengths))).padded_batch(4)
    steps = list(steps_joined(shard_dataset(dataset, Shard(), items_per_worker=2), 2))
    assert [n.numpy().tolist() for _, n in steps] == [lengths[:8], [3, 8, 2, 2, 9, 1]]  # 4 + 4, then 3 + 3
    for ones, n in steps:  # each row's sequence, padded to the step's longest
        assert ones.shape[1] == max(n.numpy()) and ones.numpy().sum(axis=1).tolist() == n.numpy().tolist()
    # a static batch size stays static (Keras lays each batch out on the devices by it)
    static = steps_joined(tf.data.Dataset.range(12).batch(3, drop_remainder=True), 2)
    assert static.element_spec.shape.as_list() == [6] and dataset_batches(static) == 2


def test_shard_dataset_reads_the_data_once():
    calls = tf.Variable(0, dtype=tf.int64)

    def counted(batch):
        calls.assign_add(1)
        return batch

    dataset = tf.data.Dataset.range(120).batch(16).map(counted)  # 8 batches: 7 of 16, then 8
    for _ in shard_dataset(dataset, Shard(0, 2), items_per_worker=2):
        pass
    assert int(calls.numpy()) == 8  # not 4 more, as skip() would read the first 4 again


def test_shard_dataset_with_fewer_batches_than_workers():
    dataset = tf.data.Dataset.range(3).batch(2)
    with pytest.raises(DataError) as err:
        shard_dataset(dataset, Shard(0, 3), what="validation dataset")
    assert "validation dataset has 2 batch(es), fewer than the 3 workers" in str(err.value)
    assert "at least 3 batches" in str(err.value)


def test_shard_dataset_of_unknown_length_is_strided_without_cutting():
    dataset = tf.data.Dataset.range(10).filter(lambda v: v < 5)
    assert dataset_batches(dataset) is None
    assert [int(v) for v in shard_dataset(dataset, Shard(1, 2))] == [1, 3]


def test_one_dataset_shard_is_the_dataset_itself():
    dataset = tf.data.Dataset.range(4)
    assert shard_dataset(dataset, Shard()) is dataset


def test_dataset_batches():
    assert dataset_batches(tf.data.Dataset.range(5).batch(2)) == 3
    assert dataset_batches(tf.data.Dataset.range(5).repeat()) == -1
    assert dataset_batches(tf.data.Dataset.range(5).filter(lambda v: v > 1)) is None


def test_arrays_to_dataset_batches_and_keeps_all_samples():
    x, y = np.arange(10, dtype="float32")[:, None], np.arange(10, dtype="float32")
    batches = list(arrays_to_dataset((x, y, None), batch_size=4, shuffle=False))
    assert [len(b[0]) for b in batches] == [4, 4, 2]
    shuffled = list(arrays_to_dataset((x, y, None), batch_size=4, shuffle=True))
    xs = np.concatenate([b[0].numpy()[:, 0] for b in shuffled])
    ys = np.concatenate([b[1].numpy() for b in shuffled])
    assert sorted(xs.tolist()) == list(range(10))
    np.testing.assert_array_equal(xs, ys)  # x and y are shuffled together


def test_arrays_to_dataset_full_batches_have_a_static_size():
    # As Keras' own adapter: a batch dimension of None makes tracing the first step slower (kscale bench).
    x = np.zeros((12, 3), "float32")
    dataset = arrays_to_dataset((x, None, None), batch_size=4, shuffle=True)
    assert dataset.element_spec.shape.as_list() == [4, 3]
    assert dataset_batches(dataset) == 3
    with_partial = arrays_to_dataset((x, None, None), batch_size=5, shuffle=True)
    assert dataset_batches(with_partial) == 3
    assert [len(b) for b in with_partial] == [5, 5, 2]


# -- Sequences -------------------------------------------------------------------------------------------
def test_sharded_sequence_lengths_and_items():
    sequence = Batches(5)
    shards = [ShardedSequence(sequence, Shard(r, 2)) for r in range(2)]
    assert [len(s) for s in shards] == [3, 3]
    assert [int(shards[0][i][0][0, 0]) for i in range(3)] == [0, 2, 4]
    assert [int(shards[1][i][0][0, 0]) for i in range(3)] == [1, 3, 4]
    # the fifth batch is the last step: its two samples, one for each worker
    assert [len(shard[2][0]) for shard in shards] == [1, 1]
    with pytest.raises(IndexError):
        shards[1][3]
    shards[0].on_epoch_end()
    assert sequence.epochs_ended == 1


def test_sharded_sequence_with_fewer_batches_than_workers():
    with pytest.raises(DataError, match=r"the Sequence has 1 batch\(es\), fewer than the 2 workers"):
        ShardedSequence(Batches(1), Shard(0, 2))


@pytest.mark.parametrize("as_list", [False, True])
def test_sequence_to_dataset_round_trip(as_list):
    sequence = Batches(3, as_list=as_list)
    dataset = sequence_to_dataset(sequence)
    assert dataset_batches(dataset) == 3
    items = list(dataset)
    assert len(items) == 3
    for i, (x, y) in enumerate(items):
        expected_x, expected_y = sequence[i]
        np.testing.assert_array_equal(x.numpy(), expected_x)
        np.testing.assert_array_equal(y.numpy(), expected_y)
    assert sequence.epochs_ended == 1  # one pass ends one epoch


def test_arrays_in_batches_gives_every_sample_once_in_the_sizes_asked():
    from kscale.tf_feeds import arrays_in_batches

    x, y = np.arange(14, dtype="float32").reshape(7, 2), np.arange(7)
    batches = list(arrays_in_batches((x, y, None), [2, 2, 2, 1]).as_numpy_iterator())
    assert [len(bx) for bx, _ in batches] == [2, 2, 2, 1]
    np.testing.assert_array_equal(np.concatenate([by for _, by in batches]), y)
    np.testing.assert_array_equal(np.concatenate([bx for bx, _ in batches]), x)


def test_split_first_batches_cuts_them_in_halves_and_keeps_every_sample():
    from kscale.tf_feeds import split_first_batches

    dataset = tf.data.Dataset.from_tensor_slices(({"a": np.arange(7.0)}, np.arange(7))).batch(3)
    split = list(split_first_batches(dataset, 2).as_numpy_iterator())
    assert [len(y) for _, y in split] == [2, 1, 2, 1, 1]
    np.testing.assert_array_equal(np.concatenate([y for _, y in split]), np.arange(7))
    assert [len(y) for _, y in split_first_batches(dataset, 0)] == [3, 3, 1]


def test_split_first_batches_reads_a_reshuffling_dataset_once():
    """A seeded shuffle() draws a new order for every pass: cutting the first batches must not read a
    second pass for the others (some samples twice, others never)."""
    from kscale.tf_feeds import split_first_batches

    dataset = tf.data.Dataset.range(12).shuffle(12, seed=3).batch(3)
    for _ in range(3):
        samples = np.concatenate(list(split_first_batches(dataset, 2).as_numpy_iterator()))
        np.testing.assert_array_equal(np.sort(samples), np.arange(12))


def test_epochs_in_one_process_order_reads_the_passes_one_process_reads():
    """Each epoch's pass is the one a seeded shuffle gives the iterator one process's fit reads then: after
    the iterators Keras' fit makes and drops (FitIterators), and no pass is begun after the last epoch."""
    from kscale._keras_private import FitIterators
    from kscale.tf_orders import after_last_epoch, epochs_in_one_process_order

    def shuffled():
        return tf.data.Dataset.range(6).shuffle(6, seed=5)

    reference = shuffled()
    passes = [list(reference.as_numpy_iterator()) for _ in range(16)]
    for before, after in ((1, 0), (0, 1), (2, 3)):
        dataset = shuffled()
        iterators = FitIterators(before_first_epoch=before, after_each_epoch=after)
        stream = list(epochs_in_one_process_order(dataset, dataset, 3, iterators).as_numpy_iterator())
        read = [before + e * (1 + after) for e in range(3)]
        assert stream == [v for i in read for v in passes[i]]
        after_last_epoch(dataset, iterators)
        assert list(dataset.as_numpy_iterator()) == passes[before + 3 * (1 + after)]


def test_split_first_batches_refuses_to_make_an_empty_batch():
    from kscale.tf_feeds import split_first_batches

    dataset = tf.data.Dataset.from_tensor_slices(np.arange(3.0)).batch(1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="batches of at least 2 samples"):
        list(split_first_batches(dataset, 1))


# -- file-level sharding --------------------------------------------------------------------------------------
def _tfrecords(folder, files: int = 8, records: int = 25) -> list[str]:
    paths = []
    for i in range(files):
        path = str(folder / f"part-{i}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for j in range(records):
                writer.write(tf.io.serialize_tensor(tf.constant([i * 100 + j], tf.int64)).numpy())
        paths.append(path)
    return paths


def _counted_pipeline(paths: list[str], reads: tf.Variable) -> tf.data.Dataset:
    """A typical input pipeline (list the files, interleave the readers, decode, batch) that counts every
    record it decodes."""

    def decode(record):
        reads.assign_add(1)
        return tf.io.parse_tensor(record, tf.int64)

    files = tf.data.Dataset.from_tensor_slices(paths)
    return files.interleave(tf.data.TFRecordDataset, cycle_length=2).map(decode).batch(10)


def _read_by_worker(dataset_for, workers: int) -> tuple[list[int], list[set[int]]]:
    from kscale.feeds import FeedRequest
    from kscale.tf_data import worker_part

    reads, samples = [], []
    for index in range(workers):
        counter = tf.Variable(0, dtype=tf.int64)
        request = FeedRequest(10, False, 5, "training data", "shard", Shard(index, workers))
        part = worker_part(dataset_for(counter), None, None, request)
        samples.append({int(v) for batch in part.x for v in batch.numpy().ravel()})
        reads.append(int(counter.numpy()))
    return reads, samples


def test_a_dataset_that_reads_files_is_sharded_by_file_each_worker_reading_its_share(tmp_path):
    paths = _tfrecords(tmp_path)
    reads, samples = _read_by_worker(lambda counter: _counted_pipeline(paths, counter), 2)
    assert reads == [100, 100]  # records decoded per worker: 1/2 of the 200, not all of them
    assert samples[0].isdisjoint(samples[1]) and len(samples[0] | samples[1]) == 200
    # Batch-level sharding, for comparison: every worker decodes all 200 records to keep half the batches.
    counter = tf.Variable(0, dtype=tf.int64)
    kept = sum(len(batch) for batch in _counted_pipeline(paths, counter).shard(2, 0))
    assert (int(counter.numpy()), kept) == (200, 100)


def test_file_sharding_is_named_in_the_plan_and_falls_back_to_batches_with_too_few_files(tmp_path):
    from kscale._tensorflow_private import dataset_files_read as files_read
    from kscale.feeds import FeedRequest
    from kscale.tf_data import worker_part

    paths = _tfrecords(tmp_path, files=3)
    request = FeedRequest(10, False, 5, "training data", "shard", Shard(0, 2))
    counter = tf.Variable(0, dtype=tf.int64)
    part = worker_part(_counted_pipeline(paths, counter), None, None, request)
    assert part.notes == [
        "input sharded by file: this worker reads 2 of the 3 files (tf.data's AutoShardPolicy.FILE)"
    ]
    one_file = tf.data.TFRecordDataset(paths[:1]).batch(5)
    assert files_read(one_file) == 1
    part = worker_part(one_file, None, None, request)
    assert "input sharded by batch (only 1 file(s) for 2 workers)" in part.notes[0]
    assert len(list(part.x)) == 3  # batches 0, 2, 4 of 5
    assert files_read(tf.data.Dataset.range(10).batch(2)) is None


def _with_policy(dataset: tf.data.Dataset, policy) -> tf.data.Dataset:
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = policy
    return dataset.with_options(options)


def test_the_datasets_own_auto_shard_policy_overrides_the_choice(tmp_path):
    """DATA: every worker reads all and keeps its batches; OFF: not sharded (the user shards it); FILE:
    by file, an error when it cannot be."""
    from kscale.feeds import FeedRequest
    from kscale.tf_data import worker_part

    policy = tf.data.experimental.AutoShardPolicy
    paths = _tfrecords(tmp_path)
    reads, samples = _read_by_worker(lambda c: _with_policy(_counted_pipeline(paths, c), policy.DATA), 2)
    assert reads == [200, 200] and samples[0].isdisjoint(samples[1]) and len(samples[0] | samples[1]) == 200
    reads, samples = _read_by_worker(lambda c: _with_policy(_counted_pipeline(paths, c), policy.OFF), 2)
    assert reads == [200, 200] and samples[0] == samples[1] and len(samples[0]) == 200
    reads, _ = _read_by_worker(lambda c: _with_policy(_counted_pipeline(paths, c), policy.FILE), 2)
    assert reads == [100, 100]
    request = FeedRequest(10, False, 5, "training data", "shard", Shard(0, 2))
    data = _with_policy(_counted_pipeline(paths, tf.Variable(0, dtype=tf.int64)), policy.DATA)
    assert (
        "input sharded by batch (the dataset's auto_shard_policy is DATA)"
        in worker_part(data, None, None, request).notes[0]
    )
    one_file = _with_policy(tf.data.TFRecordDataset(paths[:1]).batch(5), policy.FILE)
    with pytest.raises(DataError, match="auto_shard_policy is FILE, but it reads 1 file"):
        worker_part(one_file, None, None, request)


def test_with_class_weight_adds_the_weights_keras_would_to_a_dataset_of_batches():
    from kscale.tf_feeds import with_class_weight

    labels = np.array([0, 1, 1, 2])
    dataset = tf.data.Dataset.from_tensor_slices((np.zeros((4, 2), "float32"), labels)).batch(2)
    weights = [w for _, _, w in with_class_weight(dataset, {0: 0.5, 1: 4.0}).as_numpy_iterator()]
    np.testing.assert_array_equal(np.concatenate(weights), [0.5, 4.0, 4.0, 1.0])
    weighted = tf.data.Dataset.from_tensor_slices((np.zeros((2, 2)), labels[:2], np.array([2.0, 3.0])))
    ((_, _, w),) = with_class_weight(weighted.batch(2), {0: 0.5, 1: 4.0}).as_numpy_iterator()
    np.testing.assert_array_equal(w, [1.0, 12.0])


@pytest.mark.parametrize(
    "samples, last_step",
    [(72, [4, 4]), (71, [4, 3]), (65, []), (64, [])],
    ids=["even tail", "odd tail", "fewer than the replicas", "no tail"],
)
def test_arrays_cut_in_each_steps_slices_for_the_replicas_the_last_step_too(samples, last_step):
    """Two replicas at 8: each step is one batch of 16 cut in two, as one process at 16 trains on it; the
    last step's samples are cut as evenly as they go, and a tail smaller than the replicas is left out."""
    x = np.arange(samples, dtype=np.float32).reshape(-1, 1)
    batches = [b.numpy()[:, 0].tolist() for b in arrays_to_dataset((x, None, None), 8, False, replicas=2)]
    assert [len(b) for b in batches] == [8] * (2 * (samples // 16)) + last_step
    taken = [v for b in batches for v in b]
    assert taken == list(range(len(taken)))  # consecutive: step s holds samples 16s .. 16s+15


def test_shuffle_seeds_are_read_from_the_dataset_and_an_unseeded_shuffle_cannot_be_cut_by_batch():
    """Worker r takes batches r, r+N, ... of the order it reads: the workers compare their shuffles' seeds,
    and a shuffle without one (each worker its own order) is a DataError before any worker trains."""
    from kscale._tensorflow_private import dataset_shuffle_seeds as shuffle_seeds
    from kscale.feeds import FeedRequest
    from kscale.tf_data import worker_part

    def shuffled(seed=None):
        return tf.data.Dataset.range(16).shuffle(16, seed=seed).batch(2)

    tf.random.set_seed(None)  # as a script starts: another test may have set the global seed
    assert shuffle_seeds(shuffled(seed=3)) == shuffle_seeds(shuffled(seed=3)) != shuffle_seeds(shuffled(4))
    nested = tf.data.Dataset.range(2).interleave(lambda _: tf.data.Dataset.range(4).shuffle(4, seed=5))
    assert len(shuffle_seeds(nested)) == 1  # inside interleave's function too
    request = FeedRequest(2, False, None, "training data", "shard", Shard(0, 2))
    part = worker_part(shuffled(seed=3), None, None, request)
    assert part.fingerprint is not None and part.fingerprint[0].size == 2
    with pytest.raises(DataError, match="shuffle\\(\\) without a seed"):
        worker_part(shuffled(), None, None, request)
    assert worker_part(shuffled(), None, None, FeedRequest(2, False, None, "x", "shard")).fingerprint is None


def test_a_reshuffling_dataset_a_failed_fit_read_is_refused_by_the_next_fit():
    """How many orders a reshuffling shuffle() drew is unknown once a fit stopped on an error (the
    strategy read ahead): the next fit on it stops with a DataError; one that does not reshuffle goes on."""
    from kscale.tf_orders import check_not_cut_short, cut_short

    reshuffling = tf.data.Dataset.range(16).shuffle(16, seed=3).batch(4)
    fixed = tf.data.Dataset.range(16).shuffle(16, seed=3, reshuffle_each_iteration=False).batch(4)
    check_not_cut_short(reshuffling)
    cut_short(reshuffling)
    cut_short(fixed)
    with pytest.raises(DataError, match="Make the dataset again"):
        check_not_cut_short(reshuffling)
    check_not_cut_short(fixed)
    check_not_cut_short(tf.data.Dataset.range(16).shuffle(16, seed=3).batch(4))  # made again
