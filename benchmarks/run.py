"""Benchmarks, run with `make bench` (never by the test suite): speed is reported as ratios measured
side by side in one run, on whatever machine runs it.

    python benchmarks/run.py [--samples N] [--epochs E]

1. LSTM scaling (seed 001): 1 process vs 2 Horovod workers vs 2 mirrored replicas, same data.
2. Every other `benchmarks/*.py` script with a `main()` (e.g. the BERT SQuAD fine-tune), if present.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--out", default=os.path.join(REPO, "runs", "benchmarks.json"))
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.join(REPO, "examples", "lstm"))
    import compare

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    rows = compare.main(["--workers", "1", "2", "--samples", str(args.samples), "--epochs", str(args.epochs)])
    results = {"lstm_scaling": rows}
    for name in sorted(os.listdir(HERE)):
        if not name.endswith(".py") or name == "run.py":
            continue
        spec = importlib.util.spec_from_file_location(name[:-3], os.path.join(HERE, name))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if hasattr(module, "main"):
            print(f"--- benchmarks/{name}", flush=True)
            results[name[:-3]] = module.main([])
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2, default=str)
    print(f"results written to {args.out}")


if __name__ == "__main__":
    main()
