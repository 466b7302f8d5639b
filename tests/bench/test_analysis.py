"""The numbers a `kscale bench` report shows, from measurements made up here (no launches)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kscale.bench import analysis, report, runner, suite
from kscale.bench.runner import Setting


def _run(setting: Setting, samples_per_s: list[float], replicas: int | None = None, **extra) -> dict:
    batches = setting.batches
    return {
        **setting.__dict__,
        "replicas": replicas or setting.workers,
        "batches_per_iter": batches,
        "samples_per_s": samples_per_s,
        "iteration_s": [setting.batch * (replicas or setting.workers) * batches / s for s in samples_per_s],
        "command": f"launch {setting.describe()}",
        "first_step_s": 2.5 if setting.impl == "kscale" else 2.0,
        **extra,
    }


def _results() -> list[dict]:
    one = Setting("mlp", "single", 1, 32, batches=10)
    hvd = Setting("mlp", "horovod", 2, 32, batches=10)
    mirrored = Setting("mlp", "mirrored", 2, 32, batches=10)
    fp16 = Setting("mlp", "horovod", 2, 32, 10, "kscale", ("--compression", "fp16"), (), "fp16 compression")
    return [
        _run(one, [1000, 1010, 990]),
        _run(Setting("mlp", "single", 1, 32, 10, impl="keras"), [1000, 1000]),
        _run(hvd, [1800, 1800]),
        _run(Setting("mlp", "horovod", 2, 32, 10, impl="horovod"), [2000, 2000]),
        _run(
            Setting("mlp", "horovod", 2, 32, 10, variant="timeline", timeline=True),
            [1500],
            communication_s_per_step=0.004,
        ),
        _run(mirrored, [1200, 1200]),
        _run(fp16, [1980, 1980]),
        # kscale's model and the hand-written one trained in turn in one job: rounds 0.95 and 0.90
        _run(
            Setting("mlp", "horovod", 2, 32, 10, variant=runner.IN_TURN, against="horovod"),
            [1900, 1800],
            in_turn={"impl": "horovod", "samples_per_s": [2000, 2000], "iteration_s": [0.32, 0.32]},
        ),
    ]


def test_efficiency_ratios_knobs_and_recommendation():
    found = analysis.analyse(_results())
    rows = {(r["backend"], r["impl"], r["variant"]): r for r in found["rows"]}
    assert ("horovod", "kscale", "timeline") not in rows and ("horovod", "kscale", "in turn") not in rows
    horovod = rows[("horovod", "kscale", "")]
    assert horovod["efficiency"] == pytest.approx(1800 / (2 * 1000))
    assert horovod["per_replica_samples_per_s"] == pytest.approx(900)
    assert horovod["step_s"] == pytest.approx(32 * 2 * 10 / 1800 / 10)
    assert horovod["timeline"]["communication_s"] == pytest.approx(0.004)
    assert horovod["timeline"]["step_s"] == pytest.approx(32 * 2 * 10 / 1500 / 10)
    assert "efficiency" not in rows[("horovod", "kscale", "fp16 compression")]
    ratios = {b["backend"]: b["ratio"] for b in found["baselines"]}
    assert all(b["first_step_s"]["added"] == pytest.approx(0.5) for b in found["baselines"])
    assert ratios == {"single": pytest.approx(1.0), "horovod": pytest.approx(0.9)}
    in_turn = {b["backend"]: b.get("in_turn") for b in found["baselines"]}
    assert in_turn["single"] is None
    assert in_turn["horovod"]["ratio"] == pytest.approx(1850 / 2000)
    assert in_turn["horovod"]["rounds"] == pytest.approx([0.95, 0.9])
    assert in_turn["horovod"]["launch_ratios"] == pytest.approx([0.925])
    assert in_turn["horovod"]["kscale_built_first"] == [True]
    low, high = in_turn["horovod"]["interval_95"]
    assert 0.9 <= low <= 1850 / 2000 <= high <= 0.95
    [knob] = found["knobs"]
    assert knob["variant"] == "fp16 compression" and knob["ratio"] == pytest.approx(1.1)
    [advice] = found["recommendations"]
    assert advice["scaling"]["backend"] == "horovod" and advice["scaling"]["choice"] == "scale-out (horovod)"
    assert advice["scaling"]["scale_up_samples_per_s"] == pytest.approx(1200)
    assert advice["fp16"]["use"] is True
    assert advice["batch_for_efficiency"] == {
        "batch": 32,
        "efficiency": pytest.approx(0.9),
        "reached": True,
        "measured": {32: pytest.approx(0.9)},
    }


def test_a_job_trained_in_turn_stands_for_both_settings_no_launch_of_its_own_measured():
    """kscale bench --quick: each backend's kscale and hand-written numbers come from one job."""
    one = Setting("mlp", "single", 1, 32, 10, variant=runner.IN_TURN, against="keras")
    two = Setting("mlp", "horovod", 2, 32, 10, variant=runner.IN_TURN, against="horovod")
    results = [
        _run(
            one, [1000, 1000], in_turn={"impl": "keras", "samples_per_s": [1100, 1100], "iteration_s": [0.3]}
        ),
        _run(
            two,
            [1800, 1900],
            in_turn={"impl": "horovod", "samples_per_s": [2000, 2000], "iteration_s": [0.3]},
        ),
    ]
    found = analysis.analyse(results)
    rows = {(r["backend"], r["impl"]): r for r in found["rows"] if not r["variant"]}
    assert set(rows) == {
        ("single", "kscale"),
        ("single", "keras"),
        ("horovod", "kscale"),
        ("horovod", "horovod"),
    }
    assert rows[("horovod", "kscale")]["efficiency"] == pytest.approx(1850 / (2 * 1000))
    assert rows[("horovod", "horovod")]["samples_per_s"]["median"] == 2000
    baseline = {b["backend"]: b for b in found["baselines"]}["horovod"]
    assert not baseline["separate_launches"] and baseline["pairs"] == []
    assert baseline["in_turn"]["ratio"] == pytest.approx(0.925)  # the median of its rounds, 0.90 and 0.95
    assert baseline["first_step_s"] == {"kscale": 2.5, "hand_written": None, "added": None}
    text = report.markdown(
        {"analysis": found, "machine": _machine(), "results": results, "command": "kscale bench"}
    )
    assert "| mlp | horovod | 2 | horovod |" in text and "| - | - |" in text  # no separate launches
    # a launch of kscale's alone (the defaults a knob is measured against): the hand-written side is still
    # only in the job, so there is no separate-launch ratio
    knob = analysis.analyse([*results, _run(Setting("mlp", "horovod", 2, 32, 10), [1700])])
    assert not {b["backend"]: b for b in knob["baselines"]}["horovod"]["separate_launches"]


