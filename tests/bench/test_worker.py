"""The benchmark's worker: how it trains kscale's model and the hand-written one in turn (no launches)."""

from __future__ import annotations

import math

import pytest
import tensorflow as tf

from kscale.bench import runner, worker
from kscale.bench.runner import Setting


def test_in_turn_every_worker_waits_for_the_others_before_each_fit():
    calls: list[str] = []

    def job(name: str) -> worker.Job:
        def fit(epochs: int, callbacks: list) -> None:
            calls.append(f"fit {name} {epochs}")

        return worker.Job(fit, chief=True, replicas=2, barrier=lambda: calls.append(f"wait {name}"))

    turns = [
        (job("kscale"), worker.IterationTimer(tf.keras)),
        (job("theirs"), worker.IterationTimer(tf.keras)),
    ]
    worker.train_in_turn(turns, warmup=2, rounds=2)
    warm_up = ["wait kscale", "fit kscale 2", "wait theirs", "fit theirs 2"]
    first_round = ["wait kscale", "fit kscale 1", "wait theirs", "fit theirs 1"]
    second_round = ["wait theirs", "fit theirs 1", "wait kscale", "fit kscale 1"]  # the other goes first
    assert calls == warm_up + first_round + second_round


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_the_gpu_sizes_build_here_and_mixed_precision_runs_unchanged():
    """What a GPU machine measures: ResNet50 at 224x224 and BERT-base built as the bench builds them, their
    data of the model's shape, one forward pass each on this CPU (in this process: a launched training step
    of each took 150-200 s of CI, most of it tracing BERT-base's step, which no check here needs); and Keras'
    mixed_float16 under Horovod beside the hand-written script, launched (where running this found
    distribute() failing on the LossScaleOptimizer that compile adds)."""
    import numpy as np

    from kscale.bench import models

    sizes = {"cnn": ("ResNet50 224x224", 25_000_000), "bert": ("12 layers, hidden 768", 100_000_000)}
    for name, (described, parameters) in sizes.items():
        bench_model = models.built_in(name, gpu=True)
        assert described in bench_model.description
        model = bench_model.build(tf.keras)
        model.compile(**bench_model.compile_args(tf.keras, 1.0))
        assert model.count_params() > parameters, (name, model.count_params())
        x, y = bench_model.data(2, np.random.default_rng(0))
        assert len(x) == len(y) == 2 and np.all(np.isfinite(model(x, training=False)))
    mixed = runner.Sizes(iters=1, rounds=2, warmup=1, mixed_precision=True)
    setting = Setting("mlp", "horovod", 2, 4, batches=2, variant=runner.IN_TURN, against="horovod")
    measured = runner.run_one(setting, mixed, threads=1)
    assert measured["dtype_policy"] == "mixed_float16" and measured["replicas"] == 2
    assert all(_positive(s) for s in measured["samples_per_s"] + measured["in_turn"]["samples_per_s"])


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_what_a_backup_costs_is_measured_under_horovod():
    """Issue 43: `kscale bench`'s knob "BackupAndRestore every 10 steps", here every 2 of 8 steps (2 epochs
    of 4): the result holds how many backups were written and the seconds each took."""
    sizes = runner.Sizes(iters=1, warmup=1)
    knob = ("--backup-every", "2")
    setting = Setting("mlp", "horovod", 2, 4, batches=4, worker_options=knob, variant="backup every 2 steps")
    measured = runner.run_one(setting, sizes, threads=1)
    assert measured["backup"]["every"] == 2 and measured["backup"]["backups"] == 4, measured["backup"]
    assert _positive(measured["backup"]["backup_s"]) and _positive(measured["samples_per_s"][0])
