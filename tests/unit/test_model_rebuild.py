"""kscale.keras2.rebuild: a compiled model taken apart and rebuilt in a strategy scope, unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from kscale.errors import ModelError
from kscale.keras2.rebuild import (
    clone_compile_args,
    clone_optimizer,
    learning_rate_of,
    rebuild_in_scope,
)


@pytest.fixture(scope="module")
def strategy() -> tf.distribute.Strategy:
    return tf.distribute.MirroredStrategy(["CPU:0"])


def randomize(model: tf.keras.Model, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(size=w.shape).astype(w.dtype) for w in model.get_weights()])
    return model.get_weights()


def assert_same_weights(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for left, right in zip(a, b):
        np.testing.assert_array_equal(left, right)


class NoArgs(tf.keras.Model):
    """A subclassed model whose (empty) __init__ arguments Keras can serialize by itself."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = tf.keras.layers.Dense(4, activation="relu")
        self.out = tf.keras.layers.Dense(1)

    def call(self, inputs):
        return self.out(self.hidden(inputs))


class TakesALayer(tf.keras.Model):
    """Its __init__ takes a layer object: Keras' automatic get_config cannot describe it."""

    def __init__(self, layer, **kwargs):
        super().__init__(**kwargs)
        self.layer = layer

    def call(self, inputs):
        return self.layer(inputs)


class RefusesConfig(NoArgs):
    def get_config(self):
        raise NotImplementedError


def test_rebuild_sequential_keeps_weights_exactly(strategy):
    model = tf.keras.Sequential(
        [tf.keras.layers.Dense(4, activation="relu", input_shape=(3,)), tf.keras.layers.Dense(2)]
    )
    weights = randomize(model)
    clone = rebuild_in_scope(model, strategy)
    assert clone is not model
    assert clone.distribute_strategy is strategy
    assert_same_weights(weights, clone.get_weights())
    x = np.ones((2, 3), "float32")
    np.testing.assert_allclose(clone(x).numpy(), model(x).numpy(), rtol=1e-6)


def test_rebuild_functional_model_with_two_inputs(strategy):
    a, b = tf.keras.Input((3,), name="a"), tf.keras.Input((2,), name="b")
    joined = tf.keras.layers.Concatenate()([tf.keras.layers.Dense(4)(a), b])
    model = tf.keras.Model([a, b], tf.keras.layers.Dense(1)(joined), name="two_inputs")
    weights = randomize(model)
    clone = rebuild_in_scope(model, strategy)
    assert clone.distribute_strategy is strategy
    assert [i.name for i in clone.inputs] == [i.name for i in model.inputs]
    assert_same_weights(weights, clone.get_weights())


def test_rebuild_subclassed_model_with_serializable_init(strategy):
    model = NoArgs()
    model(np.zeros((1, 3), "float32"))
    weights = randomize(model)
    clone = rebuild_in_scope(model, strategy)
    assert type(clone) is NoArgs
    assert_same_weights(weights, clone.get_weights())


