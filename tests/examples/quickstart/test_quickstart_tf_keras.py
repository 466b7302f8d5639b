"""docs/quickstart/tf-keras.md and the launcher pages' tf.keras commands (docs/launch/horovodrun.md,
tf-config.md), as the pages give them, in lane A: one process; two workers through `kscale run -np 2`
(Horovod), through `horovodrun -np 2 -H localhost:2 --gloo` and with TF_CONFIG set by hand; each ends
with the same loss on every rank and the model saved once."""

from __future__ import annotations

import json
import re

import pytest

from kscale.launch.workers import free_ports
from tests.conftest import BIN, crash_report
from tests.recipes.recipe import run_processes

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(300)]

SCRIPT = "examples/quickstart/tf_keras.py"


def same_loss_on_two_ranks(output: str) -> None:
    losses = re.findall(r"rank (\d): loss ([\d.]+)", output)
    assert sorted(rank for rank, _ in losses) == ["0", "1"] and len({loss for _, loss in losses}) == 1, losses
    assert "with 2 worker(s)" in output


def test_one_process(launch, tmp_path):
    done = launch(["python", SCRIPT, tmp_path / "model.keras"], timeout=120)
    assert done.returncode == 0, crash_report(done.stdout)
    assert "with 1 worker(s)" in done.stdout and (tmp_path / "model.keras").exists()


@pytest.mark.parametrize(
    "launcher",
    [
        [BIN / "kscale", "run", "-np", "2", "--"],
        [BIN / "horovodrun", "-np", "2", "-H", "localhost:2", "--gloo"],
    ],
    ids=["kscale-run", "horovodrun"],
)
def test_two_workers(launch, tmp_path, launcher):
    done = launch([*launcher, "python", SCRIPT, tmp_path / "model.keras"], timeout=180)
    assert done.returncode == 0, crash_report(done.stdout)
    same_loss_on_two_ranks(done.stdout)
    assert (tmp_path / "model.keras").exists()


def test_two_workers_with_tf_config_set_by_hand(worker_env, tmp_path):
    workers = [f"localhost:{port}" for port in free_ports(2)]

    def tf_config(index: int) -> str:
        return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})

    output = run_processes(
        [
            (["python", SCRIPT, str(tmp_path / "model.keras")], worker_env(TF_CONFIG=tf_config(i)))
            for i in (0, 1)
        ],
        timeout=180,
    )
    same_loss_on_two_ranks(output)
    assert (tmp_path / "model.keras").exists()
