"""BERT's fine-tuning optimizer: AdamW, linear warm-up then linear decay, global-norm clipping.

Written from google-research/bert's published recipe. The Horovod patches are three kscale.estimator calls
(marked "kscale patch"); in a single process each one is a no-op, so this file serves both ways.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import tensorflow as tf

import kscale.estimator

#: Variables whose name contains one of these get no weight decay (BERT's choice: norms and biases).
NO_DECAY = ("LayerNorm", "layer_norm", "bias")


def create_optimizer(
    loss: tf.Tensor,
    init_lr: float,
    num_train_steps: int,
    num_warmup_steps: int,
    *,
    lr_scaling: str = "linear",
    compression: str | None = None,
) -> tf.Operation:
    """The train op: averaged gradients, clipped to global norm 1.0, applied by AdamW; global step + 1.

    `num_train_steps` and `num_warmup_steps` are per worker (`kscale.estimator.num_train_steps`); `init_lr`
    is the single-process rate, scaled here for the number of workers by `lr_scaling`.
    """
    global_step = tf.compat.v1.train.get_or_create_global_step()
    # kscale patch 1: N workers take N batches per step; scale the rate for the N times larger global batch.
    peak_lr = kscale.estimator.scale_learning_rate(init_lr, lr_scaling)
    learning_rate = learning_rate_schedule(global_step, peak_lr, num_train_steps, num_warmup_steps)

    optimizer = AdamWeightDecayOptimizer(
        learning_rate=learning_rate,
        weight_decay_rate=0.01,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        exclude_from_weight_decay=NO_DECAY,
    )
    # kscale patch 2: Horovod's DistributedOptimizer (the optimizer itself in a single process).
    optimizer = kscale.estimator.wrap_optimizer(optimizer, compression=compression)
    # kscale patch 3: gradients THROUGH the wrapped optimizer, where the allreduce lives. BERT's own
    # tf.gradients(loss, tvars) would bypass it and every worker would apply only its own gradients.
    grads, tvars = kscale.estimator.compute_gradients(optimizer, loss, tf.compat.v1.trainable_variables())
    # Clip after averaging, so the clip sees the same global-batch gradient on every worker.
    grads, _ = tf.clip_by_global_norm(grads, clip_norm=1.0)
    return optimizer.apply_gradients(zip(grads, tvars), global_step=global_step)


def learning_rate_schedule(
    global_step: tf.Tensor, peak_lr: float, num_train_steps: int, num_warmup_steps: int
) -> tf.Tensor:
    """Linear warm-up from 0 to `peak_lr` over `num_warmup_steps`, then linear decay to 0 at the last step.

    Warm-up keeps the first Adam steps, whose second-moment estimates are still poor, from wrecking the
    pre-trained weights; it matters more as scaling raises the peak rate.
    """
    step = tf.cast(global_step, tf.float32)
    decayed = tf.compat.v1.train.polynomial_decay(
        peak_lr, global_step, max(num_train_steps, 1), end_learning_rate=0.0, power=1.0, cycle=False
    )
    if num_warmup_steps <= 0:
        return decayed
    warmup = peak_lr * step / float(num_warmup_steps)
    return tf.where(step < float(num_warmup_steps), warmup, decayed)


class AdamWeightDecayOptimizer(tf.compat.v1.train.Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter), as BERT was pre-trained and fine-tuned.

    The decay is added to the Adam update rather than to the loss, so it does not pass through Adam's
    per-parameter scaling; and, like BERT, there is no bias correction of the moments. Slots are plain
    variables `<var>/adam_m` and `<var>/adam_v`, the names in google-research/bert checkpoints.
    """

    def __init__(
        self,
        learning_rate: float | tf.Tensor,
        weight_decay_rate: float = 0.0,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        exclude_from_weight_decay: Sequence[str] | None = None,
        name: str = "AdamWeightDecayOptimizer",
    ) -> None:
        super().__init__(use_locking=False, name=name)
        self.learning_rate = learning_rate
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.exclude_from_weight_decay = tuple(exclude_from_weight_decay or ())

    def apply_gradients(
        self,
        grads_and_vars: Iterable[tuple[tf.Tensor | tf.IndexedSlices | None, tf.Variable]],
        global_step: tf.Variable | None = None,
        name: str | None = None,
    ) -> tf.Operation:
        """Update every variable that has a gradient; then, if given, add 1 to `global_step`."""
        updates = []
        for grad, var in grads_and_vars:
            if grad is None or var is None:
                continue  # e.g. BERT's pooler: SQuAD's loss does not reach it
            grad = tf.convert_to_tensor(grad)  # the embedding's IndexedSlices; m and v are dense anyway
            var_name = _variable_name(var.name)
            m = self._moment(var, var_name + "/adam_m")
            v = self._moment(var, var_name + "/adam_v")
            next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
            next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
            update = next_m / (tf.sqrt(next_v) + self.epsilon)
            if self._uses_weight_decay(var_name):
                update += self.weight_decay_rate * var
            updates += [var.assign(var - self.learning_rate * update), m.assign(next_m), v.assign(next_v)]
        update_op = tf.group(*updates, name=None if global_step is not None else name)
        if global_step is None:
            return update_op
        with tf.control_dependencies([update_op]):
            return tf.compat.v1.assign_add(global_step, 1, name=name).op

    def _moment(self, var: tf.Variable, name: str) -> tf.Variable:
        return tf.compat.v1.get_variable(
            name, shape=var.shape, dtype=tf.float32, trainable=False, initializer=tf.zeros_initializer()
        )

    def _uses_weight_decay(self, var_name: str) -> bool:
        if not self.weight_decay_rate:
            return False
        return not any(re.search(pattern, var_name) for pattern in self.exclude_from_weight_decay)


def _variable_name(tensor_name: str) -> str:
    """`bert/encoder/layer_0/output/dense/kernel:0` -> `bert/encoder/layer_0/output/dense/kernel`."""
    match = re.match(r"^(.*):\d+$", tensor_name)
    return match.group(1) if match else tensor_name
