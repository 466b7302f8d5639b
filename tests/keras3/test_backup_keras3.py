"""Keras 3's BackupAndRestore across processes (TF_CONFIG workers on TensorFlow, JAX processes, torchrun): a job
killed after epoch 2 of 4 resumes at epoch 3, on the same number of processes or on another.

On the same number the resumed weights equal one uninterrupted process at the same global batch and rate
(SGD with momentum: the optimizer's own state must come back too). On another number every process
restores exactly what the chief backed up and trains at the rate scaled for its own world.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import keras
import numpy as np
import pytest

from kscale import environment

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(300)]

KSCALE = Path(sys.executable).parent / "kscale"
WORKER = Path(__file__).parent / "workers" / "resume.py"
LR = 0.02  # the worker's rate per replica
TOLERANCE = 1e-5


#: Seconds each start of a job may take: a job restarted twice starts its processes three times (on torch
#: on a busy 2-core AMD EPYC 7002, 240 s for all three ran out, 2026-12-01).
EACH_START = 240


def _starts_limit(starts: int) -> int:
    """A test's own limit where its job starts `starts` times: each start's, and the test's own work."""
    return EACH_START * starts + 180


def _launch(processes: int, *args: str, restarts: int = 0, **variables: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(environment.LAUNCHER_VARIABLE_PREFIXES)}
    env.update(variables)
    command = [sys.executable, WORKER, *args]
    if processes > 1:
        command = [KSCALE, "run", "-np", str(processes), "--max-restarts", str(restarts), "--", *command]
    timeout = EACH_START * (restarts + 1)
    return subprocess.run([str(c) for c in command], env=env, capture_output=True, text=True, timeout=timeout)


def _killed(processes: int, workdir: Path) -> None:
    done = _launch(processes, "kscale", str(workdir), "--crash-after-epochs", "2")
    assert done.returncode != 0 and "dying after epoch 2" in done.stdout, (
        done.stdout[-3000:] + done.stderr[-3000:]
    )
    assert (workdir / "backup").exists()  # the chief's backup is there to resume from


def _resumed(processes: int, workdir: Path) -> list[dict]:
    done = _launch(processes, "kscale", str(workdir))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads((workdir / f"result.{rank}.json").read_text()) for rank in range(processes)]


def _assert_same_history(result: dict, uninterrupted: dict) -> None:
    """The epochs a resumed job ran report what the uninterrupted run reported for them."""
    epochs = result["history"]["epoch"]
    assert epochs == result["epochs"] and uninterrupted["history"]["epoch"] == [0, 1, 2, 3], epochs
    resumed_loss = result["history"]["loss"]
    uninterrupted_loss = [uninterrupted["history"]["loss"][epoch] for epoch in epochs]
    assert resumed_loss == pytest.approx(uninterrupted_loss, rel=TOLERANCE), (
        resumed_loss,
        uninterrupted_loss,
    )


def _max_diff(a: list, b: list) -> float:
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    workdir = tmp_path_factory.mktemp("uninterrupted")
    done = _launch(1, "reference", str(workdir))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((workdir / "result.0.json").read_text())


@pytest.fixture(scope="module")
def killed_by_two(tmp_path_factory) -> Path:
    """A workdir where a 2-process job died after epoch 2's backup (launched once for the tests that resume
    it; each copies it)."""
    workdir = tmp_path_factory.mktemp("killed_by_two")
    _killed(2, workdir)
    return workdir


def _copy_of(killed: Path, tmp_path: Path) -> Path:
    workdir = tmp_path / "job"
    shutil.copytree(killed, workdir)
    return workdir


def _assert_restored_the_chiefs_backup(results: list[dict], workdir: Path, resumed: tuple = (2, 3)) -> None:
    backed_up = json.loads((workdir / "backed_up.0.json").read_text())
    for rank, result in enumerate(results):
        for part in ("weights", "optimizer"):
            assert _max_diff(result["restored"][part], backed_up[part]) == 0.0, f"rank {rank}: {part}"
        assert result["epochs"] == list(resumed), f"rank {rank} ran epochs {result['epochs']}"
        assert _max_diff(result["final"], results[0]["final"]) == 0.0, f"rank {rank} differs from rank 0"
    assert not (workdir / "backup").exists()  # deleted when training ended


