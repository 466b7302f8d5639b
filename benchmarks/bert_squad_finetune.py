"""Fine-tune the bundled MiniLM on the mini SQuAD files and report exact match / F1 before and after.

The test suite's learning check uses a tiny random BERT (seconds); this is the slow, real variant: the
pre-trained all-MiniLM-L6-v2 converted to a BERT checkpoint, fine-tuned on train-v1.1-mini.json, scored on
the held-out dev-v1.1-mini.json and on the training questions, with 1 and/or 2 Horovod workers.

    .venv/bin/python benchmarks/bert_squad_finetune.py [--workers 1 2] [--epochs 10] [--learning_rate 3e-4]

Takes 3 to 5 minutes per training run on two CPU cores. Prints a Markdown table and writes results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "bert_squad"
TRAIN, DEV = EXAMPLE / "data" / "train-v1.1-mini.json", EXAMPLE / "data" / "dev-v1.1-mini.json"


def run_squad(workers: int, flags: list[str]) -> float:
    """Run run_squad.py with `workers` processes; returns the wall time in seconds."""
    bin_dir = Path(sys.executable).parent
    command = [sys.executable, str(EXAMPLE / "run_squad.py"), *flags]
    if workers > 1:
        command = [
            str(bin_dir / "horovodrun"),
            "-np",
            str(workers),
            "-H",
            f"localhost:{workers}",
            "--gloo",
            *command,
        ]
    env = dict(
        os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", TF_CPP_MIN_LOG_LEVEL="2"
    )
    start = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{proc.stderr[-5000:]}")
    return time.perf_counter() - start


def scores(output_dir: Path) -> dict[str, float]:
    return json.loads((output_dir / "eval_results.json").read_text())


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the benchmark; `benchmarks/run.py` (make bench) calls `main([])` and stores the returned rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--epochs", type=float, default=10.0)
    parser.add_argument("--learning_rate", type=float, default=3e-4, help="for one worker; scaled linearly")
    parser.add_argument("--batch_size", type=int, default=8, help="per worker")
    parser.add_argument("--max_seq_length", type=int, default=192)
    parser.add_argument("--work_dir", default=None, help="default: a new temporary directory")
    args = parser.parse_args(argv)

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="bert_squad_bench-"))
    sys.path.insert(0, str(EXAMPLE))
    import convert_checkpoint

    checkpoint = Path(convert_checkpoint.convert(None, work / "minilm"))
    model = [
        f"--vocab_file={checkpoint.parent / 'vocab.txt'}",
        f"--bert_config_file={checkpoint.parent / 'bert_config.json'}",
        f"--init_checkpoint={checkpoint}",
        f"--max_seq_length={args.max_seq_length}",
        "--predict_batch_size=16",
        "--eval",
    ]

    rows = []
    before_dir = work / "before"
    run_squad(1, [*model, "--do_predict", f"--predict_file={DEV}", f"--output_dir={before_dir}"])
    before_dev = scores(before_dir)
    run_squad(1, [*model, "--do_predict", f"--predict_file={TRAIN}", f"--output_dir={before_dir}"])
    before_train = scores(before_dir)
    for workers in args.workers:
        out = work / f"after_{workers}"
        seconds = run_squad(
            workers,
            [
                *model,
                "--do_train",
                "--do_predict",
                f"--train_file={TRAIN}",
                f"--predict_file={DEV}",
                f"--num_train_epochs={args.epochs}",
                f"--learning_rate={args.learning_rate}",
                f"--train_batch_size={args.batch_size}",
                f"--output_dir={out}",
            ],
        )
        after_dev = scores(out)
        run_squad(1, [*model, "--do_predict", f"--predict_file={TRAIN}", f"--output_dir={out}"])
        rows.append(
            {
                "workers": workers,
                "train_seconds": round(seconds, 1),
                "dev_before": before_dev,
                "dev_after": after_dev,
                "train_before": before_train,
                "train_after": scores(out),
            }
        )

    print(
        f"MiniLM-L6, {args.epochs:g} epochs, batch {args.batch_size}/worker, lr {args.learning_rate:g} x workers"
    )
    print(
        "| workers | dev EM / F1 before | dev EM / F1 after | train EM / F1 before | train EM / F1 after | train+predict s |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        cells = [
            f"{r[key]['exact_match']:.1f} / {r[key]['f1']:.1f}"
            for key in ("dev_before", "dev_after", "train_before", "train_after")
        ]
        print(f"| {r['workers']} | {' | '.join(cells)} | {r['train_seconds']} |")
    (work / "results.json").write_text(json.dumps(rows, indent=2))
    print(f"results: {work / 'results.json'}")
    return rows


if __name__ == "__main__":
    main()
