"""Keras callbacks kscale uses, one per module, each usable on its own."""

from kscale.callbacks.average_metrics import AverageMetrics
from kscale.callbacks.broadcast import BroadcastInitialState
from kscale.callbacks.chief_only import chief_only, for_this_worker, is_chief_only
from kscale.callbacks.chief_writes import ChiefWritesBackup

__all__ = [
    "AverageMetrics",
    "BroadcastInitialState",
    "ChiefWritesBackup",
    "chief_only",
    "for_this_worker",
    "is_chief_only",
]
