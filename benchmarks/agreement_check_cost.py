"""What the agreement check does at every epoch end, timed in one process on a Keras Applications model.

    python benchmarks/agreement_check_cost.py [--model MobileNetV2] [--input 32] [--repeats 20]

Reads every weight, as the check does (kscale.agreement.fingerprint of the backend's local values), and
reports the milliseconds per epoch end and the epoch length above which that is under 1%. The collectives
(the fingerprints gathered, batch-norm statistics averaged: a few numbers per array) come on top; `kscale
bench --knobs "agreement check off"` measures everything together under Horovod.
"""

from __future__ import annotations

import argparse
import json
import time

import tensorflow as tf

from kscale import agreement


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="MobileNetV2")
    parser.add_argument("--input", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    model = getattr(tf.keras.applications, args.model)(
        input_shape=(args.input, args.input, 3), weights=None, classes=10
    )
    weights = list(model.weights)
    agreement.fingerprint([w.numpy() for w in weights])  # warm up
    start = time.perf_counter()
    for _ in range(args.repeats):
        agreement.fingerprint([w.numpy() for w in weights])
    ms = (time.perf_counter() - start) / args.repeats * 1000
    result = {
        "model": args.model,
        "arrays": len(weights),
        "parameters": int(sum(w.shape.num_elements() for w in weights)),
        "ms_per_epoch_end": round(ms, 1),
        "under_1_percent_of_epochs_longer_than_s": round(ms / 10, 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
