"""What `kscale.distribute()` returns is a real Keras model: every Keras API takes it, for every kind of model."""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest
import tensorflow as tf

import kscale
from kscale.model_state import state_of

from .conftest import regression_data

pytestmark = pytest.mark.usefixtures("single_process")


@tf.keras.saving.register_keras_serializable(package="kscale_tests")
class TwoLayers(tf.keras.Model):
    """A subclassed model with a config, registered as a user would for saving."""

    def __init__(self, units: int = 4, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.hidden = tf.keras.layers.Dense(units, activation="tanh")
        self.out = tf.keras.layers.Dense(1)

    def call(self, inputs):
        return self.out(self.hidden(inputs))

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def sequential() -> tf.keras.Model:
    return tf.keras.Sequential(
        [tf.keras.layers.Dense(4, activation="tanh", input_shape=(3,)), tf.keras.layers.Dense(1)]
    )


def functional() -> tf.keras.Model:
    inputs = tf.keras.Input((3,))
    return tf.keras.Model(
        inputs, tf.keras.layers.Dense(1)(tf.keras.layers.Dense(4, activation="tanh")(inputs))
    )


def subclassed() -> tf.keras.Model:
    model = TwoLayers()
    model(np.zeros((1, 3), "float32"))
    return model


KINDS = {"sequential": sequential, "functional": functional, "subclassed": subclassed}


@pytest.fixture(params=list(KINDS))
def kind(request) -> str:
    return request.param


def compiled(kind: str, lr: float = 0.05) -> tf.keras.Model:
    kscale.set_seed(0)
    model = KINDS[kind]()
    model.compile(optimizer=tf.keras.optimizers.SGD(lr), loss="mse", metrics=["mae"])
    return model


def assert_same_outputs(a, b, x) -> None:
    np.testing.assert_allclose(np.asarray(a(x)), np.asarray(b(x)), rtol=1e-6, atol=1e-6)


X, Y = regression_data(16)


def test_the_result_is_an_instance_of_the_users_class_and_of_keras_model(kind):
    model = compiled(kind)
    distributed = kscale.distribute(model, print_plan=False)
    assert isinstance(distributed, type(model)) and isinstance(distributed, tf.keras.Model)
    assert type(distributed) is type(model)
    assert distributed is model  # the single backend keeps the object


def test_clone_model_gives_a_plain_model_of_the_same_architecture(kind):
    distributed = kscale.distribute(compiled(kind), print_plan=False)
    clone = tf.keras.models.clone_model(distributed)
    assert type(clone) is type(distributed) and state_of(clone) is None
    if kind == "subclassed":
        clone(X[:1])
    clone.set_weights(distributed.get_weights())
    assert_same_outputs(clone, distributed, X)


def test_get_config_and_from_config_round_trip(kind):
    distributed = kscale.distribute(compiled(kind), print_plan=False)
    config = distributed.get_config()
    rebuilt = type(distributed).from_config(config)
    assert rebuilt.get_config() == config and state_of(rebuilt) is None


def test_keras_save_model_and_load_model(kind, tmp_path):
    distributed = kscale.distribute(compiled(kind), print_plan=False)
    distributed.fit(X, Y, batch_size=4, verbose=0)
    path = str(tmp_path / "model.keras")
    tf.keras.models.save_model(distributed, path)
    loaded = tf.keras.models.load_model(path)
    assert type(loaded) is type(distributed) and state_of(loaded) is None
    assert_same_outputs(loaded, distributed, X)


def test_tf_saved_model_save_and_load(kind, tmp_path):
    distributed = kscale.distribute(compiled(kind), print_plan=False)
    path = str(tmp_path / "saved")
    tf.saved_model.save(distributed, path)
    loaded = tf.saved_model.load(path)
    serve = loaded.signatures["serving_default"]
    (output,) = serve(tf.constant(X)).values()
    np.testing.assert_allclose(output.numpy(), distributed(X).numpy(), rtol=1e-6, atol=1e-6)


def test_used_as_a_layer_of_another_model(kind):
    distributed = kscale.distribute(compiled(kind), print_plan=False)
    before = [w.copy() for w in distributed.get_weights()]
    outer = tf.keras.Sequential([tf.keras.Input((3,)), distributed, tf.keras.layers.Dense(1)])
    outer.compile(optimizer="sgd", loss="mse")
    outer.fit(X, Y, batch_size=4, verbose=0)
    assert any(not np.array_equal(a, b) for a, b in zip(before, distributed.get_weights()))
    outer_path = outer.get_config()
    assert outer_path["layers"][1]["class_name"] == type(distributed).__name__


def test_summary_prints_the_model(kind, capsys):
    distributed = kscale.distribute(compiled(kind), print_plan=False)
    distributed.summary()
    assert distributed.name in capsys.readouterr().out


def test_batch_methods_match_plain_keras(kind):
    model = compiled(kind)
    twin = tf.keras.models.clone_model(model)
    if kind == "subclassed":
        twin(X[:1])
    twin.set_weights(model.get_weights())
    twin.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    distributed = kscale.distribute(model, print_plan=False)
    assert distributed.train_on_batch(X, Y) == pytest.approx(twin.train_on_batch(X, Y))
    assert distributed.train_on_batch(X, Y, return_dict=True) == pytest.approx(
        twin.train_on_batch(X, Y, return_dict=True)
    )
    assert distributed.test_on_batch(X, Y) == pytest.approx(twin.test_on_batch(X, Y))
    np.testing.assert_allclose(distributed.predict_on_batch(X), twin.predict_on_batch(X), rtol=1e-6)


def test_metrics_with_a_result_per_threshold_or_class_evaluate_as_in_plain_keras():
    """Precision at several thresholds, F-beta per class: results that are arrays (a TypeError before)."""
    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    y = np.eye(2, dtype="float32")[(x[:, 0] > 0).astype(int)]

    def model() -> tf.keras.Model:
        kscale.set_seed(0)
        made = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2, activation="softmax")])
        metrics = [
            tf.keras.metrics.Precision(thresholds=[0.3, 0.7], name="precision"),
            tf.keras.metrics.FBetaScore(name="fbeta"),
        ]
        made.compile(optimizer="sgd", loss="categorical_crossentropy", metrics=metrics)
        return made

    plain, distributed = model(), kscale.distribute(model(), print_plan=False)
    expected = plain.evaluate(x, y, verbose=0, return_dict=True)
    results = distributed.evaluate(x, y, verbose=0, return_dict=True)
    assert results.keys() == expected.keys() and np.asarray(results["precision"]).shape == (2,)
    for name, value in expected.items():
        np.testing.assert_allclose(results[name], value, rtol=1e-6)
    history = distributed.fit(x, y, validation_data=(x, y), verbose=0).history
    assert np.asarray(history["val_fbeta"][0]).shape == (2,)


