"""kscale.backends: picking a backend by name, by KSCALE_BACKEND, or from the environment."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf

from kscale import backends, environment
from kscale.backends import resolve
from kscale.backends.horovod import HorovodBackend
from kscale.backends.mirrored import MirroredBackend
from kscale.backends.multi_worker import MultiWorkerBackend
from kscale.backends.single import SingleBackend
from kscale.environment import detect
from kscale.errors import OptionError

HOROVOD_ENV = {"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"}
TWO_TF_WORKERS = {
    "TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}})
}


@pytest.fixture
def gpus(monkeypatch):
    """`gpus(n)`: make TensorFlow report n physical GPUs (mirrored detection looks at them)."""

    def set_count(n: int) -> None:
        fake = [
            tf.config.PhysicalDevice(name=f"/physical_device:GPU:{i}", device_type="GPU") for i in range(n)
        ]
        real = tf.config.list_physical_devices
        monkeypatch.setattr(
            tf.config, "list_physical_devices", lambda kind=None: fake if kind == "GPU" else real(kind)
        )

    return set_count


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("single", SingleBackend),
        ("mirrored", MirroredBackend),
        ("horovod", HorovodBackend),
        ("multi_worker", MultiWorkerBackend),
    ],
)
def test_explicit_name(name, cls):
    assert resolve(name, detect({})) is cls
    assert cls.name == name


def test_kscale_backend_variable_picks_the_backend():
    assert resolve(None, detect({"KSCALE_BACKEND": "horovod"})) is HorovodBackend
    assert resolve(None, detect({**TWO_TF_WORKERS, "KSCALE_BACKEND": "single"})) is SingleBackend


def test_an_explicit_name_beats_kscale_backend():
    assert resolve("mirrored", detect({"KSCALE_BACKEND": "horovod"})) is MirroredBackend


@pytest.mark.parametrize(
    ("variables", "cls"),
    [
        (HOROVOD_ENV, HorovodBackend),
        ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, HorovodBackend),
        (TWO_TF_WORKERS, MultiWorkerBackend),
        (
            {
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}
                )
            },
            SingleBackend,
        ),
        (
            {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0"},
            MultiWorkerBackend,
        ),
        ({}, SingleBackend),
    ],
)
def test_auto_detection_on_a_host_without_gpus(gpus, variables, cls):
    gpus(0)
    assert resolve(None, detect(variables)) is cls


def test_two_local_gpus_and_no_launcher_pick_mirrored(gpus):
    gpus(2)
    assert resolve(None, detect({})) is MirroredBackend
    gpus(1)
    assert resolve(None, detect({})) is SingleBackend


def test_a_launcher_wins_over_local_gpus(gpus):
    gpus(4)
    assert resolve(None, detect(HOROVOD_ENV)) is HorovodBackend
    assert resolve(None, detect(TWO_TF_WORKERS)) is MultiWorkerBackend


@pytest.mark.parametrize("where", ["argument", "KSCALE_BACKEND"])
def test_unknown_backend_lists_the_valid_names(where):
    with pytest.raises(OptionError) as err:
        if where == "argument":
            resolve("tpu", detect({}))
        else:
            resolve(None, detect({"KSCALE_BACKEND": "tpu"}))
    message = str(err.value)
    assert "unknown backend 'tpu'" in message
    for name in ("'horovod'", "'multi_worker'", "'mirrored'", "'single'"):
        assert name in message


def test_resolve_reads_the_process_environment_by_default(monkeypatch, clean_launcher_env):
    monkeypatch.setenv("KSCALE_BACKEND", "horovod")
    environment.reset()
    assert resolve() is HorovodBackend


def test_current_creates_one_backend_and_reuses_it(clean_launcher_env, gpus):
    gpus(0)
    first = backends.current("single")
    assert isinstance(first, SingleBackend)
    assert backends.current("single") is first
    assert backends.current() is first  # nothing named: the environment picks single again


def test_current_refuses_to_switch_backends(clean_launcher_env):
    backends.current("single")
    with pytest.raises(
        OptionError, match=r"already runs the 'single' backend; it cannot switch to 'mirrored'"
    ):
        backends.current("mirrored")


def test_a_backend_whose_import_fails_with_prose_says_so(monkeypatch):
    """Keras' own ImportError ('To use Keras, you need to have `optree` installed') names no module: the
    message says what failed, not 'To use Keras ... is not installed'."""
    from kscale.errors import MissingDependencyError

    def fail(name):
        raise ImportError(
            "To use Keras, you need to have `optree` installed. Install it via `pip install optree`"
        )

    monkeypatch.setattr(backends.importlib, "import_module", fail)
    with pytest.raises(MissingDependencyError) as raised:
        backends.Entry("jax", 3, ("jax",), "kscale.backends.jax:JaxBackend").load()
    assert "and importing it failed here: To use Keras, you need to have `optree` installed" in str(
        raised.value
    )
