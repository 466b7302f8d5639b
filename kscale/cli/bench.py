"""`kscale bench`: how fast training scales on this machine, for the built-in models or your own.

    kscale bench --quick --output runs/bench                 # minutes: the MLP on 1 and 2 workers
    kscale bench                                             # MLP, LSTM, a CNN and a BERT encoder
    kscale bench --model my_model.py:build --input-shape 24,1  # your model, and a recommendation
    kscale bench --reanalyse runs/bench/results.json --output runs/bench  # the report again, nothing run

Every backend this stack runs (single, mirrored, horovod, multi_worker) is launched for each worker
count through the real launchers, next to hand-written Horovod and tf.distribute scripts of the same
training; the report (results.json, results.md, scaling.png in --output) gives throughput with its
spread, scaling efficiency, Horovod's communication share, the kscale / hand-written ratios, Horovod's
knobs and the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kscale.bench import analysis, report, runner, suite
from kscale.bench.models import BUILT_IN, defaults, is_user_model
from kscale.errors import KScaleError

DESCRIPTION = "Measure training throughput and scaling (synthetic data) and write a report."
FULL_MODELS = tuple(BUILT_IN)


def bench_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    kwargs = dict(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    if subparsers is not None:
        parser = subparsers.add_parser("bench", help=DESCRIPTION, allow_abbrev=False, **kwargs)
    else:
        parser = argparse.ArgumentParser("kscale bench", allow_abbrev=False, **kwargs)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the MLP only, short runs, one knob, kscale against the hand-written scripts in one job each "
        "(no separate launches): every kind of measurement once, in the fewest launches (for tests)",
    )
    parser.add_argument("--output", default="runs/bench", help="folder for results.json/.md, scaling.png")
    parser.add_argument(
        "--models", nargs="+", help=f"built-in models to measure (default: {' '.join(FULL_MODELS)})"
    )
    parser.add_argument(
        "--model",
        help="your model: path/to/model.py:function (returns a compiled Keras model) or a .keras file; "
        "ends with a recommendation",
    )
    parser.add_argument("--input-shape", help="--model: input shape without the batch, e.g. 24,1")
    parser.add_argument("--sample", help="--model: an .npz with arrays x and y to train on instead of noise")
    parser.add_argument("--workers", type=int, nargs="+", help="worker counts (default: 1 and 2, or 1..GPUs)")
    parser.add_argument("--backends", nargs="+", help="default: every backend this stack runs")
    parser.add_argument("--batch-sizes", type=int, nargs="+", help="per-replica batches (default per model)")
    parser.add_argument("--batches", type=int, help="training steps per timed iteration (default per model)")
    parser.add_argument("--iters", type=int, help="timed iterations per launch (default 5; --quick 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed iterations first (default 1)")
    parser.add_argument(
        "--rounds",
        type=int,
        help="kscale and the hand-written script trained in turn in one job: rounds per launch (default 30; "
        "--quick 3)",
    )
    parser.add_argument(
        "--repeats", type=int, help="launches of each setting, alternating (default 2; --quick 1)"
    )
    parser.add_argument("--no-baselines", action="store_true", help="skip the hand-written scripts")
    parser.add_argument(
        "--knobs",
        nargs="*",
        help="Horovod knobs to measure (no value: all of them): " + "; ".join(suite.KNOB_LABELS),
    )
    parser.add_argument(
        "--input-sharding",
        action="store_true",
        help="measure TFRecord input sharded by file against by batch",
    )
    parser.add_argument("--mixed-precision", action="store_true", help="Keras' mixed_float16 policy")
    parser.add_argument("--timeout", type=int, default=600, help="seconds one launch may take (default 600)")
    parser.add_argument(
        "--reanalyse",
        metavar="RESULTS_JSON",
        help="measure nothing: write the report of an earlier run again from its results.json, with this "
        "kscale's analysis, to --output",
    )
    parser.set_defaults(func=bench_command, argv=None)
    return parser


def plan_from(args: argparse.Namespace, gpus: int) -> suite.Plan:
    """The settings asked for, with the defaults of --quick, a full run, or the user's model."""
    backends = tuple(args.backends or runner.backends_here())
    workers = tuple(args.workers or (range(1, gpus + 1) if gpus > 1 else (1, 2)))
    if 1 not in workers:
        workers = (1, *workers)  # efficiency is against one worker
    if args.model:
        models: tuple[str, ...] = (args.model,)
    elif args.models:
        models = tuple(args.models)
    else:
        models = ("mlp",) if args.quick else FULL_MODELS
    for model in models:
        defaults(model)  # an unknown name or a missing file: an error before any launch
    user = any(is_user_model(m) for m in models)
    if args.knobs is None:
        knobs: tuple[str, ...] = ("fp16 compression",) if (args.quick or user) else ()
    else:
        knobs = tuple(args.knobs) or suite.KNOB_LABELS
    unknown = set(knobs) - set(suite.KNOB_LABELS)
    if unknown:
        raise runner.BenchError(f"unknown knob(s) {sorted(unknown)}: use {'; '.join(suite.KNOB_LABELS)}")
    batch_sizes = args.batch_sizes or ((16, 32, 64) if user else None)
    return suite.Plan(
        models=models,
        workers=workers,
        backends=backends,
        batch_sizes=tuple(batch_sizes) if batch_sizes else None,
        batches=args.batches or (20 if args.quick else None),
        repeats=args.repeats or (1 if args.quick else 2),
        baselines=not args.no_baselines and not user,
        separate_baselines=not args.quick,
        knobs=knobs,
        input_sharding=args.input_sharding or args.quick,
    )


