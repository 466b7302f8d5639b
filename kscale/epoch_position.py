"""Where a job resumed after a backup written inside an epoch goes on: after the batch of its own that ends
the samples the backup's batches held (issue 43, item 4), in both families (Keras 3:
kscale/callbacks/shared_backup.py; tf.keras: kscale/keras2/backup_inside_epoch.py). The order of the samples
is one process's at any number of processes (array data), so a job of another number of processes or
another global batch goes on from the same sample where one of its batches ends there. Data that holds
its batch (a Keras Sequence / PyDataset, a batched tf.data dataset) is cut by batch, a step of R replicas
taking R of its batches (kscale/batch_shards.py, kscale/tf_data.py), so there the same holds counted in its
batches.

The record beside a backup says what a job's step is: its "processes", "steps_per_epoch" (None: unknown),
"global_batch" (samples a step, array data; None where the data holds the batch) and "batches_per_step"
(the data's batches a step where kscale cut it by batch; else None)."""

from __future__ import annotations

from typing import Any


def job_record(processes: int, steps_per_epoch: Any, plan: Any) -> dict:
    """What a job's step is, as the record beside its backups keeps it (`plan`: the model's kscale_plan)."""
    return {
        "processes": processes,
        "steps_per_epoch": None if steps_per_epoch is None else int(steps_per_epoch),
        "global_batch": None if plan is None else plan.global_batch,
        "batches_per_step": None if plan is None else plan.batches_per_step,
    }


def step_size(record: dict) -> str:
    """A job's step in words: "global batch 8", or "2 of the data's batches a step"."""
    if record.get("global_batch") is None and record.get("batches_per_step"):
        return f"{record['batches_per_step']} of the data's batches a step"
    return f"global batch {record.get('global_batch')}"


def same_samples_batch(wrote: dict, now: dict, batch: int) -> int | None:
    """The batch of an epoch of the job `now` that ends the samples its `batch` ended in the job that wrote
    the backup (`wrote`), each a record as `job_record` makes it; None where no batch does.

    A job like the writer's (processes, steps an epoch): the same batch. One of another number of
    processes or global batch (array data, one process's order at any number of them): the batch after
    which as many samples of the epoch are done, where one is (a 2-process job's batch b is a 1-process
    job's batch 2b + 1 at half its global batch), counted in samples for arrays and in the data's batches
    where it holds them; the writer's last batch of an epoch, this job's last."""
    if (wrote["processes"], wrote["steps_per_epoch"]) == (now["processes"], now["steps_per_epoch"]):
        return batch
    unit = "global_batch" if wrote.get("global_batch") and now.get("global_batch") else "batches_per_step"
    before, after, steps = wrote.get(unit), now.get(unit), now["steps_per_epoch"]
    if not (before and after and steps and wrote["steps_per_epoch"]):
        return None
    if batch + 1 == wrote["steps_per_epoch"]:
        return steps - 1
    done, rest = divmod((batch + 1) * before, after)
    return done - 1 if rest == 0 and done < steps else None
