"""Kill one worker (SIGKILL) at a random step; measure how the job ends (issue 8.3).

    python benchmarks/kill_trials.py --mode horovod --trials 20 [--limit 60] [--output DIR] [--seed S]

Modes, 2 workers each, launched as users launch them on this machine:
  horovod   kscale run -np 2                  (horovodrun underneath; Gloo)
  tf        kscale run --engine tf -np 2      (TF_CONFIG workers; MultiWorkerMirroredStrategy)
  pernode   kscale run --nnodes 2 --node-rank R --master 127.0.0.1:PORT, one launcher per "node"
  elastic   kscale run -np 2 --min-np 2 --max-np 2 --host-discovery-script (Horovod's elastic driver)

A trial passes when every launcher exits non-zero within --limit seconds of the kill, no worker process is
left, a launcher's output names the rank and host that died and how (SIGKILL), and the last checkpoint on
disk (ModelCheckpoint, written each epoch by the chief) loads. Results: DIR/kill_trials.<mode>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kscale import environment
from kscale.launch.workers import free_ports

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "benchmarks" / "workers" / "killable.py"
BIN = Path(sys.executable).parent
STEPS_PER_EPOCH = 8  # killable.py: 256 samples, batch 16 per worker, 2 workers


def _env(limit: float) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(environment.LAUNCHER_VARIABLE_PREFIXES)}
    env.update(
        PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=f"{REPO}:{env.get('PYTHONPATH', '')}"
    )
    # A worker stuck in a Gloo collective with a dead peer gives up after this long (Horovod's own timeout).
    env["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(int(limit / 2))
    return env


def _commands(mode: str, workdir: Path, kill_rank: int, kill_step: int) -> list[list[str]]:
    kscale = str(BIN / "kscale")
    job = ["--", sys.executable, str(WORKER), str(workdir), str(kill_rank), str(kill_step)]
    if mode == "horovod":
        return [[kscale, "run", "-np", "2", *job]]
    if mode == "tf":
        return [[kscale, "run", "--engine", "tf", "-np", "2", *job]]
    if mode == "pernode":
        master = f"127.0.0.1:{free_ports(1)[0]}"
        return [
            [
                kscale,
                "run",
                "--nnodes",
                "2",
                "--node-rank",
                str(r),
                "--master",
                master,
                "--nproc-per-node",
                "1",
                *job,
            ]
            for r in range(2)
        ]
    if mode == "elastic":
        hosts = workdir / "discover.sh"
        hosts.write_text("#!/bin/sh\necho localhost:2\n")
        hosts.chmod(0o755)
        return [
            [
                kscale,
                "run",
                "-np",
                "2",
                "--min-np",
                "2",
                "--max-np",
                "2",
                "--host-discovery-script",
                str(hosts),
                *job,
            ]
        ]
    raise SystemExit(f"unknown mode {mode!r}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has ended; only its parent has not reaped it yet
        return f.read().split(")")[-1].split()[0] != "Z"


def trial(mode: str, kill_rank: int, kill_step: int, limit: float, workdir: Path) -> dict:
    """One job, one SIGKILL; what happened, measured."""
    workdir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(open(workdir / f"launcher.{i}.log", "w+")) for i in range(2)]
        return _trial(mode, kill_rank, kill_step, limit, workdir, logs)


def _trial(mode: str, kill_rank: int, kill_step: int, limit: float, workdir: Path, logs: list) -> dict:
    launchers = [
        subprocess.Popen(command, cwd=REPO, env=_env(limit), stdout=logs[i], stderr=subprocess.STDOUT)
        for i, command in enumerate(_commands(mode, workdir, kill_rank, kill_step))
    ]
    ended: dict[int, float] = {}
    deadline = time.time() + 300 + limit
    while len(ended) < len(launchers) and time.time() < deadline:
        for i, launcher in enumerate(launchers):
            if i not in ended and launcher.poll() is not None:
                ended[i] = time.time()
        time.sleep(0.05)
    for launcher in launchers:
        launcher.kill()
    output = ""
    for log in logs:
        log.seek(0)
        output += log.read()
    killed = json.loads((workdir / "killed.json").read_text()) if (workdir / "killed.json").exists() else None
    pids = [int(p.read_text()) for p in workdir.glob("pid.*")]
    result = {
        "mode": mode,
        "kill_rank": kill_rank,
        "kill_step": kill_step,
        "killed": killed is not None,
        "exit_codes": [launcher.returncode for launcher in launchers],
        "seconds_to_exit": max(ended.values()) - killed["time"]
        if killed and len(ended) == len(launchers)
        else None,
        "workers_left": [pid for pid in pids if _alive(pid)],
        "names_rank_host_and_signal": bool(
            killed and re.search(rf"rank {kill_rank}\b[^\n]*{re.escape(killed['host'])}[^\n]*SIGKILL", output)
        ),
        "checkpoint_loads": _loads(workdir / "last.keras"),
    }
    result["ok"] = bool(
        result["killed"]
        and all(code != 0 for code in result["exit_codes"])
        and result["seconds_to_exit"] is not None
        and result["seconds_to_exit"] <= limit
        and not result["workers_left"]
        and result["names_rank_host_and_signal"]
        and result["checkpoint_loads"]
    )
    if not result["ok"]:
        result["output_tail"] = output[-3000:]
    return result


def _loads(path: Path) -> bool:
    if not path.exists():
        return False
    import tensorflow as tf

    try:
        tf.keras.models.load_model(path)
    except Exception as err:  # any failure to load is the finding
        print(f"checkpoint {path} does not load: {err}", file=sys.stderr)
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=["horovod", "tf", "pernode", "elastic"], required=True)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--limit", type=float, default=60.0, help="seconds the survivors may take to exit")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--output", type=Path, default=None, help="folder for kill_trials.<mode>.json")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    scratch = Path(tempfile.mkdtemp(prefix="kscale-kill-"))
    results = []
    try:
        for number in range(args.trials):
            kill_rank = rng.randrange(2)
            kill_step = rng.randint(STEPS_PER_EPOCH + 1, 10 * STEPS_PER_EPOCH)  # after the first checkpoint
            result = trial(args.mode, kill_rank, kill_step, args.limit, scratch / f"trial{number}")
            results.append(result)
            seconds = result["seconds_to_exit"]
            print(
                f"[{args.mode} {number + 1}/{args.trials}] rank {kill_rank} killed at step {kill_step}: "
                f"exits {result['exit_codes']}, "
                + (f"{seconds:.2f} s after the kill" if seconds is not None else "did not end")
                + f", {'ok' if result['ok'] else 'FAILED'}",
                flush=True,
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summary = {
        "mode": args.mode,
        "trials": len(results),
        "passed": sum(r["ok"] for r in results),
        "limit_s": args.limit,
        "max_seconds_to_exit": max((r["seconds_to_exit"] or float("inf")) for r in results)
        if results
        else None,
        "results": results,
    }
    print(f"{args.mode}: {summary['passed']}/{summary['trials']} passed, slowest exit "
          f"{summary['max_seconds_to_exit']:.2f} s (limit {args.limit:g} s)")  # fmt: skip
    if args.output:
        args.output.mkdir(parents=True, exist_ok=True)
        (args.output / f"kill_trials.{args.mode}.json").write_text(json.dumps(summary, indent=1))
    return 0 if summary["passed"] == summary["trials"] else 1


if __name__ == "__main__":
    sys.exit(main())
