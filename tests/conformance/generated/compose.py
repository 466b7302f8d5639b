"""Keras programs composed from independent feature axes, as source text a user could have written.

`compose(seed, family)` picks one value of every axis (`AXES`) with a generator seeded by `seed`, keeps
only combinations a user could run (`_allowed`: what the family has, what one process itself trains), and
writes a conformance program (tests/conformance/harness.py: `job.distribute`, `job.batch`, `job.rate`...)
whose docstring names the values. The same seed gives the same program in a lane, so a failing one is
run again, or saved under tests/conformance/programs/ as a named program, from its seed alone.

What a combination cannot give exactly is written into the program as the named programs write it:
`EXACT = False` where one process's training is not reproducible by replicas (dropout, batch statistics
of each replica's own slice), `NOT_EXACT_UNDER` for the ways where it is not (a batch normalization
synchronized by every backend but torch's), `EXPECT_ERROR_UNDER` for the refusals kscale documents, and a
larger `TOLERANCE` where compute is in 16 bits.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import random
import textwrap

#: Every axis and its values, in the order a program is composed. Each value's source is in `_render`.
AXES: dict[str, tuple[str, ...]] = {
    "model": ("sequential", "functional", "multi_io", "subclassed", "compute_loss", "train_step", "nested"),
    "layers": (
        "dense",
        "conv",
        "batchnorm",
        "batchnorm_sync",
        "dropout",
        "embedding",
        "lstm",
        "gru",
        "stateful_lstm",
        "normalization",
        "lookup",
    ),
    "task": ("regression", "classification"),
    "loss": ("name", "object", "object_sum", "function", "regularized"),
    "metrics": ("none", "builtin", "user_sum", "user_max", "lambda", "weighted"),
    "optimizer": ("sgd_momentum", "adam", "adamw", "rmsprop"),
    "optimizer_option": (
        "none",
        "clipnorm",
        "clipvalue",
        "global_clipnorm",
        "ema",
        "schedule",
        "accumulation",
    ),
    "data": (
        "arrays",
        "arrays_shuffled",
        "arrays_odd",
        "sample_weight",
        "class_weight",
        "validation_split",
        "validation_data",
        "dataset",
        "dataset_shuffled",
        "dataset_repeat",
        "generator",
        "pydataset",
        "dataloader",
    ),
    "fit": ("once", "twice", "initial_epoch", "recompile", "save_load", "evaluate_predict"),
    "callbacks": (
        "none",
        "lr_scheduler",
        "lr_scheduler_relative",
        "plateau",
        "early_stopping",
        "checkpoint",
        "csv_logger",
        "tensorboard",
        "user_logs",
        "backup_restore",
    ),
    "precision": ("float32", "mixed_float16", "mixed_bfloat16"),
}

#: Where a backup_restore program's first fit is interrupted, by the seed's parity (not drawn: the seeds
#: drawn before this variant keep their programs): an error at an epoch's start, after the backup of the
#: epoch before; or in the middle of an epoch, after a `BackupAndRestore(save_freq=2)` backup inside it
#: (kscale resumes at the batch after the backup, as the reference that is never stopped:
#: job.stops_inside_epochs).
_BACKUP_RESTORE_AT = ("mid_epoch", "epoch_begin")

#: compile's steps_per_execution (keras.io's performance advice), drawn from a stream of its own, after the
#: axes (every seed keeps the values it had): 4 in about one program in four, where the family's Keras
#: takes it (Keras 3 on torch takes 1 only).
_STEPS_PER_EXECUTION = (1, 1, 1, 4)

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
_TF_FAMILIES = ("keras2", "keras3-tf")


@dataclasses.dataclass(frozen=True)
class Program:
    """A composed program: its name, its values by axis, and its source."""

    name: str
    seed: int
    values: dict
    source: str


def compose(seed: int, family: str) -> Program:
    """The program of `seed` for a lane of `family`: the first combination `_allowed` of the values drawn."""
    rng = random.Random(f"{family}:{seed}")
    for _ in range(10_000):
        values = {axis: rng.choice(choices) for axis, choices in AXES.items()}
        if _allowed(values, family):
            name = f"g{seed:04d}"
            if values["callbacks"] == "backup_restore":
                values["backup_restore_at"] = _BACKUP_RESTORE_AT[seed % 2]
            variants = random.Random(f"{family}:{seed}:variants")
            if family != "keras3-torch" and variants.choice(_STEPS_PER_EXECUTION) > 1:
                values["steps_per_execution"] = 4
            return Program(name, seed, values, _render(name, seed, values, family))
    raise RuntimeError(f"no allowed combination found for seed {seed} in {family}")


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _allowed(v: dict, family: str) -> bool:
    """Whether a user could write this program in this family and run it as one process."""
    tf_data = family in _TF_FAMILIES
    sequence = v["layers"] in ("lstm", "gru", "stateful_lstm")
    rules = [
        # what the family has
        not (v["data"].startswith("dataset") and not tf_data),
        not (v["data"] == "dataloader" and family != "keras3-torch"),
        not (v["layers"] == "lookup" and not tf_data),
        # Keras 3's array adapters take no strings: a lookup layer's strings come through tf.data there
        not (v["layers"] == "lookup" and family != "keras2" and not v["data"].startswith("dataset")),
        # tf.keras feeds a generator's or Sequence's strings as shape (None, None): a one-hot lookup of
        # unknown last dimension is rank 3, which StringLookup refuses (one process fails too)
        not (v["layers"] == "lookup" and v["data"] in ("generator", "pydataset")),
        not (v["optimizer_option"] == "accumulation" and family == "keras2"),
        # 16-bit floats on JAX/torch CPUs are slow but for small dense layers; mixed_float16 there runs
        # Keras' LossScaleOptimizer, whose scale each process must keep as one process's (torch's was not)
        not (v["precision"] == "mixed_float16" and not tf_data and v["layers"] not in ("dense", "dropout")),
        not (v["callbacks"] == "tensorboard" and not _has("tensorboard")),
        not (v["model"] == "train_step" and family == "keras3-jax"),  # written for TF and torch here
        # what one process trains (Keras' own limits)
        not (v["layers"] == "stateful_lstm" and family == "keras3-torch"),
        not (v["layers"] == "stateful_lstm" and v["data"] not in ("arrays", "sample_weight")),
        not (v["layers"] == "stateful_lstm" and v["fit"] in ("save_load", "recompile", "evaluate_predict")),
        not (v["layers"] == "stateful_lstm" and v["model"] not in ("sequential", "functional")),
        not (v["layers"] == "normalization" and v["model"] in ("subclassed", "train_step", "nested")),
        not (v["task"] == "regression" and v["data"] == "class_weight"),
        not (v["data"] == "class_weight" and v["metrics"] == "weighted"),  # Keras: not both weights
        not (v["loss"] == "object_sum" and v["data"] in ("validation_split", "validation_data")),
        not (v["loss"] == "object_sum" and v["metrics"] == "weighted"),
        # multi_io: two inputs, two outputs, fed as arrays
        not (v["model"] == "multi_io" and v["layers"] not in ("dense", "batchnorm_sync", "dropout")),
        not (v["model"] == "multi_io" and v["data"] not in ("arrays", "arrays_shuffled", "arrays_odd")),
        not (v["model"] == "multi_io" and v["loss"] in ("function", "object_sum")),
        not (v["model"] == "multi_io" and v["metrics"] in ("weighted", "user_max", "user_sum")),
        # a train_step of one's own trains with the compiled loss on (x, y) batches
        not (v["model"] == "train_step" and v["data"] in ("sample_weight", "class_weight")),
        not (v["model"] == "train_step" and v["metrics"] == "weighted"),
        not (v["model"] == "train_step" and v["fit"] in ("save_load", "recompile")),
        not (v["model"] == "train_step" and v["precision"] != "float32"),
        not (v["model"] == "train_step" and v["optimizer_option"] == "accumulation"),
        # files: a saved model with classes of one's own loads only with custom_objects
        not (v["fit"] == "save_load" and v["model"] not in ("sequential", "functional")),
        not (v["fit"] == "save_load" and v["loss"] == "function"),
        not (v["fit"] == "save_load" and v["metrics"] in ("user_sum", "user_max", "lambda")),
        not (v["fit"] == "save_load" and v["layers"] in ("lookup", "normalization", "stateful_lstm")),
        not (v["fit"] == "save_load" and v["precision"] != "float32"),
        not (v["fit"] == "save_load" and v["optimizer_option"] in ("ema", "accumulation")),
        # tf.keras writes .h5 files of Sequential and functional models only (ModelCheckpoint, save)
        not (family == "keras2" and v["model"] == "subclassed" and v["callbacks"] == "checkpoint"),
        # generators: Keras 3 validates a generator unevenly in one process (python_generator's docstring)
        not (v["data"] == "generator" and v["callbacks"] in ("early_stopping", "checkpoint", "plateau")),
        not (v["callbacks"] == "backup_restore" and v["fit"] != "once"),
        not (v["callbacks"] == "backup_restore" and v["data"] in ("generator", "dataset_repeat")),
        not (v["callbacks"] == "backup_restore" and v["model"] == "train_step"),
        not (v["fit"] == "recompile" and v["layers"] in ("lookup", "stateful_lstm")),
        not (sequence and v["precision"] == "mixed_float16"),
        not (v["precision"] != "float32" and v["layers"] in ("lookup", "embedding", "normalization")),
        not (v["precision"] != "float32" and v["loss"] in ("function", "regularized")),  # Keras 3: dtypes
        not (v["precision"] != "float32" and v["metrics"] in ("user_sum", "user_max")),
        # 16 bits (tolerance 5e-2) with every gradient clipped to 0.05 and the rate halved every epoch: the
        # weights move less than the tolerance, so nothing is compared (lane B, seed 51: 0.044)
        not (
            v["precision"] != "float32"
            and v["optimizer_option"] == "clipvalue"
            and v["callbacks"] == "plateau"
        ),
        # mixed_float16 (its first steps skipped while the loss scale falls) with an update every other step
        # (gradient accumulation) and the rate cut every epoch (x0.7, or halved): the weights move less than
        # the tolerance (torch, seed 139: 0.040)
        not (
            v["precision"] == "mixed_float16"
            and v["optimizer_option"] == "accumulation"
            and v["callbacks"] in ("lr_scheduler_relative", "plateau")
        ),
        not (v["optimizer_option"] == "ema" and v["fit"] != "once"),  # Keras 3 on JAX: EMA fails a second fit
        not (v["layers"] == "batchnorm_sync" and not tf_data),  # synchronized=True: TensorFlow's only
        # a rate a callback writes needs a float rate (Keras refuses to set a schedule's)
        not (v["optimizer_option"] == "schedule" and v["callbacks"].startswith(("lr_", "plateau"))),
    ]
    return all(rules)


def _exactness(v: dict, family: str) -> dict:
    """EXACT, NOT_EXACT_UNDER, TOLERANCE and EXPECT_ERROR_UNDER of a combination (see the module's
    docstring)."""
    exact = v["layers"] not in ("dropout", "batchnorm")
    not_exact: set[str] = set()
    if v["layers"] == "batchnorm" and family == "keras3-jax":
        exact = True  # every step's batch statistics are the global batch's
    if v["layers"] == "batchnorm_sync":
        not_exact.add("torch")  # torch's BatchNormalization has no synchronized statistics
    if v["layers"] == "dropout" and family == "keras3-jax":
        exact = False
    if v["precision"] == "mixed_float16" and v["loss"] == "object_sum":
        # The plan's loss-scaling note: a float16 sum over the global batch that alone overflows (no
        # replica's half does) is applied where one process skips the step (seed 51 of lane A, 388 and 261
        # of C-tf: 0.07-0.15 off in every way alike; one process nudged by 1e-6 moves 1e-5)
        exact = False
    if (
        v["callbacks"] == "backup_restore"
        and v["backup_restore_at"] == "mid_epoch"
        and (
            v["data"] in ("arrays_shuffled", "arrays_odd", "dataset_shuffled", "pydataset")
            or v["layers"] == "stateful_lstm"
            or (family == "keras2" and v.get("steps_per_execution", 1) > 1)
        )
    ):
        # kscale resumes at the batch after the backup, and the reference is the run never stopped; fit's
        # shuffle (its default for arrays_odd and a PyDataset's batches) or a dataset's orders the resumed
        # epoch anew in each run (the plan's shuffle note; JAX seeds 290 and 988: 0.05 and 0.02 off); a
        # stateful LSTM's state is in no backup (Keras 3 on TensorFlow seed 2796: 0.04; the chief says so);
        # tf.keras with steps_per_execution resumes after the first batch of the backup's last execution (a
        # warning says so)
        exact = False
    if v["layers"] == "batchnorm_sync" and v["fit"] == "save_load" and family == "keras2":
        exact = False  # tf.keras saves no `synchronized`: the loaded model's is not (the plan says so)
    errors = {}
    if v["model"] == "subclassed" and family == "keras3-jax":
        # one process sets its distribution at distribute(): the model built before is copied, from a config
        # Keras cannot revive without a get_config (the error says to build it in kscale.scope())
        errors["jax_devices"] = "ModelError: cloning model"
    if v["layers"] == "stateful_lstm":
        errors.update(
            {"keras2/mirrored": "BackendError: a stateful", "keras2/multi_worker": "BackendError: a stateful"}
        )
        errors["jax"] = errors["jax_devices"] = "BackendError: a stateful"
    if v["optimizer_option"] == "accumulation":
        errors.update(
            {
                "keras3-tf/mirrored": "BackendError: gradient_accumulation_steps",
                "keras3-tf/multi_worker": "BackendError: gradient_accumulation_steps",
            }
        )
    if v.get("steps_per_execution", 1) > 1:  # Keras' own bug under a strategy (program steps_per_execution)
        errors.update(
            {
                "keras3-tf/mirrored": "BackendError: compile(steps_per_execution=",
                "keras3-tf/multi_worker": "BackendError: compile(steps_per_execution=",
            }
        )
    if v["callbacks"] == "backup_restore" and v["data"] == "dataset_shuffled":
        # fit again on the reshuffling dataset an interrupted fit read (named: reshuffled_dataset_resumed)
        errors.update({"mirrored": "DataError", "multi_worker": "DataError"})
    tolerance = 1e-5
    if v["precision"] != "float32":
        tolerance = (
            5e-2  # 16-bit compute (bfloat16: 3 digits): the same sums in another order round otherwise
        )
    elif v["optimizer"] in ("adam", "adamw", "rmsprop"):
        tolerance = 1e-3  # normalised steps (g / sqrt(v)) amplify float32 rounding where gradients are small
    elif v["loss"] == "object_sum":
        tolerance = 1e-4  # sums over batches amplify float32 rounding
    return {"exact": exact, "not_exact": sorted(not_exact), "errors": errors, "tolerance": tolerance}


#: The records of History where a classification computes in 16 bits: its accuracies apart (see below).
HISTORIES = ("history", "more", "after_recompile", "resumed")
#: How far a 16-bit program's accuracy may be from one process's: two logits a bfloat16 (3 digits) cannot
#: tell apart go either way in another summation order, and a heavily weighted sample moves a weighted
#: accuracy by up to this much (torch, seed 351: 0.053 of val_accuracy, every loss and weight within 1e-3).
ACCURACY_UNDER_16_BITS = 0.1


def _accuracy_apart(v: dict) -> bool:
    return v["precision"] != "float32" and v["task"] == "classification"


def _record_history(variable: str, v: dict, name: str = "", from_epoch: int = 0) -> list[str]:
    """Lines recording a History as `name` (its epochs from `from_epoch` on); in 16 bits with its
    accuracies as `name`_accuracy."""
    name = name or variable
    history = (
        f"job.history({variable}, from_epoch={from_epoch})" if from_epoch else f"job.history({variable})"
    )
    if not _accuracy_apart(v):
        return [f'job.record("{name}", {history})']
    return [
        f"logs = {history}",
        f'job.record("{name}", {{k: v for k, v in logs.items() if "accuracy" not in k}})',
        f'job.record("{name}_accuracy", {{k: v for k, v in logs.items() if "accuracy" in k}})',
    ]


def _inexact_accuracies() -> dict:
    """INEXACT_UNDER of a 16-bit classification: in every way, its accuracies within ACCURACY_UNDER_16_BITS."""
    bounds = {f"{name}_accuracy": ACCURACY_UNDER_16_BITS for name in HISTORIES}
    return {way: bounds for way in ("horovod", "multi_worker", "mirrored", "jax", "jax_devices", "torch")}


# -- rendering ------------------------------------------------------------------------------------------------
def _render(name: str, seed: int, v: dict, family: str) -> str:
    e = _exactness(v, family)
    body = _main_body(seed, v, family)
    listing = "\n".join(f"{axis}: {value}" for axis, value in v.items())
    return (
        f'"""Generated program {name} (tests/conformance/generated, seed {seed}, {family}).\n\n{listing}\n"""\n\n'
        "import numpy as np\n\n"
        "import kscale\n"
        "from tests.conformance.harness import classes, data\n\n"
        f"FAMILIES = ({family!r},)\n"
        f"EXACT = {e['exact']}\n"
        f"TOLERANCE = {e['tolerance']!r}\n"
        f"NOT_EXACT_UNDER = {set(e['not_exact'])!r}\n"
        f"EXPECT_ERROR_UNDER = {e['errors']!r}\n"
        + ("EXACT_WHILE_SAME = ('loss_scales',)\n" if v["precision"] == "mixed_float16" else "")
        + (f"INEXACT_UNDER = {_inexact_accuracies()!r}\n" if _accuracy_apart(v) else "")
        + "RELATIVE = True  # differences relative to the numbers' size (a loss summed over a batch is large)\n"
        f"MOVED_AT_LEAST = {max(e['tolerance'], 1e-4)!r}\n\n\n"
        + "def main(job):\n"
        + textwrap.indent(body, "    ")
    )


def _main_body(seed: int, v: dict, family: str) -> str:
    keras2 = family == "keras2"
    lines: list[str] = ["keras = job.keras"]
    if family in _TF_FAMILIES:
        lines.append("import tensorflow as tf")
    if family == "keras3-torch":
        lines.append("import torch")
    lines.append(f"rng = np.random.default_rng({seed})")
    n = 67 if v["data"] == "arrays_odd" else 64
    if v["layers"] == "stateful_lstm":
        n = 64
    lines += _data_lines(v, n)
    if v["precision"] != "float32":
        lines.append(f"keras.mixed_precision.set_global_policy({v['precision']!r})")
        lines.append("try:")
        inner = _model_and_training(v, family, keras2)
        lines.append(textwrap.indent(inner, "    "))
        lines.append("finally:")
        lines.append('    keras.mixed_precision.set_global_policy("float32")')
    else:
        lines.append(_model_and_training(v, family, keras2))
    lines.append("return model")
    return "\n".join(lines) + "\n"


def _data_lines(v: dict, n: int) -> list[str]:
    """x, y (and x_val, y_val, weights) as one process holds them, the same on every rank."""
    layers, classify = v["layers"], v["task"] == "classification"
    lines = []
    if layers == "conv":
        lines.append(f"x = rng.normal(size=({n}, 6, 6, 1)).astype('float32')")
    elif layers in ("lstm", "gru", "stateful_lstm"):
        lines.append(f"x = rng.normal(size=({n}, 5, 3)).astype('float32')")
    elif layers == "embedding":
        lines.append(f"x = rng.integers(1, 30, size=({n}, 8)).astype('int32')")
    elif layers == "lookup":
        lines.append(f"x = np.array([['abcde'[i] for i in rng.integers(0, 5, size={n})]]).T")
    else:
        lines.append(f"x = rng.normal(size=({n}, 6)).astype('float32')")
    if layers == "lookup":
        lines.append("features = (x == np.array(list('abcde'))).astype('float32')")
    else:
        lines.append(f"features = np.asarray(x, 'float32').reshape({n}, -1)")
    lines.append("projection = rng.normal(size=(features.shape[1], 3))")
    if classify:
        lines.append("y = (features @ projection).argmax(axis=1).astype('int32')")
    else:
        # Standardized, as users scale regression targets: raw sums of 36 conv features (variance 36) made
        # SGD with momentum chaotic, a 1e-6 change of the initial weights ending 0.15 apart (seeds 238, 472)
        lines.append(
            "y = (features @ projection[:, :1] / np.sqrt(features.shape[1]) + 0.1).astype('float32')"
        )
    if v["model"] == "multi_io":
        lines.append(f"aux = rng.normal(size=({n}, 3)).astype('float32')")
        lines.append("y_b = (aux @ rng.normal(size=(3, 3))).argmax(axis=1).astype('int32')")
    if v["data"] == "sample_weight" or v["metrics"] == "weighted":
        lines.append(f"weights = (0.5 + rng.random({n})).astype('float32')")
    if v["data"] == "validation_data":
        lines.append("x_val, y_val = x[::3], y[::3]")
    return lines


def _head(v: dict) -> str:
    if v["task"] == "classification":
        return 'keras.layers.Dense(3, activation="softmax", dtype="float32")'
    return 'keras.layers.Dense(1, dtype="float32")'


def _input_shape(v: dict) -> str:
    return {
        "conv": "(6, 6, 1)",
        "lstm": "(5, 3)",
        "gru": "(5, 3)",
        "stateful_lstm": "(5, 3)",
        "embedding": "(8,)",
        "lookup": "(1,)",
    }.get(v["layers"], "(6,)")


def _body_layers(v: dict) -> list[str]:
    """The layers between the input and the head, as expressions."""
    regularizer = ", kernel_regularizer=keras.regularizers.L2(1e-3)" if v["loss"] == "regularized" else ""
    dense = f'keras.layers.Dense(8, activation="tanh"{regularizer})'
    return {
        "dense": [dense],
        "conv": ['keras.layers.Conv2D(4, 3, activation="relu")', "keras.layers.Flatten()", dense],
        # No bias before the normalization (as Keras' guides write it): its gradient is zero in exact
        # arithmetic, and Adam-like optimizers turn the rounding left of it into steps of ±rate whose signs
        # differ between any two ways of summing a batch (measured: 5e-3 on that bias alone, every other
        # weight to 1e-7).
        "batchnorm": [
            f"keras.layers.Dense(8, use_bias=False{regularizer})",
            "keras.layers.BatchNormalization()",
            'keras.layers.Activation("relu")',
        ],
        "batchnorm_sync": [
            f"keras.layers.Dense(8, use_bias=False{regularizer})",
            "keras.layers.BatchNormalization(synchronized=True)",
            'keras.layers.Activation("relu")',
        ],
        "dropout": [dense, "keras.layers.Dropout(0.25)"],
        "embedding": ["keras.layers.Embedding(30, 6)", "keras.layers.GlobalAveragePooling1D()", dense],
        "lstm": ["keras.layers.LSTM(4)", dense],
        "gru": ["keras.layers.GRU(4)", dense],
        "stateful_lstm": ["keras.layers.LSTM(4, stateful=True)", dense],
        "normalization": ["normalizer", dense],
        "lookup": [
            'keras.layers.StringLookup(vocabulary=list("abcd"), output_mode="one_hot")',
            dense,
        ],
    }[v["layers"]] + (["keras.layers.ActivityRegularization(l2=1e-3)"] if v["loss"] == "regularized" else [])


def _model_lines(v: dict, family: str, keras2: bool) -> list[str]:
    shape, head, body = _input_shape(v), _head(v), _body_layers(v)
    dtype = (
        ', dtype="int32"'
        if v["layers"] == "embedding"
        else ', dtype="string"'
        if v["layers"] == "lookup"
        else ""
    )
    batch = ", batch_size=job.batch(4)" if v["layers"] == "stateful_lstm" else ""
    lines = []
    if v["layers"] == "normalization":
        lines += ["normalizer = keras.layers.Normalization()", "normalizer.adapt(x)"]
    kind = v["model"]
    if kind == "sequential":
        lines.append(
            f"model = keras.Sequential([keras.Input({shape}{dtype}{batch}), {', '.join(body)}, {head}])"
        )
    elif kind in ("functional", "compute_loss", "train_step"):
        lines.append(f"inputs = keras.Input({shape}{dtype}{batch})")
        lines.append("hidden = inputs")
        for layer in body:
            lines.append(f"hidden = {layer}(hidden)")
        cls = {"functional": "keras.Model", "compute_loss": "Penalized", "train_step": "OwnStep"}[kind]
        if kind == "compute_loss":
            lines += _compute_loss_class(keras2)
        if kind == "train_step":
            lines += _train_step_class(family)
        lines.append(f"model = {cls}(inputs, {head}(hidden))")
    elif kind == "nested":
        lines.append(
            f"inner = keras.Sequential([keras.Input({shape}{dtype}), {', '.join(body)}], name='inner')"
        )
        lines.append(f"model = keras.Sequential([keras.Input({shape}{dtype}), inner, {head}])")
    elif kind == "subclassed":
        lines += [
            "class Net(keras.Model):",
            "    def __init__(self):",
            "        super().__init__()",
            f"        self.body = [{', '.join(body)}]",
            f"        self.head = {head}",
            "",
            "    def call(self, inputs, training=False):",
            "        hidden = inputs",
            "        for layer in self.body:",
            "            hidden = layer(hidden, training=training)",
            "        return self.head(hidden)",
            "",
            "model = Net()",
            f"model(x[:{4}])  # built on a batch, as subclassed models are",
        ]
    elif kind == "multi_io":
        lines += [
            f"main_in, aux_in = keras.Input({shape}, name='main'), keras.Input((3,), name='aux')",
            "hidden = main_in",
        ]
        for layer in body:
            lines.append(f"hidden = {layer}(hidden)")
        lines += [
            "merged = keras.layers.Concatenate()([hidden, aux_in])",
            f"out_a = {head.replace('keras.layers.Dense(', 'keras.layers.Dense(name=' + repr('out_a') + ', units=')}(merged)",
            "out_b = keras.layers.Dense(3, activation='softmax', name='out_b', dtype='float32')(merged)",
            "model = keras.Model({'main': main_in, 'aux': aux_in}, {'out_a': out_a, 'out_b': out_b})",
        ]
    return lines


def _compute_loss_class(keras2: bool) -> list[str]:
    if keras2:
        signature, call = (
            "self, x=None, y=None, y_pred=None, sample_weight=None",
            "x, y, y_pred, sample_weight",
        )
        mean = "tf.reduce_mean(tf.square(tf.cast(y_pred, 'float32')))"
    else:
        signature = "self, x=None, y=None, y_pred=None, sample_weight=None, training=True"
        call, mean = (
            "x, y, y_pred, sample_weight, training",
            "keras.ops.mean(keras.ops.square(keras.ops.cast(y_pred, 'float32')))",
        )
    return [
        "class Penalized(keras.Model):",
        f"    def compute_loss({signature}):",
        f"        return super().compute_loss({call}) + 0.05 * {mean}",
    ]


def _train_step_class(family: str) -> list[str]:
    """keras.io's "customizing what happens in fit()": the compiled loss, the optimizer, the metrics."""
    if family == "keras3-torch":
        return [
            "class OwnStep(keras.Model):",
            "    def train_step(self, data):",
            "        x, y = data",
            "        self.zero_grad()",
            "        y_pred = self(x, training=True)",
            "        loss = self.compute_loss(y=y, y_pred=y_pred)",
            "        loss.backward()",
            "        trainable = [v for v in self.trainable_weights]",
            "        gradients = [v.value.grad for v in trainable]",
            "        with torch.no_grad():",
            "            self.optimizer.apply(gradients, trainable)",
            "        for metric in self.metrics:",
            "            if metric.name == 'loss':",
            "                metric.update_state(loss)",
            "            else:",
            "                metric.update_state(y, y_pred)",
            "        return {m.name: m.result() for m in self.metrics}",
        ]
    loss = "self.compiled_loss(y, y_pred)" if family == "keras2" else "self.compute_loss(y=y, y_pred=y_pred)"
    update = (
        "        self.compiled_metrics.update_state(y, y_pred)\n"
        "        return {m.name: m.result() for m in self.metrics}"
        if family == "keras2"
        else "        for metric in self.metrics:\n"
        "            if metric.name == 'loss':\n"
        "                metric.update_state(loss)\n"
        "            else:\n"
        "                metric.update_state(y, y_pred)\n"
        "        return {m.name: m.result() for m in self.metrics}"
    )
    return [
        "class OwnStep(keras.Model):",
        "    def train_step(self, data):",
        "        x, y = data",
        "        with tf.GradientTape() as tape:",
        "            y_pred = self(x, training=True)",
        f"            loss = {loss}",
        "        gradients = tape.gradient(loss, self.trainable_variables)",
        "        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))",
        *update.split("\n"),
    ]


