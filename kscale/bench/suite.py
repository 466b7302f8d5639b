"""Which settings a `kscale bench` run measures, in what order, with progress on the way.

A setting and the one it is compared with (kscale and the hand-written script; a knob and the
defaults; file and batch sharding) run alternately, `repeats` times each, so a slow minute on a shared
machine falls on both sides of a ratio. kscale and the hand-written script are also trained in turn in
one job (the worker's --against), which takes what differs between launches out of their ratio.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator

from kscale.bench import models
from kscale.bench.runner import (
    HAND_WRITTEN,
    IN_TURN,
    TIMELINE,
    BenchError,
    Setting,
    Sizes,
    cores,
    run_one,
    threads_for,
    write_records,
)

#: Horovod's knobs (label, worker options, launcher options), each measured against the defaults
#: (fusion threshold 128 MB, cycle time 1 ms, no compression, one backward pass per allreduce, kscale's
#: agreement check on).
KNOBS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("fp16 compression", ("--compression", "fp16"), ()),
    ("backward_passes_per_step=2", ("--backward-passes", "2"), ()),
    ("fusion threshold 0 MB (off)", (), ("--fusion-threshold-mb", "0")),
    ("fusion threshold 32 MB", (), ("--fusion-threshold-mb", "32")),
    ("cycle time 5 ms", (), ("--cycle-time-ms", "5")),
    ("autotune", (), ("--autotune",)),
    # Not Horovod's: kscale's own check that the workers' weights agree, run at every epoch end (the cost
    # of keeping it on is this ratio's distance from 1).
    ("agreement check off", ("--no-check-agreement",), ()),
    # Not Horovod's either: what keras.callbacks.BackupAndRestore costs, writing a backup every 10 steps
    # (the result's "backup" also holds the seconds one backup takes).
    ("BackupAndRestore every 10 steps", ("--backup-every", "10"), ()),
)
KNOB_LABELS = tuple(label for label, _, _ in KNOBS)


@dataclasses.dataclass(frozen=True)
class Plan:
    models: tuple[str, ...]
    workers: tuple[int, ...]
    backends: tuple[str, ...]
    #: Per-replica batches to measure (None: each model's default).
    batch_sizes: tuple[int, ...] | None = None
    #: Steps per timed iteration (None: each model's default).
    batches: int | None = None
    repeats: int = 1
    baselines: bool = True
    #: Also launch kscale and the hand-written script separately (alternately), beside the job that trains
    #: both in turn; without them (--quick) that job's two sides stand for both settings.
    separate_baselines: bool = True
    timeline: bool = True
    #: Knob labels (of KNOBS) to measure on Horovod at the largest worker count, on the first model.
    knobs: tuple[str, ...] = ()
    #: Measure file against batch sharding of a TFRecord input on the multi-process backends (first model).
    input_sharding: bool = False


def settings(plan: Plan, records: str | None = None) -> Iterator[list[Setting]]:
    """Groups of settings, each group run together and in turn `repeats` times."""
    most = max(plan.workers)
    for model in plan.models:
        defaults = models.defaults(model)
        steps = plan.batches or defaults.batches
        batch_sizes = plan.batch_sizes or (defaults.batch,)
        rebuildable = defaults.rebuildable
        for batch in batch_sizes:
            for n in plan.workers:
                for backend in plan.backends:
                    if (n == 1) != (backend == "single"):
                        continue
                    mine = Setting(model, backend, n, batch, steps)
                    if plan.baselines and rebuildable:
                        hand_written = HAND_WRITTEN[backend]
                        if plan.separate_baselines:
                            yield [mine, dataclasses.replace(mine, impl=hand_written)]
                        yield [dataclasses.replace(mine, variant=IN_TURN, against=hand_written)]
                    else:
                        yield [mine]
                    if plan.timeline and backend in ("horovod", "multi_worker"):
                        yield [Setting(model, backend, n, batch, steps, timeline=True, variant=TIMELINE)]
        batch = batch_sizes[0]
        first = model == plan.models[0]  # knobs and input sharding: measured on the first model
        if plan.knobs and "horovod" in plan.backends and most > 1 and first:
            default = Setting(model, "horovod", most, batch, steps)
            for label, worker, launcher in KNOBS:
                if label in plan.knobs:
                    variant = Setting(model, "horovod", most, batch, steps, "kscale", worker, launcher, label)
                    yield [default, variant]
        if records and first:
            for backend in _sharding_backends(plan):
                files = Setting(model, backend, most, batch, steps, variant="files", records=records)
                yield [files, dataclasses.replace(files, variant="batches", shard="data")]


def _sharding_backends(plan: Plan) -> list[str]:
    """The backends input sharding is measured on: several processes, each reading its part."""
    if not plan.input_sharding or max(plan.workers) < 2:
        return []
    return [backend for backend in ("horovod", "multi_worker") if backend in plan.backends]


def count(plan: Plan) -> int:
    return sum(len(group) * (1 if group[0].timeline else plan.repeats) for group in settings(plan, "-"))


def run(plan: Plan, sizes: Sizes, log: Callable[[str], None] = print) -> list[dict]:
    """Every launch of the plan, in order; each result carries its setting and a repeat number."""
    results: list[dict] = []
    total, done = count(plan), 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kscale-bench-records-") as tmp:
        records = None
        if _sharding_backends(plan):
            records = os.path.join(tmp, "records")
            defaults = models.defaults(plan.models[0])
            samples = (plan.batches or defaults.batches) * (plan.batch_sizes or (defaults.batch,))[0]
            log(f"writing {samples} samples of {plan.models[0]} as TFRecord files in {records}")
            write_records(plan.models[0], records, samples * max(plan.workers), sizes)
        for group in settings(plan, records):
            rounds = 1 if group[0].timeline else plan.repeats
            for repeat in range(rounds):
                for setting in group:
                    done += 1
                    log(f"[{done}/{total}] {setting.describe()} ...")
                    result = run_one(setting, sizes, threads_for(setting, cores()), repeat)
                    result["repeat"] = repeat
                    results.append(result)
                    elapsed = time.monotonic() - started
                    measured = f"{statistics.median(result['samples_per_s']):,.0f} samples/s"
                    if "in_turn" in result:
                        theirs = statistics.median(result["in_turn"]["samples_per_s"])
                        measured += f", hand-written {theirs:,.0f}"
                    log(
                        f"[{done}/{total}]   {measured} "
                        f"({elapsed:.0f} s so far, about {elapsed / done * (total - done):.0f} s to go)"
                    )
    if not results:
        raise BenchError("the plan has no settings to run: check --workers and --backends")
    return results
