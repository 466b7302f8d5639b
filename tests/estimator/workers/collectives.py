"""Worker for test_multiprocess.py: gradient averaging through kscale.estimator, and the broadcast hook.

Run under `horovodrun -np 2 ... python collectives.py OUT_DIR`; each rank writes OUT_DIR/rank<r>.json.
Each rank's loss depends on its rank, so local gradients differ and an average is visible in the update.
"""

import json
import os
import sys

import tensorflow as tf

import kscale.estimator
from kscale import environment

tf.compat.v1.disable_eager_execution()
rank = environment.current().rank
out_dir = sys.argv[1]
INIT = [1.0, 2.0]
LR = 1.0


def local_gradient(r: int) -> list[float]:
    """d(loss)/dw on rank r for loss = sum(w * c_r): c_r itself."""
    return [float(r + 1), 10.0 * (r + 1)]


def loss_of(var: tf.Variable) -> tf.Tensor:
    return tf.reduce_sum(var * tf.constant(local_gradient(rank)))


def variable(name: str, init: list[float]) -> tf.Variable:
    return tf.compat.v1.get_variable(name, initializer=tf.constant(init), use_resource=True)


# 1. Through the wrapped optimizer's compute_gradients: the update uses the average of both ranks' grads.
w_avg = variable("w_avg", INIT)
opt = kscale.estimator.wrap_optimizer(tf.compat.v1.train.GradientDescentOptimizer(LR))
grads, tvars = kscale.estimator.compute_gradients(opt, loss_of(w_avg), [w_avg])
step_avg = opt.apply_gradients(zip(grads, tvars))

# 2. The same with fp16 compression (the values are exact in float16).
w_fp16 = variable("w_fp16", INIT)
opt16 = kscale.estimator.wrap_optimizer(tf.compat.v1.train.GradientDescentOptimizer(LR), compression="fp16")
grads16, tvars16 = kscale.estimator.compute_gradients(opt16, loss_of(w_fp16), [w_fp16])
step_fp16 = opt16.apply_gradients(zip(grads16, tvars16))

# 3. Control, as hand-patched BERT does it: tf.gradients, then the WRAPPED optimizer's apply_gradients.
w_plain = variable("w_plain", INIT)
plain_grads = tf.gradients(loss_of(w_plain), [w_plain])
step_plain = opt.apply_gradients(zip(plain_grads, [w_plain]))

# 4. Broadcast: each rank initialises differently; after the hook all hold rank 0's values.
w_bcast = variable("w_bcast", [100.0 * (rank + 1), -1.0 * (rank + 1)])

with tf.compat.v1.train.MonitoredSession(hooks=[kscale.estimator.broadcast_hook()]) as sess:
    after_broadcast = sess.run(w_bcast).tolist()
    # The broadcast overwrote the other variables with rank 0's (equal) initial values too.
    sess.run([step_avg, step_fp16, step_plain])
    result = {
        "rank": rank,
        "local_gradient": local_gradient(rank),
        "init": INIT,
        "lr": LR,
        "w_avg": sess.run(w_avg).tolist(),
        "w_fp16": sess.run(w_fp16).tolist(),
        "w_plain": sess.run(w_plain).tolist(),
        "w_bcast": after_broadcast,
        "w_bcast_own_init": [100.0 * (rank + 1), -1.0 * (rank + 1)],
        "optimizer_class": type(opt).__module__ + "." + type(opt).__name__,
    }

with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
    json.dump(result, f)