def _loss_expr(v: dict, keras2: bool) -> str:
    classify = v["task"] == "classification"
    name = "sparse_categorical_crossentropy" if classify else "mse"
    cls = "SparseCategoricalCrossentropy" if classify else "MeanSquaredError"
    if v["model"] == "multi_io":
        a = '"sparse_categorical_crossentropy"' if classify else '"mse"'
        if v["loss"] == "object":
            a = f"keras.losses.{cls}()"
        return f'{{"out_a": {a}, "out_b": "sparse_categorical_crossentropy"}}, loss_weights={{"out_a": 1.0, "out_b": 0.5}}'
    if v["loss"] == "object":
        return f"keras.losses.{cls}()"
    if v["loss"] == "object_sum":
        reduction = "keras.losses.Reduction.SUM" if keras2 else '"sum"'
        return f"keras.losses.{cls}(reduction={reduction})"
    if v["loss"] == "function":
        return "loss_fn"
    return repr(name)


def _loss_function_lines(v: dict, keras2: bool) -> list[str]:
    if v["loss"] != "function" or v["model"] == "multi_io":
        return []
    # one loss per sample, as Keras' own loss functions return (tests/conformance/programs/
    # loss_function_batch_mean.py has one that reduces over the batch itself)
    ops = "tf" if keras2 else "keras.ops"
    mean = "tf.reduce_mean" if keras2 else "keras.ops.mean"
    if v["task"] == "classification":
        body = "keras.losses.sparse_categorical_crossentropy(y_true, y_pred)"
        return ["def loss_fn(y_true, y_pred):", f"    return {body}"]
    return [
        "def loss_fn(y_true, y_pred):",
        f"    return {mean}({ops}.square({ops}.cast(y_true, y_pred.dtype) - y_pred), axis=-1)",
    ]


