"""Keras callbacks kscale uses, one per module, each usable on its own.

`chief_only` and `for_this_worker` are framework-free; the tf.keras callbacks load on first use, so that
`import kscale` (which exports `chief_only`) imports no TensorFlow.
"""

from __future__ import annotations

import importlib
from typing import Any

from kscale.callbacks.chief_only import chief_only, for_this_worker, is_chief_only

_LAZY = {
    "AverageMetrics": "kscale.callbacks.average_metrics",
    "BroadcastInitialState": "kscale.callbacks.broadcast",
    "ChiefWritesBackup": "kscale.callbacks.chief_writes",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kscale.callbacks' has no attribute {name!r}")


__all__ = [
    "AverageMetrics",
    "BroadcastInitialState",
    "ChiefWritesBackup",
    "chief_only",
    "for_this_worker",
    "is_chief_only",
]
