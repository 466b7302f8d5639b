"""`kscale bench --quick` on this lane's stack: every backend the stack runs but multi_worker (lane C-tf's
tests/keras3/test_bench_keras3.py), launched for real, trained in turn with its hand-written script in one
job; the report's files, structure, and every number positive and finite."""

from __future__ import annotations

import json
import math

import pytest

from kscale.bench.runner import HAND_WRITTEN, backends_here

from .conftest import BIN, HAS_HOROVOD, KERAS

pytestmark = pytest.mark.multiprocess


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


@pytest.mark.timeout(600)
def test_quick_bench_writes_the_report_of_every_backend_and_baseline(tmp_path, launch):
    out = tmp_path / "bench"
    here = backends_here()
    assert here[0] == "single" and (KERAS.backend == "tensorflow") == ("multi_worker" in here)
    # Not multi_worker: lane C-tf benches it against TensorFlow's custom loop, profiled and on files
    # (tests/keras3/test_bench_keras3.py), four launches of CI time less here.
    backends = [backend for backend in here if backend != "multi_worker"]
    done = launch([BIN / "kscale", "bench", "--quick", "--backends", *backends, "--output", out], timeout=540)
    assert done.returncode == 0, done.stdout[-5000:]
    for name in ("results.json", "results.md", "scaling.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "[1/" in done.stdout  # progress while it runs
    report, markdown = json.loads((out / "results.json").read_text()), (out / "results.md").read_text()
    assert report["machine"]["cores"] >= 1 and report["machine"]["keras"]
    assert (KERAS.backend == "jax") == ("jax" in backends)
    analysis = report["analysis"]
    table = {(r["backend"], r["workers"], r["impl"]): r for r in analysis["rows"] if not r["variant"]}
    for backend in backends:
        workers = 1 if backend == "single" else 2
        row = table[(backend, workers, "kscale")]
        assert row["replicas"] == workers
        assert _positive(row["samples_per_s"]["median"]) and row["samples_per_s"]["std"] >= 0
        assert _positive(row["per_replica_samples_per_s"]) and _positive(row["step_s"])
        assert _positive(row["efficiency"])
        assert f"| mlp | {backend} | {workers} |" in markdown
    baselines = {(b["backend"], b["hand_written"]): b for b in analysis["baselines"]}
    assert set(baselines) == {(backend, HAND_WRITTEN[backend]) for backend in backends}
    # --quick: each backend's kscale and hand-written numbers from one job that trained both in turn
    assert all(not b["separate_launches"] and b["pairs"] == [] for b in baselines.values())
    assert all(_positive(b["ratio"]) and _positive(b["b_samples_per_s"]) for b in baselines.values())
    for in_turn in (b["in_turn"] for b in baselines.values()):
        assert _positive(in_turn["ratio"]) and len(in_turn["rounds"]) >= 2
        assert all(_positive(r) for r in in_turn["rounds"] + in_turn["rounds_quartiles"])
    assert all(_positive(b["first_step_s"]["kscale"]) for b in baselines.values())  # built first
    for backend in backends:  # the hand-written script's own row, beside kscale's
        assert _positive(table[(backend, 1 if backend == "single" else 2, HAND_WRITTEN[backend])]["step_s"])
    assert "## kscale against hand-written scripts" in markdown
    if len(backends) > 1:
        [advice] = analysis["recommendations"]
        assert advice["scaling"]["backend"] in backends[1:]
        assert "## Recommendation for mlp" in markdown
        if HAS_HOROVOD:  # the advice's Horovod side (tests/bench/test_bench_command.py: single, mirrored)
            scale = advice["scaling"]
            assert _positive(scale["scale_up_samples_per_s"]) and _positive(scale["scale_out_samples_per_s"])
            assert _positive(advice["fp16"]["ratio"])
    if HAS_HOROVOD:  # Horovod's timeline, its knobs, its launcher; file against batch sharding
        assert report["machine"]["horovod"]
        split = table[("horovod", 2, "kscale")]["timeline"]
        assert _positive(split["communication_s"]) and split["communication_s"] <= split["step_s"]
        assert "kscale.cli run --engine horovod -np 2" in baselines[("horovod", "horovod")]["a_command"]
        [knob] = analysis["knobs"]
        assert knob["variant"] == "fp16 compression" and _positive(knob["ratio"])
        sharding = {s["backend"]: s for s in analysis["input_sharding"]}
        assert set(sharding) == {"horovod"}  # and multi_worker's where it is benched (not here)
        assert all(_positive(s["ratio"]) for s in sharding.values())
