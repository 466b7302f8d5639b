"""kscale.frameworks: which Keras a process uses, read from metadata and variables, and when tf_keras steps in."""

from __future__ import annotations

import json
import os
import sys

import pytest

from kscale import environment, frameworks
from kscale.frameworks import KerasInfo


@pytest.fixture
def stack(monkeypatch):
    """`stack(tensorflow=(2, 18, 1), keras=(3, 15, 1), tf_keras=True, **variables)`: fake an installed stack,
    TensorFlow not imported yet (a lane's own TensorFlow, imported, would say what its tf.keras is)."""
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)

    def make(tensorflow=None, keras=None, tf_keras=False, **variables):
        versions = {"tensorflow": tensorflow, "keras": keras}
        monkeypatch.setattr(frameworks, "version_of", lambda name: versions.get(name))
        monkeypatch.setattr(frameworks, "is_installed", lambda package: package == "tf_keras" and tf_keras)
        for name in ("TF_USE_LEGACY_KERAS", "KERAS_BACKEND", "KERAS_HOME"):
            monkeypatch.setenv(name, "")  # so that monkeypatch restores it even when kscale sets it
            monkeypatch.delenv(name)
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        environment.reset()

    return make


def test_lane_a_tensorflow_2_15_is_keras_2(stack):
    stack(tensorflow=(2, 15, 1), keras=(2, 15, 0))
    assert frameworks.process_keras() == KerasInfo(2, "tensorflow")
    assert not frameworks.legacy_keras_needed()


def test_lane_b_is_keras_2_with_the_variable_and_keras_3_without(stack):
    stack(
        tensorflow=(2, 18, 1),
        keras=(3, 15, 1),
        tf_keras=True,
        TF_USE_LEGACY_KERAS="1",
        KERAS_BACKEND="tensorflow",
    )
    assert frameworks.process_keras() == KerasInfo(2, "tensorflow")
    stack(tensorflow=(2, 18, 1), keras=(3, 15, 1), tf_keras=True, KERAS_BACKEND="tensorflow")
    assert frameworks.process_keras() == KerasInfo(3, "tensorflow")
    assert frameworks.legacy_keras_needed()  # Horovod and MultiWorkerMirroredStrategy need it there


def test_tf_keras_is_what_tensorflow_made_it_once_it_decided(stack, monkeypatch):
    # Ray's TensorflowTrainer sets TF_USE_LEGACY_KERAS=1 in workers whose tf.keras is Keras 3 already.
    stack(tensorflow=(2, 21, 0), keras=(3, 15, 1), tf_keras=True, TF_USE_LEGACY_KERAS="1")
    decided = {"value": "keras_3"}
    monkeypatch.setitem(sys.modules, "tensorflow", object())
    monkeypatch.setattr("kscale._tensorflow_private.tf_keras_decided", lambda tf: decided["value"])
    assert frameworks.process_keras().generation == 3
    decided["value"] = "tf_keras"
    assert frameworks.process_keras() == KerasInfo(2, "tensorflow")
    decided["value"] = None  # not decided yet: the variable and tf_keras say what it will be
    assert frameworks.process_keras() == KerasInfo(2, "tensorflow")


def test_lane_c_keras_3_on_jax_without_tensorflow(stack):
    stack(keras=(3, 15, 1), KERAS_BACKEND="jax")
    assert frameworks.process_keras() == KerasInfo(3, "jax")
    assert not frameworks.legacy_keras_needed()


def test_keras_3_backend_is_read_from_keras_json_like_keras_does(stack, tmp_path):
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "jax", "floatx": "float32"}))
    stack(keras=(3, 15, 1), KERAS_HOME=str(tmp_path))
    assert frameworks.process_keras() == KerasInfo(3, "jax")
    stack(keras=(3, 15, 1), KERAS_HOME=str(tmp_path / "missing"))
    assert frameworks.process_keras() == KerasInfo(3, "tensorflow")  # Keras' own default


def test_an_explicit_zero_keeps_keras_3(stack):
    stack(tensorflow=(2, 18, 1), keras=(3, 15, 1), tf_keras=True, TF_USE_LEGACY_KERAS="0")
    assert not frameworks.legacy_keras_needed()


@pytest.mark.parametrize(
    ("launcher_vars", "expected"),
    [
        ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"}, True),
        (
            {
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}
                )
            },
            True,
        ),
        ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "1"}, False),  # one process: nothing to make work
        ({}, False),
    ],
)
def test_import_kscale_switches_multi_process_tensorflow_jobs_to_tf_keras(
    stack, monkeypatch, clean_launcher_env, launcher_vars, expected
):
    stack(tensorflow=(2, 18, 1), keras=(3, 15, 1), tf_keras=True, **launcher_vars)
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)  # before TensorFlow is imported
    assert frameworks.use_legacy_keras_under_launchers(environment.current()) is expected
    assert (os.environ.get("TF_USE_LEGACY_KERAS") == "1") is expected


def test_no_switch_once_tensorflow_is_imported_or_without_tf_keras(stack, monkeypatch, clean_launcher_env):
    horovod = {"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"}
    stack(tensorflow=(2, 18, 1), keras=(3, 15, 1), tf_keras=False, **horovod)
    assert not frameworks.use_legacy_keras_under_launchers(environment.current())
    stack(tensorflow=(2, 18, 1), keras=(3, 15, 1), tf_keras=True, **horovod)
    monkeypatch.setitem(sys.modules, "tensorflow", object())
    assert not frameworks.use_legacy_keras_under_launchers(environment.current())
    assert "TF_USE_LEGACY_KERAS" not in os.environ


def test_version_of_reads_package_metadata():
    assert frameworks.version_of("pytest")[0] >= 7
    assert frameworks.version_of("no-such-distribution-kscale") is None
