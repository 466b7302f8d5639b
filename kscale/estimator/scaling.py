"""Steps and learning rate for N workers, so a BERT-style script keeps its single-process flags.

Each of N Horovod workers takes its own batch per step, so one step moves N batches: the same number of
epochs needs 1/N of the steps, and the step sees an N times larger global batch, which usually wants a larger
learning rate. The rule names match `kscale.plan` ("linear", "sqrt", "none").
"""

from __future__ import annotations

from kscale import plan
from kscale.errors import OptionError
from kscale.estimator._deps import resolve_world_size

#: Learning-rate scaling rules, by name: the same as distribute()'s `lr_scaling`.
LR_RULES: tuple[str, ...] = tuple(rule.value for rule in plan.LRScaling)


def lr_scale_factor(rule: str, world_size: int) -> float:
    """How much to multiply the single-process learning rate by for `world_size` workers.

    "linear" (Goyal et al. 2017) is what Horovod's examples do, "sqrt" is gentler for adaptive optimizers
    at large worker counts, "none" keeps the rate. The one rule table is `kscale.plan.lr_scale_factor`.
    """
    return plan.lr_scale_factor(rule, resolve_world_size(world_size))


def scale_learning_rate(lr: float, rule: str = "linear", world_size: int | None = None) -> float:
    """`lr` times the rule's factor for `world_size` workers (default: the launcher's world size)."""
    return lr * lr_scale_factor(rule, resolve_world_size(world_size))


def num_train_steps(num_examples: int, batch_size: int, epochs: float, world_size: int | None = None) -> int:
    """Training steps PER WORKER: the single-process count `int(examples / batch * epochs)` // world size.

    Every worker runs this many steps on its own batch, so together they see the same number of examples
    as one process running the single-process count. Never below 1, so a tiny data set still trains.
    """
    if batch_size < 1:
        raise OptionError(f"batch_size must be >= 1, got {batch_size!r}.")
    if num_examples < 0 or epochs < 0:
        raise OptionError(f"num_examples and epochs must be >= 0, got {num_examples!r} and {epochs!r}.")
    single_process_steps = int(num_examples / batch_size * epochs)
    return max(1, single_process_steps // resolve_world_size(world_size))


def num_warmup_steps(num_train_steps: int, warmup_proportion: float) -> int:
    """Warm-up steps as a proportion of `num_train_steps`.

    Pass the per-worker count from `num_train_steps()`; it is already divided by the world size. Dividing
    the warm-up by the world size again (as some hand-patched BERT scripts do) makes it N times too short.
    """
    if not 0.0 <= warmup_proportion <= 1.0:
        raise OptionError(f"warmup_proportion must be between 0 and 1, got {warmup_proportion!r}.")
    return int(num_train_steps * warmup_proportion)
