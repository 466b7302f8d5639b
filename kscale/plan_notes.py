"""What the plan says of the user's model where replicas cannot train it quite as one process: notes that
fit adds to the plan (printed once on the chief) when it learns the model's metrics and layers. Each note
names what differs and what to set instead; none changes training."""

from __future__ import annotations

from typing import Any

from kscale import log, metric_states, rebuild

_WARNED_METRIC_CLASSES: set[str] = set()


def resumed_inside_an_epoch(
    model: Any, backup: str, otherwise: str = ", as if the job had never stopped"
) -> str:
    """The end of the chief's line on a job resumed after a backup written inside an epoch: `otherwise`,
    unless `model` has stateful layers, whose state the family's BackupAndRestore (`backup`) does not hold."""
    stateful = rebuild.stateful_layers(model)
    if not stateful:
        return otherwise
    return (
        f"; but the state of the stateful layer(s) {stateful}, which {backup} does not hold, starts from "
        "zeros, so the rest of the run is not the one never stopped"
    )


def notes(backend: Any, model: Any, metrics: list) -> list[str]:
    """Every note of this module for `model` under `backend` (none where one replica computes the loss)."""
    if backend.loss_replicas < 2:  # one replica, or every step's loss is the global batch's (JAX)
        return []
    return [
        *metric_notes(backend, metrics),
        *loss_scale_notes(model),
        *batch_norm_notes(backend.family.keras_module().layers.BatchNormalization, model),
    ]


def metric_notes(backend: Any, metrics: list) -> list[str]:
    """Metrics of the user's own classes that declare nothing: kscale sums their states over replicas
    (right for totals and counts). Warned once per class, on the chief."""
    undeclared = metric_states.user_metrics_declaring_nothing(metrics)
    if not undeclared:
        return []
    note = (
        f"metric(s) {', '.join(undeclared)}: their states are summed over the replicas (right for totals and "
        "counts); declare others with kscale.combine_states (a maximum: combine_states(state='max'))"
    )
    new = [name for name in undeclared if name not in _WARNED_METRIC_CLASSES]
    if new and backend.is_chief:
        _WARNED_METRIC_CLASSES.update(new)
        log.warning(note)
    return [note]


def loss_scale_notes(model: Any) -> list[str]:
    """A mixed-precision loss scale over replicas (kscale/keras2/loss_scaling.py): each replica's float16
    backward pass carries one process's numbers, but a sum over the whole global batch (a kernel's
    gradient) is only made in float32, after the replicas' halves are summed."""
    if not hasattr(getattr(model, "optimizer", None), "inner_optimizer"):
        return []
    return [
        "loss scaling (mixed_float16): each replica's float16 gradients are one process's, so the same steps "
        "overflow and are skipped; one whose float16 sum over the global batch alone overflows (no replica's "
        "part does) is applied, where one process skips it"
    ]


def batch_norm_notes(batch_norm: type, model: Any) -> list[str]:
    """BatchNormalization layers that are not synchronized, where each replica computes a step on its
    slice: each normalizes by its slice's statistics, not the global batch's. Also where the user asked for
    synchronized=True: tf.keras 2.15 saves no such setting, so a model loaded from a file has lost it
    (generated program 84 of lane A: 0.02 off after load_model, history exact)."""
    found = [
        layer.name
        for layer in rebuild.submodules(model)
        if isinstance(layer, batch_norm) and not getattr(layer, "synchronized", False)
    ]
    if not found:
        return []
    return [
        f"BatchNormalization {', '.join(sorted(found))}: not synchronized, each replica normalizes by its own "
        "slice's statistics (one process: the global batch's); BatchNormalization(synchronized=True) for those "
        "(a tf.keras model loaded from a file has lost that setting: set it again before distribute())"
    ]
