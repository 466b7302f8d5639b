"""What a conformance program is handed: the one line, and what one process at the global batch uses.

A program is written as a Keras user writes it, with one difference from its one-process version: the
line `model = job.distribute(model)`. In the reference run that line does nothing and the program trains
with the global batch and rate (`job.batch(b)`, `job.rate(r)`: b and r times the replicas); under kscale
it is `kscale.distribute(model)` and the batch and rate are the per-replica ones the user writes (kscale
scales them). Everything a program wants compared is `job.record`ed; the runner adds the final weights.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any

import numpy as np

import kscale
from kscale import frameworks

KERAS = frameworks.process_keras()
#: "keras2" (tf.keras), "keras3-tf", "keras3-jax" or "keras3-torch": which programs run, and which form.
FAMILY = (
    "keras2"
    if KERAS.generation == 2
    else f"keras3-{'tf' if KERAS.backend == 'tensorflow' else KERAS.backend}"
)
REPLICAS = 2  # every distributed run of the suite trains on two replicas


def keras_module() -> Any:
    if KERAS.generation == 2:
        import tensorflow as tf

        return tf.keras
    import keras

    return keras


@dataclasses.dataclass
class Job:
    """One program's run: reference (one process, plain Keras) or distributed (kscale, 2 replicas)."""

    reference: bool
    directory: str  # shared by every rank of the run: files the program writes go here
    options: dict  # kscale.distribute options of this way of running (backend, devices)
    records: dict = dataclasses.field(default_factory=dict)
    #: The weights at the one line (before training); empty for a model built on its first batch.
    initial_weights: list = dataclasses.field(default_factory=list)

    @property
    def keras(self) -> Any:
        return keras_module()

    @property
    def family(self) -> str:
        return FAMILY

    @property
    def rank(self) -> int:
        return 0 if self.reference else kscale.rank()

    def distribute(self, model: Any) -> Any:
        """The one line (and the weights as it finds them, to show that training moved them)."""
        try:
            self.initial_weights = model_weights(model)
        except ValueError:  # Keras 2, a model built on its first batch: no weights yet
            self.initial_weights = []
        return model if self.reference else kscale.distribute(model, **self.options)

    def scope(self) -> Any:
        """`with kscale.scope():`, where kscale's error asks for it (a model it cannot build again in the
        backend's scope); nothing in the reference, which is plain Keras."""
        if self.reference:
            return contextlib.nullcontext()
        return kscale.scope(**{k: v for k, v in self.options.items() if k in ("backend", "devices")})

    def batch(self, per_replica: int) -> int:
        return per_replica * REPLICAS if self.reference else per_replica

    def rate(self, per_replica: float) -> float:
        return per_replica * REPLICAS if self.reference else per_replica

    def written_rate(self, rate: Any) -> float:
        """A learning rate read back from the optimizer (or logged by a callback) in one worker's terms:
        what the script wrote, which one process at the global batch writes REPLICAS times larger."""
        return float(np.asarray(rate)) / self.rate(1.0)

    def history(self, history: Any, from_epoch: int = 0) -> dict:
        """History's numbers, the rate a callback logs ("lr", "learning_rate") in one worker's terms; with
        `from_epoch`, those of epochs from there on only (a resumed fit ran only those)."""
        logs = getattr(history, "history", history)
        epochs = getattr(history, "epoch", None) or list(range(len(next(iter(logs.values()), []))))
        return {
            name: [
                self.written_rate(v) if name in ("lr", "learning_rate") else v
                for epoch, v in zip(epochs, values)
                if epoch >= from_epoch
            ]
            for name, values in logs.items()
        }

    def stops_inside_epochs(self) -> bool:
        """Whether a program stops its fit inside an epoch, to fit again from a `BackupAndRestore(save_freq=N)`
        backup. kscale resumes such a backup at the batch after it, as if never stopped, so one process's
        reference is the run that never stopped."""
        return not self.reference

    def steps(self, per_replica: int) -> int:
        """steps_per_epoch (validation_steps, steps) as a script at the per-replica batch counts them: one
        process at the global batch runs 1/REPLICAS of them (kscale divides them by the replicas)."""
        return per_replica // REPLICAS if self.reference else per_replica

    def seed(self, seed: int = 1) -> None:
        """Seed before building a model. Under tf.keras and torch every rank but the chief starts from other
        weights, so the broadcast is exercised; Keras 3 on JAX creates variables collectively (same seed
        on all)."""
        differ = not self.reference and (KERAS.generation == 2 or KERAS.backend == "torch")
        kscale.set_seed(seed + (100 * self.rank if differ else 0))

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def loss_scales(self) -> Any:
        """A callback recording the optimizer's dynamic loss scale after every step (mixed_float16), as
        "loss_scales". Where one process's float16 gradient over the global batch overflows and no
        replica's part does, one process skips a step that the replicas apply, and the two scales part
        (the plan's loss-scaling note): compare.py compares with one process while they agree
        (`EXACT_WHILE_SAME`)."""
        scales = self.records.setdefault("loss_scales", [])
        job = self

        class LossScales(self.keras.callbacks.Callback):
            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                scales.append(loss_scale(job, self.model.optimizer))

        return LossScales()

    def record(self, name: str, value: Any) -> None:
        """Something to compare: with the other ranks (always) and with the reference (where exact)."""
        self.records[name] = _plain(value)


