"""examples/kubernetes/trainjob-jax.yaml: Keras 3 on JAX under Kubeflow Trainer's `jax-distributed`
runtime, started here as the runtime starts its pods.

Each pod is one process with the variables the runtime's JAX plugin sets
(https://github.com/kubeflow/trainer/blob/master/pkg/runtime/framework/plugins/jax/jax.go):
JAX_NUM_PROCESSES (numNodes), JAX_PROCESS_ID (the pod's job completion index) and
JAX_COORDINATOR_ADDRESS (`<job>-node-0-0.<job>:29500`, here 127.0.0.1 and a free port), plus the
TrainJob's own `env`. The pods run the manifest's command. Not tested: a real cluster (DNS, the image).
"""

from __future__ import annotations

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

MANIFEST = REPO / "examples/kubernetes/trainjob-jax.yaml"


def test_two_pods_of_the_jax_runtime_train_as_one_job(worker_env):
    command = manifest_list(MANIFEST, "command")
    assert command == ["python", TRAIN] and manifest_env(MANIFEST) == {"KERAS_BACKEND": "jax"}
    command = [sys.executable, *command[1:]]  # this lane's python
    one = one_process(command, worker_env(KERAS_BACKEND="jax"))

    coordinator = f"127.0.0.1:{free_ports(1)[0]}"
    pods = [
        (
            command,
            worker_env(
                **manifest_env(MANIFEST),
                JAX_NUM_PROCESSES="2",
                JAX_PROCESS_ID=str(index),
                JAX_COORDINATOR_ADDRESS=coordinator,
            ),
        )
        for index in range(2)
    ]
    assert_one_job(run_processes(pods, 150), size=2, backend="jax", reference=one)
