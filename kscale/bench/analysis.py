"""From the launches' measurements to the numbers a report shows: throughput with its spread, scaling
efficiency, kscale / hand-written ratios, each knob's effect, file against batch sharding, and the
recommendation for the model.
"""

from __future__ import annotations

import random
import statistics
from collections import defaultdict
from typing import Any

from kscale.bench.runner import IN_TURN, TIMELINE, summary

#: Efficiency from which scaling counts as good (the per-replica batch recommendation looks for it).
GOOD_EFFICIENCY = 0.9
#: A knob is recommended when it gains at least this much (smaller differences are within the noise).
CLEAR_GAIN = 1.05
#: Resamples behind the one-job ratio's 95% interval (seeded: the same results give the same report).
BOOTSTRAP_RESAMPLES = 2000

Key = tuple  # (model, backend, workers, batch, impl, variant)


def _key(run: dict) -> Key:
    return (run["model"], run["backend"], run["workers"], run["batch"], run["impl"], run["variant"])


def pooled(results: list[dict]) -> dict[Key, list[dict]]:
    """The launches of each setting (repeats together), with the two sides of a job that trained kscale's
    model and the hand-written one in turn standing for a setting no launch of its own measured."""
    groups: dict[Key, list[dict]] = defaultdict(list)
    for run in results:
        groups[_key(run)].append(run)
    measured = set(groups)
    for run in results:
        if run["variant"] == IN_TURN:
            for side in _sides(run):
                if _key(side) not in measured:
                    groups[_key(side)].append(side)
    return groups


def _sides(run: dict) -> tuple[dict, dict]:
    """kscale's and the hand-written script's measurements of one in-turn job, each as a launch of its own
    (the model built second has no first step of its own: it waited for the first)."""
    mine = {k: v for k, v in run.items() if k not in ("in_turn", "against")}
    theirs = {**mine, **run["in_turn"]}
    if "first_step_s" not in run["in_turn"]:
        theirs.pop("first_step_s", None)
    return {**mine, "variant": "", "in_job": True}, {**theirs, "variant": "", "in_job": True}


def _throughput(runs: list[dict]) -> list[float]:
    return [value for run in runs for value in run["samples_per_s"]]


def rows(results: list[dict]) -> list[dict]:
    """One row per setting of kscale's (and the hand-written scripts'), with efficiency against one
    worker of the same model and batch, and the timeline's split where one was recorded."""
    groups = pooled(results)
    out = []
    for key, runs in groups.items():
        model, backend, workers, batch, impl, variant = key
        if variant in (TIMELINE, IN_TURN):
            continue
        throughput = summary(_throughput(runs))
        replicas = runs[0]["replicas"]
        row = {
            "model": model,
            "backend": backend,
            "workers": workers,
            "replicas": replicas,
            "batch": batch,
            "impl": impl,
            "variant": variant,
            "launches": len(runs),
            "samples_per_s": throughput,
            "per_replica_samples_per_s": throughput["median"] / replicas,
            "step_s": statistics.median(s for run in runs for s in run["iteration_s"])
            / runs[0]["batches_per_iter"],
            "command": runs[0]["command"],
        }
        reference = (model, "single", 1, batch, impl if impl == "kscale" else "keras", "")
        one = None if variant else groups.get(reference)
        if one:
            row["efficiency"] = throughput["median"] / (replicas * summary(_throughput(one))["median"])
        timeline = groups.get((model, backend, workers, batch, impl, TIMELINE))
        if timeline and "communication_s_per_step" in timeline[0]:
            communication = timeline[0]["communication_s_per_step"]
            step = statistics.median(s for s in timeline[0]["iteration_s"]) / timeline[0]["batches_per_iter"]
            row["timeline"] = {
                "step_s": step,
                "communication_s": communication,
                "compute_and_other_s": max(step - communication, 0.0),
            }
        out.append(row)
    return out


