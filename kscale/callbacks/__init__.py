"""Keras callbacks kscale uses, one per module, each usable on its own."""

from kscale.callbacks.atomic_checkpoint import AtomicModelCheckpoint
from kscale.callbacks.broadcast import BroadcastInitialState
from kscale.callbacks.chief_only import chief_only, for_this_worker, is_chief_only

__all__ = ["AtomicModelCheckpoint", "BroadcastInitialState", "chief_only", "for_this_worker", "is_chief_only"]
