"""A worker's part of a `torch.utils.data.DataLoader` (Keras 3 on torch): every N-th of its batches.

The loader is made again around the same dataset, with the same workers, collate function and memory
pinning, and a batch sampler that yields batches r, r+N, ... of the user's (so batches keep the user's
size, as for a Keras PyDataset). A loader that shuffles with torch's global generator would draw another
order on every process, whose parts would overlap and miss samples: its RandomSampler gets a generator of
its own seeded as torch's DistributedSampler seeds it (0, plus the epoch), the same on every process.
"""

from __future__ import annotations

from typing import Any

import torch

from kscale import batch_shards, feeds, sharding
from kscale.errors import DataError

#: DistributedSampler's default seed: the order every process draws for epoch e is seed + e's.
SHUFFLE_SEED = 0


def is_loader(x: Any) -> bool:
    return isinstance(x, torch.utils.data.DataLoader)


def worker_part(loader: Any, y: Any, sample_weight: Any, request: feeds.FeedRequest) -> feeds.WorkerPart:
    shard = request.shard
    batch_shards.no_separate_targets(y, sample_weight, "a torch DataLoader")
    if shard.count == 1:
        return feeds.WorkerPart(feeds.Kind.SEQUENCE, loader, length=len(loader))
    if loader.batch_sampler is None:  # an IterableDataset, or batch_size=None: no batches to deal out
        raise DataError(
            f"kscale cannot split this DataLoader's {request.what} between {shard.count} processes: it has "
            "no batch sampler (an IterableDataset, or batch_size=None). Give the DataLoader a map-style "
            "dataset and a batch_size, or pass data_policy='none' if each process already reads its own part."
        )
    total = len(loader.batch_sampler)
    if total < shard.count:
        raise DataError(
            f"the DataLoader's {request.what} has {total} batch(es), fewer than the {shard.count} processes: "
            "some process would get no step. Use a smaller batch size or more data."
        )
    batches = ShardedBatchSampler(_same_order_everywhere(loader.batch_sampler), shard)
    notes = []
    if batches.shares_last_step:
        notes.append(sharding.last_step_note(request.what, batches.tail, shard.count))
    elif total % shard.count and shard.even:
        notes.append(f"{total % shard.count} trailing batch(es) of {total} unused so processes stay even")
    longest, shortest = sharding.longest_and_shortest(total, shard)
    part = _loader_with(loader, batches)
    return feeds.WorkerPart(
        feeds.Kind.SEQUENCE, part, length=len(part), notes=notes, longest=longest, shortest=shortest
    )


class ShardedBatchSampler(torch.utils.data.Sampler):
    """The batches r, r+N, ... of `batch_sampler` (N processes, this one r), as many on every process. The
    last step's batches are joined and cut in N equal index lists, as one process at the global batch
    trains on their samples, where the sampler's sizes give each process one; otherwise they stay
    unused."""

    def __init__(self, batch_sampler: Any, shard: sharding.Shard):
        self.batch_sampler = batch_sampler
        self.shard = shard
        self.head, self.tail = sharding.last_step(len(batch_sampler), shard.count)
        self.shares_last_step = (
            shard.even and shard.count > 1 and _last_step_samples(batch_sampler, self.tail) >= shard.count
        )

    def __len__(self) -> int:
        if self.shares_last_step:
            return self.head // self.shard.count + 1
        return sharding.part_length(len(self.batch_sampler), self.shard)

    def __iter__(self) -> Any:
        wanted, count, index = len(self), self.shard.count, self.shard.index
        joined: list = []
        for position, batch in enumerate(self.batch_sampler):
            if self.shares_last_step and position >= self.head:
                joined.extend(batch)
            elif position // count >= wanted:
                return
            elif position % count == index:
                yield batch
        if joined:
            each = len(joined) // count
            yield joined[index * each : (index + 1) * each]


def _last_step_samples(batch_sampler: Any, tail: int) -> int:
    """How many samples the last `tail` batches hold, to be shared: a BatchSampler's sizes say it (none
    with drop_last, whose trailing batches one process at the global batch drops as well); any other
    sampler holds at least one in each batch."""
    if not isinstance(batch_sampler, torch.utils.data.BatchSampler):
        return tail
    if batch_sampler.drop_last:
        return 0
    return len(batch_sampler.sampler) - (len(batch_sampler) - tail) * batch_sampler.batch_size


class _EpochSeededRandomSampler(torch.utils.data.RandomSampler):
    """A RandomSampler whose order for its e-th pass is drawn from SHUFFLE_SEED + e on every process."""

    def __init__(self, sampler: Any):
        # The sampler's own count where it was given one; else none, to follow the data's size as it does.
        given = sampler.num_samples if sampler.num_samples != len(sampler.data_source) else None
        super().__init__(sampler.data_source, replacement=sampler.replacement, num_samples=given)
        self.generator = torch.Generator()
        self._epoch = 0

    def __iter__(self) -> Any:
        self.generator.manual_seed(SHUFFLE_SEED + self._epoch)
        self._epoch += 1
        return super().__iter__()


def _same_order_everywhere(batch_sampler: Any) -> Any:
    """The loader's batch sampler, shuffling alike on every process where it shuffled from torch's global
    generator (a RandomSampler without a generator: DataLoader(shuffle=True))."""
    sampler = getattr(batch_sampler, "sampler", None)
    shuffles_globally = (
        type(batch_sampler) is torch.utils.data.BatchSampler
        and type(sampler) is torch.utils.data.RandomSampler
        and sampler.generator is None
    )
    if shuffles_globally:
        return torch.utils.data.BatchSampler(
            _EpochSeededRandomSampler(sampler), batch_sampler.batch_size, batch_sampler.drop_last
        )
    return batch_sampler


def _loader_with(loader: Any, batch_sampler: Any) -> Any:
    """`loader` made again with `batch_sampler`: its dataset, worker processes, collation and pinning."""
    return torch.utils.data.DataLoader(
        loader.dataset,
        batch_sampler=batch_sampler,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        generator=loader.generator,
        prefetch_factor=loader.prefetch_factor if loader.num_workers else None,
        persistent_workers=loader.persistent_workers,
        pin_memory_device=loader.pin_memory_device,
    )
