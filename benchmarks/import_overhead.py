"""What `import kscale` and `kscale.distribute(model)` add to the time before the first training step.

    python benchmarks/import_overhead.py [--runs 10]

Runs the same small training script, plain Keras and with kscale's one line, alternately in fresh
processes (one process, no launcher), and reports the median time from the top of the script (before
any import) to the end of the first training step, and the difference. Issue 10's bar: at most 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from kscale import environment

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import time
start = time.perf_counter()
import numpy as np
import tensorflow as tf
{import_kscale}
model = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu", input_shape=(32,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
{distribute}

class FirstStep(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        print("FIRST_STEP", time.perf_counter() - start, flush=True)
        self.model.stop_training = True

x = np.zeros((256, 32), "float32")
model.fit(x, x[:, :1], batch_size=32, epochs=1, verbose=0, callbacks=[FirstStep()])
"""


def _seconds(with_kscale: bool) -> float:
    code = SCRIPT.format(
        import_kscale="import kscale" if with_kscale else "",
        distribute="model = kscale.distribute(model, print_plan=False)" if with_kscale else "",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(environment.LAUNCHER_VARIABLE_PREFIXES)}
    env.update(TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=f"{REPO}:{env.get('PYTHONPATH', '')}")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    line = next(line for line in done.stdout.splitlines() if line.startswith("FIRST_STEP"))
    return float(line.split()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--output", type=Path, default=None, help="write import_overhead.json here")
    args = parser.parse_args(argv)
    plain, kscale = [], []
    for run in range(args.runs):  # alternate, so a slow moment of the machine hits both alike
        plain.append(_seconds(False))
        kscale.append(_seconds(True))
        print(f"run {run + 1}/{args.runs}: plain {plain[-1]:.2f} s, kscale {kscale[-1]:.2f} s", flush=True)
    result = {
        "runs": args.runs,
        "plain_median_s": statistics.median(plain),
        "kscale_median_s": statistics.median(kscale),
        "added_median_s": statistics.median(k - p for k, p in zip(kscale, plain)),
        "plain_s": plain,
        "kscale_s": kscale,
    }
    print(
        f"to the first training step: plain Keras {result['plain_median_s']:.2f} s, with kscale "
        f"{result['kscale_median_s']:.2f} s; kscale adds {result['added_median_s']:.2f} s (median of {args.runs} pairs)"
    )
    if args.output:
        args.output.mkdir(parents=True, exist_ok=True)
        (args.output / "import_overhead.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
