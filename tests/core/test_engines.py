"""kscale.launch.engines: what each worker's environment says to join a TF multi-worker or a JAX job."""

from __future__ import annotations

import json

import pytest

from kscale import environment
from kscale.errors import LaunchError
from kscale.frameworks import KerasInfo
from kscale.launch import engines


def test_jax_workers_get_keras_distribution_variables():
    layout = engines.Layout(
        nnodes=2, node_rank=1, nproc_per_node=2, master_addr="10.0.0.1", master_port=29400
    )
    surrounding_job = {"TF_CONFIG": "{}", "HOROVOD_RANK": "5", "KSCALE_BACKEND": "jax"}
    envs = engines.worker_envs("jax", layout, {"PATH": "/bin", **surrounding_job})
    assert sorted(envs) == [2, 3]
    env = envs[3]
    assert env["KERAS_DISTRIBUTION_JOB_ADDRESSES"] == "10.0.0.1:29400"
    assert (env["KERAS_DISTRIBUTION_NUM_PROCESSES"], env["KERAS_DISTRIBUTION_PROCESS_ID"]) == ("4", "3")
    assert (env["KSCALE_LOCAL_RANK"], env["KSCALE_LOCAL_SIZE"], env["KERAS_BACKEND"]) == ("1", "2", "jax")
    assert (envs[2]["CUDA_VISIBLE_DEVICES"], env["CUDA_VISIBLE_DEVICES"]) == ("0", "1")  # a GPU each
    chosen = engines.worker_envs("jax", layout, {"CUDA_VISIBLE_DEVICES": "4,6"})
    assert [chosen[r]["CUDA_VISIBLE_DEVICES"] for r in (2, 3)] == ["4", "6"]  # from the user's list
    assert env["PATH"] == "/bin" and env["KSCALE_BACKEND"] == "jax"  # the user's choice passes
    assert "TF_CONFIG" not in env and "HOROVOD_RANK" not in env  # another job's identity does not


def test_tf_workers_on_one_host_get_one_tf_config_each():
    layout = engines.Layout(1, 0, 2, "127.0.0.1", 5000, ports=(5000, 5123))
    envs = engines.worker_envs("tf", layout, {})
    configs = [json.loads(envs[r]["TF_CONFIG"]) for r in (0, 1)]
    assert configs[0]["cluster"] == configs[1]["cluster"] == {"worker": ["127.0.0.1:5000", "127.0.0.1:5123"]}
    assert [c["task"] for c in configs] == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1}]


def test_tf_workers_on_several_nodes_need_every_nodes_address():
    layout = engines.Layout(2, 1, 2, "10.0.0.1", 7000, hosts=("10.0.0.1", "10.0.0.2"))
    config = json.loads(engines.worker_envs("tf", layout, {})[3]["TF_CONFIG"])
    assert config["cluster"]["worker"] == ["10.0.0.1:7000", "10.0.0.1:7001", "10.0.0.2:7000", "10.0.0.2:7001"]
    assert config["task"] == {"type": "worker", "index": 3}
    with pytest.raises(LaunchError, match="-H node0,node1"):
        engines.worker_envs("tf", engines.Layout(2, 1, 2, "10.0.0.1", 7000), {})


def test_horovodrun_options_are_refused_by_the_other_engines():
    engines.forbidden_options("jax", [])
    with pytest.raises(LaunchError, match="'--gloo' is a horovodrun option"):
        engines.forbidden_options("jax", ["--gloo"])


@pytest.mark.parametrize(
    ("keras", "legacy_possible", "horovod", "engine"),
    [
        (KerasInfo(3, "jax"), False, False, "jax"),
        (KerasInfo(2, "tensorflow"), False, True, "horovod"),
        (KerasInfo(2, "tensorflow"), False, False, "tf"),
        (KerasInfo(3, "tensorflow"), True, True, "horovod"),  # lane B: tf_keras stands in for Keras 3
    ],
)
def test_default_engine_is_what_the_stack_runs_with_several_processes(
    monkeypatch, keras, legacy_possible, horovod, engine
):
    monkeypatch.setattr(engines.frameworks, "process_keras", lambda: keras)
    monkeypatch.setattr(engines.frameworks, "legacy_keras_needed", lambda: legacy_possible)
    monkeypatch.setattr(engines.frameworks, "is_installed", lambda package: package == "horovod" and horovod)
    assert engines.default_engine() == engine


def test_keras_3_on_tensorflow_launches_tf_config_workers(monkeypatch):
    monkeypatch.setattr(engines.frameworks, "process_keras", lambda: KerasInfo(3, "tensorflow"))
    monkeypatch.setattr(engines.frameworks, "legacy_keras_needed", lambda: False)
    monkeypatch.setattr(engines.frameworks, "is_installed", lambda package: True)  # never Horovod for Keras 3
    assert engines.default_engine() == "tf"


def test_keras_3_on_torch_launches_torchrun(monkeypatch):
    monkeypatch.setattr(engines.frameworks, "process_keras", lambda: KerasInfo(3, "torch"))
    monkeypatch.setattr(engines.frameworks, "legacy_keras_needed", lambda: False)
    assert engines.default_engine() == "torch"
    assert engines.LAUNCHERS["torch"] is environment.Launcher.TORCH


def test_a_keras_3_backend_without_an_engine_is_refused_with_the_ones_that_have_one(monkeypatch):
    monkeypatch.setattr(engines.frameworks, "process_keras", lambda: KerasInfo(3, "openvino"))
    monkeypatch.setattr(engines.frameworks, "legacy_keras_needed", lambda: False)
    with pytest.raises(LaunchError) as err:
        engines.default_engine()
    message = str(err.value)
    assert "Keras 3 on openvino trains in one process here" in message and "torch" in message


def test_torchrun_takes_one_host_standalone_and_several_through_c10d_rendezvous():
    one = engines.torchrun_command(engines.Layout(1, 0, 2, "127.0.0.1", 0), ["python", "t.py"], "/py")
    assert one[:6] == ["/py", "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone"]
    assert one[-3:] == ["--no-python", "python", "t.py"] and "--max-restarts" in one
    two = engines.torchrun_command(engines.Layout(2, 1, 4, "10.0.0.1", 29500), ["python", "t.py"], "/py")
    assert "--standalone" not in two
    at = {two[i]: two[i + 1] for i in range(3, len(two) - 3) if two[i].startswith("--")}
    assert at["--nnodes"] == "2" and "--node-rank" not in at and at["--nproc-per-node"] == "4"
    assert at["--rdzv-backend"] == "c10d" and at["--rdzv-endpoint"] == "10.0.0.1:29500"
    assert at["--rdzv-conf"] == "is_host=false"  # node 1: node 0 serves the store


def test_torchrun_workers_inherit_no_other_jobs_place_and_run_keras_on_torch():
    env = engines.torch_env(
        {"PATH": "/bin", "RANK": "3", "MASTER_ADDR": "x", "TF_CONFIG": "{}", "KERAS_BACKEND": "jax"}
    )
    assert env == {"PATH": "/bin", "PYTHONUNBUFFERED": "1", "KERAS_BACKEND": "torch"}
