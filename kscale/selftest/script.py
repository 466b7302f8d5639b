"""The self-test each rank runs: allreduce, broadcast, then a few training steps that must agree.

Written against `horovod.tensorflow.keras` directly (plus a small Keras model), so it checks the
cluster and Horovod install without depending on the rest of kscale. Every check prints one line; the
last line is `kscale selftest PASS ...` or `kscale selftest FAIL ...: reason`, and the exit status
follows, so `kscale test` (and a test suite) can read the verdict from any rank.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Sequence
from typing import Any

PASS, FAIL = "kscale selftest PASS", "kscale selftest FAIL"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser("python -m kscale.selftest", description=__doc__)
    parser.add_argument("--steps", type=int, default=4, help="training steps (batches) to run")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--fail-rank",
        type=int,
        default=None,
        help="make this rank exit right after hvd.init(), to check that the launcher stops the job",
    )
    parser.add_argument("--fail-code", type=int, default=3, help="exit status used with --fail-rank")
    return parser.parse_args(argv)


def _digest(flat: Any) -> str:
    return hashlib.sha256(flat.astype("float32").tobytes()).hexdigest()[:16]


def build_model(seed: int) -> Any:
    """A small dense model whose initial weights depend on `seed` (so ranks start different)."""
    import tensorflow as tf

    init = tf.keras.initializers.GlorotUniform(seed=seed)
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(8,)),
            tf.keras.layers.Dense(16, activation="tanh", kernel_initializer=init),
            tf.keras.layers.Dense(1, kernel_initializer=init),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    # Several workers share a machine in a self-test: one thread each keeps them from starving each other.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import horovod.tensorflow as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if args.fail_rank == rank:
        print(
            f"exiting with status {args.fail_code} after hvd.init(), as asked (--fail-rank {rank})",
            flush=True,
        )
        os._exit(args.fail_code)  # like a crash: no Horovod shutdown, the other ranks are left waiting

    def gathered(flat: Any) -> Any:
        """Every rank's copy of `flat`, one row per rank."""
        rows = hvd.allgather(tf.constant(flat[None, :], dtype=tf.float32), name=None)
        return rows.numpy()

    def spread(rows: Any) -> float:
        return float(np.max(np.abs(rows - rows[0:1]))) if len(rows) > 1 else 0.0

    problems: list[str] = []

    # 1. allreduce: the sum of the ranks.
    total = float(hvd.allreduce(tf.constant(float(rank)), op=hvd.Sum, name="kscale_selftest_sum").numpy())
    expected = size * (size - 1) / 2
    if total != expected:
        problems.append(f"allreduce(sum of ranks) gave {total}, expected {expected}")
    print(f"allreduce: sum of ranks 0..{size - 1} = {total:g} (expected {expected:g})", flush=True)

    # 2. broadcast: differently seeded weights become rank 0's.
    model = build_model(seed=1000 + rank)

    def flat_weights() -> Any:
        return np.concatenate([w.reshape(-1) for w in model.get_weights()]).astype("float32")

    before = gathered(flat_weights())
    if size > 1 and spread(before) == 0.0:
        problems.append("ranks started with identical weights although they were seeded differently")
    hvd.broadcast_variables(model.variables, root_rank=0)
    after = gathered(flat_weights())
    if spread(after) != 0.0 or not np.array_equal(after[rank], before[0]):
        problems.append(f"after broadcast the weights differ from rank 0's (max |diff| {spread(after):.3g})")
    print(
        f"broadcast: weights differed by {spread(before):.3g} before, {spread(after):.3g} after", flush=True
    )

    # 3. training on different data per rank must keep every rank's weights identical.
    rng = np.random.default_rng(rank)
    n = args.steps * args.batch_size
    x = rng.normal(size=(n, 8)).astype("float32")
    y = (x @ np.linspace(-1.0, 1.0, 8, dtype="float32")[:, None] + 0.5).astype("float32")
    # Through kscale.distribute, as users' scripts do: a fresh, differently seeded model whose weights
    # distribute() must broadcast, with the data already split by rank (data_policy="none").
    import kscale

    model = build_model(seed=2000 + rank)
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.05), loss="mse")
    model = kscale.distribute(model, data_policy="none", print_plan=False)
    start = flat_weights()
    if spread(gathered(start)) != 0.0:
        problems.append("kscale.distribute() did not give every rank rank 0's weights")
    history = model.fit(x, y, batch_size=args.batch_size, epochs=1, shuffle=False, verbose=0)
    trained = gathered(flat_weights())
    moved = float(np.max(np.abs(trained[rank] - start)))
    if moved == 0.0:
        problems.append("training did not change the weights")
    if spread(trained) > 1e-6:
        problems.append(
            f"after {args.steps} steps the ranks' weights differ (max |diff| {spread(trained):.3g})"
        )
    loss = history.history["loss"][-1]
    print(f"training: {args.steps} steps, loss {loss:.4f}, ranks differ by {spread(trained):.3g}", flush=True)

    digest = _digest(trained[rank])
    if problems:
        print(f"{FAIL} rank={rank} size={size}: " + "; ".join(problems), flush=True)
        return 1
    print(f"{PASS} rank={rank} size={size} weights={digest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