def _metric_lines(v: dict, keras2: bool) -> tuple[list[str], str]:
    """Definitions, and compile's metric arguments."""
    classify, kind = v["task"] == "classification", v["metrics"]
    ops = "tf" if keras2 else "keras.ops"
    reduce_max, reduce_sum = (
        ("tf.reduce_max", "tf.reduce_sum") if keras2 else ("keras.ops.max", "keras.ops.sum")
    )
    if kind == "none":
        return [], ""
    if kind == "builtin":
        if v["model"] == "multi_io":
            first = '["accuracy"]' if classify else '["mae"]'
            return [], f', metrics={{"out_a": {first}, "out_b": ["accuracy"]}}'
        if classify:
            return [], ', metrics=["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(k=2)]'
        return [], ', metrics=["mae", keras.metrics.RootMeanSquaredError()]'
    if kind == "lambda":

        def given(name: str) -> str:  # two outputs: for the first, by name (Keras 3 takes no list there)
            return f', metrics={{"out_a": [{name}]}}' if v["model"] == "multi_io" else f", metrics=[{name}]"

        if classify:
            predicted = f"{ops}.cast({ops}.argmax(y_pred, axis=-1), 'int32')"
            true = f"{ops}.cast({ops}.reshape(y_true, [-1]), 'int32')"
            return [
                "def hit(y_true, y_pred):",
                f"    return {ops}.cast({ops}.equal({predicted}, {true}), 'float32')",
            ], given("hit")
        return [
            "def error(y_true, y_pred):",
            f"    return {ops}.abs({ops}.cast(y_true, y_pred.dtype) - y_pred)",
        ], given("error")
    if kind == "weighted":
        metric = '"accuracy"' if classify else '"mae"'
        return [], f", weighted_metrics=[{metric}]"
    error = (
        f"{reduce_max}(y_pred, axis=-1)"
        if classify
        else f"{ops}.abs({ops}.cast(y_true, y_pred.dtype) - y_pred)"
    )
    if kind == "user_sum":
        return [
            "class Total(keras.metrics.Metric):",
            "    def __init__(self, name='total', **kwargs):",
            "        super().__init__(name=name, **kwargs)",
            "        self.total = self.add_weight(name='total', shape=(), initializer='zeros')",
            "        self.count = self.add_weight(name='count', shape=(), initializer='zeros')",
            "",
            "    def update_state(self, y_true, y_pred, sample_weight=None):",
            f"        error = {error}",
            f"        self.total.assign_add({reduce_sum}(error))",
            f"        self.count.assign_add({ops}.cast({ops}.shape(error)[0], 'float32'))",
            "",
            "    def result(self):",
            "        return self.total / self.count",
        ], ", metrics=[Total()]"
    return [
        "@kscale.combine_states(peak='max')",
        "class Peak(keras.metrics.Metric):",
        "    def __init__(self, name='peak', **kwargs):",
        "        super().__init__(name=name, **kwargs)",
        "        self.peak = self.add_weight(name='peak', shape=(), initializer='zeros')",
        "",
        "    def update_state(self, y_true, y_pred, sample_weight=None):",
        f"        self.peak.assign({ops}.maximum(self.peak, {reduce_max}({error})))",
        "",
        "    def result(self):",
        "        return self.peak * 1.0",
    ], ", metrics=[Peak()]"