def test_batch_recommendation_is_the_smallest_batch_past_ninety_percent_or_the_best():
    results = []
    for batch, single, two in ((16, 1000, 1200), (32, 1500, 2400), (64, 2000, 3700)):
        results += [
            _run(Setting("m", "single", 1, batch), [single]),
            _run(Setting("m", "horovod", 2, batch), [two]),
        ]
    advice = analysis.analyse(results)["recommendations"][0]["batch_for_efficiency"]
    assert advice["batch"] == 64 and advice["reached"] is True  # 3700 / 4000 = 92.5%
    slow = [r for r in results if r["batch"] != 64]
    advice = analysis.analyse(slow)["recommendations"][0]["batch_for_efficiency"]
    assert advice == {
        "batch": 32,
        "efficiency": pytest.approx(0.8),
        "reached": False,
        "measured": {16: pytest.approx(0.6), 32: pytest.approx(0.8)},
    }


def _machine() -> dict:
    facts = {"cores": 2, "cpu": "cpu", "memory_gib": 8, "gpus": [], "python": "3.11", "tensorflow": "2.15.1"}
    return {**facts, "keras": "2.15", "horovod": "0.28.1", "kscale": "0.1", "date": "today"}


def test_report_files(tmp_path):
    results = _results()
    full = {
        "machine": _machine(),
        "command": "kscale bench",
        "results": results,
        "analysis": analysis.analyse(results),
    }
    paths = report.write(full, str(tmp_path))
    markdown = (tmp_path / "results.md").read_text()
    assert "| mlp | horovod | 2 | 32 | 1,800 ± 0 | 900 | 90% |" in markdown
    assert (
        "| 0.900 | 0.900 | **0.925** | 0.900-0.950 | 0.925 (kscale) |" in markdown
        and "| single | 1 | keras |" in markdown
    )
    assert "fp16 compression" in markdown and "scale-out (horovod)" in markdown
    assert json.loads((tmp_path / "results.json").read_text())["analysis"]["baselines"]
    assert Path(paths["scaling.png"]).read_bytes()[:4] == b"\x89PNG"


