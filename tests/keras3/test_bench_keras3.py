"""`kscale bench` on Keras 3 on TensorFlow: what only this lane runs of it, kscale's multi_worker against
TensorFlow's custom training loop (Keras 3's `fit` fails under that strategy upstream), trained in turn in
one job, TensorFlow's profile of the chief, and TFRecord files read by each worker its own. The rest of `kscale bench --quick` is the code lane A and
the JAX lane run whole (tests/stack/test_stack_bench.py; the Makefile says why not here)."""

from __future__ import annotations

import math

import keras
import pytest

from kscale.bench import runner
from kscale.bench.runner import Setting

pytestmark = pytest.mark.multiprocess


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


@pytest.mark.timeout(400)
@pytest.mark.skipif(
    keras.config.backend() != "tensorflow", reason="MultiWorkerMirroredStrategy is TensorFlow's: lane C-tf"
)
def test_multi_worker_against_tensorflows_custom_loop_in_one_job_profiled_and_on_files(tmp_path):
    sizes = runner.Sizes(iters=2, rounds=2, warmup=1, timeout=300)
    in_turn = Setting("mlp", "multi_worker", 2, 16, batches=5, variant=runner.IN_TURN, against="tf")
    measured = runner.run_one(in_turn, sizes, threads=1)
    assert measured["replicas"] == 2 and len(measured["in_turn"]["samples_per_s"]) == sizes.rounds
    assert all(_positive(s) for s in measured["samples_per_s"] + measured["in_turn"]["samples_per_s"])
    timeline = Setting("mlp", "multi_worker", 2, 16, batches=5, timeline=True, variant=runner.TIMELINE)
    traced = runner.run_one(timeline, sizes, threads=1)
    assert "--profile" in traced["command"] and _positive(traced["communication_s_per_step"])
    records = str(tmp_path / "records")
    runner.write_records("mlp", records, 2 * 5 * 16 * 2, sizes)
    files = Setting("mlp", "multi_worker", 2, 16, batches=5, variant="files", records=records)
    read = runner.run_one(files, sizes, threads=1)
    assert read["replicas"] == 2 and all(_positive(s) for s in read["samples_per_s"])


@pytest.mark.timeout(300)
@pytest.mark.skipif(keras.config.backend() != "jax", reason="one Keras 3 lane is enough: C-jax")
def test_what_a_backup_costs_is_measured_on_jax():
    """Issue 43: the knob "BackupAndRestore every 10 steps" (kscale.bench.suite), here every 2 of 8 steps on
    2 JAX processes, where every process takes part in saving: the backups written and seconds each."""
    sizes = runner.Sizes(iters=1, warmup=1, timeout=240)
    knob = ("--backup-every", "2")
    setting = Setting("mlp", "jax", 2, 4, batches=4, worker_options=knob, variant="backup every 2 steps")
    measured = runner.run_one(setting, sizes, threads=1)
    assert measured["backup"]["every"] == 2 and measured["backup"]["backups"] == 4, measured["backup"]
    assert _positive(measured["backup"]["backup_s"]) and _positive(measured["samples_per_s"][0])
