"""`kscale.distribute` on Keras 3 models (JAX or TensorFlow): the user's own model, scaled, sharded, saved once."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest

import kscale
import kscale.learning_rate
from kscale.errors import BackendError, DataError, OptionError
from kscale.model_state import state_of

from .conftest import KERAS_BACKEND, regression_data, tiny_model

X, Y = regression_data(16)


@keras.saving.register_keras_serializable(package="kscale_tests")
class TwoLayers(keras.Model):
    def __init__(self, units: int = 4, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.hidden = keras.layers.Dense(units, activation="tanh")
        self.out = keras.layers.Dense(1)

    def call(self, inputs):
        return self.out(self.hidden(inputs))

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def compiled(kind: str, lr: float = 0.05) -> keras.Model:
    kscale.set_seed(0)
    if kind == "sequential":
        model = keras.Sequential(
            [keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)]
        )
    elif kind == "functional":
        inputs = keras.Input((3,))
        model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.Dense(4, activation="tanh")(inputs)))
    else:
        model = TwoLayers()
        model(X[:1])
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse", metrics=["mae"])
    return model


def twin_of(model: keras.Model) -> keras.Model:
    twin = keras.models.clone_model(model)
    if not twin.built:
        twin(X[:1])
    twin.set_weights(model.get_weights())
    twin.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    return twin


@pytest.fixture(params=["sequential", "functional", "subclassed"])
def kind(request) -> str:
    return request.param


@pytest.mark.usefixtures("single_process")
def test_the_result_is_the_users_model_and_trains_like_keras(kind):
    model = compiled(kind)
    twin = twin_of(model)
    distributed = kscale.distribute(model, print_plan=False)
    assert distributed is model and type(distributed) is type(model) and isinstance(distributed, keras.Model)
    ours = distributed.fit(X, Y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    theirs = twin.fit(X, Y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(ours.history["loss"], theirs.history["loss"], rtol=1e-5)
    assert distributed.evaluate(X, Y, verbose=0) == pytest.approx(twin.evaluate(X, Y, verbose=0), rel=1e-5)
    np.testing.assert_allclose(
        distributed.predict(X, verbose=0), twin.predict(X, verbose=0), rtol=1e-5, atol=1e-6
    )
    assert distributed.train_on_batch(X, Y) == pytest.approx(twin.train_on_batch(X, Y), rel=1e-5)
    assert distributed.test_on_batch(X, Y, return_dict=True) == pytest.approx(
        twin.test_on_batch(X, Y, return_dict=True), rel=1e-5
    )
    np.testing.assert_allclose(
        distributed.predict_on_batch(X), twin.predict_on_batch(X), rtol=1e-5, atol=1e-6
    )
    assert distributed.kscale_plan.backend == "single"


@pytest.mark.usefixtures("single_process")
def test_keras_apis_take_the_distributed_model(kind, tmp_path):
    distributed = kscale.distribute(compiled(kind), print_plan=False)
    clone = keras.models.clone_model(distributed)
    assert type(clone) is type(distributed) and state_of(clone) is None
    path = str(tmp_path / "model.keras")
    keras.saving.save_model(distributed, path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded.predict(X, verbose=0), distributed.predict(X, verbose=0), rtol=1e-6)
    outer = keras.Sequential([keras.Input((3,)), distributed, keras.layers.Dense(1)])
    assert outer(X).shape == (16, 1)
    assert type(distributed).from_config(distributed.get_config()).get_config() == distributed.get_config()


def test_two_workers_scale_the_rate_and_take_half_the_data(distribute_as_worker):
    distributed = distribute_as_worker(tiny_model(lr=0.05), worker_index=1)
    assert float(keras.ops.convert_to_numpy(distributed.optimizer.learning_rate)) == pytest.approx(0.05)
    assert distributed.kscale_plan.learning_rate_after == pytest.approx(0.1)  # applied x2, read as written
    distributed.fit(*regression_data(21), batch_size=4, shuffle=False, verbose=0)
    plan = distributed.kscale_plan
    assert (plan.per_replica_batch, plan.global_batch, plan.steps_per_epoch_after) == (4, 8, 3)
    assert plan.notes == (  # 21 samples: 2 steps of 8, then 5 cut 3 and 2
        "every sample once per epoch: the last step's 5 samples cut in 2 slices, each replica's gradient "
        "weighted by its slice's share",
    )
    distributed.compile(optimizer="adam", loss="mse")  # compile again: still scaled
    assert distributed.kscale_plan.learning_rate_after == pytest.approx(0.002)


def test_mixed_precision_keeps_the_loss_scaling_and_scales_the_rate_inside_it(distribute_as_worker):
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:  # compile() wraps SGD in a LossScaleOptimizer, which has no rate of its own
        model = tiny_model(lr=0.05)
        model.compile(
            optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.05), initial_scale=256.0),
            loss="mse",
        )
        distributed = distribute_as_worker(model, worker_index=1)
        distributed.fit(*regression_data(16), batch_size=4, verbose=0)
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    optimizer = distributed.optimizer
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    assert float(keras.ops.convert_to_numpy(optimizer.inner_optimizer.learning_rate)) == pytest.approx(0.05)
    assert kscale.learning_rate.scaling_of(optimizer.inner_optimizer).factor == 2.0
    assert optimizer.initial_scale == 256.0 and distributed.layers[0].compute_dtype == "float16"
    assert int(keras.ops.convert_to_numpy(optimizer.iterations)) == 2  # 8 samples on this worker, batch 4


def test_warmup_ramps_from_the_single_replica_rate(distribute_as_worker):
    distributed = distribute_as_worker(tiny_model(lr=0.05), warmup_epochs=2)
    scaling = state_of(distributed).rates.scaling
    distributed.fit(*regression_data(16), batch_size=2, verbose=0)  # 8 per worker: 4 steps an epoch
    assert scaling.warmup_steps == 8 and distributed.kscale_plan.warmup_epochs == 2.0


def test_gradient_accumulation_is_the_optimizers_own_option(distribute_as_worker):
    distributed = distribute_as_worker(tiny_model(), gradient_accumulation_steps=2)
    assert distributed.optimizer.gradient_accumulation_steps == 2
    with pytest.raises(OptionError, match="gradient_accumulation_steps=0 must be an integer >= 1"):
        distribute_as_worker(tiny_model(), gradient_accumulation_steps=0)


@pytest.mark.timeout(240)
@pytest.mark.skipif(
    KERAS_BACKEND != "tensorflow", reason="JAX and torch train it (program gradient_accumulation)"
)
def test_gradient_accumulation_under_a_strategy_is_refused_before_training_in_either_form():
    """Keras 3's TensorFlow trainer fails under a tf.distribute strategy on an optimizer that accumulates
    gradients (a raw RuntimeError from its Cond): a BackendError at distribute(), whether the optimizer
    was made with gradient_accumulation_steps (inside a LossScaleOptimizer too) or kscale's option asks
    for it."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import tensorflow as tf

        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        import keras
        import kscale

        def model(optimizer):
            made = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
            made.compile(optimizer=optimizer, loss="mse")
            return made

        accumulating = keras.optimizers.SGD(0.1, gradient_accumulation_steps=2)
        for name, made, options in [
            ("optimizer", model(accumulating), {}),
            ("loss scaling", model(keras.optimizers.LossScaleOptimizer(accumulating)), {}),
            ("option", model(keras.optimizers.SGD(0.1)), {"gradient_accumulation_steps": 3}),
        ]:
            try:
                kscale.distribute(made, print_plan=False, **options)
                print(name, "distributed")
            except kscale.BackendError as err:
                print(name, "refused:", err)
        """
    )
    env = {**os.environ, "KSCALE_BACKEND": "mirrored", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    for name, steps in (("optimizer", 2), ("loss scaling", 2), ("option", 3)):
        refused = [line for line in lines if line.startswith(f"{name} refused:")]
        assert refused and f"gradient_accumulation_steps={steps}" in refused[0], done.stdout
        assert "KERAS_BACKEND=jax" in refused[0] and "KERAS_BACKEND=torch" in refused[0]


class Recorder(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        self.model.save(self.path)


@pytest.mark.parametrize(("worker", "written"), [(0, True), (1, False)])
def test_files_are_written_once_by_the_chief(distribute_as_worker, tmp_path, worker, written):
    distributed = distribute_as_worker(tiny_model(), worker_index=worker)
    checkpoint = keras.callbacks.ModelCheckpoint(
        str(tmp_path / "best.keras"), monitor="loss", save_best_only=True
    )
    saver = Recorder()
    saver.path = str(tmp_path / "by_callback.keras")
    csv = keras.callbacks.CSVLogger(str(tmp_path / "log.csv"))
    distributed.fit(
        *regression_data(16), batch_size=2, epochs=2, callbacks=[checkpoint, saver, csv], verbose=0
    )
    distributed.save(str(tmp_path / "final.keras"))
    expected = {"best.keras", "by_callback.keras", "log.csv", "final.keras"} if written else set()
    assert set(os.listdir(tmp_path)) == expected  # nothing else: no staging folders left behind
    if written:
        assert checkpoint.best < float("inf") and checkpoint.model is distributed


def test_a_pydataset_is_cut_into_equal_shards(distribute_as_worker):
    class Batches(keras.utils.PyDataset):
        def __init__(self, count):
            super().__init__()
            self.count = count

        def __len__(self):
            return self.count

        def __getitem__(self, i):
            return np.full((2, 3), i, "float32"), np.full((2, 1), i, "float32")

    distributed = distribute_as_worker(tiny_model(), worker_index=1)
    distributed.fit(Batches(7), verbose=0)
    plan = distributed.kscale_plan
    # 3 steps of two batches, then the seventh batch's two samples, one for each worker
    assert plan.steps_per_epoch_after == 4 and plan.notes == (
        "the training data's last step: its 1 batch(es) joined and cut in 2 equal parts, as one process at "
        "the global batch trains on them (a remainder of fewer than 2 samples unused)",
    )
    with pytest.raises(DataError, match="fewer than the 2 workers"):
        distributed.fit(Batches(1), verbose=0)


# -- what cannot work is refused, with what works instead -------------------------------------------------------
@pytest.mark.usefixtures("single_process")
def test_keras_3_with_horovod_is_refused():
    with pytest.raises(BackendError) as err:
        kscale.distribute(tiny_model(), backend="horovod")
    message = str(err.value)
    assert "never averages gradients" in message and "KERAS_BACKEND=jax" in message
    assert "kscale run --engine tf" in message


@pytest.mark.usefixtures("single_process")
def test_multi_worker_runs_keras_3_on_tensorflow_and_refuses_it_on_jax_and_torch():
    from kscale import backends

    if KERAS_BACKEND == "tensorflow":
        assert backends.resolve("multi_worker").__name__ == "Keras3MultiWorkerBackend"
        return
    with pytest.raises(BackendError) as err:
        kscale.distribute(tiny_model(), backend="multi_worker")
    assert f"does not run a Keras 3 ({KERAS_BACKEND}) model (it runs on: tensorflow" in str(err.value)


def test_a_keras_3_model_under_horovodrun_is_refused_not_trained_alone(monkeypatch, clean_launcher_env):
    monkeypatch.setenv("HOROVOD_RANK", "0")
    monkeypatch.setenv("HOROVOD_SIZE", "2")
    kscale.environment.reset()
    with pytest.raises(BackendError) as err:
        kscale.distribute(tiny_model())
    message = str(err.value)
    assert "started by horovodrun / kscale run (Horovod) as worker 0 of 2" in message
    assert "never averages gradients" in message


@pytest.mark.usefixtures("single_process")
def test_mirrored_is_tensorflows_and_jax_is_jaxs_and_torch_is_torchs():
    model = tiny_model()
    if KERAS_BACKEND == "tensorflow":
        distributed = kscale.distribute(model, backend="mirrored", devices=["CPU:0"], print_plan=False)
        assert distributed is not model and type(distributed) is type(model)
        assert len(distributed.fit(X, Y, batch_size=4, verbose=0).history["loss"]) == 1
        with pytest.raises(
            BackendError, match="the 'jax' backend does not run a Keras 3 \\(tensorflow\\) model"
        ):
            kscale.distribute(tiny_model(), backend="jax")
    else:
        with pytest.raises(
            BackendError, match=f"the 'mirrored' backend does not run a Keras 3 \\({KERAS_BACKEND}\\) model"
        ):
            kscale.distribute(model, backend="mirrored")
        other = "torch" if KERAS_BACKEND == "jax" else "jax"
        with pytest.raises(BackendError, match=f"the '{other}' backend does not run a Keras 3"):
            kscale.distribute(tiny_model(), backend=other)


def test_a_keras_2_option_is_unknown_for_keras_3(distribute_as_worker):
    with pytest.raises(OptionError, match="unknown option\\(s\\) 'compression'"):
        distribute_as_worker(tiny_model(), compression="fp16")


@pytest.mark.usefixtures("single_process")
def test_evaluate_list_is_in_keras_order_loss_first():
    """keras.io's MNIST example prints score[0] as the loss: the list must be Keras' own order (#19.9)."""
    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    plain = model.evaluate(x, y, verbose=0)
    distributed = kscale.distribute(model, print_plan=False)
    assert distributed.evaluate(x, y, verbose=0) == pytest.approx(plain)
    assert hasattr(model, "_flatten_metrics_in_order")  # the private order kscale follows (_keras_private)


@pytest.mark.usefixtures("single_process")
def test_a_model_built_on_its_first_batch_trains_like_keras():
    def unbuilt() -> keras.Model:
        kscale.set_seed(0)
        model = keras.Sequential([keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        return model

    plain = unbuilt()
    plain.fit(X, Y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    model = kscale.distribute(unbuilt(), print_plan=False)
    model.fit(X, Y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    for ours, theirs in zip(model.get_weights(), plain.get_weights(), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


class OwnCompile(keras.Model):
    """keras.io's GAN shape: compile(d_optimizer, g_optimizer) of its own signature, optimizers as attributes."""

    def __init__(self):
        super().__init__()
        self.first = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])

    def compile(self, d_optimizer, g_optimizer):
        super().compile()
        self.d_optimizer, self.g_optimizer = d_optimizer, g_optimizer


def test_every_optimizer_the_model_holds_is_scaled_and_in_the_plan(distribute_as_worker):
    users = OwnCompile()
    users.compile(keras.optimizers.SGD(0.01), keras.optimizers.Adam(0.002))
    model = distribute_as_worker(users)
    assert float(model.d_optimizer.learning_rate) == pytest.approx(0.01)  # as written, applied x 2 workers
    assert kscale.learning_rate.scaling_of(model.g_optimizer).factor == 2.0
    assert model.kscale_plan.own_optimizers == (("d_optimizer", 0.01, 0.02), ("g_optimizer", 0.002, 0.004))


def test_load_weights_restores_the_rate_as_written_and_applies_it_scaled(distribute_as_worker, tmp_path):
    # Files hold the rate as written (one worker's; one process trains with it): a restore (load_weights,
    # BackupAndRestore's) reads it back, and this world applies it scaled.
    model = distribute_as_worker(compiled("sequential", lr=0.05))
    model.fit(X, Y, batch_size=4, epochs=1, verbose=0)  # builds the optimizer: its variables are saved
    model.save_weights(str(tmp_path / "two.weights.h5"))
    model.load_weights(str(tmp_path / "two.weights.h5"))
    assert float(keras.ops.convert_to_numpy(model.optimizer.learning_rate)) == pytest.approx(0.05)
    plain = compiled("sequential", lr=0.3)  # one process's checkpoint at its own rate
    plain.fit(X, Y, batch_size=4, epochs=1, verbose=0)
    plain.save_weights(str(tmp_path / "one.weights.h5"))
    model.load_weights(str(tmp_path / "one.weights.h5"))
    assert float(keras.ops.convert_to_numpy(model.optimizer.learning_rate)) == pytest.approx(0.3)
    assert kscale.learning_rate.scaling_of(model.optimizer).factor == 2.0


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copy_holds_the_rate_as_written_and_is_scaled_once_when_distributed(distribute_as_worker, how):
    import copy
    import pickle

    distributed = distribute_as_worker(compiled("sequential", lr=0.01))
    clone = copy.deepcopy(distributed) if how == "deepcopy" else pickle.loads(pickle.dumps(distributed))
    assert state_of(clone) is None and type(clone) is type(distributed)
    assert float(keras.ops.convert_to_numpy(clone.optimizer.learning_rate)) == pytest.approx(0.01)
    again = distribute_as_worker(clone)
    assert float(keras.ops.convert_to_numpy(again.optimizer.learning_rate)) == pytest.approx(0.01)
    assert again.kscale_plan.learning_rate_after == pytest.approx(0.02)


def test_a_loaded_models_optimizer_state_is_carried_into_the_scaled_optimizer(distribute_as_worker, tmp_path):
    # keras.io "resume from a saved model": load_model brings the built optimizer (step count, Adam's
    # moments); the optimizer kscale compiles with the scaled rate must start from that state, not zero.
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    model.fit(X, Y, batch_size=4, epochs=2, verbose=0)
    model.save(str(tmp_path / "model.keras"))
    loaded = keras.models.load_model(str(tmp_path / "model.keras"))
    saved = loaded.optimizer
    before = {v.path: np.asarray(v) for v in saved.variables}
    assert int(saved.iterations) > 0 and len(before) > 2  # built and trained

    resumed = distribute_as_worker(loaded)
    assert resumed.optimizer is saved  # the user's own, applying the rate as written x 2
    after = {v.path: np.asarray(v) for v in resumed.optimizer.variables}
    assert after.keys() == before.keys()
    for path, value in before.items():
        np.testing.assert_array_equal(after[path], value, err_msg=path)