def _executions(v: dict) -> str:
    """compile's steps_per_execution argument, where the program has one."""
    steps = v.get("steps_per_execution", 1)
    return f", steps_per_execution={steps}" if steps > 1 else ""


def _optimizer_expr(v: dict) -> str:
    rate = {"sgd_momentum": 0.02, "adam": 0.005, "adamw": 0.005, "rmsprop": 0.002}[v["optimizer"]]
    if v["loss"] == "object_sum" and v["optimizer"] == "sgd_momentum":
        rate /= 8  # a sum over a batch of 8 steps 8 times a mean's: as its users set it, or it diverges
    rate_expr = f"job.rate({rate})"
    if v["optimizer_option"] == "schedule":
        rate_expr = (
            f"keras.optimizers.schedules.ExponentialDecay(job.rate({rate}), decay_steps=3, decay_rate=0.8)"
        )
    option = {
        "none": "",
        "clipnorm": ", clipnorm=0.5",
        "clipvalue": ", clipvalue=0.05",
        "global_clipnorm": ", global_clipnorm=0.5",
        "ema": ", use_ema=True, ema_momentum=0.9",
        "schedule": "",
        "accumulation": ", gradient_accumulation_steps=2",
    }[v["optimizer_option"]]
    cls = {
        "sgd_momentum": "SGD",
        "adam": "Adam",
        "adamw": "AdamW",
        "rmsprop": "RMSprop",
    }[v["optimizer"]]
    extra = ", momentum=0.9" if v["optimizer"] == "sgd_momentum" else ""
    extra += ", weight_decay=0.01" if v["optimizer"] == "adamw" else ""
    return f"keras.optimizers.{cls}({rate_expr}{extra}{option})"