class FunctionalWithTrainStep(tf.keras.Model):
    """keras.io's "Customizing what happens in fit()": a functional model of the user's class, with its own
    train_step and metrics kept as attributes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tracker = tf.keras.metrics.Mean(name="loss")

    def train_step(self, data):
        raise AssertionError("the user's own train_step")


class FunctionalOtherInit(FunctionalWithTrainStep):
    def __init__(self, width):
        inputs = tf.keras.Input((3,))
        super().__init__(inputs, tf.keras.layers.Dense(width)(inputs))


def test_rebuild_functional_subclass_keeps_the_users_class(strategy):
    # Keras 2's clone_model returns a plain functional Model here: its default train_step would train.
    inputs = tf.keras.Input((3,))
    model = FunctionalWithTrainStep(inputs, tf.keras.layers.Dense(2)(tf.keras.layers.Dense(4)(inputs)))
    weights = randomize(model)
    assert type(tf.keras.models.clone_model(model)) is not FunctionalWithTrainStep  # why kscale rebuilds it
    clone = rebuild_in_scope(model, strategy)
    assert type(clone) is FunctionalWithTrainStep and clone.distribute_strategy is strategy
    assert_same_weights(weights, clone.get_weights())
    x = np.ones((2, 3), "float32")
    np.testing.assert_allclose(clone(x).numpy(), model(x).numpy(), rtol=1e-6)


def test_functional_subclass_of_another_signature_is_a_model_error(strategy):
    model = FunctionalOtherInit(2)
    with pytest.raises(ModelError) as err:
        rebuild_in_scope(model, strategy)
    message = str(err.value)
    assert "FunctionalOtherInit(inputs=..., outputs=...) failed" in message
    assert "plain functional Model" in message and "with kscale.scope():" in message


def test_subclassed_model_keras_cannot_describe_is_a_model_error(strategy):
    model = TakesALayer(tf.keras.layers.Dense(1))
    model(np.zeros((1, 3), "float32"))
    with pytest.raises(ModelError) as err:
        rebuild_in_scope(model, strategy)
    message = str(err.value)
    assert "TakesALayer.from_config(model.get_config()) failed" in message
    assert "with kscale.scope():" in message


def test_subclassed_model_without_get_config_is_a_model_error(strategy):
    model = RefusesConfig()
    model(np.zeros((1, 3), "float32"))
    with pytest.raises(ModelError) as err:
        rebuild_in_scope(model, strategy)
    message = str(err.value)
    assert "subclassed model RefusesConfig has no get_config()" in message
    assert "implement get_config()" in message and "with kscale.scope():" in message


def test_cloned_compile_args_have_new_metric_and_loss_objects():
    loss = tf.keras.losses.Huber(delta=2.0)
    metric = tf.keras.metrics.MeanAbsoluteError(name="err")
    args = {"loss": loss, "metrics": [metric, "mse"], "loss_weights": [1.0]}
    cloned = clone_compile_args(args, created_here=lambda variable: False)
    assert cloned["loss"] is not loss and cloned["loss"].get_config() == loss.get_config()
    new_metric, name = cloned["metrics"]
    assert new_metric is not metric and new_metric.get_config() == metric.get_config()
    assert name == "mse"
    assert cloned["loss_weights"] == [1.0]
    # A metric whose variables were made where the backend trains stays the user's own (a loss never)
    kept = clone_compile_args(args, created_here=lambda variable: True)
    assert kept["metrics"][0] is metric and kept["loss"] is not loss


@pytest.mark.parametrize(
    "make",
    [
        lambda: tf.keras.optimizers.Adam(0.01, beta_1=0.8, epsilon=1e-5),
        lambda: tf.keras.optimizers.SGD(0.01, momentum=0.9, nesterov=True),
        lambda: tf.keras.optimizers.legacy.SGD(0.01, momentum=0.9),
        lambda: tf.keras.optimizers.legacy.Adam(0.01, beta_2=0.99),
    ],
)
def test_clone_optimizer_keeps_class_and_settings_with_the_new_rate(make):
    optimizer = make()
    clone = clone_optimizer(optimizer, 0.04)
    assert clone is not optimizer
    assert type(clone) is type(optimizer)
    before, after = optimizer.get_config(), clone.get_config()
    assert after.pop("learning_rate") == pytest.approx(0.04)
    assert before.pop("learning_rate") == pytest.approx(0.01)
    assert before == after
    assert learning_rate_of(optimizer) == pytest.approx(0.01)  # the original is untouched


def test_clone_optimizer_with_a_schedule():
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    clone = clone_optimizer(tf.keras.optimizers.Adam(0.01), schedule)
    assert learning_rate_of(clone) is schedule


def test_learning_rate_of_a_float_rate():
    lr = learning_rate_of(tf.keras.optimizers.Adam(0.003))
    assert isinstance(lr, float) and lr == pytest.approx(0.003)


def test_learning_rate_of_a_schedule_is_the_schedule():
    schedule = tf.keras.optimizers.schedules.PiecewiseConstantDecay([10], [0.1, 0.01])
    assert learning_rate_of(tf.keras.optimizers.SGD(schedule)) is schedule


def test_learning_rate_of_a_legacy_optimizer():
    lr = learning_rate_of(tf.keras.optimizers.legacy.RMSprop(0.02))
    assert isinstance(lr, float) and lr == pytest.approx(0.02)
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    assert learning_rate_of(tf.keras.optimizers.legacy.SGD(schedule)) is schedule


@pytest.mark.parametrize(
    "settings",
    [dict(), dict(dynamic=False, initial_scale=256.0), dict(initial_scale=1024.0, dynamic_growth_steps=50)],
)
def test_a_loss_scale_optimizer_keeps_its_settings_and_the_new_rate_goes_inside(settings):
    # Under a mixed_float16 policy compile() wraps the optimizer in a LossScaleOptimizer, which has no rate.
    scaled = tf.keras.mixed_precision.LossScaleOptimizer(
        tf.keras.optimizers.SGD(0.01, momentum=0.9), **settings
    )
    assert learning_rate_of(scaled) == pytest.approx(0.01)
    clone = clone_optimizer(scaled, 0.04)
    assert isinstance(clone, tf.keras.mixed_precision.LossScaleOptimizer) and clone is not scaled
    assert learning_rate_of(clone) == pytest.approx(0.04)
    assert clone.inner_optimizer.get_config()["momentum"] == pytest.approx(0.9)
    for setting in ("dynamic", "initial_scale", "dynamic_growth_steps"):
        assert getattr(clone, setting) == getattr(scaled, setting), setting
    assert learning_rate_of(scaled) == pytest.approx(0.01)  # the original is untouched
