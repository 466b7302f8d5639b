"""Where a job resumed after a backup written inside an epoch goes on: after the batch of its own that ends
the samples the backup's batches held (issue 43, item 4), in both families (Keras 3:
kscale/callbacks/shared_backup.py; tf.keras: kscale/keras2/backup_inside_epoch.py). The order of the samples
is one process's at any number of processes (array data), so a job of another number of processes or
another global batch goes on from the same sample where one of its batches ends there."""

from __future__ import annotations


def same_samples_batch(wrote: dict, now: dict, batch: int) -> int | None:
    """The batch of an epoch of the job `now` that ends the samples its `batch` ended in the job that wrote
    the backup (`wrote`): each a dict of its "processes", "steps_per_epoch" (None: unknown) and
    "global_batch" (None: the data holds the batch), as the record beside the backup keeps them; None where
    no batch does.

    A job like the writer's (processes, steps an epoch): the same batch. One of another number of
    processes or global batch (array data, one process's order at any number of them): the batch after
    which as many samples of the epoch are done, where one is (a 2-process job's batch b is a 1-process
    job's batch 2b + 1 at half its global batch); the writer's last batch of an epoch, this job's last."""
    if (wrote["processes"], wrote["steps_per_epoch"]) == (now["processes"], now["steps_per_epoch"]):
        return batch
    before, after, steps = wrote.get("global_batch"), now["global_batch"], now["steps_per_epoch"]
    if not (before and after and steps and wrote["steps_per_epoch"]):
        return None
    if batch + 1 == wrote["steps_per_epoch"]:
        return steps - 1
    done, rest = divmod((batch + 1) * before, after)
    return done - 1 if rest == 0 and done < steps else None
