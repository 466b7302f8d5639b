"""A DataLoader's batches dealt to processes (kscale.keras3.torch_data), the last step shared evenly."""

from __future__ import annotations

import pytest
import torch

from kscale.keras3.torch_data import ShardedBatchSampler
from kscale.sharding import Shard


def batches(total: int, size: int, drop_last: bool = False) -> torch.utils.data.BatchSampler:
    return torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(total)), size, drop_last)


@pytest.mark.parametrize(
    "total, drop_last, last",
    [
        (38, False, [[32, 33, 34], [35, 36, 37]]),  # 16, 16, 6: the 6 shared, as one process's last step
        (54, False, [[*range(32, 43)], [*range(43, 54)]]),  # ..., 16, 6: 11 each
    ],
)
def test_the_last_step_is_shared_evenly_by_the_processes(total, drop_last, last):
    parts = [ShardedBatchSampler(batches(total, 16, drop_last), Shard(r, 2)) for r in range(2)]
    lists = [list(part) for part in parts]
    assert [len(items) for items in lists] == [len(part) for part in parts]  # the length it says
    assert [items[-1] for items in lists] == last
    seen = sorted(i for items in lists for batch in items for i in batch)
    assert len(seen) == len(set(seen))  # disjoint


@pytest.mark.parametrize("total, drop_last", [(33, False), (48, True)])
def test_trailing_batches_it_cannot_share_stay_unused(total, drop_last):
    # 16, 16, 1: one sample for two processes; drop_last: one process at the global batch drops them too
    parts = [ShardedBatchSampler(batches(total, 16, drop_last), Shard(r, 2)) for r in range(2)]
    assert not parts[0].shares_last_step
    assert [list(part) for part in parts] == [[[*range(16)]], [[*range(16, 32)]]]
