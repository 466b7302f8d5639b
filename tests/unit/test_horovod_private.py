"""The private Horovod members kscale uses (kscale/backends/horovod.py), checked on the installed Horovod.

`average_every_update` calls the DistributedOptimizer's own `_allreduce` (Horovod's reduction, with its
compression and local-variable rules) and reads `_agg_helper` (backward_passes_per_step); an upgrade that
renames either fails here instead of inside a user's train_step.
"""

from __future__ import annotations


def test_distributed_optimizer_has_the_members_kscale_uses():
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1))
    assert callable(optimizer._allreduce)
    assert optimizer._agg_helper is None
    assert hasattr(type(optimizer), "aggregate_gradients")  # the hook every apply_gradients calls
