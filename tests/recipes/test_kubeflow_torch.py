"""examples/kubernetes/trainjob-torch.yaml: Keras 3 on PyTorch under Kubeflow Trainer's
`torch-distributed` runtime, started here as the runtime starts its pods.

Each pod gets the variables the runtime's torch plugin sets
(https://github.com/kubeflow/trainer/blob/master/pkg/runtime/framework/plugins/torch/torch.go):
PET_NNODES (numNodes), PET_NPROC_PER_NODE (numProcPerNode), PET_NODE_RANK (the pod's job completion
index), PET_MASTER_ADDR (`<job>-node-0-0.<job>`, here 127.0.0.1) and PET_MASTER_PORT (29500, here a free
port), plus the TrainJob's own `env`, and runs the manifest's command: torchrun, which reads the PET_*
variables as its options and starts the pod's workers. Not tested: a real cluster (DNS, the image, GPUs).
"""

from __future__ import annotations

import sys
from pathlib import Path

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

MANIFEST = REPO / "examples/kubernetes/trainjob-torch.yaml"
TORCHRUN = Path(sys.executable).parent / "torchrun"


def test_two_pods_of_the_torch_runtime_train_as_one_job(worker_env):
    command = manifest_list(MANIFEST, "command")
    assert command == ["torchrun", TRAIN] and manifest_env(MANIFEST) == {"KERAS_BACKEND": "torch"}
    assert "numNodes: 2" in MANIFEST.read_text() and "numProcPerNode: 1" in MANIFEST.read_text()
    one = one_process([sys.executable, TRAIN], worker_env(KERAS_BACKEND="torch"))

    pet = {
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "1",
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(free_ports(1)[0]),
    }
    pods = [
        ([str(TORCHRUN), *command[1:]], worker_env(**manifest_env(MANIFEST), **pet, PET_NODE_RANK=str(index)))
        for index in range(2)
    ]
    assert_one_job(run_processes(pods, 150), size=2, backend="torch", reference=one)
