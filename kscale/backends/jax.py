"""Keras 3 on JAX: `keras.distribution.DataParallel` over every device of every process.

Processes find each other through `keras.distribution.initialize()` (jax.distributed), which reads
KERAS_DISTRIBUTION_JOB_ADDRESSES / NUM_PROCESSES / PROCESS_ID (kscale run sets them), or is handed
jax.distributed's JAX_COORDINATOR_ADDRESS / NUM_PROCESSES / PROCESS_ID (Kubeflow's JAX runtime sets
them); CPUs talk over Gloo. In kscale's fit and *_on_batch each process feeds its own shard of the data
(Keras' auto-sharding takes tf.data only), and Keras assembles each step's global batch from the
processes' local batches. Outside them (predict, and plain Keras calls on any model) every process passes
all its data, and computes what one process would; evaluate runs on each process's copy of the model and
sums the metrics' states.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import keras
import numpy as np

from kscale import _keras_private, step_weights, structures
from kscale.backends.base import Backend
from kscale.environment import Environment, Launcher
from kscale.errors import BackendError
from kscale.keras3.family import Keras3Family, Keras3Options
from kscale.rebuild import refuse_stateful

#: The launchers whose processes join one JAX job (jax.distributed) at `import kscale`.
_JOB_LAUNCHERS = (Launcher.KERAS_DISTRIBUTION, Launcher.JAX_DISTRIBUTED)


class JaxBackend(Backend):
    name = "jax"
    Family = Keras3Family
    Options = Keras3Options
    # Variables created under the distribution live on every process's devices; set at `import kscale`,
    # so that models built afterwards are created there, with the same values everywhere.
    create_at_import = True
    # Under a multi-process keras.distribution every new Keras variable is a collective (JAX checks that
    # its value is the same everywhere), and Keras' save creates one: every process saves.
    saves_are_collective = True
    # Evaluation across processes: arrays in global steps, like training (a last step the global batch
    # does not fill taken whole by every process); other data whole on every process (evaluates_whole).
    uneven_evaluation = False
    # Keras assembles one array of every process's batch, cut evenly over the devices.
    equal_batches = True
    # Every step's loss is the global batch's, computed by Keras itself.
    replica_losses = False

    def __init__(self, env: Environment, devices: list[str] | None = None):
        super().__init__(env, devices)
        self._distribution: Any = None
        self._between: Any = None  # the job's distribution outside kscale's steps

    @classmethod
    def detect(cls, env: Environment) -> bool:
        if env.launcher in _JOB_LAUNCHERS:
            return True
        return env.launcher is Launcher.NONE and len(jax.devices()) > 1

    def setup(self) -> None:
        if self._distribution is not None:
            return
        if self.env.launcher in _JOB_LAUNCHERS and self.env.world_size > 1:
            _use_gloo_on_cpus()
            # Keras reads its KERAS_DISTRIBUTION_* variables itself; jax.distributed's (Kubeflow's JAX
            # runtime) are handed to it as read by kscale.environment.
            job = ()
            if self.env.launcher is Launcher.JAX_DISTRIBUTED:
                job = (self.env.coordinator, self.env.world_size, self.env.rank)
            try:
                keras.distribution.initialize(*job)
            except RuntimeError as err:
                if "must be called before" not in str(err):
                    raise
                raise BackendError(
                    "this process ran JAX before joining the job (jax.distributed must start first). Put "
                    "`import kscale` at the top of your script, before building a model or running any "
                    "Keras or JAX operation: kscale joins the keras.distribution job at import."
                ) from err
        devices = self.requested_devices or keras.distribution.list_devices()
        # In kscale's own steps each process gives Keras its own shard (kscale cuts it, so Keras must not
        # cut it again), and Keras assembles the global batch from them.
        self._distribution = keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
        # Between them the job's distribution places variables alike but takes data whole on every device
        # of every process (WholeDataOnEveryProcess): Keras' own DataParallel cuts each batch over the
        # devices and fails on one that they do not divide (evaluate's or predict's last batch of 5 rows
        # on 2 devices of one process: jax's IndivisibleError, where one device computes it).
        between = WholeDataOnEveryProcess(devices=devices, auto_shard_dataset=False)
        self._between = between
        keras.distribution.set_distribution(between)
        # The whole last step of arrays (kscale.step_weights.WholeStep), on every device
        _keras_private.lay_out_whole_steps(
            lambda data: isinstance(data, step_weights.WholeStep),
            lambda shape: WholeDataOnEveryProcess.whole_layout(self._distribution.device_mesh, len(shape)),
        )

    @property
    def num_workers(self) -> int:
        return jax.process_count()

    @property
    def worker_index(self) -> int:
        return jax.process_index()

    @property
    def num_replicas(self) -> int:
        return len(self._distribution.device_mesh.devices.flatten())

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(str(d) for d in self._distribution.device_mesh.devices.flatten())

    def scope(self) -> contextlib.AbstractContextManager:
        return self._distribution.scope()

    def keras_steps(self) -> contextlib.AbstractContextManager:
        return self._distribution.scope()

    def check_model(self, model: Any) -> None:
        if self.num_replicas > 1:
            refuse_stateful(
                model,
                self.name,
                "keras.distribution feeds each step the global batch, while the layer's state is sized for "
                "the batch it was built with. Keras 3 on TensorFlow trains it as one process at the global "
                "batch (KERAS_BACKEND=tensorflow, `kscale run --engine tf`; or mirrored on one host), with "
                "shuffle=False; so does tf.keras under Horovod.",
            )

    def place_model(self, model: Any) -> Any:
        """The model itself if it was built under the distribution (after `import kscale`), else a copy."""
        if all(_on_every_device(v, self.num_replicas) for v in model.weights):
            return model
        if self.num_workers == 1:
            return self.family.rebuild_in(model, self)
        # Every process must create the copy's variables with the same values (JAX checks it): draw them
        # from the same seed everywhere, then load the chief's weights. Keras' own initialize() seeds its
        # generator the same way on every process for the same reason.
        from jax.experimental import multihost_utils

        chief = multihost_utils.broadcast_one_to_all([np.asarray(w) for w in model.get_weights()])
        seed = int(multihost_utils.broadcast_one_to_all(np.int32(np.random.randint(2**31 - 1))))
        keras.utils.set_random_seed(seed)
        return self.family.rebuild_in(model, self, weights=chief)

    # In the distribution, with metric objects made before it (in one process `import kscale` sets none: the
    # model is rebuilt in it) made anew there: their variables on one device would stop the first step
    # (JAX's "incompatible devices"). The user's own, made in it, stay as they are.
    compile = Backend.compile_in_scope

    def created_here(self, variable: Any) -> bool:
        return _on_every_device(variable, self.num_replicas)

    def optimizer_for(self, optimizer: Any, options: Any) -> Any:
        """The family's optimizer, whose update (`stateless_apply`, where Keras' JAX trainer and a JAX
        train_step of one's own apply the gradients) weighs them by a shared last step's share first."""
        if not all(_on_every_device(v, self.num_replicas) for v in optimizer.variables):
            # Made before the distribution (before `import kscale`): its step count and rate on one device
            # would make Keras' step mix layouts. A copy made here; compile carries the old one's state.
            with self.scope():
                optimizer = self.family.clone_optimizer(optimizer, options)
        optimizer = super().optimizer_for(optimizer, options)
        if "_kscale_weighed" not in vars(optimizer):
            apply = optimizer.stateless_apply

            def stateless_apply(optimizer_variables: Any, grads: Any, trainable_variables: Any) -> Any:
                return apply(optimizer_variables, step_weights.scale(list(grads)), trainable_variables)

            object.__setattr__(optimizer, "stateless_apply", stateless_apply)
            object.__setattr__(optimizer, "_kscale_weighed", True)
        return optimizer

    def broadcast(self, array: np.ndarray) -> np.ndarray:
        if self.num_workers == 1:
            return np.asarray(array)
        from jax.experimental import multihost_utils

        array = np.asarray(array)  # JAX without x64 carries int64 as int32: back to the dtype given
        return np.asarray(multihost_utils.broadcast_one_to_all(array)).astype(array.dtype)

    def gather(self, values: np.ndarray) -> np.ndarray:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(np.asarray(values, np.float32)))

    def local_values(self, variables: list) -> list[np.ndarray]:
        # This process's own shard of each (replicated) variable: no transfer between processes.
        return [np.asarray(v.value.addressable_data(0)) for v in variables]

    def agree_on_state(self, variables: list) -> None:
        """Nothing to do: every step computes batch statistics over the global batch, on every process."""

    def barrier(self) -> None:
        if self.num_workers > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("kscale.barrier")

    def evaluate(self, model: Any, keras_evaluate: Any, arguments: dict, whole: bool = False) -> dict:
        """Arrays in global steps under the distribution, as fit trains (each step's metrics the global
        batch's: one process's numbers); other data whole on every process."""
        if self.num_workers == 1:
            # One process, several devices: cut over the devices, a last batch they do not divide would
            # fail (jax's IndivisibleError); whole on every device, each batch is one device's computation.
            with self.whole_data_on_every_process():
                return super().evaluate(model, keras_evaluate, arguments, whole)
        if whole:
            return super().evaluate(model, keras_evaluate, arguments, whole)
        with self.keras_steps():
            return keras_evaluate(**arguments)

    def evaluates_whole(self, x: Any) -> bool:
        # Every step of Keras' evaluate across processes is a collective over equal batches: data other
        # than arrays, whose parts no batch divides, would lose samples. Every process evaluates all of
        # it, on the model itself. Arrays are cut in global steps, the last one whole (feeds.array_part).
        return self.num_workers > 1 and not structures.is_array_data(x)

    def whole_data_on_every_process(self) -> contextlib.AbstractContextManager:
        return self._between.scope()


class WholeDataOnEveryProcess(keras.distribution.DataParallel):
    """The job's distribution outside kscale's own steps: variables on every device of every process, as
    under DataParallel (models built after `import kscale` are made there, alike everywhere), but data
    taken whole on every process. What a plain Keras call passes (`keras.models.load_model(path)
    .predict(x)` on every process) is then computed as one process would, on each, instead of being
    taken for one process's shard of a global batch whose results no process holds whole."""

    def get_data_layout(self, data_shape: tuple) -> Any:
        return keras.distribution.TensorLayout([None] * len(data_shape), self.device_mesh)

    @staticmethod
    def whole_layout(device_mesh: Any, rank: int) -> Any:
        """Data of `rank` dimensions whole on every device (each process giving all of it)."""
        return keras.distribution.TensorLayout([None] * rank, device_mesh).backend_layout


def _on_every_device(variable: Any, devices: int) -> bool:
    sharding = getattr(getattr(variable, "value", None), "sharding", None)
    return sharding is not None and len(sharding.device_set) == devices


def _use_gloo_on_cpus() -> None:
    """CPU processes exchange gradients over Gloo (JAX before 0.5 had no CPU collectives by default)."""
    with contextlib.suppress(AttributeError, ValueError):
        if jax.config.jax_cpu_collectives_implementation in (None, "none"):
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
