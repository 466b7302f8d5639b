"""`import kscale` is light: horovod is imported only by the horovod backend, with a clear error if missing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import kscale
from kscale import _optional, backends, environment
from kscale.errors import KScaleError, MissingDependencyError

from .conftest import tiny_model


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith((*environment.LAUNCHER_VARIABLE_PREFIXES, "KSCALE_"))
    }
    clean.update(TF_CPP_MIN_LOG_LEVEL="2", **env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=clean, timeout=110
    )


@pytest.mark.timeout(120)
def test_import_kscale_loads_no_horovod_and_no_estimator():
    proc = run_python(
        """
        import sys
        import kscale
        loaded = [m for m in ("horovod", "tensorflow_estimator") if m in sys.modules]
        assert not loaded, loaded
        print("rank", kscale.rank(), "size", kscale.size())
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rank 0 size 1" in proc.stdout


@pytest.mark.timeout(120)
def test_import_under_horovodrun_variables_still_loads_no_horovod():
    proc = run_python(
        """
        import sys
        import kscale
        assert "horovod" not in sys.modules, "horovod imported at import kscale"
        print("rank", kscale.rank(), "size", kscale.size(), "local", kscale.local_rank())
        """,
        HOROVOD_RANK="1",
        HOROVOD_SIZE="2",
        HOROVOD_LOCAL_RANK="1",
        HOROVOD_LOCAL_SIZE="2",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rank 1 size 2 local 1" in proc.stdout


@pytest.fixture
def no_horovod(monkeypatch):
    """Make every horovod module unimportable in this process (restored afterwards)."""
    for name in [m for m in sys.modules if m == "horovod" or m.startswith("horovod.")]:
        monkeypatch.setitem(sys.modules, name, None)
    for name in ("horovod", "horovod.tensorflow", "horovod.tensorflow.keras"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.usefixtures("clean_launcher_env", "no_horovod")
def test_horovod_backend_without_horovod_names_the_install_command():
    with pytest.raises(MissingDependencyError) as err:
        kscale.distribute(tiny_model(), backend="horovod")
    message = str(err.value)
    assert "the horovod backend needs horovod, which is not importable here" in message
    assert _optional.HOROVOD_INSTALL in message
    assert isinstance(err.value, ImportError) and isinstance(err.value, KScaleError)
    assert backends._current is None  # a failed setup leaves no half-made backend behind


@pytest.mark.usefixtures("no_horovod")
def test_estimator_without_horovods_extension_gives_the_backends_install_command(monkeypatch):
    """One install advice for Horovod, whichever part of kscale needs it (issue 20)."""
    from kscale.estimator import _deps

    monkeypatch.setattr(_deps, "is_horovod_available", lambda: True)  # installed, but it does not import
    with pytest.raises(MissingDependencyError) as err:
        _deps.import_horovod()
    assert "kscale.estimator with several workers needs horovod" in str(err.value)
    assert _optional.HOROVOD_INSTALL in str(err.value)


def test_require_names_the_feature_and_the_install_command(monkeypatch):
    def refuse(name):
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(_optional.importlib, "import_module", refuse)
    with pytest.raises(MissingDependencyError) as err:
        _optional.require("somepkg.sub", "pip install somepkg", "the thing")
    assert str(err.value).startswith("the thing needs somepkg, which is not importable here")
    assert str(err.value).endswith("Install it: pip install somepkg")


def test_public_api():
    for name in kscale.__all__:
        assert hasattr(kscale, name), name
    assert issubclass(kscale.OptionError, kscale.KScaleError)
    assert issubclass(kscale.DataError, ValueError)


@pytest.mark.usefixtures("clean_launcher_env")
def test_rank_helpers_follow_the_environment(monkeypatch):
    from kscale import environment

    assert (kscale.rank(), kscale.size(), kscale.local_rank(), kscale.num_replicas()) == (0, 1, 0, 1)
    assert kscale.is_chief()
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
    environment.reset()
    assert (kscale.rank(), kscale.size(), kscale.local_rank(), kscale.num_replicas()) == (2, 4, 0, 4)
    assert not kscale.is_chief()


@pytest.mark.timeout(120)
def test_distribute_in_one_process_imports_no_horovod_and_no_jax():
    proc = run_python(
        """
        import sys
        import tensorflow as tf
        import kscale
        model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(3,))])
        model.compile(optimizer="sgd", loss="mse")
        kscale.distribute(model, print_plan=False)
        model.fit(tf.zeros((4, 3)), tf.zeros((4, 1)), verbose=0)
        loaded = [m for m in ("horovod", "jax") if m in sys.modules]
        assert not loaded, loaded
        # Training carries only what training needs: not the launcher, the command line or the benchmark.
        tools = [m for m in sys.modules if m.startswith(("kscale.launch", "kscale.cli", "kscale.bench"))]
        assert not tools, tools
        print("ok")
        """
    )
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]


@pytest.mark.timeout(120)
def test_import_kscale_alone_imports_no_framework():
    proc = run_python(
        """
        import sys
        import kscale
        loaded = [m for m in ("tensorflow", "keras", "jax", "torch") if m in sys.modules]
        assert not loaded, loaded
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.timeout(120)
def test_tensorflow_imported_first_without_several_devices_is_left_untouched():
    """One CPU, no backend asked for: `import kscale` makes no strategy and leaves TensorFlow's devices open
    to the script's own set-up after it."""
    proc = run_python(
        """
        import tensorflow as tf
        import kscale
        assert not tf.distribute.has_strategy()
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        print("devices", len(tf.config.list_logical_devices("CPU")))
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "devices 2" in proc.stdout


#: A script for one process with two logical CPUs standing in for a host's GPUs: TensorFlow imported and set
#: up first, then `import kscale`, then keras.io's pattern of a model whose __init__ takes models.
MIRRORED_SCRIPT = """
import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import kscale

keras = tf.keras


class Pair(keras.Model):  # no get_config: Keras cannot copy it from a config
    def __init__(self, first, second):
        super().__init__()
        self.first, self.second = first, second

    def call(self, x):
        return self.second(self.first(x))


first = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
second = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model = Pair(first, second)
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
"""


@pytest.mark.timeout(120)
def test_mirrored_strategy_made_at_import_trains_the_users_own_model():
    proc = run_python(
        MIRRORED_SCRIPT
        + """
distributed = kscale.distribute(model)
assert distributed is model, "a copy"
assert isinstance(first.layers[0].kernel, tf.distribute.DistributedValues), type(first.layers[0].kernel)
x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
history = model.fit(x, x[:, :1], batch_size=4, epochs=1, verbose=0)
loss = model.evaluate(x, x[:, :1], batch_size=4, verbose=0)
print("replicas", model.distribute_strategy.num_replicas_in_sync, "loss", loss)
assert not tf.distribute.has_strategy(), "the process's strategy is left at distribute()"
""",
        KSCALE_BACKEND="mirrored",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "replicas 2" in proc.stdout


@pytest.mark.timeout(120)
def test_other_devices_than_the_strategy_made_at_import_are_refused():
    proc = run_python(
        MIRRORED_SCRIPT
        + """
try:
    kscale.distribute(model, devices=["CPU:0"])
except kscale.OptionError as err:
    print("refused:", err)
kscale.distribute(model, devices=["CPU:1", "CPU:0"])  # the same devices, in any order
print("accepted")
""",
        KSCALE_BACKEND="mirrored",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "refused:" in proc.stdout and "already runs on" in proc.stdout and "not on CPU:0" in proc.stdout
    assert "accepted" in proc.stdout


@pytest.mark.timeout(120)
def test_weights_saved_and_loaded_as_keras_3_names_them_under_the_mirrored_strategy(tmp_path):
    """keras.io's Keras 3 weather example's checkpoint name, `.weights.h5`, in a tf.keras script: tf.keras
    loads it into a metric's state under MirroredStrategy only with kscale (TypeError without)."""
    path = tmp_path / "model_checkpoint.weights.h5"
    proc = run_python(
        MIRRORED_SCRIPT
        + f"""
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
model = kscale.distribute(model)
x = np.random.default_rng(0).normal(size=(32, 3)).astype("float32")
model.fit(x, x[:, :1], batch_size=4, epochs=1, verbose=0)
before = model.evaluate(x, x[:, :1], batch_size=4, verbose=0)
model.save_weights({str(path)!r})
model.load_weights({str(path)!r})
print("loaded", model.evaluate(x, x[:, :1], batch_size=4, verbose=0) == before)
""",
        KSCALE_BACKEND="mirrored",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "loaded True" in proc.stdout
