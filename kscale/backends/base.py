"""The seam every backend fits behind: set up devices, prepare the model, feed data, reduce results."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable
from typing import Any, ClassVar

import tensorflow as tf

from kscale.environment import Environment


class Backend(abc.ABC):
    """One way of running a Keras model on one or more replicas.

    Subclasses say when they apply (`detect`), how many replicas they run, and how a compiled model
    becomes a distributed one. Everything that does not depend on the backend (plan arithmetic,
    callbacks, the model proxy) lives outside this package.
    """

    name: ClassVar[str]
    #: True when prepare_model takes `compression` and `backward_passes_per_step`.
    supports_gradient_options: ClassVar[bool] = False

    def __init__(self, env: Environment, devices: list[str] | None = None):
        self.env = env
        self.requested_devices = devices

    @classmethod
    @abc.abstractmethod
    def detect(cls, env: Environment) -> bool:
        """Whether this backend is the natural choice for this process (checked in registry order)."""

    def setup(self) -> None:
        """Initialise the runtime and pin devices; called once before the model is prepared."""

    @property
    def num_workers(self) -> int:
        return self.env.world_size

    @property
    def worker_index(self) -> int:
        return self.env.rank

    @property
    def num_replicas(self) -> int:
        """Replicas in sync: the factor the global batch (and the learning rate) grows by."""
        return self.num_workers

    @property
    def replicas_per_worker(self) -> int:
        return self.num_replicas // self.num_workers

    @property
    def is_chief(self) -> bool:
        return self.worker_index == 0

    @property
    def devices(self) -> tuple[str, ...]:
        return ()

    @abc.abstractmethod
    def prepare_model(
        self, model: tf.keras.Model, make_optimizer: Callable[[], Any], compile_args: dict
    ) -> tf.keras.Model:
        """Return a model compiled with `make_optimizer()` that trains on all replicas.

        The optimizer comes from a factory because strategy backends must create it inside their scope.
        """

    def callbacks(self) -> list[tf.keras.callbacks.Callback]:
        """Callbacks this backend needs during fit (broadcast, metric averaging)."""
        return []

    def average(self, values: list[float]) -> list[float]:
        """Average per-worker numbers (evaluate's results) over workers.

        Identity here: in one process there is nothing to average, and tf.distribute strategies already
        reduce evaluate() over all replicas. Horovod, whose workers evaluate alone, overrides it.
        """
        return values

    def scope(self) -> contextlib.AbstractContextManager:
        """Context in which models are built for this backend (a strategy scope, or nothing)."""
        return contextlib.nullcontext()

    @property
    def strategy(self) -> tf.distribute.Strategy | None:
        """The tf.distribute strategy, for backends that use one."""
        return None


class OneProcess:
    """Mixin for backends that run in a single process, whatever the launcher's environment says."""

    @property
    def num_workers(self) -> int:
        return 1

    @property
    def worker_index(self) -> int:
        return 0
