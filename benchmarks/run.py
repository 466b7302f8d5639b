"""`make bench`: the full benchmark, on whatever machine runs it (never run by the test suite).

    python benchmarks/run.py [--output benchmarks/results/bench] [--repeats 2]

1. `kscale bench` with every built-in model (MLP, the LSTM of seed 001, MobileNetV2 on a CPU / ResNet50 on
   GPUs, a BERT encoder), 1 and 2 workers (1..N on N GPUs), every backend this stack runs, kscale next to
   the hand-written Horovod and tf.distribute scripts, every Horovod knob, and a TFRecord input sharded by
   file against by batch. Writes results.json, results.md and scaling.png to --output.
2. `benchmarks/import_overhead.py`: time to the first training step with and without kscale in one process.

The other scripts here (kill_trials.py, bert_squad_finetune.py, fit_end_hold.py) take their own commands
(RESULTS.md).
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", default=os.path.join(HERE, "results", "bench"))
    p.add_argument("--repeats", type=int, default=2, help="launches of each compared setting, alternating")
    args = p.parse_args(argv)

    from kscale.cli import bench

    options = ["--output", args.output, "--repeats", str(args.repeats), "--knobs", "--input-sharding"]
    code = bench.main(options)
    if code:
        return code
    import import_overhead

    return import_overhead.main(["--runs", "10", "--output", os.path.join(HERE, "results")])


if __name__ == "__main__":
    sys.exit(main())
