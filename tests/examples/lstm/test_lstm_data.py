"""The LSTM example reads a user's .npz or .csv as well as its synthetic data."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

TRAIN = Path(__file__).resolve().parents[3] / "examples" / "lstm" / "train.py"


def _train_module():
    spec = importlib.util.spec_from_file_location("lstm_train", TRAIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_synthetic_data_is_deterministic_sequences_with_next_value_targets():
    train = _train_module()
    args = train.parse_args(["--samples", "10", "--timesteps", "6"])
    x, y = train.load_data(args)
    assert x.shape == (10, 6, 1) and y.shape == (10, 1) and x.dtype == np.float32
    x2, _ = train.load_data(args)
    assert np.array_equal(x, x2)


def test_npz_with_2d_sequences_gets_a_feature_axis(tmp_path):
    train = _train_module()
    path = tmp_path / "d.npz"
    np.savez(path, x=np.arange(12, dtype="float64").reshape(3, 4), y=np.array([1.0, 2.0, 3.0]))
    x, y = train.load_data(train.parse_args(["--data", str(path)]))
    assert x.shape == (3, 4, 1) and y.shape == (3, 1) and x.dtype == np.float32
    assert x[1, :, 0].tolist() == [4.0, 5.0, 6.0, 7.0]


def test_csv_rows_are_sequences_with_the_last_column_as_target(tmp_path):
    train = _train_module()
    path = tmp_path / "d.csv"
    path.write_text("0.1,0.2,0.3,9\n0.4,0.5,0.6,8\n")
    x, y = train.load_data(train.parse_args(["--data", str(path)]))
    assert x.shape == (2, 3, 1) and y.ravel().tolist() == [9.0, 8.0]
