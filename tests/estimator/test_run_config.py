import os
import shutil

import pytest
import tensorflow as tf

from kscale.errors import MissingDependencyError
from kscale.estimator import _deps, run_config


def test_single_process_keeps_everything(tmp_path):
    user_session = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=3)
    config = run_config(
        str(tmp_path), save_checkpoints_steps=7, tf_random_seed=1, session_config=user_session
    )
    assert config.model_dir == str(tmp_path)
    assert config.save_checkpoints_steps == 7
    assert config.tf_random_seed == 1
    assert config.session_config == user_session  # nothing to pin: the Estimator sees what it would alone
    assert run_config(str(tmp_path)).session_config is None  # so the Estimator still applies its defaults


def test_rank_0_of_two_keeps_model_dir_and_pins_gpu_0(tmp_path, fake_workers):
    fake_workers(rank=0, size=2)
    config = run_config(str(tmp_path), save_checkpoints_steps=5, save_summary_steps=10)
    assert config.model_dir == str(tmp_path)
    assert (config.save_checkpoints_steps, config.save_summary_steps) == (5, 10)
    assert config.session_config.gpu_options.visible_device_list == "0"
    assert config.session_config.gpu_options.allow_growth
    assert config.session_config.allow_soft_placement  # the Estimator's default session settings are kept


def test_rank_1_writes_elsewhere_with_checkpoints_off(tmp_path, fake_workers, kscale_log):
    fake_workers(rank=1, size=2)
    user_session = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=2, log_device_placement=True)
    config = run_config(
        str(tmp_path / "out"),
        save_checkpoints_steps=5,
        save_summary_steps=10,
        keep_checkpoint_max=3,
        log_step_count_steps=50,
        tf_random_seed=42,
        session_config=user_session,
    )
    try:
        private = os.path.realpath(config.model_dir)
        assert not private.startswith(os.path.realpath(tmp_path))
        assert os.path.isdir(private) and os.listdir(private) == []
        assert config.save_checkpoints_steps is None and config.save_checkpoints_secs is None
        assert config.save_summary_steps is None
        # The user's other settings survive, including the session config's.
        assert (config.keep_checkpoint_max, config.log_step_count_steps, config.tf_random_seed) == (3, 50, 42)
        session = config.session_config
        assert session.intra_op_parallelism_threads == 2 and session.log_device_placement
        assert session.gpu_options.visible_device_list == "1" and session.gpu_options.allow_growth
        assert user_session.gpu_options.visible_device_list == ""  # the caller's proto is not modified
        assert not (tmp_path / "out").exists()
        assert any("checkpoints and summaries off" in m for m in kscale_log)
    finally:
        shutil.rmtree(config.model_dir, ignore_errors=True)


def test_missing_estimator_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setattr(_deps, "is_estimator_available", lambda: False)
    with pytest.raises(MissingDependencyError, match=r"pip install tensorflow-estimator==2\.15\.0"):
        run_config(str(tmp_path))
