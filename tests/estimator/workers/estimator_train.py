"""Worker for test_multiprocess.py: a tf.estimator training run that uses every kscale.estimator helper.

Run under `horovodrun -np 2 ... python estimator_train.py OUT_DIR USER_DIR`. Rank r is handed
USER_DIR/rank<r> as its model_dir (so the test can tell whose files are whose) and writes OUT_DIR/rank<r>.json.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

import kscale.estimator
from kscale import environment

env = environment.current()
out_dir, user_dir = sys.argv[1], sys.argv[2]
NUM_EXAMPLES, BATCH, EPOCHS = 64, 8, 2

rng = np.random.default_rng(0)
features = rng.normal(size=(NUM_EXAMPLES, 3)).astype(np.float32)
labels = (features @ np.array([1.0, -2.0, 0.5], dtype=np.float32) + 0.3).reshape(-1, 1)


def input_fn(params):
    dataset = tf.data.Dataset.from_tensor_slices(({"x": features}, labels))
    dataset = kscale.estimator.shard_dataset(dataset)  # before shuffle and repeat
    return dataset.shuffle(64, seed=env.rank).repeat().batch(params["batch_size"])


def model_fn(features, labels, mode, params):
    predictions = tf.compat.v1.layers.dense(features["x"], 1, name="linear")
    loss = tf.compat.v1.losses.mean_squared_error(labels, predictions)
    optimizer = kscale.estimator.wrap_optimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    grads, tvars = kscale.estimator.compute_gradients(optimizer, loss, tf.compat.v1.trainable_variables())
    global_step = tf.compat.v1.train.get_or_create_global_step()
    train_op = optimizer.apply_gradients(zip(grads, tvars), global_step=global_step)
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


class RecordVariables(tf.compat.v1.train.SessionRunHook):
    """Keeps the final values of every global variable, since only rank 0 writes a checkpoint."""

    def end(self, session):
        variables = tf.compat.v1.global_variables()
        self.values = {
            v.op.name: np.asarray(value).tolist() for v, value in zip(variables, session.run(variables))
        }


session_config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
my_dir = os.path.join(user_dir, f"rank{env.rank}")
config = kscale.estimator.run_config(
    my_dir,
    save_checkpoints_steps=2,
    save_summary_steps=1,
    tf_random_seed=env.rank,
    session_config=session_config,
)
estimator = tf.estimator.Estimator(model_fn, config=config, params={"batch_size": BATCH})
steps = kscale.estimator.num_train_steps(NUM_EXAMPLES, BATCH, EPOCHS)
record = RecordVariables()
speed = kscale.estimator.ExamplesPerSecondHook(BATCH, every_n_steps=2)
hooks = [*kscale.estimator.training_hooks(), speed, record]
estimator.train(input_fn, max_steps=steps, hooks=hooks)

result = {
    "rank": env.rank,
    "steps": steps,
    "variables": record.values,
    "config_model_dir": config.model_dir,
    "config_save_checkpoints_steps": config.save_checkpoints_steps,
    "config_save_summary_steps": config.save_summary_steps,
    "visible_device_list": config.session_config.gpu_options.visible_device_list,
    "allow_growth": config.session_config.gpu_options.allow_growth,
    "intra_op_parallelism_threads": config.session_config.intra_op_parallelism_threads,
    "allow_soft_placement": config.session_config.allow_soft_placement,
    "examples_per_sec": speed.last_examples_per_sec,
    "global_batch_size": speed.global_batch_size,
    "private_dir_existed": os.path.isdir(config.model_dir),
}
with open(os.path.join(out_dir, f"rank{env.rank}.json"), "w") as f:
    json.dump(result, f)