def test_compile_again_keeps_the_distribution_and_scales_the_new_rate(kind, distribute_as_worker):
    distributed = distribute_as_worker(compiled(kind, lr=0.05), num_workers=2)
    assert distributed.kscale_plan.learning_rate_after == pytest.approx(0.1)
    distributed.compile(
        tf.keras.optimizers.Adam(0.001), "mse", metrics=["mae"]
    )  # positional, as Keras allows
    assert isinstance(distributed.optimizer, tf.keras.optimizers.Adam)
    assert float(distributed.optimizer.learning_rate.numpy()) == pytest.approx(0.001)  # as written
    plan = distributed.kscale_plan
    assert (plan.learning_rate_before, plan.learning_rate_after) == (0.001, 0.002)
    history = distributed.fit(X, Y, batch_size=2, epochs=1, verbose=0)
    assert set(history.history) == {"loss", "mae"}
    assert distributed.kscale_plan.steps_per_epoch_after == 4  # still this worker's half of the data


def test_compile_with_an_optimizer_name(distribute_as_worker):
    distributed = distribute_as_worker(compiled("sequential"), num_workers=2)
    distributed.compile(optimizer="adam", loss="mse")
    assert distributed.kscale_plan.learning_rate_after == pytest.approx(0.002)  # Adam's 0.001, x2


