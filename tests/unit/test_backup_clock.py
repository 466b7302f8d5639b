"""kscale/backup_clock.py: the batches to the next backup every M minutes, agreed from the slowest
process' pace, and the user's BackupAndRestore set to back up inside epochs."""

from __future__ import annotations

import numpy as np
import pytest

from kscale import backup_clock
from kscale.errors import OptionError
from kscale.options import Options


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def gather_with(*others: float):
    """A gather of a job where the other processes measured `others` seconds per batch."""

    def gather(row: np.ndarray) -> np.ndarray:
        return np.asarray([row, *[[other] for other in others]])

    return gather


def test_the_next_backup_comes_after_the_batches_the_slowest_process_trains_in_m_minutes():
    now = FakeClock()
    clock = backup_clock.BackupClock(1.0, now)
    clock.start()
    now.now = 2.0  # 4 batches in 2 s here: 0.5 s a batch; the other process 0.75 s a batch
    assert clock.batches_to_next_backup(4, gather_with(0.75)) == 80  # 60 s / 0.75 s
    clock.start()
    now.now += 6.0  # 80 batches in 6 s, the other faster still: this one sets the pace
    assert clock.batches_to_next_backup(80, gather_with(0.01)) == 800


def test_steps_longer_than_m_minutes_back_up_after_every_batch():
    now = FakeClock()
    clock = backup_clock.BackupClock(0.01, now)  # 0.6 s
    clock.start()
    now.now = 10.0
    assert clock.batches_to_next_backup(2, gather_with()) == 1


def test_a_clock_counts_from_its_making_so_no_time_yet_backs_up_at_the_next_batch():
    clock = backup_clock.BackupClock(1.0, FakeClock())
    assert clock.batches_to_next_backup(2, gather_with()) == 1


class Backup:
    def __init__(self, save_freq):
        self.save_freq = save_freq


def test_timed_backups_start_after_the_users_save_freq_or_two_batches():
    epoch, every_five = Backup("epoch"), Backup(5)
    backup_clock.timed([epoch, every_five], 10)
    assert (epoch.save_freq, every_five.save_freq) == (backup_clock.FIRST_BACKUP_BATCHES, 5)
    # Its clock: 600 s at the other process' 0.5 s a batch (this one's pace since the start is nearly 0).
    assert backup_clock.pace_next(epoch, 2, gather_with(0.5)) == 1200
    assert "every 10 minutes" in backup_clock.notes(10, [epoch])[0]


def test_without_backup_minutes_the_users_backup_is_unchanged():
    backup = Backup("epoch")
    backup_clock.timed([backup], None)
    assert backup.save_freq == "epoch" and backup_clock.pace_next(backup, 2, gather_with(0.5)) is None
    assert backup_clock.notes(None, [backup]) == []


@pytest.mark.parametrize("minutes", [0, -1, "10", True])
def test_backup_minutes_must_be_a_positive_number(minutes):
    with pytest.raises(OptionError, match="backup_minutes"):
        Options.parse({"backup_minutes": minutes})