def _ratio(groups: dict[Key, list[dict]], a: Key, b: Key) -> dict[str, Any] | None:
    """median(a) / median(b), with the ratio of each repeat's pair for the spread."""
    if a not in groups or b not in groups:
        return None
    ratio = statistics.median(_throughput(groups[a])) / statistics.median(_throughput(groups[b]))
    pairs = [
        statistics.median(x["samples_per_s"]) / statistics.median(y["samples_per_s"])
        for x, y in zip(groups[a], groups[b], strict=False)
    ]
    return {
        "ratio": ratio,
        "pairs": pairs,
        "a_samples_per_s": statistics.median(_throughput(groups[a])),
        "b_samples_per_s": statistics.median(_throughput(groups[b])),
        "a_command": groups[a][0]["command"],
        "b_command": groups[b][0]["command"],
    }


def _first_step(runs: list[dict]) -> float | None:
    """Seconds to the end of the first training step (median), where the runs measured it."""
    seconds = [run["first_step_s"] for run in runs if "first_step_s" in run]
    return statistics.median(seconds) if seconds else None


def _in_turn_ratio(runs: list[dict]) -> dict[str, Any]:
    """kscale against the hand-written script trained in turn in the same jobs (see one_job_ratio), with
    each launch's ratio, each round's, and, for comparison, the ratio of the two sides' medians."""
    mine, theirs = _throughput(runs), _throughput([run["in_turn"] for run in runs])
    launches = [
        [a / b for a, b in zip(run["samples_per_s"], run["in_turn"]["samples_per_s"])] for run in runs
    ]
    rounds = [ratio for launch in launches for ratio in launch]
    quartiles = statistics.quantiles(rounds, n=4, method="inclusive") if len(rounds) > 1 else [rounds[0]] * 3
    return {
        "ratio": one_job_ratio(launches),
        "interval_95": bootstrap_interval(launches),
        "launch_ratios": [statistics.median(launch) for launch in launches],
        "kscale_built_first": [not run.get("against_first", False) for run in runs],
        "ratio_of_medians": statistics.median(mine) / statistics.median(theirs),
        "rounds": rounds,
        "rounds_quartiles": [quartiles[0], quartiles[2]],
        "a_samples_per_s": statistics.median(mine),
        "b_samples_per_s": statistics.median(theirs),
        "command": runs[0]["command"],
    }


def one_job_ratio(launches: list[list[float]]) -> float:
    """kscale / hand-written from launches that trained both in turn: each round's ratio compares two epochs
    seconds apart (a slow or fast minute of the machine falls on both), a launch's ratio is the median of
    its rounds', and the result the geometric mean of the launches' (they alternate which model is built
    first, which moves a launch's ratio a few percent either way: the mean cancels it)."""
    return statistics.geometric_mean(statistics.median(rounds) for rounds in launches)


def bootstrap_interval(launches: list[list[float]], resamples: int = BOOTSTRAP_RESAMPLES) -> list[float]:
    """A 95% percentile-bootstrap interval of one_job_ratio: each launch's rounds resampled (each round
    keeps its pairing; each launch its build order). How far the ratio can move by chance on this machine:
    a ratio under 0.98 whose interval reaches above it is not evidence of a cost."""
    draw = random.Random(0)
    ratios = sorted(
        one_job_ratio([draw.choices(rounds, k=len(rounds)) for rounds in launches]) for _ in range(resamples)
    )
    return [ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1]]


def baselines(results: list[dict]) -> list[dict]:
    """kscale's one line against the hand-written script, per model, backend and workers."""
    groups = pooled(results)
    out = []
    for model, backend, workers, batch, impl, variant in groups:
        if impl == "kscale" or variant:
            continue
        mine, theirs = (
            (model, backend, workers, batch, "kscale", ""),
            (model, backend, workers, batch, impl, ""),
        )
        found = _ratio(groups, mine, theirs)
        if found:
            first = [_first_step(groups[k]) for k in (mine, theirs)]
            found["first_step_s"] = {
                "kscale": first[0],
                "hand_written": first[1],
                "added": None if None in first else first[0] - first[1],
            }
            # A side measured only in a job with the other (--quick): no separate launches to compare.
            found["separate_launches"] = all(
                any(not run.get("in_job") for run in groups[k]) for k in (mine, theirs)
            )
            if not found["separate_launches"]:
                found["pairs"] = []
            in_turn = groups.get((model, backend, workers, batch, "kscale", IN_TURN))
            if in_turn:
                found["in_turn"] = _in_turn_ratio(in_turn)
            out.append(
                {
                    "model": model,
                    "backend": backend,
                    "workers": workers,
                    "batch": batch,
                    "hand_written": impl,
                    **found,
                }
            )
    return out