def test_distribute_twice_does_not_compound_the_scaling(distribute_as_worker):
    model = distribute_as_worker(compiled("sequential", lr=0.05), num_workers=2)
    again = distribute_as_worker(model, num_workers=2)
    assert again is model
    assert float(again.optimizer.learning_rate.numpy()) == pytest.approx(0.05)
    assert again.kscale_plan.learning_rate_after == pytest.approx(0.1)


def test_mirrored_returns_a_copy_of_the_users_class_and_leaves_the_original(kind):
    model = compiled(kind)
    weights = [w.copy() for w in model.get_weights()]
    distributed = kscale.distribute(model, backend="mirrored", devices=["CPU:0"], print_plan=False)
    assert distributed is not model and type(distributed) is type(model)
    distributed.fit(X, Y, batch_size=4, verbose=0)
    for before, now in zip(weights, model.get_weights(), strict=True):
        np.testing.assert_array_equal(before, now)
    distributed.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    assert distributed.optimizer is not None and distributed.distribute_strategy is not None
    assert distributed.train_on_batch(X, Y) > 0


# -- files go where the user points them, on any file system tf.io.gfile knows -------------------------------
@pytest.fixture
def ram() -> str:
    """A fresh folder on TensorFlow's in-memory file system: the stand-in for gs:// or s3:// here."""
    return f"ram://kscale-tests/{uuid.uuid4().hex}"


def test_checkpoints_saves_and_logs_on_ram_paths(ram, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a buggy path join would create ./ram:/... here
    distributed = kscale.distribute(compiled("sequential"), print_plan=False)
    callbacks = [
        tf.keras.callbacks.ModelCheckpoint(f"{ram}/ckpt/epoch-{{epoch}}.keras"),
        tf.keras.callbacks.ModelCheckpoint(f"{ram}/weights/ckpt", save_weights_only=True),
        tf.keras.callbacks.TensorBoard(f"{ram}/tensorboard"),
        tf.keras.callbacks.CSVLogger(f"{ram}/log.csv"),
    ]
    distributed.fit(X, Y, batch_size=4, epochs=2, callbacks=callbacks, verbose=0)
    distributed.save(f"{ram}/final.keras")
    distributed.save(f"{ram}/saved_model")
    distributed.save_weights(f"{ram}/final_weights/ckpt")
    gfile = tf.io.gfile
    assert sorted(gfile.listdir(f"{ram}/ckpt")) == ["epoch-1.keras", "epoch-2.keras"]
    assert sorted(gfile.listdir(f"{ram}/weights")) == ["checkpoint", "ckpt.data-00000-of-00001", "ckpt.index"]
    assert gfile.glob(f"{ram}/tensorboard/train/*")
    with gfile.GFile(f"{ram}/log.csv") as f:
        assert f.read().count("\n") == 3  # header and two epochs
    assert not [name for name in gfile.listdir(ram) if ".tmp-" in name]  # staging folders removed
    assert os.listdir(tmp_path) == []
    for loaded in (
        tf.keras.models.load_model(f"{ram}/final.keras"),
        tf.keras.models.load_model(f"{ram}/ckpt/epoch-2.keras"),
        tf.keras.models.load_model(f"{ram}/saved_model"),
    ):
        assert_same_outputs(loaded, distributed, X)
    fresh = sequential()
    fresh.load_weights(f"{ram}/final_weights/ckpt")
    assert_same_outputs(fresh, distributed, X)


@pytest.mark.parametrize("worker", [0, 1])
def test_only_the_chief_writes_to_ram_paths(ram, distribute_as_worker, worker):
    distributed = distribute_as_worker(compiled("sequential"), worker_index=worker)
    distributed.fit(X, Y, batch_size=2, callbacks=[tf.keras.callbacks.CSVLogger(f"{ram}/log.csv")], verbose=0)
    distributed.save(f"{ram}/model.keras")
    assert tf.io.gfile.exists(f"{ram}/model.keras") is (worker == 0)
    assert tf.io.gfile.exists(f"{ram}/log.csv") is (worker == 0)
