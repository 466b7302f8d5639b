"""One process, Keras 3 on torch: Keras' own `fit` against keras.io's torch loop (torch optimizer and loss,
a DataLoader) on the same model and data, in turn in one process. Says how much of kscale's ratio against
the hand-written DistributedDataParallel script (`kscale bench --backends torch`) is Keras' fit itself.

    KERAS_BACKEND=torch .venv-torch/bin/python benchmarks/keras_fit_vs_torch_loop.py --model cnn --batch 32
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import keras
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "kscale", "bench"))
import models

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from kscale.bench.worker import _torch_loss, _torch_optimizer, torch_loop_epoch


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=40, help="steps per timed epoch")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    spec = models.resolve(args.model, 0, None, None)
    x, y = spec.data(args.batch * args.batches, np.random.default_rng(0))

    fitted = spec.build(keras)
    fitted.compile(**spec.compile_args(keras, 1.0))
    looped = spec.build(keras)
    compile_args = spec.compile_args(keras, 1.0)
    optimizer, loss_fn = (
        _torch_optimizer(compile_args["optimizer"], looped),
        _torch_loss(compile_args["loss"], keras),
    )
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=args.batch
    )

    def keras_epoch() -> None:
        fitted.fit(x, y, batch_size=args.batch, epochs=1, shuffle=False, verbose=0)

    def torch_epoch() -> None:
        torch_loop_epoch(looped, loader, optimizer, loss_fn)

    keras_epoch(), torch_epoch()  # warm-up: tracing, first allocations
    ratios = []
    for round_ in range(args.rounds):
        order = [keras_epoch, torch_epoch] if round_ % 2 == 0 else [torch_epoch, keras_epoch]
        seconds = {}
        for epoch in order:
            started = time.perf_counter()
            epoch()
            seconds[epoch] = time.perf_counter() - started
        ratios.append(seconds[torch_epoch] / seconds[keras_epoch])
        print(
            f"round {round_}: Keras fit {seconds[keras_epoch]:.2f} s, torch loop {seconds[torch_epoch]:.2f} s"
        )
    print(
        f"{args.model}: Keras fit's speed / the torch loop's = {statistics.median(ratios):.3f} (median of {len(ratios)})"
    )


if __name__ == "__main__":
    main()
