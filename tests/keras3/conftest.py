"""Fixtures for the Keras 3 unit tests (lane C: Keras 3 on JAX or on TensorFlow): tiny models, a clean
backend per test, and a stand-in for being worker r of N."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import keras
import numpy as np
import pytest

import kscale
from kscale import backends, environment
from kscale.backends.base import Backend
from kscale.keras3.family import Keras3Family, Keras3Options


@pytest.fixture(autouse=True)
def _fresh_backend() -> Iterator[None]:
    backends.reset()
    yield
    backends.reset()


@pytest.fixture
def single_process(monkeypatch: pytest.MonkeyPatch, clean_launcher_env: None) -> None:
    monkeypatch.setenv("KSCALE_BACKEND", "single")
    environment.reset()


def tiny_model(lr: float = 0.1, inputs: int = 3, seed: int = 0, **compile_kwargs) -> keras.Model:
    """One Dense layer, built and compiled with plain SGD."""
    kscale.set_seed(seed)
    model = keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(1)])
    compile_kwargs.setdefault("loss", "mse")
    model.compile(optimizer=keras.optimizers.SGD(lr), **compile_kwargs)
    return model


def regression_data(n: int = 16, inputs: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, inputs)).astype("float32")
    y = (x @ np.arange(1, inputs + 1, dtype="float32")[:, None] + 0.5).astype("float32")
    return x, y


class StubWorkers(Backend):
    """Worker `worker_index` of `num_workers` one-device processes, without collectives (see tests/unit)."""

    name = "stub"
    Family = Keras3Family
    Options = Keras3Options

    def __init__(self, worker_index: int = 0, num_workers: int = 2):
        super().__init__(environment.Environment())
        self._index, self._count = worker_index, num_workers

    @classmethod
    def detect(cls, env: environment.Environment) -> bool:
        return False

    @property
    def num_workers(self) -> int:
        return self._count

    @property
    def worker_index(self) -> int:
        return self._index


@pytest.fixture
def distribute_as_worker(monkeypatch: pytest.MonkeyPatch) -> Callable[..., keras.Model]:
    def make(model: keras.Model, worker_index: int = 0, num_workers: int = 2, **options) -> keras.Model:
        stub = StubWorkers(worker_index, num_workers)
        monkeypatch.setattr(backends, "current", lambda *args, **kwargs: stub)
        options.setdefault("print_plan", False)
        return kscale.distribute(model, **options)

    return make


#: The Keras backend this lane runs on: "jax" or "tensorflow".
KERAS_BACKEND = keras.config.backend()