def test_the_plan_alternates_compared_settings_and_counts_its_launches(tmp_path):
    plan = suite.Plan(
        models=("mlp",), workers=(1, 2), backends=("single", "horovod"), repeats=3, knobs=("autotune",)
    )
    groups = list(suite.settings(plan))
    assert [len(g) for g in groups] == [2, 1, 2, 1, 1, 2]
    assert [s.impl for s in groups[2]] == ["kscale", "horovod"]
    assert [(s.impl, s.against) for s in groups[1] + groups[3]] == [
        ("kscale", "keras"),
        ("kscale", "horovod"),
    ]
    assert groups[4][0].timeline and groups[5][1].launcher_options == ("--autotune",)
    assert suite.count(plan) == 2 * 3 + 3 + 2 * 3 + 3 + 1 + 2 * 3
    (tmp_path / "model.py").write_text("def build():\n    pass\n")
    user = suite.Plan(
        models=(f"{tmp_path}/model.py:build",), workers=(1, 2), backends=("single",), batch_sizes=(8, 16)
    )
    assert [g[0].batch for g in suite.settings(user)] == [8, 16]
    assert all(len(g) == 1 for g in suite.settings(user))  # no hand-written baseline of a user's model


def test_launch_commands_use_the_real_launchers():
    sizes = runner.Sizes()
    horovod = runner.command(Setting("mlp", "horovod", 2, 32, impl="horovod"), sizes, "r.json")
    assert horovod[0].endswith("horovodrun") and horovod[1:6] == ["-np", "2", "-H", "localhost:2", "--gloo"]
    mine = runner.command(
        Setting("mlp", "multi_worker", 4, 32, launcher_options=("--autotune",)), sizes, "r.json"
    )
    assert mine[1:9] == ["-m", "kscale.cli", "run", "--autotune", "--engine", "tf", "-np", "4"]
    in_turn = runner.command(Setting("mlp", "horovod", 2, 32, against="horovod"), sizes, "r.json")
    assert in_turn[3:5] == ["run", "--engine"] and in_turn[-2:] == ["--against", "horovod"]
    assert in_turn[in_turn.index("--iters") + 1] == str(sizes.rounds) != str(sizes.iters)  # rounds in one job
    # Every other launch builds the hand-written model first; not under multi_worker (shared strategy).
    second = runner.command(Setting("mlp", "horovod", 2, 32, against="horovod"), sizes, "r.json", repeat=1)
    assert second[-1] == "--against-first" and "--against-first" not in in_turn
    shared = runner.command(Setting("mlp", "multi_worker", 2, 32, against="tf"), sizes, "r.json", repeat=1)
    assert "--against-first" not in shared
    mirrored = runner.command(Setting("mlp", "mirrored", 2, 32), sizes, "r.json")
    assert mirrored[1] == runner.WORKER and mirrored[-2:] == ["--replicas", "2"]