def as_if_just_imported() -> None:
    """Each program as its own script: right after `import kscale`, as if its process had just started
    (one launch runs them all, since starting the workers is most of a program's cost). What `import kscale`
    did to the process's backend (multi_worker: its strategy the process's own, until the first
    distribute()) is done again, and TensorFlow's global seed is unset, as in a new process: a program that
    seeds its shuffle() before its own job.seed() must not take the seed the previous program set (under
    tf.keras another one on every rank, to exercise the broadcast)."""
    import sys

    from kscale import backends

    current = backends._current
    if current is not None and current.name == "jax" and current.num_workers == 1:
        # `import kscale` sets no distribution in one process (it imports no framework): a new backend
        # at the next distribute(), on no distribution, as in a new process
        import keras

        backends.reset()
        keras.distribution.set_distribution(None)
    elif current is not None and current.create_at_import:
        current.at_import()
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        tf.random.set_seed(None)


def model_weights(model: Any) -> list[np.ndarray]:
    """The model's weights without its metrics' state, which is each worker's own (Keras 2 counts a metric
    kept as an attribute among the weights)."""
    states = {id(v) for metric in model.metrics for v in metric.variables}
    # not a lookup layer's table (tf.keras lists it among the weights as a handler, with no shape)
    return [np.asarray(w) for w in model.weights if id(w) not in states and hasattr(w, "shape")]


def _plain(value: Any) -> Any:
    """Numbers and arrays as numpy, containers kept: picklable and comparable."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str | bool | type(None)):
        return value
    return np.asarray(value)


def loss_scale(job: Job, optimizer: Any) -> float:
    """A mixed-precision LossScaleOptimizer's dynamic loss scale now (tf.keras and Keras 3 name it apart)."""
    keras = job.keras
    if job.family == "keras2":
        return float(np.asarray(keras.backend.get_value(optimizer.loss_scale)))
    return float(np.asarray(keras.ops.convert_to_numpy(optimizer.dynamic_scale)))


def data(samples: int, features: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A small regression problem, the same on every rank."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, features)).astype("float32")
    y = (x @ rng.normal(size=(features, 1)) + 0.1).astype("float32")
    return x, y


def classes(samples: int, shape: tuple[int, ...], num_classes: int, seed: int = 0) -> tuple:
    """A small classification problem (labels a function of the inputs), the same on every rank."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, *shape)).astype("float32")
    scores = x.reshape(samples, -1) @ rng.normal(size=(int(np.prod(shape)), num_classes))
    return x, scores.argmax(axis=1).astype("int32")
