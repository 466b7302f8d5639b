"""Communication time read from traces: Horovod's timeline, and TensorFlow's profile of real collectives."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf

from kscale import _tensorflow_private
from kscale.bench import communication, worker


def test_allreduce_time_is_the_union_of_overlapping_allreduces_without_negotiation(tmp_path):
    events = [
        {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 0, "pid": 1},
        {"ph": "E", "ts": 500, "pid": 1},
        {"ph": "B", "name": "ALLREDUCE", "ts": 1000, "pid": 1},
        {"ph": "B", "name": "GLOO_ALLREDUCE", "ts": 1100, "pid": 1},
        {"ph": "E", "ts": 1900, "pid": 1},
        {"ph": "E", "ts": 2000, "pid": 1},
        {"ph": "B", "name": "ALLREDUCE", "ts": 1500, "pid": 2},
        {"ph": "E", "ts": 3000, "pid": 2},
        {"ph": "B", "name": "ALLREDUCE", "ts": 5000, "pid": 3},
        {"ph": "E", "ts": 5500, "pid": 3},
    ]
    path = tmp_path / "timeline.json"
    # Horovod leaves the array open while it runs (and after a crash): both forms are read.
    path.write_text("[\n" + ",\n".join(json.dumps(e) for e in events) + ",")
    assert communication.allreduce_seconds(str(path)) == pytest.approx((3000 - 1000 + 500) / 1e6)
    path.write_text(json.dumps(events))
    assert communication.allreduce_seconds(str(path)) == pytest.approx(0.0025)


def test_the_xspace_message_class_is_where_kscale_imports_it():
    # Not public API: when an upgrade moves it, this fails first (kscale bench's multi_worker split uses it).
    assert _tensorflow_private.xplane_pb2().XSpace().planes is not None


def test_collective_time_from_a_tensorflow_profile_of_real_collectives(tmp_path):
    # One-member collectives run the same kernels and executor as a multi-worker strategy's, in one process.
    def one_member_sum(x, instance_key):
        return tf.raw_ops.CollectiveReduceV2(
            input=x,
            group_size=1,
            group_key=1,
            instance_key=instance_key,
            ordering_token=[],
            merge_op="Add",
            final_op="Id",
        )

    @tf.function
    def reduce_twice(x):
        return one_member_sum(one_member_sum(x, 1), 2)

    x = tf.ones([1000])
    reduce_twice(x)  # traced outside the profile
    assert communication.collective_seconds(str(tmp_path)) is None  # nothing recorded yet
    started = tf.timestamp()
    tf.profiler.experimental.start(str(tmp_path))
    for _ in range(5):
        reduce_twice(x).numpy()
    worker.stop_profile()  # as the bench worker stops it: after the last Done event is recorded
    elapsed = float(tf.timestamp() - started)
    spans = communication.collective_spans(communication.profile_file(str(tmp_path)))
    assert len(spans) == 10 and all(0 < end - start < elapsed for start, end in spans)
    seconds = communication.collective_seconds(str(tmp_path))
    assert 0 < seconds <= sum(end - start for start, end in spans) + 1e-9 and seconds < elapsed


def test_union_of_spans():
    assert communication.covered_seconds([(0, 2), (1, 3), (5, 6)]) == pytest.approx(4)
    assert communication.covered_seconds([(0, 10), (2, 3)]) == pytest.approx(10)
    assert communication.covered_seconds([]) == 0