def reanalysed(path: str) -> dict[str, Any]:
    """An earlier run's report with its numbers analysed again (measurements, machine and command kept)."""
    try:
        with open(path) as f:
            full = json.load(f)
        full["analysis"] = analysis.analyse(full["results"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise runner.BenchError(
            f"--reanalyse {path}: not a results.json written by kscale bench ({type(err).__name__}: {err}); "
            "give the results.json in a kscale bench --output folder"
        ) from err
    return full


def bench_command(args: argparse.Namespace) -> int:
    try:
        full = reanalysed(args.reanalyse) if args.reanalyse else measured(args)
        paths = report.write(full, args.output)
    except KScaleError as err:
        print(f"kscale bench: error: {err}", file=sys.stderr)
        return 1
    print()
    print(report.markdown(full))
    print(f"kscale bench: wrote {', '.join(paths.values())}")
    return 0


def measured(args: argparse.Namespace) -> dict[str, Any]:
    """Every launch the arguments ask for, with the machine, the plan and the analysis."""
    gpus = runner.gpu_count()
    plan = plan_from(args, gpus)
    sizes = runner.Sizes(
        iters=args.iters or (3 if args.quick else 5),
        rounds=args.rounds or (3 if args.quick else 30),
        warmup=args.warmup,
        gpu=gpus > 0,
        mixed_precision=args.mixed_precision,
        input_shape=args.input_shape,
        sample=args.sample,
        timeout=args.timeout,
    )
    facts = report.machine()
    print(f"kscale bench on {report.describe_machine(facts)}", flush=True)
    print(
        f"models {', '.join(plan.models)}; workers {', '.join(map(str, plan.workers))}; backends "
        f"{', '.join(plan.backends)}; {suite.count(plan)} launches",
        flush=True,
    )
    results = suite.run(plan, sizes, log=lambda line: print(line, flush=True))
    return {
        "machine": facts,
        "command": "kscale bench " + " ".join(sys.argv[2:] if args.argv is None else args.argv),
        "plan": {**plan.__dict__, "sizes": sizes.__dict__},
        "results": results,
        "analysis": analysis.analyse(results),
    }


def main(argv: list[str] | None = None) -> int:
    args = bench_command_parser().parse_args(argv)
    args.argv = argv
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
