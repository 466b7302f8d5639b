"""A distributed model is a real Keras model under every launcher (tests/multiprocess/workers/keras_api.py).

In one process, under horovodrun -np 2, with two mirrored CPU replicas and with two TF_CONFIG workers:
the returned type, the user's own callback objects and their state, compile() again, the *_on_batch
methods, Keras' cloning and saving APIs, and every file written once, by the chief, atomically.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

WORKER = "tests/multiprocess/workers/keras_api.py"
KINDS = ("sequential", "functional", "subclassed")

pytestmark = pytest.mark.multiprocess


def _results(workdir, ranks: int) -> list[dict]:
    out = []
    for rank in range(ranks):
        with open(os.path.join(workdir, f"result.{rank}.json")) as f:
            out.append(json.load(f))
    return out


def _files(workdir, kind: str) -> set[str]:
    folder = os.path.join(workdir, kind)
    return {
        os.path.relpath(os.path.join(root, name), folder)
        for root, _, names in os.walk(folder)
        for name in names
    }


def _check(workdir, ranks: int, replicas: int, chief_writes_everything: bool = True) -> list[dict]:
    results = _results(workdir, ranks)
    for result in results:
        assert result["replicas"] == replicas
    for kind in KINDS:
        per_rank = [result["models"][kind] for result in results]
        for rank, r in enumerate(per_rank):
            where = f"{kind}, rank {rank}"
            assert r["is_users_class"], where
            assert r["history_model_is_it"], where
            assert r["learning_rate_after_compile"] == pytest.approx(0.001 * replicas), where
            for check in ("clone_matches", "save_model_loads", "saved_model_serves", "nested_runs"):
                assert r[check], f"{check}: {where}"
            # Every rank ends with the same weights and reports the same (averaged) batch results.
            for left, right in zip(r["weights"], per_rank[0]["weights"], strict=True):
                np.testing.assert_array_equal(np.asarray(left), np.asarray(right), err_msg=where)
            # ... equal to what one process reports for all ranks' batches together (not rank 0's own)
            for name in ("train_on_batch", "test_on_batch"):
                assert r[name] == pytest.approx(r[f"{name}_one_process"], rel=1e-5), f"{name}: {where}"
            np.testing.assert_allclose(r["predict_on_batch"], r["predict_on_batch_one_process"], rtol=1e-5)
            assert r["predict_on_batch"] == per_rank[0]["predict_on_batch"], where
            assert r["stopped_epoch"] == 1, where  # the user's EarlyStopping ran, alike on every rank
            assert r["ram_written"] is (rank == 0), where  # each process has its own ram://
        chief = per_rank[0]
        assert chief["best"] == pytest.approx(min(chief["val_loss"])), kind  # the user's object ran
        assert chief["final_loads"], kind
        expected = {
            "best.keras",
            "by_callback.keras",
            "log.csv",
            "final.keras",
            "final_weights/checkpoint",
            "final_weights/ckpt.index",
            "final_weights/ckpt.data-00000-of-00001",
        }
        expected |= {f"keras_save_model.{rank}.keras" for rank in range(ranks)}
        files = {f for f in _files(workdir, kind) if not f.startswith("saved_model.")}
        assert files == expected, kind  # nothing else: no staging or scratch leftovers, no rank-1 copies
    assert results[0]["failed_save"] == "OSError"  # the chief's own error
    for rank, result in enumerate(results[1:], start=1):
        assert result["failed_save"] == "SaveError", f"rank {rank}: {result['failed_save']}"
    chief_saves = results[0]["saves"]["atomic"]
    assert sum(1 for path in chief_saves if path.endswith("by_callback.keras")) == 2 * len(KINDS)
    for rank, result in enumerate(results[1:], start=1):
        assert result["saves"]["atomic"] == [], f"rank {rank} wrote {result['saves']['atomic']}"
        if not chief_writes_everything:  # multi-worker TF: the others take part in every save, into scratch
            assert len(result["saves"]["scratch"]) == len(chief_saves)
    return results


@pytest.mark.timeout(300)
def test_one_process(run_python, tmp_path):
    run_python([WORKER, "single", str(tmp_path)])
    _check(tmp_path, ranks=1, replicas=1)


@pytest.mark.timeout(300)
def test_two_mirrored_replicas(run_python, tmp_path):
    run_python([WORKER, "mirrored", str(tmp_path)])
    _check(tmp_path, ranks=1, replicas=2)


@pytest.mark.timeout(300)
def test_two_horovod_workers(horovodrun, tmp_path):
    horovodrun(2, [WORKER, "horovod", str(tmp_path)])
    _check(tmp_path, ranks=2, replicas=2)


@pytest.mark.timeout(300)
def test_two_tf_config_workers(tf_config_workers, tmp_path):
    tf_config_workers(2, [WORKER, "multi_worker", str(tmp_path)])
    results = _check(tmp_path, ranks=2, replicas=2, chief_writes_everything=False)
    for result in results:  # a batch per rank would train on parts of each: a DataError on every rank
        assert all(result["models"][kind]["per_rank_batches_refused"] for kind in KINDS)
