"""Atomic writes of checkpoint files and folders: write beside the target, then rename into place."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable

_SINGLE_FILE_SUFFIXES = (".h5", ".hdf5", ".keras")


def atomic_save(filepath: str, save: Callable[[str], None]) -> None:
    """Run `save(path)` on a temporary path in the same folder, then move the result to `filepath`.

    Single files (.h5, .keras) are renamed with os.replace (atomic on POSIX). A SavedModel folder
    replaces the old one by two renames. A TensorFlow weights prefix (`ckpt` -> ckpt.index,
    ckpt.data-*, checkpoint) moves its data files first and its index and `checkpoint` state last, so
    a reader never sees an index that points at missing data.
    """
    folder = os.path.dirname(os.path.abspath(filepath))
    os.makedirs(folder, exist_ok=True)
    name = os.path.basename(filepath)
    staging = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=folder)
    try:
        staged = os.path.join(staging, name)
        save(staged)
        if os.path.isdir(staged):
            _replace_folder(staged, filepath)
        elif name.endswith(_SINGLE_FILE_SUFFIXES) or os.path.isfile(staged):
            os.replace(staged, filepath)
            _move_checkpoint_state(staging, folder)
        else:
            _move_weights_prefix(staging, name, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _replace_folder(staged: str, target: str) -> None:
    if os.path.exists(target):
        old = target + f".old-{os.getpid()}"
        os.replace(target, old)
        os.replace(staged, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staged, target)


def _move_weights_prefix(staging: str, name: str, folder: str) -> None:
    files = [f for f in os.listdir(staging) if f.startswith(name + ".")]
    for f in sorted(files, key=lambda f: f.endswith(".index")):  # data files first, the index last
        os.replace(os.path.join(staging, f), os.path.join(folder, f))
    _move_checkpoint_state(staging, folder)


def _move_checkpoint_state(staging: str, folder: str) -> None:
    state = os.path.join(staging, "checkpoint")
    if os.path.exists(state):  # relative paths inside, so it is valid in its new folder
        os.replace(state, os.path.join(folder, "checkpoint"))
