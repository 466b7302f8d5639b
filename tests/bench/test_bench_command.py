"""`kscale bench --model` end to end: a user's model measured on every backend, then the recommendation
(`kscale bench --quick` on each lane's stack: tests/stack/test_stack_bench.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.multiprocess


def _bench(tmp_path: Path, worker_env, *options: str) -> dict:
    out = tmp_path / "bench"
    done = subprocess.run(
        [sys.executable, "-m", "kscale.cli", "bench", "--output", str(out), *options],
        cwd=REPO,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in ("results.json", "results.md", "scaling.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "[1/" in done.stdout  # progress while it runs
    return {"report": json.loads((out / "results.json").read_text()), "stdout": done.stdout, "out": out}


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


@pytest.mark.timeout(600)
def test_bench_of_the_users_model_ends_with_a_recommendation(tmp_path, worker_env):
    """Single and mirrored at two batch sizes: four launches. Horovod's own rows (its timeline, the fp16
    knob, kscale against the hand-written script) are measured by `kscale bench --quick` in
    tests/stack/test_stack_bench.py with the same code; here the user's model, its rows and the advice."""
    model = f"{REPO}/tests/bench/user_model.py:build"
    options = ["--model", model, "--backends", "single", "mirrored", "--batch-sizes", "16", "32"]
    run = _bench(tmp_path, worker_env, *options, "--batches", "10", "--iters", "2", "--repeats", "1")
    analysis = run["report"]["analysis"]
    assert not analysis["baselines"]  # a user's model is not rebuilt by hand-written scripts
    assert not analysis["knobs"]  # Horovod's knobs: only where Horovod is benched
    measured = {(r["backend"], r["batch"]) for r in analysis["rows"] if not r["variant"]}
    assert measured == {(b, s) for b in ("single", "mirrored") for s in (16, 32)}
    [advice] = analysis["recommendations"]
    assert advice["model"] == model and advice["workers"] == 2
    assert advice["scaling"]["choice"] == "scale-up (mirrored)"
    assert _positive(advice["scaling"]["scale_up_samples_per_s"])
    assert {int(batch) for batch in advice["batch_for_efficiency"]["measured"]} == {16, 32}
    assert "fp16" not in advice
    assert "## Recommendation for" in run["stdout"] and "per-replica batch" in run["stdout"].lower()
