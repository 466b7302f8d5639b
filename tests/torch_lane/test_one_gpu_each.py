"""Two torch processes on one GPU: stopped before NCCL's own error at the first collective, as the lent
H200 showed (benchmarks/RESULTS.md); and `kscale test` in one torch process, as it runs on a one-GPU host."""

from __future__ import annotations

import pytest

from kscale.backends import torch as torch_backend
from kscale.errors import BackendError
from tests.stack.conftest import BIN


def test_more_processes_than_gpus_stop_before_the_group_is_made_with_the_fix():
    """The rule `kscale run` applies before the launch (checks.shared_gpu_problem), in the worker itself."""
    one_gpu = ("NVIDIA H200",)
    with pytest.raises(
        BackendError, match=r"2 worker processes on this host, but only 1 GPU.*NCCL"
    ) as raised:
        torch_backend._check_one_gpu_each(2, one_gpu)
    assert "--nproc-per-node 1" in str(raised.value) and "CUDA_VISIBLE_DEVICES=" in str(raised.value)
    torch_backend._check_one_gpu_each(2, one_gpu * 2)


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_kscale_test_passes_in_one_torch_process(launch):
    """torchrun with one process makes no group: the self-test's collectives are its own values."""
    done = launch([BIN / "kscale", "test", "--engine", "torch", "-np", "1"], KERAS_BACKEND="torch")
    assert done.returncode == 0, done.stdout[-3000:]
    assert (
        "kscale selftest PASS rank=0 size=1" in done.stdout
        and "device: the model's variables are on cpu" in done.stdout
    )
