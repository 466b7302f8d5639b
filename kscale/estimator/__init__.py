"""tf.estimator on N Horovod workers: the handful of calls a BERT-style script adds, each usable alone.

Every helper works in a single process too, where it does nothing (world size 1), so one script runs
both ways. Horovod and tensorflow-estimator are imported only when a helper needs them.

    config = kscale.estimator.run_config(output_dir, save_checkpoints_steps=1000)
    steps = kscale.estimator.num_train_steps(len(examples), batch_size, epochs)  # per worker
    # in the model_fn:
    optimizer = kscale.estimator.wrap_optimizer(optimizer)
    grads, tvars = kscale.estimator.compute_gradients(optimizer, loss, tvars)  # averaged
    # in the input_fn, before shuffle/repeat:
    dataset = kscale.estimator.shard_dataset(dataset)
    estimator.train(input_fn, max_steps=steps, hooks=kscale.estimator.training_hooks(batch_size))
"""

from kscale.estimator.hooks import ExamplesPerSecondHook, broadcast_hook, training_hooks
from kscale.estimator.inputs import is_chief, shard_dataset, sharded_input_fn
from kscale.estimator.optimizer import COMPRESSIONS, compute_gradients, wrap_optimizer
from kscale.estimator.run_config import run_config
from kscale.estimator.scaling import (
    LR_RULES,
    lr_scale_factor,
    num_train_steps,
    num_warmup_steps,
    scale_learning_rate,
)

__all__ = [
    "COMPRESSIONS",
    "LR_RULES",
    "ExamplesPerSecondHook",
    "broadcast_hook",
    "compute_gradients",
    "is_chief",
    "lr_scale_factor",
    "num_train_steps",
    "num_warmup_steps",
    "run_config",
    "scale_learning_rate",
    "shard_dataset",
    "sharded_input_fn",
    "training_hooks",
    "wrap_optimizer",
]
