"""examples/kubernetes/tfjob-tensorflow.yaml: Keras 3 on TensorFlow as a TFJob of Kubeflow's Training
Operator, started here as the operator starts its replicas.

Each replica gets the TF_CONFIG the operator writes
(https://github.com/kubeflow/training-operator/blob/release-1.9/pkg/controller.v1/tensorflow/tensorflow.go,
genTFConfigJSONStr): the cluster of every replica type's `<job>-<type>-<i>.<namespace>.svc:<port>`
(here 127.0.0.1 and free ports), this replica's task, and `"environment": "cloud"`, in that order, plus
the container's own `env`; it runs the manifest's command. Not tested: a real cluster.
"""

from __future__ import annotations

import json
import sys

import pytest

from kscale.launch.workers import free_ports
from tests.conftest import REPO
from tests.recipes.recipe import (
    TRAIN,
    assert_one_job,
    manifest_env,
    manifest_list,
    one_process,
    run_processes,
)

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(180)]

MANIFEST = REPO / "examples/kubernetes/tfjob-tensorflow.yaml"


def tf_config(workers: list[str], index: int) -> str:
    """As the operator's Go structs marshal it: cluster, task, environment."""
    config = {
        "cluster": {"worker": workers},
        "task": {"type": "worker", "index": index},
        "environment": "cloud",
    }
    return json.dumps(config, separators=(",", ":"))


def test_two_replicas_of_a_tfjob_train_as_one_job(worker_env):
    command = manifest_list(MANIFEST, "command")
    assert command == ["python", TRAIN] and manifest_env(MANIFEST) == {"KERAS_BACKEND": "tensorflow"}
    assert "replicas: 2" in MANIFEST.read_text()
    command = [sys.executable, *command[1:]]  # this lane's python
    one = one_process(command, worker_env(KERAS_BACKEND="tensorflow"))

    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    replicas = [
        (command, worker_env(**manifest_env(MANIFEST), TF_CONFIG=tf_config(workers, index)))
        for index in range(2)
    ]
    assert_one_job(run_processes(replicas, 150), size=2, backend="multi_worker", reference=one)
