"""BackupAndRestore in every tf.keras backend: a job killed after epoch 2 of 4 (one process, mirrored) or inside
an epoch (Horovod, TF_CONFIG workers, restarted by `kscale run --max-restarts`), or told to stop by a preemption
notice, resumes where its last backup was written.

The resumed weights must equal one uninterrupted process at the same global batch and rate (SGD with
momentum, so the optimizer's own state has to come back too), and be identical on every rank.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys

import numpy as np
import pytest

WORKER = "tests/multiprocess/workers/resume.py"
TOLERANCE = 1e-5

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def uninterrupted(run_python, tmp_path_factory) -> dict:
    workdir = tmp_path_factory.mktemp("uninterrupted")
    run_python([WORKER, "reference", str(workdir)], timeout=180)
    return _result(workdir, 0)


def _result(workdir, rank: int) -> dict:
    with open(os.path.join(workdir, f"result.{rank}.json")) as f:
        return json.load(f)


def _max_diff(a: list, b: list) -> float:
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b, strict=True))


def _assert_resumed(workdir, ranks: int, uninterrupted: dict, resumed_epochs: tuple = (2, 3)) -> None:
    results = [_result(workdir, rank) for rank in range(ranks)]
    with open(os.path.join(workdir, "backed_up.0.json")) as f:
        backed_up = json.load(f)  # the chief's weights and optimizer state when its backup was written
    for rank, result in enumerate(results):
        # Every rank resumed from exactly what the killed chief backed up: its weights and step count.
        for part in ("weights", "optimizer"):
            assert _max_diff(result["restored"][part], backed_up[part]) == 0.0, f"rank {rank}: {part}"
        assert result["epochs"] == list(resumed_epochs), f"rank {rank} ran epochs {result['epochs']}"
        # 64 samples at global batch 8: 8 steps an epoch, 32 in all: those done before the backup came back
        # with it (its step count, checked above), the rest were run.
        assert result["iterations"] == uninterrupted["iterations"] == 32, f"rank {rank}"
        assert _max_diff(result["final"], results[0]["final"]) == 0.0, f"rank {rank} differs from rank 0"
        assert _max_diff(result["final"], uninterrupted["final"]) < TOLERANCE, f"rank {rank}"
        # Its History: the epochs it ran, each with the loss the uninterrupted process reported for it.
        history = result["history"]
        assert history["epoch"] == list(resumed_epochs), f"rank {rank}: {history['epoch']}"
        expected = [uninterrupted["history"]["loss"][epoch] for epoch in resumed_epochs]
        assert history["loss"] == pytest.approx(expected, rel=TOLERANCE), (rank, history["loss"], expected)
    assert uninterrupted["epochs"] == [0, 1, 2, 3]
    assert not os.path.exists(os.path.join(workdir, "backup", "chief"))  # deleted when training ended


def _assert_killed(codes: list[int], output: str) -> None:
    assert 3 in codes or any(code != 0 for code in codes), codes
    assert "dying after epoch 2" in output


@pytest.mark.timeout(300)
def test_single_process(run_python, uninterrupted, tmp_path):
    killed = run_python([WORKER, "single", str(tmp_path), "--crash-after-epochs", "2"], check=False)
    _assert_killed([killed.returncode], killed.stdout)
    run_python([WORKER, "single", str(tmp_path)])
    _assert_resumed(tmp_path, 1, uninterrupted)


@pytest.mark.timeout(300)
def test_two_mirrored_replicas(run_python, uninterrupted, tmp_path):
    killed = run_python([WORKER, "mirrored", str(tmp_path), "--crash-after-epochs", "2"], check=False)
    _assert_killed([killed.returncode], killed.stdout)
    run_python([WORKER, "mirrored", str(tmp_path)])
    _assert_resumed(tmp_path, 1, uninterrupted)


# A preemption notice (SIGTERM) to one rank at a random step of a random epoch: every rank stops after that
# epoch's backup with exit status 143 (kscale/preemption.py), and the job run again resumes at the next epoch
# as if never stopped. 64 samples at global batch 8: 8 steps an epoch, 4 epochs; the last epoch's notice
# comes when training ends anyway, so the notice falls in epochs 0-2. With BackupAndRestore(save_freq=3)
# every rank stops at the next step a backup is written after (every third) or an epoch's end, and the job
# run again resumes at the step after its last backup, inside an epoch (kscale/keras2/backup_inside_epoch.py),
# and ends as if never stopped: steps, weights and the History of every epoch it ran.
STEPS_PER_EPOCH, PREEMPTED, SAVE_FREQ = 8, 143, 3


def _notice_step(save_freq: int = 0) -> tuple[int, tuple, list]:
    """The step of the notice, the epochs the resumed job runs, and the arguments of both runs' workers."""
    step = random.Random().randint(1, 3 * STEPS_PER_EPOCH)
    stopped_after = (step - 1) // STEPS_PER_EPOCH  # the epoch under way when the notice came
    if not save_freq:
        return step, tuple(range(stopped_after + 1, 4)), []
    stop = min(k for k in range(step, 33) if k % save_freq == 0 or k % STEPS_PER_EPOCH == 0)
    backed_up = stop // save_freq * save_freq  # the last backup: at the stop, or before an epoch's end
    return step, tuple(range(backed_up // STEPS_PER_EPOCH, 4)), ["--save-freq", str(save_freq)]


def _output(done) -> str:
    return (done.stdout or "") + (done.stderr or "")


def _assert_preempted(codes: list[int], output: str, step: int, save_freq: int = 0) -> None:
    assert f"preemption notice after step {step}" in output, output[-3000:]
    stop = min(k for k in range(step, 33) if (save_freq and k % save_freq == 0) or k % STEPS_PER_EPOCH == 0)
    where = f"epoch {stop // STEPS_PER_EPOCH} of 4"
    if save_freq and stop % save_freq == 0:
        where = f"batch {(stop - 1) % STEPS_PER_EPOCH + 1} of epoch {(stop - 1) // STEPS_PER_EPOCH + 1}"
    assert f"every worker stopped after {where}" in output, (step, output[-3000:])
    assert PREEMPTED in codes and all(code in (PREEMPTED, 0) or code > 128 for code in codes), (codes, step)
    assert "Traceback" not in output, output[-3000:]


@pytest.mark.timeout(300)
# One process: one replica backing up at epochs' ends, or two every SAVE_FREQ batches.
@pytest.mark.parametrize("backend, save_freq", [("single", 0), ("mirrored", SAVE_FREQ)])
def test_one_process_notice(run_python, uninterrupted, tmp_path, backend, save_freq):
    step, resumed, every = _notice_step(save_freq)
    stopped = run_python([WORKER, backend, str(tmp_path), *every, "--notice-at-step", str(step)], check=False)
    _assert_preempted([stopped.returncode], _output(stopped), step, save_freq)
    run_python([WORKER, backend, str(tmp_path), *every])
    _assert_resumed(tmp_path, 1, uninterrupted, resumed)


@pytest.mark.timeout(300)
def test_two_horovod_workers_notice_to_one(horovodrun, uninterrupted, tmp_path):
    step, resumed, every = _notice_step(SAVE_FREQ)
    notice = ["--notice-at-step", str(step)]
    stopped = horovodrun(2, [WORKER, "horovod", str(tmp_path), *every, *notice], check=False)
    # horovodrun exits 1 when a worker fails, and names the worker's own status.
    assert stopped.returncode == 1 and f"Exit code: {PREEMPTED}" in _output(stopped), _output(stopped)[-3000:]
    workers = "".join(line for line in _output(stopped).splitlines(True) if line.startswith("["))
    _assert_preempted([PREEMPTED], workers, step, SAVE_FREQ)
    horovodrun(2, [WORKER, "horovod", str(tmp_path), *every])
    _assert_resumed(tmp_path, 2, uninterrupted, resumed)


@pytest.mark.timeout(300)
def test_two_tf_config_workers_notice_to_one(tf_config_workers, uninterrupted, tmp_path):
    step, resumed, every = _notice_step(SAVE_FREQ)
    notice = ["--notice-at-step", str(step)]
    stopped = tf_config_workers(2, [WORKER, "multi_worker", str(tmp_path), *every, *notice], check=False)
    _assert_preempted([k.returncode for k in stopped], "".join(_output(k) for k in stopped), step, SAVE_FREQ)
    tf_config_workers(2, [WORKER, "multi_worker", str(tmp_path), *every])
    _assert_resumed(tmp_path, 2, uninterrupted, resumed)


# distribute(backup_minutes=0.02): every 1.2 s, where rank 1 sleeps 0.2 s after each step (8 steps an epoch):
# after the first backup (after 2 batches) the workers agree on the slowest one's pace, 6 batches at most
# (fewer where the steps themselves take time). SIGTERM to rank 1 at a random step of epochs 0-1 stops both at
# the next timed backup (or an epoch's end); run again, the job resumes after its last backup and ends as one
# uninterrupted process does. (One launcher: the timed backup is the family's, the same under each.)
@pytest.mark.timeout(300)
def test_two_horovod_workers_back_up_every_m_minutes_stop_for_a_notice_and_resume_exactly(
    horovodrun, uninterrupted, tmp_path
):
    timed = ["--backup-minutes", "0.02", "--step-seconds", "0.2"]
    notice = random.Random().randint(1, 16)
    worker = [WORKER, "horovod", str(tmp_path), *timed]
    stopped = horovodrun(2, [*worker, "--notice-at-step", str(notice)], check=False)
    assert f"Exit code: {PREEMPTED}" in _output(stopped), (notice, _output(stopped)[-3000:])
    assert "every worker stopped after" in _output(stopped), (notice, _output(stopped)[-3000:])
    horovodrun(2, worker)
    results = [_result(tmp_path, rank) for rank in range(2)]
    assert results[0]["save_freq"] == results[1]["save_freq"], results[1]["save_freq"]
    # 1.2 s at 0.2 s a step and more: 6 at most; 3 unless a step of this small model took 0.2 s itself.
    assert 3 <= results[0]["save_freq"] <= 6, results[0]["save_freq"]
    for rank, result in enumerate(results):
        assert result["iterations"] == uninterrupted["iterations"] == 32, (rank, notice)
        assert _max_diff(result["final"], results[0]["final"]) == 0.0, (rank, notice)
        assert _max_diff(result["final"], uninterrupted["final"]) < TOLERANCE, (rank, notice)
        expected = [uninterrupted["history"]["loss"][epoch] for epoch in result["history"]["epoch"]]
        assert result["history"]["loss"] == pytest.approx(expected, rel=TOLERANCE), (rank, notice)


# A loss without notice inside an epoch: BackupAndRestore(save_freq=3), and SIGKILL to the last rank after a
# random step that is not a backup's (so that which backup was the last one written is certain: the one
# before it). `kscale run --max-restarts 1` ends the job and starts it again, which resumes at the step after
# that backup and ends as if never stopped: only the steps since the backup ran twice. (A kill at an epoch's
# end with epoch backups: these tests' conformance program backup_and_restore and the one-process tests above.)
@pytest.mark.timeout(420)
@pytest.mark.parametrize("engine, mode", [("horovod", "horovod"), ("tf", "multi_worker")])
def test_two_workers_killed_inside_an_epoch_restarted_by_kscale_run(
    launch, uninterrupted, tmp_path, engine, mode
):
    kill = random.Random().choice([k for k in range(4, 32) if k % SAVE_FREQ])
    run = ["kscale", "run", "--engine", engine, "-np", "2", "--max-restarts", "1", "--"]
    worker = [sys.executable, WORKER, mode, str(tmp_path), "--save-freq", str(SAVE_FREQ)]
    done = launch([*run, *worker, "--kill-at-step", str(kill)], timeout=400)
    assert done.returncode == 0, (kill, done.stdout[-4000:])
    assert f"rank 1: killing itself after step {kill}" in done.stdout, (kill, done.stdout[-4000:])
    assert "restart 1 of 1" in done.stdout, (kill, done.stdout[-4000:])
    backed_up = kill // SAVE_FREQ * SAVE_FREQ
    _assert_resumed(tmp_path, 2, uninterrupted, tuple(range(backed_up // STEPS_PER_EPOCH, 4)))


# Issue 43, item 4: a backup written inside an epoch by 2 Horovod workers at global batch 8 (8 steps an
# epoch), resumed by one process at global batch 4 (16 steps an epoch). tf.keras alone resumes after the
# backup's batch counted in the new job's batches (other samples); kscale resumes after the batch that ends
# the backup's samples (kscale/epoch_position.py), and the job ends as plain tf.keras in one process going
# on from those samples. (One launcher is enough: how the backup was written is each launcher's
# notice test above; the job that resumes is one process.)
@pytest.mark.timeout(420)
@pytest.mark.parametrize("data", ["arrays", "sequence"])
def test_a_backup_inside_an_epoch_of_two_workers_resumed_on_one_goes_on_after_the_same_samples(
    horovodrun, run_python, tmp_path, data
):
    """Also where the data is a keras.utils.Sequence of batches of 4 (data that holds its batch, cut by
    batch: two of them a step, then one)."""
    rng = random.Random()
    stop = rng.choice([9, 12, 15, 18, 21, 27, 30])  # a backup's step inside an epoch, not at its end

    def stops_at(notice: int) -> int:  # the next step a backup is written after, or an epoch ends
        return min(k for k in range(notice, 33) if k % SAVE_FREQ == 0 or k % STEPS_PER_EPOCH == 0)

    notice = rng.choice([n for n in range(stop - 2, stop + 1) if stops_at(n) == stop])
    epoch, batch = (stop - 1) // STEPS_PER_EPOCH, (stop - 1) % STEPS_PER_EPOCH  # from 0
    every = ["--save-freq", str(SAVE_FREQ), *(["--sequence"] if data == "sequence" else [])]
    stopped = horovodrun(
        2, [WORKER, "horovod", str(tmp_path), *every, "--notice-at-step", str(notice)], check=False
    )
    workers = "".join(line for line in _output(stopped).splitlines(True) if line.startswith("["))
    _assert_preempted([PREEMPTED], workers, notice, SAVE_FREQ)
    plain = tmp_path / "plain"
    shutil.copytree(tmp_path / "backup", plain / "backup")
    resumed_run = run_python([WORKER, "one", str(tmp_path), *every])
    goes_on = 2 * (batch + 1)  # this job's batches the backup's samples fill
    steps_were, steps_are = (
        ("2 of the data's batches a step", "1 of the data's batches a step")
        if data == "sequence"
        else ("global batch 8", "global batch 4")
    )
    said = (
        f"epoch {epoch + 1} resumed at batch {goes_on + 1}, after the backup written after batch {batch + 1} "
        f"by 2 process(es) at {steps_were}, on 1 at {steps_are}, after the same samples (its first "
        f"{goes_on} batches are read again, not trained"
    )
    assert said in _output(resumed_run), (notice, _output(resumed_run)[-3000:])
    resumed = _result(tmp_path, 0)
    run_python([WORKER, "continue", str(plain), "--backup-processes", "2"])
    with open(plain / "continued.json") as f:
        continued = json.load(f)
    assert resumed["epochs"] == list(range(epoch, 4)), (notice, resumed["epochs"])
    steps = stop + (16 - goes_on) + 16 * (3 - epoch)  # the backup's, the epoch's rest, the epochs after
    assert resumed["iterations"] == continued["iterations"] == steps, (notice, resumed["iterations"])
    assert _max_diff(resumed["final"], continued["final"]) < TOLERANCE, notice
    after = resumed["history"]["loss"][1:]  # the epochs after the resumed one
    assert continued["history"]["epoch"] == list(range(epoch + 1, 4)), continued["history"]["epoch"]
    assert after == pytest.approx(continued["history"].get("loss", []), rel=TOLERANCE), (notice, after)
