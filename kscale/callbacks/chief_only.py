"""Which callbacks run on the chief (rank 0) only, and how a user marks their own.

Framework-free: each Keras family's backend says which of its callback classes write files or print
progress (and, under a multi-worker tf.distribute strategy, which must run everywhere).
"""

from __future__ import annotations

from typing import Any

_MARK = "_kscale_chief_only"


def chief_only(callback: Any) -> Any:
    """Mark `callback` to run on the chief only (e.g. one that writes files or sends messages)."""
    setattr(callback, _MARK, True)
    return callback


def is_chief_only(
    callback: Any, chief_only_types: tuple[type, ...] = (), everywhere_types: tuple[type, ...] = ()
) -> bool:
    """Marked by the user, or of a type that writes on its own (unless it must run everywhere)."""
    if getattr(callback, _MARK, False):
        return True
    if isinstance(callback, everywhere_types):
        return False
    return isinstance(callback, chief_only_types)


def for_this_worker(
    callbacks: list[Any],
    is_chief: bool,
    chief_only_types: tuple[type, ...] = (),
    everywhere_types: tuple[type, ...] = (),
) -> list[Any]:
    """The callbacks this worker runs: all on the chief, the others without the chief-only ones, and
    silent there (ReduceLROnPlateau, EarlyStopping and ModelCheckpoint print the same line on every rank
    otherwise): their `verbose` is set to 0 on this worker's objects."""
    if is_chief:
        return list(callbacks)
    kept = [cb for cb in callbacks if not is_chief_only(cb, chief_only_types, everywhere_types)]
    for callback in kept:
        if isinstance(getattr(callback, "verbose", None), int) and callback.verbose:
            callback.verbose = 0
    return kept
