"""examples/slurm/train.sbatch, run as sbatch runs it on the first node of a two-node job, with an `srun`
that starts one task per node with srun's variables (tests/recipes/fake_srun.py), both nodes on this
machine: each task's `kscale run` finds its node, node 0 and the port in them and starts its node's
worker with the lane's engine (jax, or torch through torchrun), and the two workers train as one job.

The batch script's variables are sbatch's (https://slurm.schedmd.com/sbatch.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES):
SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_JOB_NUM_NODES, SLURM_NNODES, SLURM_NODELIST. Not tested: real
SLURM (its srun, scontrol, two hosts), and a node with GPUs (SLURM_GPUS_ON_NODE).
"""

from __future__ import annotations

import os
import socket
import sys

import pytest

from kscale.launch import pernode
from tests.conftest import REPO
from tests.recipes.recipe import TRAIN, assert_one_job, one_process, run_processes

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(240)]

SBATCH = REPO / "examples/slurm/train.sbatch"


def job_id_with_a_free_port() -> int:
    """A job id whose rendezvous port (29400 + id % 1000, kscale.launch.pernode.from_slurm) is free here."""
    for job_id in range(4242, 5242):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", pernode.DEFAULT_PORT + job_id % 1000))
            except OSError:
                continue
            return job_id
    raise AssertionError("no free port in 29400-30399")


def test_the_sbatch_script_trains_two_nodes_as_one_job(worker_env, tmp_path):
    backend = os.environ["KERAS_BACKEND"]  # the lane's: jax or torch
    assert backend in ("jax", "torch")
    one = one_process([sys.executable, TRAIN], worker_env())

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPO / "tests/recipes/fake_srun.py"}" "$@"\n')
    srun.chmod(0o755)
    base = worker_env()
    sbatch = {
        "PATH": f"{bin_dir}:{base['PATH']}",
        "SLURM_JOB_ID": str(job_id_with_a_free_port()),
        "SLURM_JOB_NAME": "kscale-train",
        "SLURM_JOB_NODELIST": "localhost,localhost",  # two nodes, both this machine
        "SLURM_NODELIST": "localhost,localhost",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NNODES": "2",
        "SLURM_NODEID": "0",
        "SLURMD_NODENAME": "localhost",
    }
    output = run_processes([(["bash", str(SBATCH)], {**base, **sbatch})], 200)
    assert_one_job(output, size=2, backend=backend, reference=one)
