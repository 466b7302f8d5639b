"""kscale._horovod_private: each Horovod internal kscale reaches is still there and does what kscale needs.

Runs in the lanes with Horovod (A and B). If one of these fails after a Horovod upgrade, kscale's launch (horovodrun options, per-node launch, rank
placement, output prefixes) has lost a piece: fix kscale/_horovod_private.py, nothing else.
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import sys

from kscale import _horovod_private


def test_horovodruns_parser_reads_its_options_and_leaves_argv():
    before = list(sys.argv)
    args = _horovod_private.parse_horovodrun_args(
        ["-np", "2", "-H", "a:1,b:1", "--fusion-threshold-mb", "32", "python", "train.py"]
    )
    assert sys.argv == before
    assert (args.num_proc, args.hosts, args.command) == (2, "a:1,b:1", ["python", "train.py"])
    assert args.fusion_threshold_mb == 32
    # ...and its tuning flags become horovodrun's variables
    assert _horovod_private.tuning_env(args)["HOROVOD_FUSION_THRESHOLD"] == str(32 * 1024 * 1024)


def test_the_runner_entry_point_and_build_answers_kscale_patches_exist():
    from horovod.runner import launch

    assert callable(launch._run) and callable(launch.gloo_built) and callable(launch.mpi_built)


def test_the_build_answers_are_restored_after_a_run(monkeypatch):
    from horovod.runner import launch

    seen = {}

    def fake_run(args: argparse.Namespace) -> None:
        seen["gloo"], seen["mpi"] = launch.gloo_built(), launch.mpi_built()
        seen["main"] = sys.modules["__main__"].__dict__.get("__file__")

    monkeypatch.setattr(launch, "_run", fake_run)
    original = launch.gloo_built
    _horovod_private.run_horovodrun(argparse.Namespace(), gloo=True, mpi=False)
    assert seen == {"gloo": True, "mpi": False, "main": None}  # spawn sees an empty __main__
    assert launch.gloo_built is original and sys.modules["__main__"].__dict__.get("__file__")


def test_rank_placement_matches_horovodrun_for_both_host_forms():
    from_string = _horovod_private.host_assignments("a:2,b:1", 3)
    from_pairs = _horovod_private.host_assignments([("a", 2), ("b", 1)], 3)
    for slots in (from_string, from_pairs):
        assert [(s.hostname, s.rank, s.local_rank, s.cross_rank) for s in slots] == [
            ("a", 0, 0, 0),
            ("a", 1, 1, 0),
            ("b", 2, 0, 1),
        ]


def test_a_gloo_workers_environment_is_gloo_runs():
    [slot] = _horovod_private.host_assignments("localhost:1", 1)
    env = _horovod_private.gloo_worker_env("10.0.0.1", ["eth0"], 1234, slot)
    assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "10.0.0.1"
    assert env["HOROVOD_GLOO_RENDEZVOUS_PORT"] == "1234"
    assert (
        env["HOROVOD_RANK"] == "0" and env["HOROVOD_SIZE"] == "1" and env["HOROVOD_HOSTNAME"] == "localhost"
    )


def test_output_gets_horovodruns_rank_prefix():
    read, write = os.pipe()
    os.write(write, b"hello\n")
    os.close(write)
    target = io.StringIO()
    with os.fdopen(read, "rb") as source:
        _horovod_private.forward_with_rank_prefix(source, target, "stdout", 3)
    assert target.getvalue() == "[3]<stdout>:hello\n"


def test_the_rendezvous_server_serves_on_the_port_given_and_closes():
    with socket.socket() as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    server = _horovod_private.rendezvous_server_on(port)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        _horovod_private.close_rendezvous_server(server)
    with socket.socket() as again:  # the socket is closed: the port can be bound again
        again.bind(("", port))


def test_the_allreduce_kscale_traces_without_autograph_is_still_horovods_tf_function():
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    wrapped = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1))
    original = wrapped._allreduce_grads
    assert callable(original.python_function)  # what kscale traces again, AutoGraph off
    _horovod_private.allreduce_without_autograph(wrapped)
    assert wrapped._allreduce_grads is not original
    assert wrapped._allreduce_grads.python_function is original.python_function


def test_a_distributed_optimizer_says_whether_it_accumulates_and_reduces_as_kscale_asks():
    import inspect

    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    plain = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1))
    accumulating = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), backward_passes_per_step=2)
    assert not _horovod_private.accumulates_gradients(plain)
    assert _horovod_private.accumulates_gradients(accumulating)
    # what kscale._horovod_private.allreduce calls (reducing needs hvd.init(): the multiprocess tests do)
    assert list(inspect.signature(plain._allreduce).parameters) == ["grads", "vars"]
