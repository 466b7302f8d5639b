"""Seed 001's table on one machine: the LSTM example on 1 worker vs N, scale-up vs scale-out.

    python examples/lstm/compare.py --workers 1 2

Runs examples/lstm/train.py once per setting, side by side in one run: one process; N Horovod workers
(horovodrun -np N, scale-out); one process with N mirrored replicas (scale-up). Prints wall time,
samples/s, final loss and the speed-up against one worker. On a CPU-only machine the replicas share
the same cores, so the speed-up shows overhead, not the gain N GPUs would give.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

from kscale.bench.runner import gpu_count

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "train.py")


def run(label: str, command: list[str], report: str, timeout: int, **extra_env: str) -> dict:
    print(f"--- {label}: {' '.join(command)}", flush=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2", **extra_env)
    done = subprocess.run(command, env=env, timeout=timeout, text=True, capture_output=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"{label} failed with exit code {done.returncode}")
    with open(report) as f:
        return {"setting": label, **json.load(f)}


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--data-policy", default="divide_epochs", help="seed 001 divides epochs by workers")
    p.add_argument("--modes", nargs="+", default=["horovod", "mirrored"], choices=["horovod", "mirrored"])
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--json", help="also write the table here")
    p.add_argument("--plot", help="also draw samples/s and scaling efficiency against workers here (PNG)")
    args = p.parse_args(argv)

    cores = os.cpu_count() or 1
    gpus = gpu_count()
    common = ["--epochs", str(args.epochs), "--samples", str(args.samples), "--data-policy", args.data_policy]
    horovodrun = shutil.which("horovodrun") or os.path.join(os.path.dirname(sys.executable), "horovodrun")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.workers:
            threads = str(max(1, cores // n))
            if n == 1:
                report = os.path.join(tmp, "single.json")
                cmd = [sys.executable, TRAIN, *common, "--threads", threads, "--report", report]
                rows.append(run("1 worker", cmd, report, args.timeout))
                continue
            if "horovod" in args.modes:
                report = os.path.join(tmp, f"horovod{n}.json")
                cmd = [horovodrun, "-np", str(n), "-H", f"localhost:{n}", "--gloo", sys.executable, TRAIN]
                cmd += [*common, "--threads", threads, "--report", report]
                rows.append(run(f"{n} Horovod workers (scale-out)", cmd, report, args.timeout))
            if "mirrored" in args.modes:
                report = os.path.join(tmp, f"mirrored{n}.json")
                cmd = [sys.executable, TRAIN, *common, "--backend", "mirrored", "--threads", str(cores)]
                if gpus >= n:  # one replica per GPU, on the first n GPUs
                    visible = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(n)))}
                else:  # no GPUs: n logical devices on the CPU
                    cmd, visible = [*cmd, "--cpu-devices", str(n)], {}
                cmd += ["--report", report]
                rows.append(run(f"{n} mirrored replicas (scale-up)", cmd, report, args.timeout, **visible))

    base = next((r for r in rows if r["replicas"] == 1), rows[0])
    print()
    print(
        f"LSTM, {args.samples} samples, {args.epochs} epochs as for one worker, data policy {args.data_policy}"
    )
    print(
        f"{'setting':34} {'epochs/worker':>13} {'wall s':>8} {'samples/s':>10} {'per replica':>12} "
        f"{'final loss':>11} {'speed-up':>9} {'efficiency':>11}"
    )
    for r in rows:
        speedup = r["samples_per_s"] / base["samples_per_s"]
        r["speedup"], r["efficiency"] = speedup, speedup / r["replicas"]
        print(
            f"{r['setting']:34} {r['epochs_run']:>13} {r['wall_s']:>8.1f} {r['samples_per_s']:>10.0f} "
            f"{r['samples_per_s'] / r['replicas']:>12.0f} {r['final_loss']:>11.4f} {speedup:>8.2f}x "
            f"{r['efficiency']:>10.0%}"
        )
    print(_explain(cores, max(r["replicas"] for r in rows), gpus))
    if args.plot:
        _plot(rows, args.plot, f"make demo on {cores} CPU core(s), {gpus or 'no'} GPU(s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return rows


def _plot(rows: list[dict], path: str, title: str) -> None:
    """The table as kscale bench draws its results (kscale.bench.report): a line per mode from one worker."""
    from kscale.bench.report import plot

    one = next(r for r in rows if r["replicas"] == 1)
    lines = {}
    for mode, word in (("Horovod (scale-out)", "Horovod"), ("mirrored (scale-up)", "mirrored")):
        points = [
            (r["replicas"], r["samples_per_s"], 0.0, r["efficiency"]) for r in rows if word in r["setting"]
        ]
        if points:
            lines[mode] = [(1, one["samples_per_s"], 0.0, 1.0), *points]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    plot({"LSTM of seed 001": lines}, path, title)
    print(f"plot written to {path}")


def _explain(cores: int, replicas: int, gpus: int) -> str:
    """What the table can and cannot show on this machine."""
    lines = [
        "",
        "speed-up: samples/s against 1 worker; efficiency: speed-up / replicas (100% = perfect scaling);",
        "per replica: samples/s of one replica.",
    ]
    if replicas > 1 and cores < 2 * replicas and not gpus:
        lines += textwrap.wrap(
            f"This machine has {cores} CPU core(s) and no GPU: the {replicas} replicas share those cores, so "
            "the table measures what distribution costs (synchronising gradients every step, N processes "
            "or threads on the same cores), not the speed-up N devices give. On a machine with N GPUs the "
            "same command trains each replica on its own GPU.",
            width=100,
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
