import numpy as np
import pytest
import tensorflow as tf

from kscale.errors import KScaleError, OptionError
from kscale.estimator import compute_gradients, wrap_optimizer


def test_single_process_returns_the_optimizer_itself():
    opt = tf.compat.v1.train.AdamOptimizer(0.1)
    assert wrap_optimizer(opt) is opt
    assert wrap_optimizer(opt, compression="fp16", backward_passes_per_step=1) is opt


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"compression": "bf16"}, "'none', 'fp16'"),
        ({"backward_passes_per_step": 0}, "backward_passes_per_step"),
    ],
)
def test_bad_options_fail_even_in_a_single_process(kwargs, match):
    with pytest.raises(OptionError, match=match):
        wrap_optimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), **kwargs)


def test_keras_optimizers_are_pointed_to_kscale_distribute():
    with pytest.raises(KScaleError, match=r"kscale\.distribute"):
        wrap_optimizer(tf.keras.optimizers.SGD())


def test_compute_gradients_matches_tf_gradients_in_a_single_process():
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 2.0]))
        unused = tf.compat.v1.get_variable("unused", initializer=tf.constant(0.0))
        loss = tf.reduce_sum(w * w)
        opt = wrap_optimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5))
        grads, tvars = compute_gradients(opt, loss, [w, unused])
        assert tvars == [w, unused]
        assert grads[1] is None  # like tf.gradients: clip_by_global_norm and apply_gradients skip it
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            np.testing.assert_allclose(sess.run(grads[0]), [2.0, 4.0])


def test_compute_gradients_refuses_an_unwrapped_optimizer_among_several_workers(fake_workers):
    fake_workers(rank=0, size=2)
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant(1.0))
        with pytest.raises(KScaleError, match="wrap_optimizer"):
            compute_gradients(tf.compat.v1.train.GradientDescentOptimizer(0.1), w * w, [w])
