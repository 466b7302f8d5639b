"""One measurement of `kscale bench`, run by every worker under the real launcher.

    python kscale/bench/worker.py --impl kscale --backend horovod --model mlp --result r.json

Run as a file, not with -m: `python -m kscale.bench.worker` imports the kscale package first, whose
import joins a distributed job, and the hand-written scripts must run without kscale.

`--impl` says who distributes the training: `kscale` (the one line), `horovod` (a hand-written Horovod
script: hvd.init, GPU pinning, DistributedOptimizer, broadcast and metric callbacks, its own shard) or `tf`
(a hand-written tf.distribute script: the strategy's scope, the global batch; with Keras 3 under
multi_worker, whose fit fails there, TensorFlow's custom training loop), `keras_distribution` (Keras 3 on
JAX: keras.distribution's DataParallel, each process feeding its part) or `keras` (one process, no
distribution). Every implementation trains the same model on the same synthetic data with `fit` for
`--warmup + --iters` epochs of `--batches` steps, and the chief writes each epoch's wall time to `--result`.

`--against IMPL` (with `--impl kscale`) also builds the hand-written script's model in the same job and
trains the two in turn, one epoch each, `--iters` rounds: the ratio then compares epochs a few seconds
apart on the same processes, free of what differs between launches (where the processes and their memory
land on a shared machine). Which model is built first can move the ratio by a few percent (MobileNetV2 in
one process: the model built first about 3% slower in one launch), so the runner alternates
`--against-first` between launches (not under multi_worker, where the hand-written script must reuse
kscale's strategy). Under Horovod every rank waits for the others before each of these `fit` calls (see
`train_in_turn`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

STARTED = time.perf_counter()  # before TensorFlow, Horovod or kscale is imported

IMPLEMENTATIONS = ("kscale", "horovod", "tf", "keras", "keras_distribution", "torch_ddp")
#: How long stop_profile lets the last collectives' completion callbacks finish (measured: without a wait,
#: 1 profile in 6 to 25 lost the last Done event on a loaded 2-core machine; with 0.5 s, 0 in 40).
PROFILE_SETTLE_SECONDS = 0.5


def stop_profile() -> None:
    """Stop TensorFlow's profiler once the collectives already run have recorded their completion.

    A collective's Done event ends when the executor's completion callback returns, which can be after the
    step's result has reached Python: stopping at once may drop the last span (kscale.bench.communication
    pairs each launch with its Done event).
    """
    import tensorflow as tf

    time.sleep(PROFILE_SETTLE_SECONDS)
    tf.profiler.experimental.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", choices=IMPLEMENTATIONS, default="kscale")
    p.add_argument("--against", choices=IMPLEMENTATIONS[1:], help="also train this one, in turn, same job")
    p.add_argument("--against-first", action="store_true", help="--against: build that model before kscale's")
    p.add_argument("--backend", default="single", help="single | mirrored | horovod | multi_worker | jax")
    p.add_argument("--replicas", type=int, default=1, help="mirrored: replicas in this process")
    p.add_argument("--model", default="mlp")
    p.add_argument("--input-shape", help="your model's input shape without the batch, e.g. 24,1")
    p.add_argument("--sample", help="your model: an .npz with arrays x and y (one batch or more)")
    p.add_argument("--batch", type=int, default=32, help="per-replica batch")
    p.add_argument("--batches", type=int, default=10, help="training steps per timed iteration (epoch)")
    p.add_argument("--iters", type=int, default=5, help="timed iterations")
    p.add_argument("--warmup", type=int, default=1, help="iterations run first and not timed")
    p.add_argument("--gpu", action="store_true", help="the large model sizes (ResNet50, BERT-base)")
    p.add_argument("--mixed-precision", action="store_true", help="Keras' mixed_float16 policy")
    p.add_argument("--compression", default=None, help="Horovod: fp16 sends gradients as float16")
    p.add_argument("--backward-passes", type=int, default=1, help="Horovod: batches per allreduce")
    p.add_argument(
        "--no-check-agreement",
        action="store_true",
        help="kscale only: check_agreement=False (no fingerprint of the weights compared at each epoch end)",
    )
    p.add_argument(
        "--backup-every",
        type=int,
        default=0,
        help="kscale only: keras.callbacks.BackupAndRestore(save_freq=N) in fit's callbacks (what a backup costs)",
    )
    p.add_argument("--records", help="read the data from the TFRecord files in this folder (kscale only)")
    p.add_argument("--shard", default="auto", choices=["auto", "data"], help="--records: auto-shard policy")
    p.add_argument("--write-records", help="write the model's synthetic data as TFRecord files here, exit")
    p.add_argument("--files", type=int, default=8, help="--write-records: how many files")
    p.add_argument("--result", help="the chief writes its measurements here (JSON)")
    p.add_argument("--profile", help="the chief records TensorFlow's profile of the timed iterations here")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class IterationTimer:
    """Keras callback: the wall time of each epoch, from its start to the next epoch's start or the end of
    `fit` (so the callbacks that run at an epoch's end, Horovod's metric averaging included, count), over
    one `fit` or several."""

    def __init__(self, keras: Any):
        timer = self

        class _Callback(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                timer._stop()
                timer._started = time.perf_counter()

            def on_train_end(self, logs=None):
                timer._stop()

        self.seconds: list[float] = []
        #: When the first epoch ended (time.perf_counter()).
        self.first_epoch_end: float | None = None
        self._started: float | None = None
        self.callback = _Callback()

    def _stop(self) -> None:
        if self._started is not None:
            now = time.perf_counter()
            self.seconds.append(now - self._started)
            self.first_epoch_end = self.first_epoch_end or now
            self._started = None


def _setup_tensorflow(args: argparse.Namespace) -> Any:
    """Logical CPU devices for mirrored replicas on a CPU: before TensorFlow runs any op."""
    import tensorflow as tf

    if args.replicas > 1 and not tf.config.list_physical_devices("GPU"):
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * args.replicas
        )
    return tf


def _mirrored_devices(tf: Any, replicas: int) -> list[str]:
    kind = "GPU" if tf.config.list_physical_devices("GPU") else "CPU"
    return [f"{kind}:{i}" for i in range(replicas)]


def _records_dataset(args: argparse.Namespace, x_shape: tuple, x_dtype: str, y_dtype: str) -> Any:
    """The TFRecord files as a dataset of per-replica batches, endless (steps_per_epoch ends each epoch)."""
    import tensorflow as tf

    def parse(record):
        fields = tf.io.parse_single_example(
            record, {"x": tf.io.FixedLenFeature([], tf.string), "y": tf.io.FixedLenFeature([], tf.string)}
        )
        x = tf.reshape(tf.io.decode_raw(fields["x"], x_dtype), x_shape)
        return x, tf.io.decode_raw(fields["y"], y_dtype)[0]

    files = tf.data.Dataset.list_files(os.path.join(args.records, "*.tfrecord"), shuffle=False)
    data = files.interleave(tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=tf.data.AUTOTUNE)
    data = data.map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch(args.batch).repeat()
    if args.shard == "data":
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        data = data.with_options(options)
    return data.prefetch(tf.data.AUTOTUNE)


def write_records(args: argparse.Namespace, spec: Any, samples: int) -> None:
    import numpy as np
    import tensorflow as tf

    x, y = spec.data(samples, np.random.default_rng(args.seed))
    os.makedirs(args.write_records, exist_ok=True)
    for f, rows in enumerate(np.array_split(np.arange(samples), args.files)):
        with tf.io.TFRecordWriter(os.path.join(args.write_records, f"part-{f:03d}.tfrecord")) as out:
            for i in rows:
                feature = {
                    "x": tf.train.Feature(bytes_list=tf.train.BytesList(value=[x[i].tobytes()])),
                    "y": tf.train.Feature(bytes_list=tf.train.BytesList(value=[np.asarray(y[i]).tobytes()])),
                }
                out.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    meta = {"x_shape": list(x.shape[1:]), "x_dtype": str(x.dtype), "y_dtype": str(y.dtype)}
    with open(os.path.join(args.write_records, "meta.json"), "w") as f:
        json.dump(meta, f)


@dataclasses.dataclass
class Job:
    """A model made ready to train by one implementation: `fit(epochs, callbacks)` trains it on."""

    fit: Callable[[int, list], None]
    chief: bool
    replicas: int
    #: The model's tf.distribute strategy, if any.
    strategy: Any = None
    #: Waits until every worker gets here (train_in_turn calls it before each fit).
    barrier: Callable[[], None] = lambda: None
    #: Times the backups fit writes (--backup-every), if it writes any.
    backups: BackupTimer | None = None


# Each implementation: (args, spec, keras, data, strategy=None) -> Job; data(N) is the synthetic data of a
# job of N replicas (the arrays a user's script would load); `strategy` is only for the tf script in turn
# with kscale's multi_worker (two MultiWorkerMirroredStrategy objects in one process give their
# collectives the same keys: their first broadcasts collide).
Trainer = Callable[..., Job]


class BackupTimer:
    """A `BackupAndRestore(save_freq=every)` for fit, between two callbacks that time what runs at each
    batch's end in between: the backups (and kscale's work around them). The first waits for the step's
    results, so the step's own compute is not counted."""

    def __init__(self, keras: Any, folder: str, every: int):
        import numpy as np

        timer = self
        self.every = every
        self.seconds = 0.0
        self.batches = 0
        self._started = 0.0

        class _Start(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                for value in (logs or {}).values():
                    np.asarray(value)  # the step done
                timer._started = time.perf_counter()

        class _Stop(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                timer.seconds += time.perf_counter() - timer._started
                timer.batches += 1

        backup = keras.callbacks.BackupAndRestore(folder, save_freq=every)
        self.callbacks = [_Start(), backup, _Stop()]

    def result(self) -> dict[str, Any]:
        backups = self.batches // self.every
        return {"every": self.every, "backups": backups, "backup_s": self.seconds / max(backups, 1)}


def train_with_kscale(args, spec, keras, data, strategy=None) -> Job:
    import kscale

    model = spec.build(keras)
    if spec.rebuildable:
        model.compile(**spec.compile_args(keras, 1.0))
    options: dict[str, Any] = {"backend": args.backend}
    if args.no_check_agreement:
        options["check_agreement"] = False
    if args.backend == "mirrored":
        import tensorflow as tf

        options["devices"] = _mirrored_devices(tf, args.replicas)
    if args.backend == "horovod":
        options.update(compression=args.compression, backward_passes_per_step=args.backward_passes)
    model = kscale.distribute(model, **options)  # <- the one line
    backups: list = []
    timer = None
    if args.backup_every:
        # One folder for every process of the job (the chief's backup is restored by all): beside --result.
        folder = f"{args.result}.backup" if args.result else tempfile.mkdtemp(prefix="kscale-bench-backup-")
        timer = BackupTimer(keras, folder, args.backup_every)
        backups = timer.callbacks
    if args.records:
        with open(os.path.join(args.records, "meta.json")) as f:
            meta = json.load(f)
        records = _records_dataset(args, tuple(meta["x_shape"]), meta["x_dtype"], meta["y_dtype"])

        def fit(epochs: int, callbacks: list) -> None:
            callbacks = [*backups, *callbacks]
            model.fit(records, steps_per_epoch=args.batches, epochs=epochs, callbacks=callbacks, verbose=0)
    else:
        x, y = data(kscale.num_replicas())

        def fit(epochs: int, callbacks: list) -> None:
            callbacks = [*backups, *callbacks]
            model.fit(x, y, batch_size=args.batch, epochs=epochs, callbacks=callbacks, verbose=0)

    strategy = getattr(model, "distribute_strategy", None)
    barriers = {"horovod": _horovod_barrier, "jax": _jax_barrier}
    barrier = barriers.get(args.backend, Job.barrier) if kscale.size() > 1 else Job.barrier
    return Job(fit, kscale.is_chief(), kscale.num_replicas(), strategy, barrier, timer)


def train_with_horovod(args, spec, keras, data, strategy=None) -> Job:
    """What Horovod's Keras examples do."""
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
    model = spec.build(keras)
    compile_args = spec.compile_args(keras, hvd.size())
    compression = hvd.Compression.fp16 if args.compression == "fp16" else hvd.Compression.none
    compile_args["optimizer"] = hvd.DistributedOptimizer(
        compile_args["optimizer"], compression=compression, backward_passes_per_step=args.backward_passes
    )
    model.compile(**compile_args)
    horovod_callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
    if not _keras3_beside(keras):  # there Horovod's MetricAverageCallback fails: a user goes without it
        horovod_callbacks.append(hvd.callbacks.MetricAverageCallback())
    x, y = data(hvd.size())
    shard = slice(hvd.rank(), None, hvd.size())

    def fit(epochs: int, callbacks: list) -> None:
        model.fit(
            x[shard],
            y[shard],
            batch_size=args.batch,
            epochs=epochs,
            callbacks=[*horovod_callbacks, *callbacks],
            verbose=0,
        )

    return Job(fit, hvd.rank() == 0, hvd.size(), barrier=_horovod_barrier)


def _horovod_barrier() -> None:
    """A one-number allreduce: Horovod 0.28's TensorFlow API has no barrier."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.allreduce(tf.constant(0.0), op=hvd.Sum, name="bench.barrier")


def _keras3_beside(keras: Any) -> bool:
    """tf_keras trains (TensorFlow 2.16+ with TF_USE_LEGACY_KERAS=1) while the `keras` package is Keras 3,
    which Horovod's MetricAverageCallback imports and fails with."""
    return keras.__name__.split(".")[0] == "tf_keras"


def train_with_tf_distribute(args, spec, keras, data, strategy=None) -> Job:
    """What TensorFlow's distributed Keras tutorials do: build and compile in the strategy's scope, fit with
    the global batch (Keras splits it over replicas and auto-shards the data over workers)."""
    import tensorflow as tf

    if args.backend == "mirrored":
        strategy, chief = tf.distribute.MirroredStrategy(_mirrored_devices(tf, args.replicas)), True
    else:
        task = json.loads(os.environ["TF_CONFIG"])["task"]
        if strategy is None:
            gpus = tf.config.list_physical_devices("GPU")
            if gpus:  # several workers on one host: one GPU each
                tf.config.set_visible_devices(gpus[task["index"] % len(gpus)], "GPU")
            strategy = tf.distribute.MultiWorkerMirroredStrategy()
        chief = task["index"] == 0
        if getattr(keras, "__version__", "2").startswith("3."):
            # Keras 3's fit fails under MultiWorkerMirroredStrategy (keras-team/keras#20585): what its
            # users write instead is TensorFlow's custom training loop.
            return _tf_custom_loop(args, spec, keras, data, strategy, chief)
    replicas = strategy.num_replicas_in_sync
    with strategy.scope():
        model = spec.build(keras)
        model.compile(**spec.compile_args(keras, replicas))
    x, y = data(replicas)

    def fit(epochs: int, callbacks: list) -> None:
        model.fit(x, y, batch_size=args.batch * replicas, epochs=epochs, callbacks=callbacks, verbose=0)

    return Job(fit, chief, replicas)


def _tf_custom_loop(args, spec, keras, data, strategy, chief: bool) -> Job:
    """TensorFlow's "custom training loop with MultiWorkerMirroredStrategy" tutorial, with a Keras 3 model:
    `strategy.run` of a step that averages the loss over the global batch, the dataset distributed (and
    auto-sharded) by the strategy; the timer's hooks called where fit would call them."""
    import tensorflow as tf

    replicas = strategy.num_replicas_in_sync
    global_batch = args.batch * replicas
    with strategy.scope():
        model = spec.build(keras)
        compile_args = spec.compile_args(keras, replicas)
        optimizer = compile_args["optimizer"]
        loss = compile_args["loss"]
        per_sample = loss.call if isinstance(loss, keras.losses.Loss) else keras.losses.get(loss)
    x, y = data(replicas)
    dataset = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch, drop_remainder=True)
    )

    def replica_step(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            value = tf.nn.compute_average_loss(
                per_sample(y, model(x, training=True)), global_batch_size=global_batch
            )
        gradients = tape.gradient(value, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return value

    @tf.function
    def train_step(iterator):  # one step per call and the loss summed over replicas, as the tutorial does
        per_replica_losses = strategy.run(replica_step, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    def fit(epochs: int, callbacks: list) -> None:
        for epoch in range(epochs):
            for callback in callbacks:
                callback.on_epoch_begin(epoch)
            iterator, total_loss = iter(dataset), 0.0
            for _ in range(args.batches):
                total_loss += train_step(iterator)
            float(total_loss / args.batches)  # the epoch's loss reaches the host, as fit's logs do
        for callback in callbacks:
            callback.on_train_end()

    return Job(fit, chief, replicas, strategy)


def train_with_keras_distribution(args, spec, keras, data, strategy=None) -> Job:
    """What Keras 3's distribution guide does on JAX: initialize the processes (the launcher's
    KERAS_DISTRIBUTION_* variables), a DataParallel distribution over every device, the model built,
    compiled and trained in its scope; each process feeds its own part of the data."""
    import jax

    if not jax.distributed.is_initialized() and "KERAS_DISTRIBUTION_NUM_PROCESSES" in os.environ:
        keras.distribution.initialize()  # not yet (kscale's model, in turn in this job, has done it)
    distribution = keras.distribution.DataParallel(devices=keras.distribution.list_devices())
    distribution.auto_shard_dataset = False  # arrays: each process passes its own part (Keras' advice)
    replicas, processes, rank = (
        len(distribution.device_mesh.devices.flatten()),
        jax.process_count(),
        jax.process_index(),
    )
    with distribution.scope():
        model = spec.build(keras)
        model.compile(**spec.compile_args(keras, replicas))
    x, y = data(replicas)
    part = len(x) // processes
    x, y = x[rank * part : (rank + 1) * part], y[rank * part : (rank + 1) * part]

    def fit(epochs: int, callbacks: list) -> None:
        with distribution.scope():
            model.fit(
                x,
                y,
                batch_size=args.batch * replicas // processes,
                epochs=epochs,
                callbacks=callbacks,
                verbose=0,
            )

    return Job(fit, rank == 0, replicas, barrier=_jax_barrier)


def train_with_torch_ddp(args, spec, keras, data, strategy=None) -> Job:
    """keras.io's "Multi-GPU distributed training with PyTorch": the Keras model wrapped in torch's
    DistributedDataParallel and trained by a torch loop (torch optimizer and loss, a DataLoader with a
    DistributedSampler), under torchrun's process group; the timer's hooks called where fit calls them."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    processes, rank = dist.get_world_size(), dist.get_rank()
    model = spec.build(keras)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    compile_args = spec.compile_args(keras, processes)
    optimizer, loss_fn = (
        _torch_optimizer(compile_args["optimizer"], ddp),
        _torch_loss(compile_args["loss"], keras),
    )
    x, y = data(processes)
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, shuffle=False)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, sampler=sampler, drop_last=True)

    def fit(epochs: int, callbacks: list) -> None:
        for epoch in range(epochs):
            for callback in callbacks:
                callback.on_epoch_begin(epoch)
            sampler.set_epoch(epoch)
            torch_loop_epoch(ddp, loader, optimizer, loss_fn)
        for callback in callbacks:
            callback.on_train_end()

    return Job(fit, rank == 0, processes, barrier=dist.barrier)


def torch_loop_epoch(module: Any, loader: Any, optimizer: Any, loss_fn: Any) -> None:
    """One epoch of keras.io's torch loop, with one correction: the model is called with `training=True`,
    as `fit` calls it. The guide calls `model(inputs)`, which runs a Keras model in inference mode: batch
    normalization uses (and never updates) its moving statistics and dropout is off, less work than `fit`
    does and not the same training; timing that against `fit` would compare different computations."""
    total = 0.0
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = loss_fn(module(inputs, training=True), targets)
        loss.backward()
        optimizer.step()
        total += loss.detach()
    float(total)  # the epoch's loss reaches the host, as fit's logs do


def _torch_optimizer(optimizer: Any, module: Any) -> Any:
    """The torch optimizer the guide would write for the model's Keras one (same kind and settings)."""
    import torch

    rate = float(optimizer.learning_rate)
    if type(optimizer).__name__ == "Adam":
        return torch.optim.Adam(module.parameters(), lr=rate)
    return torch.optim.SGD(module.parameters(), lr=rate, momentum=float(getattr(optimizer, "momentum", 0.0)))


def _torch_loss(loss: Any, keras: Any) -> Any:
    """The torch loss for the model's Keras one: cross-entropy from logits or from probabilities, or MSE."""
    import torch

    name = str(getattr(loss, "name", loss)).lower()
    if "crossentropy" in name:
        logits = getattr(loss, "from_logits", False)

        def cross_entropy(outputs: Any, targets: Any) -> Any:
            targets = targets.reshape(-1).long()
            if logits:
                return torch.nn.functional.cross_entropy(outputs, targets)
            return torch.nn.functional.nll_loss(torch.log(outputs.clamp_min(1e-7)), targets)

        return cross_entropy
    return torch.nn.MSELoss()


def _jax_barrier() -> None:
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices("kscale bench: next fit")


def train_with_keras(args, spec, keras, data, strategy=None) -> Job:
    """Plain Keras in one process: the reference the single backend is compared with."""
    model = spec.build(keras)
    if spec.rebuildable:
        model.compile(**spec.compile_args(keras, 1.0))
    x, y = data(1)

    def fit(epochs: int, callbacks: list) -> None:
        model.fit(x, y, batch_size=args.batch, epochs=epochs, callbacks=callbacks, verbose=0)

    return Job(fit, True, 1)


TRAINERS: dict[str, Trainer] = {
    "kscale": train_with_kscale,
    "horovod": train_with_horovod,
    "tf": train_with_tf_distribute,
    "keras": train_with_keras,
    "keras_distribution": train_with_keras_distribution,
    "torch_ddp": train_with_torch_ddp,
}


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    if args.impl == "kscale":
        import kscale  # noqa: F401  (first, as a user's script does: joins the job, pins GPUs)
    import models  # this folder's models.py (run as a file: see the docstring)
    import numpy as np

    with contextlib.suppress(ImportError):  # no TensorFlow: Keras 3 on JAX
        _setup_tensorflow(args)
    keras = models.keras_module()
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy("mixed_float16")
    spec = models.resolve(args.model, args.gpu, _shape(args.input_shape), args.sample)
    if args.write_records:
        write_records(args, spec, args.batches * args.batch)
        return None

    @functools.cache  # one set of arrays, shared by kscale's model and the hand-written one (--against)
    def data(replicas: int) -> tuple[Any, Any]:
        return spec.data(args.batches * args.batch * replicas, np.random.default_rng(args.seed))

    def build(impl: str, strategy: Any = None) -> tuple[Job, IterationTimer]:
        return TRAINERS[impl](args, spec, keras, data, strategy), IterationTimer(keras)

    if args.against and args.against_first:
        if args.backend == "multi_worker":
            raise SystemExit(
                "--against-first: not under multi_worker (the hand-written model reuses kscale's strategy)"
            )
        other, other_timer = build(args.against)
        job, timer = build(args.impl)
    else:
        job, timer = build(args.impl)
        if args.against:
            shared = job.strategy if args.backend == "multi_worker" else None
            other, other_timer = build(args.against, shared)
    if args.against:
        train_in_turn([(job, timer), (other, other_timer)], args.warmup, args.iters)
    elif args.profile:
        import tensorflow as tf

        job.fit(args.warmup, [timer.callback])
        if job.chief:
            tf.profiler.experimental.start(args.profile)
        job.fit(args.iters, [timer.callback])
        if job.chief:
            stop_profile()
    else:
        job.fit(args.warmup + args.iters, [timer.callback])
    result = {
        "impl": args.impl,
        "backend": args.backend,
        "model": args.model,
        "replicas": job.replicas,
        "model_description": spec.description,
        "dtype_policy": keras.mixed_precision.global_policy().name,
        "per_replica_batch": args.batch,
        "batches_per_iter": args.batches,
        **_timings(args, timer, job.replicas),
    }
    if job.backups is not None:
        result["backup"] = job.backups.result()
    if args.against:
        theirs = _timings(args, other_timer, other.replicas)
        # The model built second waited for the first one: its first step says nothing.
        del (result if args.against_first else theirs)["first_step_s"]
        result["in_turn"] = {"impl": args.against, **theirs}
        result["against_first"] = args.against_first
    if job.chief and args.result:
        with open(args.result + ".tmp", "w") as f:
            json.dump(result, f)
        os.replace(args.result + ".tmp", args.result)
    return result


def train_in_turn(turns: list[tuple[Job, IterationTimer]], warmup: int, rounds: int) -> None:
    """Warm both models up, then train them in turn, one epoch each, each going first every other round.

    Before each `fit` every worker waits for the others (`Job.barrier`): the end of a `fit` can hold one
    worker for a second or more after its last callback (MobileNetV2 on 2 CPU workers: 1.0-2.5 s in about
    1 of 3 fits; it goes away with tf.data's autotuning off: benchmarks/fit_end_hold.py), and the next
    `fit`'s first step would wait for that worker inside the timed epoch. Where the `fit` starts with a
    collective of its own (kscale's broadcast under Horovod, every MultiWorkerMirroredStrategy `fit`) that
    wait falls before the timed epoch anyway; without the barrier the hand-written Horovod script alone
    paid it, and kscale looked faster than it was.
    """
    for job, timer in turns:
        job.barrier()
        job.fit(warmup, [timer.callback])
    for round_ in range(rounds):
        for job, timer in turns if round_ % 2 == 0 else reversed(turns):
            job.barrier()
            job.fit(1, [timer.callback])


def _timings(args: argparse.Namespace, timer: IterationTimer, replicas: int) -> dict[str, Any]:
    seconds = timer.seconds[args.warmup :]
    step = sorted(seconds)[len(seconds) // 2] / args.batches
    return {
        "iteration_s": seconds,
        "samples_per_s": [args.batch * replicas * args.batches / s for s in seconds],
        # From the process's start (before any import) to the end of the first training step: the end of
        # the untimed first iteration less its other steps at the timed rate.
        "first_step_s": timer.first_epoch_end - STARTED - (args.batches - 1) * step,
    }


def _shape(text: str | None) -> tuple[int, ...] | None:
    return tuple(int(d) for d in text.split(",")) if text else None


if __name__ == "__main__":
    main()