def _feed(v: dict, family: str) -> tuple[list[str], str, str]:
    """Definitions, fit's data arguments, and evaluate's."""
    data, keras2 = v["data"], family == "keras2"
    multi = v["model"] == "multi_io"
    x_expr = "{'main': x, 'aux': aux}" if multi else "x"
    y_expr = "{'out_a': y, 'out_b': y_b}" if multi else "y"
    weights = ", sample_weight=weights" if (data == "sample_weight" or v["metrics"] == "weighted") else ""
    evaluate = f"{x_expr}, {y_expr}, batch_size=job.batch(4){weights}"
    if v["loss"] == "object_sum":  # a sum over a batch depends on the batches: whole global batches
        evaluate = f"x[:64], y[:64], batch_size=job.batch(4){weights and ', sample_weight=weights[:64]'}"
    if v["layers"] == "lookup" and not keras2:  # strings: through tf.data, in whole global batches
        sliced = "(x[:64], y[:64], weights[:64])" if weights else "(x[:64], y[:64])"
        evaluate = f"tf.data.Dataset.from_tensor_slices({sliced}).batch(job.batch(4))"
    shuffle = "" if data in ("arrays_shuffled", "arrays_odd") else ", shuffle=False"
    if v["layers"] == "stateful_lstm":
        shuffle = ", shuffle=False"
    defs: list[str] = []
    if data in ("arrays", "arrays_shuffled", "arrays_odd", "sample_weight"):
        return defs, f"{x_expr}, {y_expr}, batch_size=job.batch(4){weights}{shuffle}", evaluate
    if data == "class_weight":
        return (
            defs,
            f"x, y, batch_size=job.batch(4), class_weight={{0: 1.0, 1: 2.0, 2: 0.5}}{weights}{shuffle}",
            evaluate,
        )
    if data == "validation_split":
        return defs, f"x, y, batch_size=job.batch(4), validation_split=0.25{weights}{shuffle}", evaluate
    if data == "validation_data":
        return (
            defs,
            f"x, y, batch_size=job.batch(4), validation_data=(x_val, y_val){weights}{shuffle}",
            evaluate,
        )
    with_weights = "(x, y, weights)" if weights else "(x, y)"
    if data == "dataset":
        defs.append(f"train = tf.data.Dataset.from_tensor_slices({with_weights}).batch(job.batch(4))")
        return defs, "train", evaluate
    if data == "dataset_shuffled":
        defs.append(
            f"train = tf.data.Dataset.from_tensor_slices({with_weights}).shuffle(64, seed=5).batch(job.batch(4))"
        )
        return defs, "train", evaluate
    if data == "dataset_repeat":
        defs.append(
            f"train = tf.data.Dataset.from_tensor_slices({with_weights}).batch(job.batch(4)).repeat()"
        )
        return defs, "train, steps_per_epoch=job.steps(16)", evaluate
    if data == "generator":
        parts = "x[s:e], y[s:e], weights[s:e]" if weights else "x[s:e], y[s:e]"
        defs += [
            "def batches(size):",
            "    while True:",
            "        for s in range(0, len(x), size):",
            "            e = s + size",
            f"            yield {parts}",
        ]
        return defs, "batches(job.batch(4)), steps_per_epoch=job.steps(16)", evaluate
    if data == "pydataset":
        base = "keras.utils.Sequence" if keras2 else "keras.utils.PyDataset"
        parts = "self.x[s:e], self.y[s:e], weights[s:e]" if weights else "self.x[s:e], self.y[s:e]"
        defs += [
            f"class Batches({base}):",
            "    def __init__(self, x, y, size):",
            "        super().__init__()",
            "        self.x, self.y, self.size = x, y, size",
            "",
            "    def __len__(self):",
            "        return int(np.ceil(len(self.x) / self.size))",
            "",
            "    def __getitem__(self, index):",
            "        s, e = index * self.size, (index + 1) * self.size",
            f"        return {parts}",
        ]
        return defs, "Batches(x, y, job.batch(4))", evaluate
    # a torch DataLoader over a map-style Dataset
    item = "torch.from_numpy(np.asarray(self.x[i])), torch.from_numpy(np.asarray(self.y[i]))"
    if weights:
        item += ", torch.tensor(weights[i])"
    defs += [
        "class Pairs(torch.utils.data.Dataset):",
        "    def __init__(self, x, y):",
        "        self.x, self.y = x, y",
        "",
        "    def __len__(self):",
        "        return len(self.x)",
        "",
        "    def __getitem__(self, i):",
        f"        return {item}",
    ]
    return defs, "torch.utils.data.DataLoader(Pairs(x, y), batch_size=job.batch(4), shuffle=False)", evaluate


