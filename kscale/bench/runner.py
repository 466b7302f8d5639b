"""Launch kscale/bench/worker.py for every setting of a benchmark, through the real launchers, and collect
what the chief measured.

One setting is one launch: a model, a backend (single, mirrored, horovod, multi_worker), a number of
workers (replicas), who distributes (kscale's one line or a hand-written script) and the knobs.
Hand-written scripts run under the launcher their users would use (horovodrun; TF_CONFIG workers from
`kscale run --engine tf`), kscale's under `kscale run`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from kscale import frameworks
from kscale.bench import communication
from kscale.errors import KScaleError

#: The worker runs as a file (its docstring says why).
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
#: Variants that are not a setting of their own: a run recording Horovod's timeline, and kscale's model
#: trained in turn with the hand-written script's in one job.
TIMELINE, IN_TURN = "timeline", "in turn"
#: Backend -> the hand-written script that does the same without kscale.
#: ("tf" under Keras 3's multi_worker: TensorFlow's custom training loop, as Keras 3's fit fails there.)
HAND_WRITTEN = {
    "single": "keras",
    "mirrored": "tf",
    "horovod": "horovod",
    "multi_worker": "tf",
    "jax": "keras_distribution",
    "torch": "torch_ddp",
}


class BenchError(KScaleError):
    """A `kscale bench` launch failed or measured nothing, or the bench was asked for what it does not know
    (a knob, a backend this stack cannot run).

    Fix: read the failed launch's command and output, printed with the error (run that command alone to
    see it fail), and name knobs and backends as `kscale bench --help` lists them.
    """


@dataclasses.dataclass(frozen=True)
class Setting:
    model: str
    backend: str
    workers: int
    batch: int
    #: Training steps per timed iteration.
    batches: int = 20
    impl: str = "kscale"
    #: Horovod knobs: worker options (--compression fp16, --backward-passes 2) and launcher options
    #: (--fusion-threshold-mb 0, --cycle-time-ms 1, --autotune).
    worker_options: tuple[str, ...] = ()
    launcher_options: tuple[str, ...] = ()
    #: A label for a knob or input variant ("" for the defaults).
    variant: str = ""
    #: TFRecord folder to read instead of arrays, and its auto-shard policy ("auto" or "data").
    records: str | None = None
    shard: str = "auto"
    #: Record a trace (Horovod's timeline; TensorFlow's profiler under multi_worker) and split step time into
    #: communication and the rest.
    timeline: bool = False
    #: Also train this hand-written script's model in the same job, in turn with kscale's (worker --against).
    against: str = ""

    def describe(self) -> str:
        who = "kscale" if self.impl == "kscale" else f"hand-written {self.impl}"
        who += f" and hand-written {self.against} in turn" if self.against else ""
        extra = f", {self.variant}" if self.variant else ""
        return f"{self.model} {self.backend} x{self.workers} batch {self.batch} ({who}{extra})"


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How long each launch measures, and what every launch shares."""

    iters: int = 5
    #: Rounds of a launch that trains kscale's model and the hand-written one in turn (one epoch each).
    rounds: int = 30
    warmup: int = 1
    gpu: bool = False
    mixed_precision: bool = False
    input_shape: str | None = None
    sample: str | None = None
    timeout: int = 600


def backends_here() -> list[str]:
    """The backends this stack can run (README, "Which stack?")."""
    keras = frameworks.process_keras()
    if keras.generation == 3 and keras.backend == "jax":
        return ["single", "jax"]
    if keras.generation == 3 and keras.backend == "torch":
        return ["single", "torch"]
    if keras.generation == 3 and keras.backend != "tensorflow":
        return ["single"]
    if keras.generation == 3 and not frameworks.legacy_keras_needed():
        return ["single", "mirrored", "multi_worker"]
    multi = ["horovod"] if frameworks.is_installed("horovod") else []
    return ["single", "mirrored", *multi, "multi_worker"]


