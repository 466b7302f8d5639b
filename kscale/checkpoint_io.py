"""Writing checkpoints so a reader sees the old one or the new one, never half of one, on any file system.

Every path goes through `tf.io.gfile`, as Keras' own saving does, so `gs://`, `s3://`, `hdfs://` and
`ram://` paths work exactly as they do in plain Keras (in a process without TensorFlow - Keras 3 on
JAX - local paths are written with `os`, and remote ones need TensorFlow installed, as in Keras). A save writes into a staging folder beside its
target and then renames what it wrote into place:

- a single file (`.keras`, `.h5`) is renamed over the target: atomic on POSIX file systems, and on
  object stores (where a rename is a server-side copy) the new object appears whole or not at all;
- a TensorFlow weights prefix (`ckpt` -> `ckpt.index`, `ckpt.data-*`, `checkpoint`) moves its data
  files first and its index and `checkpoint` state file last, so the index never points at missing data;
- a folder (a SavedModel) replaces the old one by two renames where folders can be renamed, which is on
  local file systems only: `ram://` does not move a folder's files with it, and object stores copy
  them one by one. There a folder is written in place (documented in docs/guide/files.md).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from kscale.errors import MissingDependencyError

_SINGLE_FILE_SUFFIXES = (".h5", ".hdf5", ".keras")


class _LocalFiles:
    """The part of tf.io.gfile kscale uses, for local paths in a process without TensorFlow (Keras 3 on JAX)."""

    exists = staticmethod(os.path.exists)
    isdir = staticmethod(os.path.isdir)
    listdir = staticmethod(os.listdir)
    rmtree = staticmethod(shutil.rmtree)

    @staticmethod
    def makedirs(path: str) -> None:
        os.makedirs(path, exist_ok=True)

    @staticmethod
    def rename(src: str, dst: str, overwrite: bool = False) -> None:
        if not overwrite and os.path.exists(dst):
            raise FileExistsError(dst)
        os.replace(src, dst)


def _gfile(path: str = "") -> Any:
    """tf.io.gfile where TensorFlow is in the process (every path Keras accepts); local files otherwise."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"].io.gfile
    if "://" in path and not path.startswith("file://"):
        try:
            import tensorflow as tf
        except ImportError:
            raise MissingDependencyError(
                f"writing {path!r} needs TensorFlow's file systems (tf.io.gfile), as in Keras itself: pip "
                "install tensorflow-cpu (or tensorflow) beside Keras, or write to a local path."
            ) from None
        return tf.io.gfile
    return _LocalFiles


def exists(path: str) -> bool:
    """Whether `path` exists, on any file system Keras writes to (tf.io.gfile's where TensorFlow is)."""
    return bool(_gfile(path).exists(path))


def split(filepath: str) -> tuple[str, str]:
    """(folder, name) of a local path or a URL, without touching the file system.

    `os.path.abspath` would turn `gs://bucket/x` into `./gs:/bucket/x`: URLs are split on their last '/'.
    """
    if "://" in filepath:
        folder, _, name = filepath.rstrip("/").rpartition("/")
        return folder, name
    folder, name = os.path.split(os.path.normpath(filepath))
    return folder or ".", name


def is_local(path: str) -> bool:
    """Whether `path` is a plain local path (no URL scheme, file:// included), which os.* functions take."""
    return "://" not in str(path)


def renames_folders(filepath: str) -> bool:
    """True where a folder can be renamed with its contents in one step: local file systems."""
    return "://" not in filepath or filepath.startswith("file://")


@contextlib.contextmanager
def _staging(filepath: str) -> Iterator[tuple[str, str, str]]:
    """A fresh folder beside `filepath` (same file system), removed afterwards whatever happens."""
    gfile = _gfile(filepath)
    folder, name = split(filepath)
    gfile.makedirs(folder)
    staging = f"{folder}/.{name}.tmp-{uuid.uuid4().hex[:12]}"
    gfile.makedirs(staging)
    try:
        yield staging, folder, name
    finally:
        if gfile.exists(staging):
            gfile.rmtree(staging)


def atomic_save(
    filepath: str, save: Callable[[str], None], may_be_folder: bool = True, replace: bool = True
) -> None:
    """Run `save(path)` on a temporary path beside `filepath`, then move what it wrote into place.

    `may_be_folder=False` tells that `save` writes files only (weights), never a SavedModel folder.
    `replace=False` (Keras' `overwrite=False`) and an existing target: `save` gets the real path, so it
    sees the file and asks or refuses as it always does. Anything not a path (an open h5py.File) too.
    """
    if not isinstance(filepath, str | os.PathLike):
        save(filepath)
        return
    filepath = os.fspath(filepath)
    name = split(filepath)[1]
    if not replace and _gfile(filepath).exists(filepath):
        save(filepath)
        return
    if may_be_folder and not name.endswith(_SINGLE_FILE_SUFFIXES) and not renames_folders(filepath):
        save(filepath)  # a SavedModel folder on a file system that cannot rename one: written in place
        return
    gfile = _gfile(filepath)
    with _staging(filepath) as (staging, folder, name):
        staged = f"{staging}/{name}"
        save(staged)
        # Decide from what was written. `isdir` is asked on local file systems only: on `ram://` it
        # matches raw key prefixes, so `ckpt` would count as a folder of `ckpt.index`.
        prefix_files = [f for f in gfile.listdir(staging) if f.startswith(name + ".")]
        if prefix_files:
            _move_weights_prefix(staging, prefix_files, folder)
        elif renames_folders(filepath) and gfile.isdir(staged):
            _replace_folder(staged, filepath)
        else:
            gfile.rename(staged, filepath, overwrite=True)
            _move_checkpoint_state(staging, folder)


def scratch_save(filepath: str, save: Callable[[str], None]) -> None:
    """Run `save(path)` into a temporary folder beside `filepath` and delete it: for workers whose copy is not
    kept, but who must take part in a save that is a collective operation (multi-worker tf.distribute)."""
    with _staging(os.fspath(filepath)) as (staging, _, name):
        save(f"{staging}/{name}")


def _replace_folder(staged: str, target: str) -> None:
    gfile = _gfile(target)
    if gfile.exists(target):
        old = f"{target}.old-{uuid.uuid4().hex[:12]}"
        gfile.rename(target, old)
        gfile.rename(staged, target)
        gfile.rmtree(old)
    else:
        gfile.rename(staged, target)


def _move_weights_prefix(staging: str, files: list[str], folder: str) -> None:
    gfile = _gfile(folder)
    for f in sorted(files, key=lambda f: f.endswith(".index")):  # data files first, the index last
        gfile.rename(f"{staging}/{f}", f"{folder}/{f}", overwrite=True)
    _move_checkpoint_state(staging, folder)


def _move_checkpoint_state(staging: str, folder: str) -> None:
    gfile = _gfile(folder)
    state = f"{staging}/checkpoint"
    if gfile.exists(state):  # relative paths inside, so it is valid in its new folder
        gfile.rename(state, f"{folder}/checkpoint", overwrite=True)
