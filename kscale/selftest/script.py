"""The self-test each rank runs: allreduce, broadcast, then a few training steps that must agree.

It runs under every engine `kscale run` launches, through the collectives of kscale's backend for it:
Horovod's (whose broadcast it also checks directly, so a broken Horovod install shows as such),
TensorFlow's MultiWorkerMirroredStrategy's, jax.distributed's and torch.distributed's (torchrun). Every
check prints one line; the last line is `kscale selftest PASS ...` or `kscale selftest FAIL ...: reason`,
and the exit status follows, so `kscale test` (and a test suite) can read the verdict from any rank.
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
        help="make this rank exit right after joining the job, to check that the launcher stops the job",
    )
    parser.add_argument("--fail-code", type=int, default=3, help="exit status used with --fail-rank")
    return parser.parse_args(argv)


def _digest(flat: Any) -> str:
    return hashlib.sha256(flat.astype("float32").tobytes()).hexdigest()[:16]


class Collectives:
    """What the self-test needs from an engine: who I am and every rank's copy of an array, through the
    collectives of kscale's backend for this launch (which joined the job at `import kscale`)."""

    def __init__(self) -> None:
        from kscale import backends, environment
        from kscale.errors import KScaleError

        launcher = environment.current().launcher
        try:
            self.backend = backends.current()
        except KScaleError as err:
            raise SystemExit(f"{FAIL}: {err}") from None
        self.rank, self.size = self.backend.worker_index, self.backend.num_workers
        #: Horovod's own broadcast, checked directly, so a broken Horovod install shows as such; the other
        #: engines' broadcast is what kscale.distribute() does (checked with training).
        self.horovod = launcher in (environment.Launcher.HOROVOD, environment.Launcher.MPI)
        #: Whether ranks may start from different weights: a strategy (TF_CONFIG) and JAX make every new
        #: variable equal everywhere (the first worker's initial values; JAX checks it).
        self.ranks_may_differ = launcher not in (
            environment.Launcher.TF_CONFIG,
            environment.Launcher.KERAS_DISTRIBUTION,
            environment.Launcher.JAX_DISTRIBUTED,
        )

    def allreduce_sum(self, value: float) -> float:
        import numpy as np

        return float(self.gather(np.array([value], "float32")).sum())

    def gather(self, flat: Any) -> Any:
        """One row per rank."""
        return self.backend.gather(flat)

    def broadcast(self, model: Any) -> bool:
        """Give every rank rank 0's weights with Horovod's own broadcast; False elsewhere."""
        if not self.horovod:
            return False
        import horovod.tensorflow as hvd

        hvd.broadcast_variables(model.variables, root_rank=0)
        return True


def keras_module() -> Any:
    from kscale import frameworks

    if frameworks.process_keras().generation == 3:
        import keras

        return keras
    import tensorflow as tf

    return tf.keras


def build_model(keras: Any, seed: int) -> Any:
    """A small dense model whose initial weights depend on `seed` (so ranks can start different)."""
    init = keras.initializers.GlorotUniform(seed=seed)
    return keras.Sequential(
        [
            keras.Input(shape=(8,)),
            keras.layers.Dense(16, activation="tanh", kernel_initializer=init),
            keras.layers.Dense(1, kernel_initializer=init),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import kscale  # first: joins the job where the engine needs it before any framework op

    comm = Collectives()
    rank, size = comm.rank, comm.size
    if args.fail_rank == rank:
        print(
            f"exiting with status {args.fail_code} after joining the job, as asked (--fail-rank {rank})",
            flush=True,
        )
        os._exit(args.fail_code)  # like a crash: no shutdown, the other ranks are left waiting
    import numpy as np

    keras = keras_module()

    def spread(rows: Any) -> float:
        return float(np.max(np.abs(rows - rows[0:1]))) if len(rows) > 1 else 0.0

    problems: list[str] = []

    # 1. allreduce: the sum of the ranks.
    total = comm.allreduce_sum(float(rank))
    expected = size * (size - 1) / 2
    if total != expected:
        problems.append(f"allreduce(sum of ranks) gave {total}, expected {expected}")
    print(f"allreduce: sum of ranks 0..{size - 1} = {total:g} (expected {expected:g})", flush=True)

    def flat_weights(model: Any) -> Any:
        return np.concatenate([np.asarray(w).reshape(-1) for w in model.get_weights()]).astype("float32")

    # 2. broadcast: differently seeded weights become rank 0's (Horovod's own broadcast; the other engines'
    # broadcast is what kscale.distribute() does, checked in 3).
    differ = comm.ranks_may_differ
    model = build_model(keras, seed=1000 + rank if differ else 1000)
    before = comm.gather(flat_weights(model))
    if size > 1 and differ and spread(before) == 0.0:
        problems.append("ranks started with identical weights although they were seeded differently")
    if comm.broadcast(model):
        after = comm.gather(flat_weights(model))
        if spread(after) != 0.0 or not np.array_equal(after[rank], before[0]):
            problems.append(
                f"after broadcast the weights differ from rank 0's (max |diff| {spread(after):.3g})"
            )
        print(
            f"broadcast: weights differed by {spread(before):.3g} before, {spread(after):.3g} after",
            flush=True,
        )

    # 3. training on different data per rank through kscale.distribute, as users' scripts do, must keep
    # every rank's weights identical (and start them identical).
    rng = np.random.default_rng(rank)
    n = args.steps * args.batch_size
    x = rng.normal(size=(n, 8)).astype("float32")
    y = (x @ np.linspace(-1.0, 1.0, 8, dtype="float32")[:, None] + 0.5).astype("float32")
    model = build_model(keras, seed=2000 + rank if differ else 2000)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05), loss="mse")
    model = kscale.distribute(model, data_policy="none", print_plan=False)
    start = flat_weights(model)
    if spread(comm.gather(start)) != 0.0:
        problems.append("kscale.distribute() did not give every rank rank 0's weights")
    history = model.fit(x, y, batch_size=args.batch_size, epochs=1, shuffle=False, verbose=0)
    trained = comm.gather(flat_weights(model))
    moved = float(np.max(np.abs(trained[rank] - start)))
    if moved == 0.0:
        problems.append("training did not change the weights")
    if spread(trained) > 1e-6:
        problems.append(
            f"after {args.steps} steps the ranks' weights differ (max |diff| {spread(trained):.3g})"
        )
    loss = history.history["loss"][-1]
    print(f"training: {args.steps} steps, loss {loss:.4f}, ranks differ by {spread(trained):.3g}", flush=True)
    print(f"device: the model's variables are on {_device_of(model.variables[0])}", flush=True)

    digest = _digest(trained[rank])
    if problems:
        print(f"{FAIL} rank={rank} size={size}: " + "; ".join(problems), flush=True)
        return 1
    print(f"{PASS} rank={rank} size={size} weights={digest}", flush=True)
    return 0


def _device_of(variable: Any) -> str:
    """Where a variable lives, as its framework names it (torch and JAX arrays, tf.Variable: `.device`)."""
    value = getattr(variable, "value", variable)
    return str(getattr(value, "device", None) or getattr(variable, "device", "unknown"))


if __name__ == "__main__":
    sys.exit(main())
