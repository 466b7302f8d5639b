"""What `kscale bench` writes: results.json (everything), results.md (the tables) and scaling.png
(throughput and efficiency against workers, one line per backend), with the machine they ran on."""

from __future__ import annotations

import json
import os
import platform
import time
from typing import Any

from kscale import __version__, _optional
from kscale.bench.analysis import GOOD_EFFICIENCY

MATPLOTLIB_INSTALL = "pip install matplotlib (or pip install 'kscale[bench]')"


def machine() -> dict[str, Any]:
    """What results are comparable by: cores, CPU, memory, GPUs, versions."""
    from kscale.bench.runner import cores
    from kscale.launch.facts import probe_build

    build = probe_build(gpus=True)
    return {
        "host": platform.node(),
        "cpu": _cpu_model(),
        "cores": cores(),
        "memory_gib": _memory_gib(),
        "gpus": list(build.gpus or ()),
        "python": platform.python_version(),
        "tensorflow": build.tensorflow_version,
        "keras": build.keras_version,
        "horovod": build.horovod_version,
        "horovod_built": {k: getattr(build, k) for k in ("gloo", "mpi", "nccl", "cuda")},
        "kscale": __version__,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def describe_machine(facts: dict[str, Any]) -> str:
    gpus = f"{len(facts['gpus'])} GPU(s)" if facts["gpus"] else "no GPU"
    return (
        f"{facts['cores']} CPU cores ({facts['cpu']}), {facts['memory_gib']} GiB, {gpus}; Python {facts['python']}, "
        f"TensorFlow {facts['tensorflow']}, Keras {facts['keras']}, Horovod {facts['horovod']}, kscale {facts['kscale']}"
    )


def _n(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _launches(in_turn: dict) -> str:
    """Each one-job launch's ratio and which model it built first."""
    return ", ".join(
        f"{ratio:.3f} ({'kscale' if kscale_first else 'hand-written'})"
        for ratio, kscale_first in zip(in_turn["launch_ratios"], in_turn["kscale_built_first"])
    )


def _span(bounds: list[float]) -> str:
    return f"{bounds[0]:.3f}-{bounds[1]:.3f}"


def markdown(report: dict[str, Any]) -> str:
    facts, analysis = report["machine"], report["analysis"]
    lines = [
        "# kscale bench",
        "",
        f"Machine: {describe_machine(facts)}. Measured {facts['date']}.",
        "",
        f"Command: `{report['command']}`",
        "",
        "Throughput is samples/s of all replicas together (median over timed iterations, ± standard deviation); "
        "efficiency = throughput / (replicas × one worker's throughput at the same per-replica batch).",
        "",
        "## Scaling",
        "",
        "| model | backend | workers | batch/replica | samples/s | per replica | efficiency | step | communication |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in analysis["rows"]:
        if r["impl"] != "kscale" or r["variant"]:
            continue
        s = r["samples_per_s"]
        efficiency = f"{r['efficiency']:.0%}" if "efficiency" in r else "-"
        split = r.get("timeline")
        communication = f"{split['communication_s'] * 1e3:.1f} ms" if split else "-"
        lines.append(
            f"| {r['model']} | {r['backend']} | {r['workers']} | {r['batch']} | {_n(s['median'])} ± {_n(s['std'])} | "
            f"{_n(r['per_replica_samples_per_s'])} | {efficiency} | {r['step_s'] * 1e3:.1f} ms | {communication} |"
        )
    lines += [
        "",
        "communication: time per step during which an allreduce was in flight, from a separate run with "
        "Horovod's timeline (horovod) or TensorFlow's profiler (multi_worker: collectives, launch to "
        "completion, on the chief); the rest of the step is computation and framework overhead. Mirrored "
        "replicas on CPUs sum gradients with ordinary ops (no collectives): not split.",
    ]
    if analysis["baselines"]:
        lines += [
            "",
            "## kscale against hand-written scripts",
            "",
            "Same model, data and launcher; ratio = kscale / hand-written (1.00 = same speed). Separate "
            "launches: the two scripts launched alternately (each pair: one launch of each; none with "
            "--quick). One job: both "
            "models built in the same launch and trained in turn, one epoch each, each going first every other "
            "round, so what differs between launches (where processes and memory land on a shared machine) "
            "is out of the ratio: each launch's ratio is the median of its rounds' (kscale's epoch / the "
            "hand-written one next to it), launches alternate which model is built first (under multi_worker "
            "kscale's always), and the one-job ratio is the geometric mean of the launches'; 95% interval: "
            "of the one-job ratio, by resampling each launch's rounds (bootstrap). First step: seconds from the "
            "process's start to the end of the first training step (imports, joining the job, building the "
            "model, tracing), kscale's and the hand-written script's.",
            "",
            "| model | backend | workers | hand-written | kscale samples/s | hand-written samples/s | ratio, separate "
            "launches | each pair | ratio, one job | 95% interval | each launch (model built first) | first "
            "step: kscale / hand-written |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for b in analysis["baselines"]:
            separate = b.get("separate_launches", True)  # --quick: measured in one job only
            pairs = ", ".join(f"{p:.3f}" for p in b["pairs"]) if separate else "-"
            ratio = f"{b['ratio']:.3f}" if separate else "-"
            first = b["first_step_s"]
            in_turn = b.get("in_turn")
            one_job = (
                f"**{in_turn['ratio']:.3f}** | {_span(in_turn['interval_95'])} | {_launches(in_turn)}"
                if in_turn
                else "- | - | -"
            )
            lines.append(
                f"| {b['model']} | {b['backend']} | {b['workers']} | {b['hand_written']} | {_n(b['a_samples_per_s'])} | "
                f"{_n(b['b_samples_per_s'])} | {ratio} | {pairs} | {one_job} | "
                f"{_seconds(first['kscale'])} / {_seconds(first['hand_written'])} |"
            )
    for title, key, note in (
        (
            "Horovod knobs",
            "knobs",
            "ratio = with the knob / the defaults, same run (Horovod's knobs; kscale's agreement check off; "
            "a BackupAndRestore backup every 10 steps: what checkpoints cost).",
        ),
        (
            "Input sharding: by file against by batch",
            "input_sharding",
            "A TFRecord data set; ratio = each worker reading its own files / every worker reading all and "
            "keeping 1/N of the batches.",
        ),
    ):
        if analysis[key]:
            lines += ["", f"## {title}", "", note, ""]
            lines += ["| model | backend | workers | variant | samples/s | reference samples/s | ratio |"]
            lines += ["|---|---|---|---|---|---|---|"]
            for k in analysis[key]:
                lines.append(
                    f"| {k['model']} | {k['backend']} | {k['workers']} | {k['variant']} | {_n(k['a_samples_per_s'])} | "
                    f"{_n(k['b_samples_per_s'])} | {k['ratio']:.3f} |"
                )
    for advice in analysis["recommendations"]:
        lines += ["", f"## Recommendation for {advice['model']}", "", *recommendation_lines(advice)]
    lines += ["", "![scaling](scaling.png)", ""]
    return "\n".join(lines)


def recommendation_lines(advice: dict[str, Any]) -> list[str]:
    scale, n = advice["scaling"], advice["workers"]
    lines = [
        f"- On this machine with {n} workers: **{scale['choice']}**, {_n(scale['samples_per_s'])} samples/s"
    ]
    if "scale_up_samples_per_s" in scale and "scale_out_samples_per_s" in scale:
        lines[-1] += (
            f" (mirrored {_n(scale['scale_up_samples_per_s'])} against {scale['scale_out']} "
            f"{_n(scale['scale_out_samples_per_s'])}, batch {advice['batch']} per replica)."
        )
    if "fp16" in advice:
        fp16 = advice["fp16"]
        verdict = "use it" if fp16["use"] else "leave it off"
        lines.append(
            f"- fp16 gradient compression: {verdict} ({fp16['ratio']:.2f}× the throughput without it; "
            f"a gain under {(1.05 - 1):.0%} is within the noise)."
        )
    if "batch_for_efficiency" in advice:
        pick = advice["batch_for_efficiency"]
        measured = ", ".join(f"{b}: {e:.0%}" for b, e in pick["measured"].items())
        if pick["reached"]:
            lines.append(
                f"- Per-replica batch {pick['batch']} is the smallest where scaling efficiency passes "
                f"{GOOD_EFFICIENCY:.0%} ({pick['efficiency']:.0%}; measured {measured})."
            )
        else:
            lines.append(
                f"- Scaling efficiency did not reach {GOOD_EFFICIENCY:.0%} at any per-replica batch measured; "
                f"the best was {pick['efficiency']:.0%} at {pick['batch']} ({measured})."
            )
    return lines


#: A point of a scaling line: (workers, samples/s, its standard deviation, scaling efficiency).
Point = tuple[int, float, float, float]


def lines_of(report: dict[str, Any]) -> dict[str, dict[str, list[Point]]]:
    """kscale's measurements as lines: {model (batch): {backend: points}}, each line starting at the
    one-worker point, at the model's smallest batch."""
    table = [r for r in report["analysis"]["rows"] if r["impl"] == "kscale" and not r["variant"]]
    panels: dict[str, dict[str, list[Point]]] = {}
    for model in dict.fromkeys(r["model"] for r in table):
        mine = [r for r in table if r["model"] == model]
        batch = min(r["batch"] for r in mine)
        mine = [r for r in mine if r["batch"] == batch]
        single = [r for r in mine if r["backend"] == "single"]
        lines = panels.setdefault(f"{model} (batch {batch}/replica)", {})
        for backend in dict.fromkeys(r["backend"] for r in mine if r["backend"] != "single"):
            line = sorted(single + [r for r in mine if r["backend"] == backend], key=lambda r: r["workers"])
            lines[backend] = [
                (
                    r["workers"],
                    r["samples_per_s"]["median"],
                    r["samples_per_s"]["std"],
                    r.get("efficiency", 1.0),
                )
                for r in line
            ]
    return panels


def plot(panels: dict[str, dict[str, list[Point]]], path: str, title: str) -> None:
    """Throughput (top) and efficiency (bottom) against workers, a column per panel, a line per backend."""
    matplotlib = _optional.require("matplotlib", MATPLOTLIB_INSTALL, "kscale bench's plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(panels), figsize=(4.2 * len(panels), 6.5), squeeze=False)
    for column, (name, lines) in enumerate(panels.items()):
        ticks: set[int] = set()
        for label, points in lines.items():
            workers = [p[0] for p in points]
            ticks.update(workers)
            axes[0][column].errorbar(
                workers,
                [p[1] for p in points],
                yerr=[p[2] for p in points],
                marker="o",
                capsize=3,
                label=label,
            )
            axes[1][column].plot(workers, [p[3] for p in points], marker="o", label=label)
        axes[0][column].set_title(name)
        axes[0][column].set_ylabel("samples/s (all replicas)")
        axes[1][column].set_ylabel("scaling efficiency")
        axes[1][column].set_ylim(0, 1.1)
        axes[1][column].axhline(GOOD_EFFICIENCY, color="grey", linestyle=":", linewidth=1)
        for row in axes:
            row[column].set_xticks(sorted(ticks))
            row[column].set_xlabel("workers (replicas)")
            row[column].grid(alpha=0.3)
            row[column].legend(fontsize="small")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_title(facts: dict[str, Any]) -> str:
    gpus = f"{len(facts['gpus'])} GPU(s)" if facts["gpus"] else "no GPU"
    return f"kscale bench: {facts['cores']} CPU cores, {gpus}, TensorFlow {facts['tensorflow']}"


def write(report: dict[str, Any], folder: str) -> dict[str, str]:
    """results.json, results.md and scaling.png in `folder`; their paths."""
    os.makedirs(folder, exist_ok=True)
    paths = {name: os.path.join(folder, name) for name in ("results.json", "results.md", "scaling.png")}
    with open(paths["results.json"], "w") as f:
        json.dump(report, f, indent=2)
    with open(paths["results.md"], "w") as f:
        f.write(markdown(report))
    plot(lines_of(report), paths["scaling.png"], plot_title(report["machine"]))
    return paths


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"