def _callback_lines(v: dict) -> tuple[list[str], str, list[str]]:
    """Definitions, fit's callbacks argument, and what to record of them after fit."""
    kind = v["callbacks"]
    suffix = "('.h5' if job.family == 'keras2' else '.keras')"
    if kind == "none":
        return [], "", []
    if kind == "lr_scheduler":
        return (
            [
                "schedule = keras.callbacks.LearningRateScheduler(lambda epoch, lr: job.rate(0.01) * 0.5**epoch)"
            ],
            ", callbacks=[schedule]",
            [],
        )
    if kind == "lr_scheduler_relative":
        return (
            ["schedule = keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.7)"],
            ", callbacks=[schedule]",
            [],
        )
    if kind == "plateau":
        return (
            [
                "plateau = keras.callbacks.ReduceLROnPlateau(monitor='loss', factor=0.5, patience=0, min_delta=100.0, min_lr=job.rate(0.001))"
            ],
            ", callbacks=[plateau]",
            [],
        )
    if kind == "early_stopping":
        # No loss improves by 100: it stops after patience + 1 epochs. With the best (first) epoch restored a
        # 16-bit program trains one epoch, less than its tolerance (torch 423, JAX 276, 424): it keeps its last
        stop = "patience=1, restore_best_weights=True" if v["precision"] == "float32" else "patience=2"
        return (
            [f"stopping = keras.callbacks.EarlyStopping(monitor='loss', min_delta=100.0, {stop})"],
            ", callbacks=[stopping]",
            ['job.record("stopped_epoch", stopping.stopped_epoch)'],
        )
    if kind == "checkpoint":
        return (
            [
                f"checkpoint = keras.callbacks.ModelCheckpoint(job.path('best' + {suffix}), monitor='loss', save_best_only=True)"
            ],
            ", callbacks=[checkpoint]",
            ['job.record("checkpoint_best", float(checkpoint.best))'],
        )
    if kind == "csv_logger":
        return (
            ["logger = keras.callbacks.CSVLogger(job.path('log.csv'), append=True)"],
            ", callbacks=[logger]",
            [],
        )
    if kind == "tensorboard":
        return ["board = keras.callbacks.TensorBoard(job.path('tensorboard'))"], ", callbacks=[board]", []
    if kind == "user_logs":
        return (
            [
                "class Logs(keras.callbacks.Callback):",
                "    def __init__(self):",
                "        super().__init__()",
                "        self.seen = []",
                "",
                "    def on_epoch_end(self, epoch, logs=None):",
                "        self.seen.append({k: float(v) for k, v in sorted((logs or {}).items()) if k not in ('lr', 'learning_rate')})",
                "",
                "reader = Logs()",
            ],
            ", callbacks=[reader]",
            ['job.record("logs_seen", reader.seen)'],
        )
    if v["backup_restore_at"] == "mid_epoch":
        return (
            [  # backup_restore: interrupted after batch 4 of epoch 2 (backed up after batch 3), run again
                "class Interrupt(keras.callbacks.Callback):",
                "    def on_epoch_begin(self, epoch, logs=None):",
                "        self.epoch = epoch",
                "",
                "    def on_train_batch_end(self, batch, logs=None):",
                "        if self.epoch == 1 and batch == 4 and job.stops_inside_epochs():",
                "            raise RuntimeError('interrupted')",
                "",
                "backup = keras.callbacks.BackupAndRestore(job.path('backup'), save_freq=2)",
            ],
            ", callbacks=[backup]",
            [],
        )
    return (
        [  # backup_restore: interrupted in epoch 2, run again with the same backup
            "class Interrupt(keras.callbacks.Callback):",
            "    def on_epoch_begin(self, epoch, logs=None):",
            "        if epoch == 1:",
            "            raise RuntimeError('interrupted')",
            "",
            "backup = keras.callbacks.BackupAndRestore(job.path('backup'))",
        ],
        ", callbacks=[backup]",
        [],
    )


