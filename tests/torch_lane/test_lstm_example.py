"""The LSTM example, unchanged, on two torch processes (`kscale run --engine torch`): the plan printed once,
every rank's weights identical, and equal to one process's at the global batch and rate."""

from __future__ import annotations

import json
import sys

import keras
import numpy as np
import pytest

from tests.stack.conftest import BIN

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(300)]

EXAMPLE = ["examples/lstm/train.py", "--samples", "512", "--epochs", "2", "--units", "8", "--no-shuffle"]


def test_the_lstm_example_on_two_processes_trains_as_one_at_the_global_batch(launch, tmp_path):
    one = launch(
        [
            sys.executable,
            *EXAMPLE,
            "--no-kscale",
            "--batch-size",
            "64",
            "--lr",
            "0.02",
            "--save",
            tmp_path / "one.keras",
        ]
    )
    assert one.returncode == 0, one.stdout[-4000:]
    run = [BIN / "kscale", "run", "--engine", "torch", "-np", "2", "--", sys.executable, *EXAMPLE]
    report = ["--report", tmp_path / "r.{rank}.json", "--save", tmp_path / "two.keras"]
    two = launch([*run, "--batch-size", "32", "--lr", "0.01", *report])
    assert two.returncode == 0, two.stdout[-6000:]
    assert two.stdout.count("kscale plan") == 1  # printed once, by the chief
    reports = [json.loads((tmp_path / f"r.{rank}.json").read_text()) for rank in (0, 1)]
    assert reports[0]["replicas"] == 2 and reports[0] == {
        **reports[1],
        "wall_s": reports[0]["wall_s"],
        "samples_per_s": reports[0]["samples_per_s"],
    }
    expected = keras.saving.load_model(tmp_path / "one.keras").get_weights()
    trained = keras.saving.load_model(tmp_path / "two.keras").get_weights()
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(expected, trained))
    assert moved < 1e-5, f"two processes' weights differ from one process at the global batch by {moved:g}"
