"""docs/quickstart/{jax,tensorflow,torch}.md: the Keras 3 quick start's commands, as the pages give them,
in the lane of each page (this file runs in the JAX, TensorFlow and torch lanes): one process, then two
workers on this machine through `kscale run -np 2`, whose engine is the stack's (jax, tf, torch)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import BIN, crash_report

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(240)]

SCRIPT = "examples/quickstart/keras3.py"


def test_the_quick_start_runs_as_one_process_and_as_two_workers(launch, tmp_path):
    one = launch(["python", SCRIPT, tmp_path / "one.keras"], timeout=120)
    assert one.returncode == 0, crash_report(one.stdout)
    assert "with 1 worker(s)" in one.stdout and (tmp_path / "one.keras").exists()

    two = launch(
        [BIN / "kscale", "run", "-np", "2", "--", "python", SCRIPT, tmp_path / "two.keras"], timeout=180
    )
    assert two.returncode == 0, crash_report(two.stdout)
    assert "with 2 worker(s)" in two.stdout and (tmp_path / "two.keras").exists()
    losses = re.findall(r"rank (\d): loss ([\d.]+)", two.stdout)
    assert sorted(rank for rank, _ in losses) == ["0", "1"] and len({loss for _, loss in losses}) == 1, losses