def variants(results: list[dict], kind: str) -> list[dict]:
    """Knobs against the defaults (kind "knob"), or file against batch sharding (kind "input")."""
    groups = pooled(results)
    out = []
    for model, backend, workers, batch, impl, variant in groups:
        records = groups[(model, backend, workers, batch, impl, variant)][0].get("records")
        if (
            not variant
            or variant in (TIMELINE, IN_TURN)
            or impl != "kscale"
            or (kind == "input") != bool(records)
        ):
            continue
        if kind == "input" and variant != "files":
            continue
        other = (model, backend, workers, batch, impl, "batches" if kind == "input" else "")
        found = _ratio(groups, (model, backend, workers, batch, impl, variant), other)
        if found:
            out.append(
                {
                    "model": model,
                    "backend": backend,
                    "workers": workers,
                    "batch": batch,
                    "variant": variant,
                    **found,
                }
            )
    return out


def recommend(table: list[dict], knobs: list[dict], model: str) -> dict[str, Any] | None:
    """Scale-up or scale-out on this machine, fp16 or not, and the per-replica batch from which scaling
    efficiency passes 90% (or the best reached), each with the numbers behind it."""
    mine = [r for r in table if r["model"] == model and r["impl"] == "kscale" and not r["variant"]]
    most = max((r["workers"] for r in mine), default=1)
    if most < 2:
        return None
    batch = min(r["batch"] for r in mine)
    at_most = [r for r in mine if r["workers"] == most and r["batch"] == batch]
    up = [r for r in at_most if r["backend"] == "mirrored"]
    out_ = sorted(
        (r for r in at_most if r["backend"] in ("horovod", "multi_worker")), key=_median, reverse=True
    )
    best = max(at_most, key=_median)
    advice: dict[str, Any] = {"model": model, "workers": most, "batch": batch}
    scale = {"backend": best["backend"], "samples_per_s": _median(best)}
    if up:
        scale["scale_up_samples_per_s"] = _median(up[0])
    if out_:
        scale["scale_out"] = out_[0]["backend"]
        scale["scale_out_samples_per_s"] = _median(out_[0])
    scale["choice"] = (
        "scale-up (mirrored)" if best["backend"] == "mirrored" else f"scale-out ({best['backend']})"
    )
    advice["scaling"] = scale
    fp16 = [k for k in knobs if k["model"] == model and k["variant"] == "fp16 compression"]
    if fp16:
        gain = fp16[0]["ratio"]
        advice["fp16"] = {
            "use": gain >= CLEAR_GAIN,
            "ratio": gain,
            "samples_per_s": fp16[0]["a_samples_per_s"],
        }
    sweep = sorted(
        (r for r in mine if r["workers"] == most and r["backend"] == best["backend"] and "efficiency" in r),
        key=lambda r: r["batch"],
    )
    if sweep:
        good = [r for r in sweep if r["efficiency"] >= GOOD_EFFICIENCY]
        pick = good[0] if good else max(sweep, key=lambda r: r["efficiency"])
        advice["batch_for_efficiency"] = {
            "batch": pick["batch"],
            "efficiency": pick["efficiency"],
            "reached": bool(good),
            "measured": {r["batch"]: r["efficiency"] for r in sweep},
        }
    return advice


def _median(row: dict) -> float:
    return row["samples_per_s"]["median"]


def analyse(results: list[dict]) -> dict[str, Any]:
    table = rows(results)
    knobs = variants(results, "knob")
    models = list(dict.fromkeys(r["model"] for r in table))
    return {
        "rows": table,
        "baselines": baselines(results),
        "knobs": knobs,
        "input_sharding": variants(results, "input"),
        "recommendations": [r for m in models if (r := recommend(table, knobs, m))],
    }
