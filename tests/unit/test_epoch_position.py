"""Where a backup written inside an epoch goes on in a job of another number of processes or global batch
(kscale/epoch_position.py, issue 43 item 4): after the batch that ends the same samples, or
nowhere (Keras' own restart of the epoch, which the chief names)."""

from __future__ import annotations

import pytest

from kscale.epoch_position import same_samples_batch, step_size


def job(processes: int, steps: int | None, global_batch: int | None) -> dict:
    return {"processes": processes, "steps_per_epoch": steps, "global_batch": global_batch}


def batches(processes: int, steps: int | None, per_step: int | None) -> dict:
    """A job on data that holds its batch (a PyDataset), cut by batch: `per_step` of its batches a step."""
    return {
        "processes": processes,
        "steps_per_epoch": steps,
        "global_batch": None,
        "batches_per_step": per_step,
    }


@pytest.mark.parametrize(
    ("wrote", "now", "batch", "goes_on_after"),
    [
        (job(2, 8, 8), job(2, 8, 8), 4, 4),  # the same job: the same batch
        (job(2, 8, None), job(2, 8, None), 4, 4),  # a dataset in the same job too
        (job(2, 8, 8), job(1, 16, 4), 2, 5),  # 24 samples: one process's batches 0-5
        (job(2, 8, 8), job(1, 16, 4), 0, 1),
        (job(1, 16, 4), job(2, 8, 8), 5, 2),  # 24 samples again, on two
        (job(1, 16, 4), job(2, 8, 8), 4, None),  # 20 samples: no batch of 8 ends them
        (job(2, 8, 8), job(4, 4, 16), 2, None),  # 24 of 16
        (job(2, 8, 8), job(4, 4, 16), 3, 1),  # 32 samples
        (job(2, 8, 8), job(1, 16, 4), 7, 15),  # the epoch's last batch: this job's last
        (job(2, 8, 8), job(1, 15, 4), 7, 14),  # ... also where the last batch is not whole (60 samples)
        (job(2, 8, None), job(1, 16, None), 2, None),  # the data held the batch: its samples are unknown
        (job(2, 8, 8), job(1, None, 4), 2, None),  # steps an epoch unknown
        (job(1, 8, 8), job(1, 16, 4), 2, 5),  # one process at another global batch
        (batches(2, 8, 2), batches(1, 16, 1), 2, 5),  # a PyDataset's batches 0-5: one process's 0-5
        (batches(2, 8, 2), batches(1, 16, 1), 7, 15),  # the epoch's last: this job's last
        (batches(1, 16, 1), batches(2, 8, 2), 4, None),  # 5 batches: no step of 2 ends them
        (batches(1, 16, 1), batches(2, 8, 2), 5, 2),
        (batches(2, 8, 2), batches(1, 16, None), 2, None),  # not cut by batch now: unknown
        (batches(2, 8, 2), job(1, 16, 4), 2, None),  # arrays now, a PyDataset before: other data
        (job(2, 8, 8), batches(1, 16, 1), 2, None),
    ],
)
def test_the_batch_that_ends_the_same_samples(wrote, now, batch, goes_on_after):
    assert same_samples_batch(wrote, now, batch) == goes_on_after


def test_a_record_written_before_the_global_batch_was_kept_maps_nothing():
    older = {"processes": 2, "steps_per_epoch": 8}  # kscale_job.json of an earlier kscale
    assert same_samples_batch(older, job(1, 16, 4), 2) is None
    assert same_samples_batch(older, job(2, 8, 8), 2) == 2


def test_a_step_in_words_is_its_samples_or_the_datas_batches():
    assert step_size(job(2, 8, 8)) == "global batch 8"
    assert step_size(batches(2, 8, 2)) == "2 of the data's batches a step"
