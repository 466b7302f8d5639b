import pytest
import tensorflow as tf

from kscale.errors import MissingDependencyError
from kscale.estimator import ExamplesPerSecondHook, _deps, broadcast_hook, training_hooks


def run_steps(hook: tf.compat.v1.train.SessionRunHook, steps: int) -> None:
    with tf.Graph().as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        increment = tf.compat.v1.assign_add(step, 1)
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as sess:
            for _ in range(steps):
                sess.run(increment)


def test_broadcast_hook_is_a_harmless_hook_in_a_single_process():
    hook = broadcast_hook()
    assert type(hook) is tf.compat.v1.train.SessionRunHook
    run_steps(hook, 1)


def test_broadcast_hook_without_horovod_says_how_to_install_it(fake_workers, monkeypatch):
    fake_workers(rank=1, size=2)
    monkeypatch.setattr(_deps, "is_horovod_available", lambda: False)
    with pytest.raises(MissingDependencyError, match=r"kscale\[horovod\]"):
        broadcast_hook()


def test_examples_per_second_counts_the_global_batch(kscale_log):
    hook = ExamplesPerSecondHook(batch_size=8, every_n_steps=2, world_size=4)
    assert hook.global_batch_size == 32
    run_steps(hook, 5)
    assert hook.last_examples_per_sec is not None and hook.last_examples_per_sec > 0
    assert any("examples/sec (global batch 32)" in m for m in kscale_log), kscale_log


def test_examples_per_second_is_silent_on_other_ranks(fake_workers, kscale_log):
    fake_workers(rank=1, size=2)
    hook = ExamplesPerSecondHook(batch_size=8, every_n_steps=1)
    assert hook.global_batch_size == 16  # world size from the launcher
    run_steps(hook, 4)
    assert hook.last_examples_per_sec is None
    assert not any("examples/sec" in m for m in kscale_log)


def test_examples_per_second_needs_a_global_step():
    hook = ExamplesPerSecondHook(batch_size=1)
    with tf.Graph().as_default(), pytest.raises(RuntimeError, match="get_or_create_global_step"):
        hook.begin()


def test_training_hooks_in_a_single_process():
    assert training_hooks() == []
    (hook,) = training_hooks(batch_size=4, every_n_steps=10)
    assert isinstance(hook, ExamplesPerSecondHook) and hook.every_n_steps == 10
