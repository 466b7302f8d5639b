"""`kscale bench` on torch: the hand-written keras.io loop trains the model as `fit` does (batch
normalization learning its statistics, dropout on), and kscale and that loop train in turn in one job
under torchrun."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import torch

from kscale.bench import runner
from kscale.bench.runner import Setting
from kscale.bench.worker import torch_loop_epoch


def test_the_hand_written_loop_trains_the_model_as_fit_does():
    """keras.io's loop calls `model(inputs)`: inference mode, batch statistics never updated. The bench's
    loop must do the work `fit` does, or the ratio compares different computations."""
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.BatchNormalization(),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(1),
        ]
    )
    rng = np.random.default_rng(0)
    x, y = rng.normal(3.0, 2.0, size=(16, 4)).astype("float32"), rng.normal(size=(16, 1)).astype("float32")
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=8
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    torch_loop_epoch(model, loader, optimizer, torch.nn.MSELoss())
    moving_mean = keras.ops.convert_to_numpy(model.layers[0].moving_mean)
    assert np.all(moving_mean > 0.05), moving_mean  # moved from 0 toward the data's mean of 3


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_kscale_and_the_ddp_loop_train_in_turn_in_one_job():
    sizes = runner.Sizes(iters=2, rounds=2, warmup=1, timeout=240)
    setting = Setting("mlp", "torch", 2, 16, batches=5, variant=runner.IN_TURN, against="torch_ddp")
    measured = runner.run_one(setting, sizes, threads=1)
    assert measured["replicas"] == 2 and len(measured["in_turn"]["samples_per_s"]) == sizes.rounds
    rates = measured["samples_per_s"] + measured["in_turn"]["samples_per_s"]
    assert all(math.isfinite(s) and s > 0 for s in rates), rates
