"""kscale.checkpoint_io.atomic_save: a checkpoint is either the old one or the new one, never half of one."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from kscale.checkpoint_io import atomic_save, renames_folders, scratch_save, split

from .conftest import tiny_model


@pytest.fixture
def model() -> tf.keras.Model:
    model = tiny_model()
    rng = np.random.default_rng(7)
    model.set_weights([rng.normal(size=w.shape).astype("float32") for w in model.get_weights()])
    return model


def assert_same_weights(a: tf.keras.Model, b: tf.keras.Model) -> None:
    for left, right in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_array_equal(left, right)


def leftovers(folder) -> list[str]:
    return [name for name in os.listdir(folder) if ".tmp-" in name or ".old-" in name]


@pytest.mark.parametrize("filename", ["model.h5", "model.keras"])
def test_single_file_model(tmp_path, model, filename):
    target = tmp_path / filename
    atomic_save(str(target), lambda path: model.save(path))
    assert os.listdir(tmp_path) == [filename]
    assert_same_weights(tf.keras.models.load_model(target), model)


def test_single_file_replaces_the_previous_one(tmp_path, model):
    target = tmp_path / "weights.h5"
    target.write_bytes(b"old checkpoint")
    atomic_save(str(target), lambda path: model.save_weights(path))
    assert target.read_bytes() != b"old checkpoint"
    fresh = tiny_model(seed=3)
    fresh.load_weights(target)
    assert_same_weights(fresh, model)
    assert leftovers(tmp_path) == []


def test_saved_model_folder_replaces_the_existing_one(tmp_path, model):
    target = tmp_path / "saved"
    target.mkdir()
    (target / "stale.txt").write_text("from the previous save")
    atomic_save(str(target), lambda path: model.save(path, save_format="tf"))
    assert (target / "saved_model.pb").exists()
    assert not (target / "stale.txt").exists()
    assert os.listdir(tmp_path) == ["saved"]  # neither the staging nor the old folder is left
    assert_same_weights(tf.keras.models.load_model(target), model)


def test_tensorflow_weights_prefix(tmp_path, model):
    prefix = tmp_path / "ckpt"
    atomic_save(str(prefix), lambda path: model.save_weights(path))
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt.data-00000-of-00001", "ckpt.index"]
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(prefix)  # the state file points at the new home
    fresh = tiny_model(seed=3)
    fresh.load_weights(str(prefix))
    assert_same_weights(fresh, model)


def test_a_missing_folder_is_created(tmp_path, model):
    target = tmp_path / "runs" / "1" / "model.h5"
    atomic_save(str(target), lambda path: model.save_weights(path))
    assert target.exists()


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def failing_save(partial: str):
    """A save that writes part of its output and then dies, as a killed or full-disk save would."""

    def save(path: str) -> None:
        if partial == "file":
            with open(path, "wb") as f:
                f.write(b"half a chec")
        elif partial == "folder":
            os.makedirs(os.path.join(path, "variables"))
            with open(os.path.join(path, "saved_model.pb"), "wb") as f:
                f.write(b"half")
        else:
            with open(path + ".data-00000-of-00001", "wb") as f:
                f.write(b"half")
        raise OSError("disk full")

    return save


@pytest.mark.parametrize(
    ("name", "partial"),
    [("model.h5", "file"), ("model.keras", "file"), ("saved", "folder"), ("ckpt", "prefix")],
)
def test_a_save_that_fails_midway_leaves_the_previous_checkpoint(tmp_path, model, name, partial):
    target = tmp_path / name
    if partial == "file":
        atomic_save(str(target), lambda path: model.save(path))
    elif partial == "folder":
        atomic_save(str(target), lambda path: model.save(path, save_format="tf"))
    else:
        atomic_save(str(target), lambda path: model.save_weights(path))
    before = snapshot(tmp_path)
    with pytest.raises(OSError, match="disk full"):
        atomic_save(str(target), failing_save(partial))
    assert snapshot(tmp_path) == before
    assert leftovers(tmp_path) == []


# -- URLs: every file system tf.io.gfile knows ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "folder", "name"),
    [
        ("gs://bucket/runs/model.keras", "gs://bucket/runs", "model.keras"),
        ("ram://x/ckpt/", "ram://x", "ckpt"),
        ("model.h5", ".", "model.h5"),
        ("runs/1/model.h5", "runs/1", "model.h5"),
    ],
)
def test_split_never_turns_a_url_into_a_local_path(path, folder, name):
    assert split(path) == (folder, name)


def test_only_local_paths_rename_folders():
    assert renames_folders("/tmp/x") and renames_folders("relative/x") and renames_folders("file:///tmp/x")
    assert (
        not renames_folders("gs://b/x") and not renames_folders("ram://x") and not renames_folders("s3://b/x")
    )


@pytest.fixture
def ram() -> str:
    return f"ram://checkpoint-io/{uuid.uuid4().hex}"


@pytest.mark.parametrize(("name", "kind"), [("model.keras", "model"), ("ckpt", "weights")])
def test_ram_saves_are_staged_and_renamed(ram, model, name, kind):
    target = f"{ram}/{name}"
    write = (lambda path: model.save(path)) if kind == "model" else (lambda path: model.save_weights(path))
    atomic_save(target, write, may_be_folder=kind == "model")
    names = sorted(tf.io.gfile.listdir(ram))
    assert names == (
        ["model.keras"] if kind == "model" else ["checkpoint", "ckpt.data-00000-of-00001", "ckpt.index"]
    )
    # What was renamed into place is the model, whole: it loads with the same weights.
    if kind == "model":
        restored = tf.keras.models.load_model(target)
    else:
        restored = tf.keras.models.clone_model(model)
        restored.load_weights(target)
    for saved, original in zip(restored.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(saved, original)
    contents = {name: tf.io.gfile.GFile(f"{ram}/{name}", "rb").read() for name in names}
    with pytest.raises(OSError, match="disk full"):
        atomic_save(target, failing_gfile_save(), may_be_folder=kind == "model")
    assert sorted(tf.io.gfile.listdir(ram)) == names  # the failed save left the previous one alone...
    assert {name: tf.io.gfile.GFile(f"{ram}/{name}", "rb").read() for name in names} == contents  # ...whole


def failing_gfile_save():
    def save(path: str) -> None:
        with tf.io.gfile.GFile(path, "wb") as f:
            f.write(b"half")
        raise OSError("disk full")

    return save


def test_a_saved_model_folder_on_ram_is_written_in_place(ram, model):
    # ram:// cannot rename a folder with its files (documented): the folder is written where asked.
    atomic_save(f"{ram}/saved", lambda path: model.save(path, save_format="tf"))
    assert_same_weights(tf.keras.models.load_model(f"{ram}/saved"), model)


def test_overwrite_false_hands_the_real_path_to_the_save(tmp_path, model):
    target = tmp_path / "model.h5"
    target.write_bytes(b"keep me")
    seen = []
    atomic_save(str(target), seen.append, replace=False)
    assert seen == [str(target)] and target.read_bytes() == b"keep me"


def test_scratch_save_writes_beside_the_target_and_leaves_nothing(tmp_path, model):
    seen = []

    def save(path):
        seen.append(path)
        model.save(path)
        assert os.path.exists(path)

    scratch_save(str(tmp_path / "model.keras"), save)
    assert len(seen) == 1 and os.path.dirname(os.path.dirname(seen[0])) == str(tmp_path)
    assert os.listdir(tmp_path) == []
