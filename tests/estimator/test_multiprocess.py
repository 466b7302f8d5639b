"""kscale.estimator under two real Horovod workers (horovodrun --gloo on localhost)."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.multiprocess
WORKERS = Path(__file__).parent / "workers"


def read_ranks(out_dir, size=2):
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(size)]


@pytest.fixture(scope="module")
def collectives(tmp_path_factory, horovodrun):
    out = tmp_path_factory.mktemp("collectives")
    horovodrun(WORKERS / "collectives.py", str(out), timeout=150)
    return read_ranks(out)


@pytest.fixture(scope="module")
def estimator_run(tmp_path_factory, horovodrun):
    out, user = tmp_path_factory.mktemp("estimator_out"), tmp_path_factory.mktemp("user_dirs")
    horovodrun(WORKERS / "estimator_train.py", str(out), str(user), timeout=150)
    return read_ranks(out), user


@pytest.mark.timeout(200)
def test_compute_gradients_applies_the_average_on_every_rank(collectives):
    average = np.mean([r["local_gradient"] for r in collectives], axis=0)
    assert not np.allclose(collectives[0]["local_gradient"], collectives[1]["local_gradient"])
    for r in collectives:
        expected = np.array(r["init"]) - r["lr"] * average
        np.testing.assert_allclose(r["w_avg"], expected, rtol=1e-6)
        np.testing.assert_allclose(r["w_fp16"], expected, rtol=1e-3)
        assert r["optimizer_class"].startswith("horovod.")


@pytest.mark.timeout(200)
def test_plain_tf_gradients_silently_skip_the_average(collectives):
    for r in collectives:
        local = np.array(r["init"]) - r["lr"] * np.array(r["local_gradient"])
        np.testing.assert_allclose(r["w_plain"], local, rtol=1e-6)
    assert not np.allclose(collectives[0]["w_plain"], collectives[1]["w_plain"])  # the ranks drift apart


@pytest.mark.timeout(200)
def test_broadcast_hook_makes_differently_initialised_variables_equal(collectives):
    assert collectives[0]["w_bcast_own_init"] != collectives[1]["w_bcast_own_init"]
    for r in collectives:
        assert r["w_bcast"] == collectives[0]["w_bcast_own_init"]


@pytest.mark.timeout(200)
def test_estimator_ranks_end_with_identical_variables(estimator_run):
    ranks, _ = estimator_run
    assert ranks[0]["variables"] == ranks[1]["variables"]
    assert ranks[0]["variables"]["global_step"] == ranks[0]["steps"] == 8  # 64 examples / 8 * 2 epochs // 2


@pytest.mark.timeout(200)
def test_run_config_on_rank_1_writes_nothing_into_its_model_dir(estimator_run):
    ranks, user = estimator_run
    rank0, rank1 = ranks
    assert rank0["config_model_dir"] == str(user / "rank0")
    assert any(name.startswith("model.ckpt-8") for name in os.listdir(user / "rank0"))
    assert not (user / "rank1").exists(), sorted(os.listdir(user / "rank1"))
    private = rank1["config_model_dir"]
    assert not os.path.realpath(private).startswith(os.path.realpath(user))
    assert rank1["private_dir_existed"] and not os.path.exists(private)  # removed when the worker exited
    assert rank1["config_save_checkpoints_steps"] is None and rank1["config_save_summary_steps"] is None
    assert rank0["config_save_checkpoints_steps"] == 2 and rank0["config_save_summary_steps"] == 1


@pytest.mark.timeout(200)
def test_run_config_pins_the_local_gpu_and_keeps_the_users_session_settings(estimator_run):
    ranks, _ = estimator_run
    for rank, r in enumerate(ranks):
        assert r["visible_device_list"] == str(rank) and r["allow_growth"]
        assert r["intra_op_parallelism_threads"] == 1


@pytest.mark.timeout(200)
def test_examples_per_second_is_reported_by_rank_0_only(estimator_run):
    ranks, _ = estimator_run
    assert ranks[0]["examples_per_sec"] > 0 and ranks[1]["examples_per_sec"] is None
    assert ranks[0]["global_batch_size"] == 16