def _with_loss_scales(callbacks: str, v: dict) -> str:
    """fit's callbacks argument, with the recorder of the dynamic loss scale in mixed_float16 (harness
    `Job.loss_scales`: compare.py compares with one process only while the loss scales agree)."""
    if v["precision"] != "mixed_float16":
        return callbacks
    return callbacks[:-1] + ", scales]" if callbacks else ", callbacks=[scales]"


def _built_again(lines: list[str], v: dict) -> list[str]:
    """The model built again in the same process (a backup_restore program's second run): a subclassed one
    inside `job.scope()`, as kscale's ModelError says (the first distribute() took the strategy's scope
    from the process, and Keras cannot revive such a model from its config; seeds 856, 1238, 2110 and 2904
    of Keras 3 on TensorFlow); a new process builds it after `import kscale`."""
    if v["model"] != "subclassed":
        return lines
    return ["with job.scope():", *[f"    {line}" if line else line for line in lines]]


def _model_and_training(v: dict, family: str, keras2: bool) -> str:
    lines: list[str] = []
    lines += _loss_function_lines(v, keras2)
    metric_defs, metrics = _metric_lines(v, keras2)
    lines += metric_defs
    feed_defs, fit_data, evaluate = _feed(v, family)
    lines += feed_defs
    callback_defs, callbacks, after = _callback_lines(v)

    def build(fresh_seed: bool = True) -> list[str]:
        out = ["job.seed()"] if fresh_seed else []
        out += _model_lines(v, family, keras2)
        out.append(
            f"model.compile(optimizer={_optimizer_expr(v)}, loss={_loss_expr(v, keras2)}{metrics}{_executions(v)})"
        )
        out.append("model = job.distribute(model)")
        return out

    lines += build()
    lines += callback_defs
    if v["precision"] == "mixed_float16":
        lines.append("scales = job.loss_scales()")
    callbacks = _with_loss_scales(callbacks, v)
    # 16-bit programs train longer: their tolerance is 5e-2, and a check is vacuous unless the weights move more
    epochs = 2 if v["precision"] == "float32" else 4
    fit = v["fit"]
    if v["callbacks"] == "backup_restore":
        lines += [
            "try:",
            f"    model.fit({fit_data}, epochs=3, verbose=0{_with_loss_scales(', callbacks=[backup, Interrupt()]', v)})",
            "except RuntimeError as err:",
            "    if 'interrupted' not in str(err):",
            "        raise",
            *_built_again(build(), v),
            f"history = model.fit({fit_data}, epochs=3, verbose=0{_with_loss_scales(', callbacks=[backup]', v)})",
            *_record_history("history", v, from_epoch=1),
        ]
    elif fit == "initial_epoch":
        lines.append(
            f"history = model.fit({fit_data}, epochs={epochs + 1}, initial_epoch=1, verbose=0{callbacks})"
        )
        lines += _record_history("history", v)
    else:
        lines.append(f"history = model.fit({fit_data}, epochs={epochs}, verbose=0{callbacks})")
        lines += _record_history("history", v)
    if fit == "twice":
        lines.append(f"more = model.fit({fit_data}, epochs=1, verbose=0{callbacks})")
        lines += _record_history("more", v)
    if fit == "recompile":
        lines += [
            "model.layers[0].trainable = False  # fine-tuning: the first layer frozen, compiled again",
            f"model.compile(optimizer={_optimizer_expr(v)}, loss={_loss_expr(v, keras2)}{metrics}{_executions(v)})",
            f"again = model.fit({fit_data}, epochs=1, verbose=0{_with_loss_scales('', v)})",
            *_record_history("again", v, "after_recompile"),
        ]
    if fit == "save_load":
        lines += [
            "path = job.path('model' + ('.h5' if job.family == 'keras2' else '.keras'))",
            "model.save(path)",
            "model = job.distribute(keras.models.load_model(path))",
            f"resumed = model.fit({fit_data}, epochs=1, verbose=0)",
            *_record_history("resumed", v),
        ]
    lines += after
    if v["model"] != "train_step":
        lines.append(f'job.record("evaluate", model.evaluate({evaluate}, verbose=0))')
    if fit == "evaluate_predict" or v["model"] == "train_step":
        first = "{'main': x[:5], 'aux': aux[:5]}" if v["model"] == "multi_io" else "x[:5]"
        if v["layers"] == "lookup" and family != "keras2":  # strings: through tf.data (see _feed)
            first = "tf.data.Dataset.from_tensor_slices(x[:5]).batch(5)"
        lines.append(f'job.record("predict", model.predict({first}, verbose=0))')
    return "\n".join(lines)
