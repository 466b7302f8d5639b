"""Session hooks for Horovod workers: start from rank 0's variables, report global throughput once."""

from __future__ import annotations

import time

import tensorflow as tf

from kscale import environment, log
from kscale.errors import OptionError
from kscale.estimator._deps import horovod, resolve_world_size


def broadcast_hook(root_rank: int = 0) -> tf.compat.v1.train.SessionRunHook:
    """Horovod's `BroadcastGlobalVariablesHook(root_rank)`: every worker starts from rank 0's variables.

    Without it each worker keeps its own random initialisation (or its own checkpoint) and the averaged
    gradients are applied to different models. In a single process this returns a hook that does nothing,
    so `hooks=[broadcast_hook()]` works everywhere.
    """
    hvd = horovod()
    if hvd is None:
        return tf.compat.v1.train.SessionRunHook()
    return hvd.BroadcastGlobalVariablesHook(root_rank)


class ExamplesPerSecondHook(tf.compat.v1.train.SessionRunHook):
    """Logs examples/sec for the whole job from rank 0 only, every `every_n_steps` steps.

    The global rate is per-rank batch × world size / seconds per step: the number that should grow with
    workers. Per-rank rates from every worker would flood the log with N copies of nearly the same line.
    The latest value is kept in `last_examples_per_sec` (None until the first report).
    """

    def __init__(self, batch_size: int, every_n_steps: int = 100, world_size: int | None = None) -> None:
        if batch_size < 1 or every_n_steps < 1:
            raise OptionError(
                f"batch_size and every_n_steps must be >= 1, got {batch_size} and {every_n_steps}."
            )
        self.global_batch_size = batch_size * resolve_world_size(world_size)
        self.every_n_steps = every_n_steps
        self.last_examples_per_sec: float | None = None
        self._active = environment.current().is_chief
        self._step_tensor: tf.Tensor | None = None
        self._last_step: int | None = None
        self._last_time = 0.0

    def begin(self) -> None:
        self._step_tensor = tf.compat.v1.train.get_global_step()
        if self._active and self._step_tensor is None:
            raise RuntimeError(
                "ExamplesPerSecondHook counts steps with the global step, but the graph has none: "
                "create it with tf.compat.v1.train.get_or_create_global_step() in the model_fn."
            )

    def before_run(
        self, run_context: tf.compat.v1.train.SessionRunContext
    ) -> tf.compat.v1.train.SessionRunArgs:
        if not self._active:
            return None
        return tf.compat.v1.train.SessionRunArgs(self._step_tensor)

    def after_run(
        self,
        run_context: tf.compat.v1.train.SessionRunContext,
        run_values: tf.compat.v1.train.SessionRunValues,
    ) -> None:
        if not self._active:
            return
        step, now = int(run_values.results), time.perf_counter()
        if self._last_step is None:
            # The first step includes graph set-up; measure from its end.
            self._last_step, self._last_time = step, now
            return
        if step - self._last_step >= self.every_n_steps:
            rate = (step - self._last_step) * self.global_batch_size / (now - self._last_time)
            self.last_examples_per_sec = rate
            log.info(f"step {step}: {rate:.1f} examples/sec (global batch {self.global_batch_size})")
            self._last_step, self._last_time = step, now


def training_hooks(
    batch_size: int | None = None, every_n_steps: int = 100, world_size: int | None = None
) -> list[tf.compat.v1.train.SessionRunHook]:
    """The hooks a Horovod estimator needs for `estimator.train(hooks=...)`.

    The broadcast hook when there are several workers, and an `ExamplesPerSecondHook` when `batch_size`
    (per worker) is given. Empty in a single process without `batch_size`.
    """
    hooks: list[tf.compat.v1.train.SessionRunHook] = []
    if environment.current().is_distributed:
        hooks.append(broadcast_hook())
    if batch_size is not None:
        hooks.append(ExamplesPerSecondHook(batch_size, every_n_steps, world_size))
    return hooks
