"""`kscale bench` end to end: real launches of every backend, the report's files and structure."""

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
def test_quick_bench_writes_the_report_of_every_backend_and_baseline(tmp_path, worker_env):
    run = _bench(tmp_path, worker_env, "--quick")
    report, markdown = run["report"], (run["out"] / "results.md").read_text()
    machine = report["machine"]
    assert machine["cores"] >= 1 and machine["tensorflow"] and machine["horovod"]
    analysis = report["analysis"]
    table = {(r["backend"], r["workers"], r["impl"]): r for r in analysis["rows"] if not r["variant"]}
    for backend, workers in (("single", 1), ("mirrored", 2), ("horovod", 2), ("multi_worker", 2)):
        row = table[(backend, workers, "kscale")]
        assert row["replicas"] == workers
        assert _positive(row["samples_per_s"]["median"]) and row["samples_per_s"]["std"] >= 0
        assert _positive(row["per_replica_samples_per_s"]) and _positive(row["step_s"])
        assert _positive(row["efficiency"])
        assert f"| mlp | {backend} | {workers} |" in markdown
    split = table[("horovod", 2, "kscale")]["timeline"]
    assert _positive(split["communication_s"]) and split["communication_s"] <= split["step_s"]
    baselines = {(b["backend"], b["hand_written"]): b for b in analysis["baselines"]}
    assert set(baselines) == {
        ("single", "keras"),
        ("mirrored", "tf"),
        ("horovod", "horovod"),
        ("multi_worker", "tf"),
    }
    assert all(_positive(b["ratio"]) and len(b["pairs"]) == 1 for b in baselines.values())
    for in_turn in (b["in_turn"] for b in baselines.values()):  # trained in turn in one job
        assert _positive(in_turn["ratio"]) and len(in_turn["rounds"]) >= 2
        assert all(_positive(r) for r in in_turn["rounds"] + in_turn["rounds_quartiles"])
    assert all(
        _positive(b["first_step_s"][who]) for b in baselines.values() for who in ("kscale", "hand_written")
    )
    assert "horovodrun -np 2" in baselines[("horovod", "horovod")]["b_command"]
    assert "kscale.cli run --engine horovod -np 2" in baselines[("horovod", "horovod")]["a_command"]
    [knob] = analysis["knobs"]
    assert knob["variant"] == "fp16 compression" and _positive(knob["ratio"])
    sharding = {s["backend"]: s for s in analysis["input_sharding"]}
    assert set(sharding) == {"horovod", "multi_worker"} and all(
        _positive(s["ratio"]) for s in sharding.values()
    )
    [advice] = analysis["recommendations"]
    assert advice["scaling"]["backend"] in ("mirrored", "horovod", "multi_worker")
    assert "## Recommendation for mlp" in markdown and "## kscale against hand-written scripts" in markdown


@pytest.mark.timeout(600)
def test_bench_of_the_users_model_ends_with_a_recommendation(tmp_path, worker_env):
    model = f"{REPO}/tests/bench/user_model.py:build"
    options = ["--model", model, "--backends", "single", "mirrored", "horovod", "--batch-sizes", "16", "32"]
    run = _bench(tmp_path, worker_env, *options, "--batches", "10", "--iters", "2", "--repeats", "1")
    analysis = run["report"]["analysis"]
    assert not analysis["baselines"]  # a user's model is not rebuilt by hand-written scripts
    measured = {(r["backend"], r["batch"]) for r in analysis["rows"] if not r["variant"]}
    assert measured == {(b, s) for b in ("single", "mirrored", "horovod") for s in (16, 32)}
    [advice] = analysis["recommendations"]
    assert advice["model"] == model and advice["workers"] == 2
    assert advice["scaling"]["choice"].startswith(("scale-up", "scale-out"))
    assert _positive(advice["scaling"]["scale_up_samples_per_s"]) and _positive(
        advice["scaling"]["scale_out_samples_per_s"]
    )
    assert {int(batch) for batch in advice["batch_for_efficiency"]["measured"]} == {16, 32}
    assert _positive(advice["fp16"]["ratio"])
    assert "## Recommendation for" in run["stdout"] and "per-replica batch" in run["stdout"].lower()
