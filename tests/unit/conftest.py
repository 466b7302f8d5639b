"""Fixtures for kscale's unit tests: tiny models, a clean backend per test, and a two-worker stand-in."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
import tensorflow as tf

import kscale
from kscale import backends, environment
from kscale.backends.base import Backend
from kscale.keras2.family import Keras2Family


@pytest.fixture(autouse=True)
def _fresh_backend() -> Iterator[None]:
    """kscale keeps one backend per process; every unit test starts and ends without one."""
    backends.reset()
    yield
    backends.reset()


@pytest.fixture
def single_process(monkeypatch: pytest.MonkeyPatch, clean_launcher_env: None) -> None:
    """No launcher, and the single backend even on a host with several GPUs (explicit names still win)."""
    monkeypatch.setenv("KSCALE_BACKEND", "single")
    environment.reset()


def tiny_model(lr: float = 0.1, inputs: int = 3, seed: int = 0, **compile_kwargs) -> tf.keras.Model:
    """One Dense layer, built and compiled with plain SGD: the smallest model kscale accepts."""
    kscale.set_seed(seed)
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(inputs,))])
    compile_kwargs.setdefault("loss", "mse")
    model.compile(optimizer=tf.keras.optimizers.SGD(lr), **compile_kwargs)
    return model


def regression_data(n: int = 16, inputs: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A linear problem a single Dense layer can learn."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, inputs)).astype("float32")
    y = (x @ np.arange(1, inputs + 1, dtype="float32")[:, None] + 0.5).astype("float32")
    return x, y


class StubWorkers(Backend):
    """A backend that says it is worker `worker_index` of `num_workers` one-device processes.

    Like Horovod, each replica is a process and there is no strategy, but there are no collectives:
    everything kscale decides per worker (sharding, steps, checks) runs in this one process.
    """

    name = "stub"
    Family = Keras2Family

    def __init__(self, worker_index: int = 0, num_workers: int = 2):
        super().__init__(environment.Environment())
        self._index = worker_index
        self._count = num_workers

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
def distribute_as_worker(monkeypatch: pytest.MonkeyPatch) -> Callable[..., tf.keras.Model]:
    """`distribute_as_worker(model, worker_index=0, num_workers=2, **options)`: kscale.distribute on a stub."""

    def make(model: tf.keras.Model, worker_index: int = 0, num_workers: int = 2, **options) -> tf.keras.Model:
        stub = StubWorkers(worker_index, num_workers)
        monkeypatch.setattr(backends, "current", lambda *args, **kwargs: stub)
        options.setdefault("print_plan", False)
        return kscale.distribute(model, **options)

    return make