def gpu_count() -> int:
    """GPUs on this machine, asked of nvidia-smi (the runner imports no framework)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def command(setting: Setting, sizes: Sizes, result: str, repeat: int = 0, profile: str = "") -> list[str]:
    """The launch: the launcher its users would use, then the worker with this setting's options. Launches
    of kscale and a hand-written script in one job alternate which model is built first (`repeat`); a
    multi_worker trace is TensorFlow's profile of the chief's timed iterations, written to `profile`."""
    worker = [sys.executable, WORKER, "--impl", setting.impl, "--backend", setting.backend]
    worker += ["--model", setting.model, "--batch", str(setting.batch), "--batches", str(setting.batches)]
    iters = sizes.rounds if setting.against else sizes.iters
    worker += ["--iters", str(iters), "--warmup", str(sizes.warmup), "--result", result]
    worker += [*setting.worker_options]
    if setting.against:
        worker += ["--against", setting.against]
        if repeat % 2 and setting.backend != "multi_worker":
            worker.append("--against-first")
    if setting.backend == "mirrored":
        worker += ["--replicas", str(setting.workers)]
    if sizes.gpu:
        worker.append("--gpu")
    if sizes.mixed_precision:
        worker.append("--mixed-precision")
    if sizes.input_shape:
        worker += ["--input-shape", sizes.input_shape]
    if sizes.sample:
        worker += ["--sample", sizes.sample]
    if setting.records:
        worker += ["--records", setting.records, "--shard", setting.shard]
    if setting.timeline and setting.backend == "multi_worker":
        worker += ["--profile", profile]
    n = str(setting.workers)
    kscale_run = [sys.executable, "-m", "kscale.cli", "run", *setting.launcher_options]
    if setting.backend == "horovod" and setting.impl == "horovod":
        horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
        horovodrun = horovodrun if os.path.exists(horovodrun) else shutil.which("horovodrun") or "horovodrun"
        return [horovodrun, "-np", n, "-H", f"localhost:{n}", "--gloo", *setting.launcher_options, *worker]
    if setting.backend == "horovod":
        return [*kscale_run, "--engine", "horovod", "-np", n, "--", *worker]
    if setting.backend == "multi_worker":
        return [*kscale_run, "--engine", "tf", "-np", n, "--", *worker]
    if setting.backend == "jax":
        return [*kscale_run, "--engine", "jax", "-np", n, "--", *worker]
    if setting.backend == "torch":  # the hand-written script too: torchrun is how its users start it
        return [*kscale_run, "--engine", "torch", "-np", n, "--", *worker]
    return worker


def processes(setting: Setting) -> int:
    return setting.workers if setting.backend in ("horovod", "multi_worker", "jax", "torch") else 1


def run_one(setting: Setting, sizes: Sizes, threads: int, repeat: int = 0) -> dict[str, Any]:
    """Launch one setting; the chief's measurements, with the timeline's split when asked for."""
    with tempfile.TemporaryDirectory(prefix="kscale-bench-") as tmp:
        result = os.path.join(tmp, "result.json")
        env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
        # TensorFlow's own variables (read when its runtime starts), the same for every implementation.
        env.update(TF_NUM_INTRAOP_THREADS=str(threads), TF_NUM_INTEROP_THREADS=str(threads))
        timeline, profile = os.path.join(tmp, "timeline.json"), os.path.join(tmp, "profile")
        if setting.timeline and setting.backend == "horovod":
            env["HOROVOD_TIMELINE"] = timeline
        argv = command(setting, sizes, result, repeat, profile)
        try:
            done = subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=sizes.timeout, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired as err:
            raise BenchError(f"{setting.describe()} took more than {sizes.timeout} s; stopped") from err
        if done.returncode != 0 or not os.path.exists(result):
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
            raise BenchError(
                f"{setting.describe()} failed (exit status {done.returncode}):\n  {' '.join(argv)}\n{tail}"
            )
        with open(result) as f:
            measured = json.load(f)
        if setting.timeline and os.path.exists(timeline):  # the whole run: warm-up iterations too
            total_steps = (sizes.warmup + sizes.iters) * setting.batches
            measured["communication_s_per_step"] = communication.allreduce_seconds(timeline) / total_steps
        if setting.timeline and setting.backend == "multi_worker":  # the timed iterations
            collectives = communication.collective_seconds(profile)
            if collectives is None:
                raise BenchError(
                    f"{setting.describe()}: TensorFlow's profiler recorded no collective in {profile}"
                )
            measured["communication_s_per_step"] = collectives / (sizes.iters * setting.batches)
    measured.update(
        dataclasses.asdict(setting),
        command=" ".join(argv),
        threads_per_process=threads,
    )
    return measured


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, mean, spread (standard deviation) and range of the iterations."""
    return {
        "median": statistics.median(values),
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def threads_for(setting: Setting, cores: int) -> int:
    """TensorFlow threads per process: the cores shared out among the processes on this host."""
    return max(1, cores // processes(setting))


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def write_records(model: str, folder: str, samples: int, sizes: Sizes) -> None:
    """Synthetic data of the model written once as TFRecord files, for the input-sharding comparison."""
    argv = [sys.executable, WORKER, "--model", model, "--write-records", folder]
    argv += ["--batches", str(samples), "--batch", "1"]
    if sizes.gpu:
        argv.append("--gpu")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=sizes.timeout)
    if done.returncode != 0:
        raise BenchError(f"writing TFRecord files failed:\n{done.stderr[-3000:]}")