def test_one_job_ratio_pairs_rounds_and_cancels_the_build_order():
    # kscale 1% slower than the hand-written script in every round; the model built second 4% faster; the
    # machine fast (1000 samples/s) or slow (700) for minutes, alike for both epochs of a round.
    in_turn = Setting("mlp", "horovod", 2, 32, 10, variant=runner.IN_TURN, against="horovod")

    def launch(speeds: list[float], kscale_first: bool) -> dict:
        second = 1.04  # the model built second
        mine = [0.99 * s * (1 if kscale_first else second) for s in speeds]
        theirs = [s * (second if kscale_first else 1) for s in speeds]
        seconds = [32 * 2 * 10 / s for s in theirs]
        return _run(
            in_turn,
            mine,
            in_turn={"impl": "horovod", "samples_per_s": theirs, "iteration_s": seconds},
            against_first=not kscale_first,
        )

    results = [
        _run(Setting("mlp", "horovod", 2, 32, 10), [1000]),
        _run(Setting("mlp", "horovod", 2, 32, 10, impl="horovod"), [1000]),
        launch([700.0] * 10 + [1000.0] * 5, kscale_first=True),
        launch([1000.0] * 10 + [700.0] * 5, kscale_first=False),
    ]
    [found] = analysis.analyse(results)["baselines"]
    assert found["in_turn"]["ratio"] == pytest.approx(0.99)
    assert found["in_turn"]["launch_ratios"] == pytest.approx([0.99 / 1.04, 0.99 * 1.04])
    assert found["in_turn"]["kscale_built_first"] == [True, False]
    assert analysis.one_job_ratio([[0.95, 0.99, 1.2]]) == pytest.approx(0.99)  # a launch: its rounds' median


def test_bootstrap_interval_resamples_each_launch_and_narrows_with_more_rounds():
    launches = [[0.99] * 20, [0.97, 1.01] * 10]
    low, high = analysis.bootstrap_interval(launches)
    assert low <= analysis.one_job_ratio(launches) <= high
    assert analysis.bootstrap_interval([[0.99] * 20]) == pytest.approx([0.99, 0.99])
    noisy = [[0.99 * (1.05 if i % 3 else 0.93) for i in range(20)]]
    few, many = analysis.bootstrap_interval([noisy[0][:6]]), analysis.bootstrap_interval([noisy[0] * 5])
    assert few[0] <= many[0] <= many[1] <= few[1] and few[1] - few[0] > 0
    assert analysis.bootstrap_interval(noisy) == analysis.bootstrap_interval(noisy)  # seeded


def test_reanalyse_writes_the_report_of_an_earlier_run_again(tmp_path, capsys):
    from kscale.cli import bench

    earlier = {"machine": _machine(), "command": "kscale bench", "results": _results(), "analysis": {}}
    (tmp_path / "results.json").write_text(json.dumps(earlier))
    out = tmp_path / "again"
    assert bench.main(["--reanalyse", str(tmp_path / "results.json"), "--output", str(out)]) == 0
    again = json.loads((out / "results.json").read_text())
    assert (
        again["results"] == json.loads(json.dumps(earlier["results"])) and again["command"] == "kscale bench"
    )
    [horovod] = [b for b in again["analysis"]["baselines"] if b["backend"] == "horovod"]
    assert horovod["in_turn"]["interval_95"] == pytest.approx([0.9, 0.95])
    assert "| **0.925** | 0.900-0.950 |" in (out / "results.md").read_text()
    assert (out / "scaling.png").read_bytes()[:4] == b"\x89PNG"

    (tmp_path / "other.json").write_text(json.dumps({"runs": []}))
    assert bench.main(["--reanalyse", str(tmp_path / "other.json"), "--output", str(out)]) == 1
    assert "not a results.json written by kscale bench (KeyError" in capsys.readouterr().err