def test_two_processes_resume_like_one_uninterrupted_process(uninterrupted, killed_by_two, tmp_path):
    workdir = _copy_of(killed_by_two, tmp_path)
    results = _resumed(2, workdir)
    _assert_restored_the_chiefs_backup(results, workdir)
    for rank, result in enumerate(results):
        # 64 samples at global batch 8: 8 steps an epoch; 16 came back with the backup, 16 were run.
        assert result["iterations"] == uninterrupted["iterations"] == 32, f"rank {rank}"
        assert result["learning_rate"] == pytest.approx(2 * LR)  # applied: the rate written x 2
        assert result["written_rate"] == pytest.approx(LR)  # what the optimizer holds, and files
        assert _max_diff(result["final"], uninterrupted["final"]) < TOLERANCE, f"rank {rank}"
    assert uninterrupted["epochs"] == [0, 1, 2, 3]


@pytest.mark.timeout(_starts_limit(3))
def test_a_notice_to_one_process_then_a_kill_and_the_restarted_job_ends_as_if_never_stopped(
    uninterrupted, tmp_path
):
    """BackupAndRestore(save_freq=3), 8 steps an epoch: SIGTERM to the last process at a random step of
    epochs 0-1; both stop with status 143 at the next step a backup is written after (every third) or an
    epoch's end (kscale/preemption.py), and `kscale run --max-restarts 2` starts the job again; it resumes
    at the step after its last backup, where SIGKILL to the last process at a random later step loses only
    the steps since the backup before it: started again, the job resumes there and ends as one
    uninterrupted process does (steps, weights, History)."""
    rng = random.Random()
    notice = rng.randint(1, 16)
    stop = min(k for k in range(notice, 33) if k % 3 == 0 or k % 8 == 0)
    kill = rng.randint(stop + 1, 32)
    steps = ("--save-freq", "3", "--notice-at-step", str(notice), "--kill-at-step", str(kill))
    done = _launch(2, "kscale", str(tmp_path), *steps, restarts=2)
    output = done.stdout + done.stderr
    assert done.returncode == 0, (notice, kill, output[-3000:])
    where = (
        f"batch {(stop - 1) % 8 + 1} of epoch {(stop - 1) // 8 + 1}"
        if stop % 3 == 0
        else f"epoch {stop // 8} of 4"
    )
    assert f"every worker stopped after {where}" in output and "Preempted" not in output, (
        notice,
        output[-3000:],
    )
    assert "the workers stopped for a preemption notice" in output and "restart 1 of 2" in output
    assert f"killing itself after step {kill}" in output and "restart 2 of 2" in output, output[-3000:]
    backed_up = kill // 3 * 3  # the last backup before the kill: the job resumes after it
    for rank in range(2):
        result = json.loads((tmp_path / f"result.{rank}.json").read_text())
        ran = list(range((backed_up - 1) // 8, 4))
        assert result["epochs"] == ran, (rank, notice, kill, result["epochs"])
        assert result["iterations"] == uninterrupted["iterations"] == 32, (rank, notice, kill)
        assert _max_diff(result["final"], uninterrupted["final"]) < TOLERANCE, (rank, notice, kill)
        _assert_same_history(result, uninterrupted)


def test_backups_every_m_minutes_at_the_slowest_pace_stop_for_a_notice_and_resume_exactly(
    uninterrupted, tmp_path
):
    """distribute(backup_minutes=0.02): every 1.2 s, where the last process sleeps 0.2 s after each step
    (8 steps an epoch): after the first backup (after 2 batches) the processes agree on the slowest one's
    pace, 6 batches at most (fewer where the steps themselves take time). SIGTERM to the last process at a
    random step of epochs 0-1 stops both at the next timed backup (or an epoch's end), and `kscale run
    --max-restarts 1` starts the job again: it resumes after its last backup and ends as one uninterrupted
    process does (steps, weights, History)."""
    notice = random.Random().randint(1, 16)
    timed = ("--backup-minutes", "0.02", "--step-seconds", "0.2", "--notice-at-step", str(notice))
    done = _launch(2, "kscale", str(tmp_path), *timed, restarts=1)
    output = done.stdout + done.stderr
    assert done.returncode == 0, (notice, output[-3000:])
    assert "every worker stopped after" in output and "restart 1 of 1" in output, (notice, output[-3000:])
    results = [json.loads((tmp_path / f"result.{rank}.json").read_text()) for rank in range(2)]
    assert results[0]["save_freq"] == results[1]["save_freq"], results[1]["save_freq"]
    # 1.2 s at 0.2 s a step and more: 6 at most; 3 unless a step of this small model took 0.2 s itself.
    assert 3 <= results[0]["save_freq"] <= 6, results[0]["save_freq"]
    for rank, result in enumerate(results):
        assert result["iterations"] == uninterrupted["iterations"] == 32, (rank, notice)
        assert _max_diff(result["final"], uninterrupted["final"]) < TOLERANCE, (rank, notice)
        _assert_same_history(result, uninterrupted)


def _on_another_file_system(folder: str, other: Path) -> bool:
    return os.path.isdir(folder) and os.stat(folder).st_dev != os.stat(other).st_dev


@pytest.mark.skipif(
    keras.config.backend() != "jax" or not _on_another_file_system("/dev/shm", Path(tempfile.gettempdir())),
    reason="kscale's SharedBackup, alike in every Keras 3 backend (one lane is enough), and a scratch folder "
    "on another file system than the backup folder: /dev/shm, a tmpfs, where there is one",
)
@pytest.mark.timeout(_starts_limit(2))
def test_backups_committed_off_the_training_thread_stop_for_a_notice_and_resume_exactly(
    uninterrupted, tmp_path
):
    """The workers' temporary folder on /dev/shm, the backup folder here: each backup is copied into the
    backup folder and committed on a thread of its own (backup_journal.Commits). SIGTERM to the last process
    at a random step of epochs 0-1 stops both at the next backup (save_freq=3) or an epoch's end; the chief
    exits 143 only once that backup is committed, and the restarted job ends as one uninterrupted process
    does (steps, weights, History)."""
    notice = random.Random().randint(1, 16)
    stop = min(k for k in range(notice, 33) if k % 3 == 0 or k % 8 == 0)
    steps = ("--save-freq", "3", "--notice-at-step", str(notice))
    done = _launch(2, "kscale", str(tmp_path), *steps, restarts=1, TMPDIR="/dev/shm")
    output = done.stdout + done.stderr
    assert done.returncode == 0, (notice, output[-3000:])
    assert "every worker stopped after" in output and "restart 1 of 1" in output, (notice, output[-3000:])
    assert "could not be committed" not in output, output[-3000:]
    for rank in range(2):
        result = json.loads((tmp_path / f"result.{rank}.json").read_text())
        assert result["epochs"] == list(range((stop - 1) // 8 if stop % 3 == 0 else stop // 8, 4)), (
            rank,
            notice,
            result["epochs"],
        )
        assert result["iterations"] == uninterrupted["iterations"] == 32, (rank, notice)
        assert _max_diff(result["final"], uninterrupted["final"]) < TOLERANCE, (rank, notice)
        _assert_same_history(result, uninterrupted)


@pytest.mark.skipif(
    keras.config.backend() != "jax",
    reason="the notice's source is backend-free (kscale/preemption.py Notice); the agreement on it runs in "
    "every Keras 3 lane (the SIGTERM tests): one lane is enough",
)
@pytest.mark.timeout(_starts_limit(2))
def test_the_scripts_notice_function_on_one_process_stops_both_and_the_job_resumes_exactly(
    uninterrupted, tmp_path
):
    """distribute(preemption_notice=f) with f true on the last process from a random step of epochs 0-2 on:
    both stop after that epoch's backup, `kscale run --max-restarts 1` starts the job again, and it ends as
    one uninterrupted process."""
    step = random.Random().randint(1, 24)
    stopped_after = (step - 1) // 8 + 1  # epochs done, counted from 1
    done = _launch(2, "kscale", str(tmp_path), "--notice-function-at-step", str(step), restarts=1)
    output = done.stdout + done.stderr
    assert done.returncode == 0, (step, output[-3000:])
    assert f"stopped after epoch {stopped_after} of 4" in output and "restart 1 of 1" in output, (
        step,
        output[-3000:],
    )
    for rank in range(2):
        result = json.loads((tmp_path / f"result.{rank}.json").read_text())
        assert result["epochs"] == list(range(stopped_after, 4)), (rank, step, result["epochs"])
        assert result["iterations"] == uninterrupted["iterations"] == 32, (rank, step)
        assert _max_diff(result["final"], uninterrupted["final"]) < TOLERANCE, (rank, step)
        _assert_same_history(result, uninterrupted)


@pytest.mark.skipif(
    keras.config.backend() != "tensorflow",
    reason="the journal is the chief's own files (kscale/callbacks/backup_journal.py), alike in every backend; "
    "a kill and the restart after it run in every Keras 3 lane (the two-process and SIGTERM tests): one lane "
    "is enough",
)
@pytest.mark.timeout(_starts_limit(2))
def test_the_chief_killed_inside_a_backup_resumes_from_the_last_whole_one(uninterrupted, tmp_path):
    """SIGKILL to the chief after the second epoch's backup weights are written and before its epoch file
    is: Keras 3 alone would resume epoch 1 again from the weights epoch 1 ended with (a silent step
    ahead); kscale commits a backup whole (kscale/callbacks/backup_journal.py), so `kscale run
    --max-restarts 1` resumes at epoch 1 from the first epoch's backup and ends as one uninterrupted
    process."""
    done = _launch(2, "kscale", str(tmp_path), "--kill-in-save", "weights", restarts=1)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "killing itself with the backup's weights written" in output and "restart 1 of 1" in output
    for rank in range(2):
        result = json.loads((tmp_path / f"result.{rank}.json").read_text())
        assert result["epochs"] == [1, 2, 3], (rank, result["epochs"])
        assert result["iterations"] == uninterrupted["iterations"] == 32, rank
        assert _max_diff(result["final"], uninterrupted["final"]) < TOLERANCE, rank
        _assert_same_history(result, uninterrupted)


@pytest.mark.skipif(
    keras.config.backend() != "tensorflow",
    reason="kscale's SharedBackup, alike in every backend; every Keras 3 lane resumes inside an epoch in its "
    "conformance program backup_inside_an_epoch, and a kill and the restart after it: one lane is enough",
)
@pytest.mark.timeout(_starts_limit(3))
def test_two_losses_inside_an_epoch_resume_at_the_batch_after_each_backup_as_if_never_stopped(
    uninterrupted, tmp_path
):
    """BackupAndRestore(save_freq=3), 8 steps an epoch: SIGKILL after step 20 (epoch 3) resumes from the
    backup of step 18 at step 19; killed again after step 23, inside the first resumed epoch, the job
    resumes from the backup of step 21 at step 22. Keras 3 alone starts epoch 3 again from its first
    batch each time (37 steps in all instead of 32), and names epoch 1 in a backup written inside the first
    epoch after a restore (53 steps). The job ends as the uninterrupted run: steps, weights, History."""
    done = _launch(
        2,
        "kscale",
        str(tmp_path),
        "--save-freq",
        "3",
        "--kill-at-step",
        "20",
        "--kill-at-step",
        "23",
        restarts=2,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "killing itself after step 20" in output and "killing itself after step 23" in output, output[
        -3000:
    ]
    assert "restart 2 of 2" in output, output[-3000:]
    # Each restart says where it resumes (the chief, once each): after batch 2 of epoch 3, then batch 5
    resumed = [line for line in output.splitlines() if "resuming a backup written after batch" in line]
    assert len(resumed) == 2, resumed
    assert "batch 2 of epoch 3 (save_freq=3): epoch 3 goes on at batch 3" in resumed[0], resumed
    assert "batch 5 of epoch 3 (save_freq=3): epoch 3 goes on at batch 6" in resumed[1], resumed
    results = [json.loads((tmp_path / f"result.{rank}.json").read_text()) for rank in range(2)]
    for rank, result in enumerate(results):
        assert result["epochs"] == [2, 3], (rank, result["epochs"])
        assert result["iterations"] == uninterrupted["iterations"] == 32, (rank, result["iterations"])
        assert _max_diff(result["final"], uninterrupted["final"]) < TOLERANCE, rank
        assert _max_diff(result["final"], results[0]["final"]) == 0.0, rank
        _assert_same_history(result, uninterrupted)


def test_sigterm_to_kscale_run_reaches_every_worker_and_the_job_resumes_exactly(uninterrupted, tmp_path):
    """Kubernetes sends SIGTERM to the container's first process, `kscale run`: it passes the notice on to
    every worker, which stop after the epoch's backup; kscale run exits 143; run again, the job resumes."""
    step = random.Random().randint(2, 24)  # after step 1 every process listens (its fit has begun)
    stopped_after = (step - 1) // 8
    env = {k: v for k, v in os.environ.items() if not k.startswith(environment.LAUNCHER_VARIABLE_PREFIXES)}
    command = [KSCALE, "run", "-np", "2", "--", sys.executable, WORKER, "kscale", tmp_path]
    command += ["--await-notice-at-step", str(step)]
    job = subprocess.Popen(
        [str(c) for c in command], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines = []
    try:
        for line in job.stdout:
            lines.append(line)
            if f"awaiting a notice after step {step}" in line:
                job.send_signal(signal.SIGTERM)
                break
        lines.extend(job.stdout)
        code = job.wait(timeout=EACH_START)
    finally:
        job.kill()
    output = "".join(lines)
    assert code == 143, (step, output[-3000:])
    assert f"stopped after epoch {stopped_after + 1} of 4" in output and "Preempted" not in output, output[
        -3000:
    ]
    results = _resumed(2, tmp_path)
    _assert_restored_the_chiefs_backup(results, tmp_path, tuple(range(stopped_after + 1, 4)))
    for rank, result in enumerate(results):
        assert _max_diff(result["final"], uninterrupted["final"]) < TOLERANCE, (rank, step)
        _assert_same_history(result, uninterrupted)


def test_a_backup_of_one_process_resumes_on_two_at_their_rate(tmp_path):
    _killed(1, tmp_path)  # one process: batch 4, rate 0.02, 16 steps an epoch
    results = _resumed(2, tmp_path)
    _assert_restored_the_chiefs_backup(results, tmp_path)
    for result in results:
        assert result["restored"]["learning_rate"] == pytest.approx(2 * LR)  # scaled for 2, not 0.02
        assert result["learning_rate"] == pytest.approx(2 * LR)
        assert result["restored"]["written_rate"] == result["written_rate"] == pytest.approx(LR)
        assert result["iterations"] == 2 * 16 + 2 * 8


def test_a_backup_of_two_processes_resumed_on_one_continues_as_one_process_would(killed_by_two, tmp_path):
    """Issue 43: a 2-process job lost after epoch 2, resumed by one process (batch 4, its own rate), ends as
    plain Keras in one process continuing from the same backup: the same steps, weights and History; the
    resumed job says what changed."""
    workdir = _copy_of(killed_by_two, tmp_path)
    plain = tmp_path / "plain"
    shutil.copytree(workdir / "backup", plain / "backup")
    done = _launch(1, "kscale", str(workdir))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    said = "resuming a backup that 2 process(es) wrote, on 1: the learning rate and the data's shards are"
    assert said in output and "an epoch has 16 steps (it had 8)" in output, output[-3000:]
    resumed = json.loads((workdir / "result.0.json").read_text())
    done = _launch(1, "plain", str(plain))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    continued = json.loads((plain / "result.0.json").read_text())
    assert resumed["epochs"] == continued["epochs"] == [2, 3]
    # 2 epochs of 8 steps at global batch 8 came back with the backup; 2 of 16 at batch 4 were run.
    assert resumed["iterations"] == continued["iterations"] == 2 * 8 + 2 * 16
    assert resumed["learning_rate"] == continued["learning_rate"] == pytest.approx(LR)
    assert _max_diff(resumed["final"], continued["final"]) < TOLERANCE
    assert resumed["history"]["loss"] == pytest.approx(continued["history"]["loss"], rel=TOLERANCE)


@pytest.mark.skipif(
    keras.config.backend() == "tensorflow",
    reason="kscale's SharedBackup maps the batch alike in every backend; the job that resumes is one "
    "process, whose data path JAX's lane and torch's (its own, keras3/torch_data) test: two lanes are enough",
)
@pytest.mark.timeout(_starts_limit(2))
@pytest.mark.parametrize("data", ["arrays", "pydataset", "dataset"])
def test_a_backup_inside_an_epoch_of_two_processes_resumed_on_one_goes_on_after_the_same_samples(
    tmp_path, data
):
    """Issue 43, item 4: BackupAndRestore(save_freq=3) in 2 processes at global batch 8 (8 steps an epoch);
    a notice at a random step stops both after the next backup, written inside epoch 1, 2 or 3. One process
    (global batch 4, 16 steps an epoch) resumes it after the same samples, at batch 2(b + 1) + 1 where the
    backup was written after batch b + 1, and ends as plain Keras in one process going on from those
    samples: the same steps, weights and History of the epochs after; the chief says what changed. Keras
    alone would start the epoch again from its first batch. The same where the data is a PyDataset or a
    tf.data dataset of batches of 4 (data that holds its batch, cut by batch: two of them a step, then one)."""
    given = [] if data == "arrays" else [f"--{data}"]
    rng = random.Random()
    stop = rng.choice([9, 12, 15, 18, 21, 27, 30])  # a backup's step inside an epoch, not at its end

    def stops_at(notice: int) -> int:  # the next step a backup is written after, or an epoch ends
        return min(k for k in range(notice, 33) if k % 3 == 0 or k % 8 == 0)

    notice = rng.choice([n for n in range(stop - 2, stop + 1) if stops_at(n) == stop])
    epoch, batch = (stop - 1) // 8, (stop - 1) % 8  # from 0: the backup was written after that batch
    done = _launch(2, "kscale", str(tmp_path), "--save-freq", "3", "--notice-at-step", str(notice), *given)
    output = done.stdout + done.stderr
    assert done.returncode != 0, (notice, output[-3000:])
    assert f"every worker stopped after batch {batch + 1} of epoch {epoch + 1}" in output, (
        notice,
        output[-3000:],
    )
    plain = tmp_path / "plain"
    shutil.copytree(tmp_path / "backup", plain / "backup")
    done = _launch(1, "kscale", str(tmp_path), "--save-freq", "3", *given)
    output = done.stdout + done.stderr
    assert done.returncode == 0, (notice, output[-3000:])
    goes_on = 2 * (batch + 1)  # this job's batches the backup's samples fill
    steps_were, steps_are = (
        ("2 of the data's batches a step", "1 of the data's batches a step")
        if given
        else ("global batch 8", "global batch 4")
    )
    said = (
        f"resuming a backup written after batch {batch + 1} of epoch {epoch + 1} (save_freq=3) by 2 process(es) "
        f"at {steps_were}, on 1 at {steps_are}: epoch {epoch + 1} goes on at batch {goes_on + 1} after "
        f"the same samples (its first {goes_on} batches are read again, not trained"
    )
    assert said in output, (notice, output[-3000:])
    resumed = json.loads((tmp_path / "result.0.json").read_text())
    done = _launch(1, "continue", str(plain), "--backup-processes", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    continued = json.loads((plain / "continued.json").read_text())
    assert resumed["epochs"] == list(range(epoch, 4)), (notice, resumed["epochs"])
    steps = stop + (16 - goes_on) + 16 * (3 - epoch)  # the backup's, the epoch's rest, the epochs after
    assert resumed["iterations"] == continued["iterations"] == steps, (notice, resumed["iterations"])
    assert resumed["learning_rate"] == continued["learning_rate"] == pytest.approx(LR)
    assert _max_diff(resumed["final"], continued["final"]) < TOLERANCE, notice
    after = resumed["history"]["loss"][1:]  # the epochs after the resumed one
    assert continued["history"]["epoch"] == list(range(epoch + 1, 4)), continued["history"]["epoch"]
    assert after == pytest.approx(continued["history"].get("loss", []), rel=TOLERANCE), (notice, after)
    assert not (tmp_path / "backup").exists()  # deleted when training ended


def test_a_backup_only_the_chief_sees_stops_every_process(killed_by_two, tmp_path):
    """Every process restores the chief's backup: one that cannot see it must not start from epoch 0."""
    tmp_path = _copy_of(killed_by_two, tmp_path)
    # As on hosts without a shared folder: process 1's backup folder is its own, and empty.
    script = tmp_path / "a_folder_per_process.py"
    script.write_text(
        "import runpy, sys, kscale\n"
        f"folder = {str(tmp_path / 'backup')!r} if kscale.rank() == 0 else {str(tmp_path / 'elsewhere')!r}\n"
        f"sys.argv = [{str(WORKER)!r}, 'kscale', {str(tmp_path)!r}, '--backup-dir', folder]\n"
        f"runpy.run_path({str(WORKER)!r}, run_name='__main__')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(environment.LAUNCHER_VARIABLE_PREFIXES)}
    done = subprocess.run(
        [str(KSCALE), "run", "-np", "2", "--", sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=EACH_START,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-3000:]
    assert "is not the same for every process" in output and "(process(es) [1]" in output, output[-3000:]
