"""The choices `kscale.distribute()` makes for every backend, each overridable by the user.

Options that belong to one backend (Horovod's gradient compression, say) are that backend's own: the
keywords left over here go to `Backend.parse_options`, which knows them and names them in its errors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kscale.errors import OptionError
from kscale.plan import BatchSemantics, DataPolicy, LRScaling, parse_option


@dataclasses.dataclass(frozen=True)
class Options:
    """Every choice `distribute()` makes whatever the backend."""

    backend: str | None = None
    devices: tuple[str, ...] | None = None
    lr_scaling: LRScaling = LRScaling.LINEAR
    warmup_epochs: float = 0.0
    data_policy: DataPolicy = DataPolicy.SHARD
    batch_semantics: BatchSemantics = BatchSemantics.PER_REPLICA
    print_plan: bool = True
    #: Compare the workers' weights at epoch ends and stop with RanksDivergedError if they differ.
    check_agreement: bool = True
    #: A function asked at each epoch's end whether this worker will be preempted (True: a notice, as
    #: SIGTERM is), for schedulers that announce it otherwise (a cloud's metadata server). kscale/preemption.py
    preemption_notice: Callable[[], bool] | None = None
    #: fit's BackupAndRestore backs up every this many minutes of training (kscale/backup_clock.py).
    backup_minutes: float | None = None

    @classmethod
    def parse(cls, options: dict[str, Any]) -> tuple[Options, dict[str, Any]]:
        """The common options, checked, and the remaining keywords (for the backend)."""
        names = {f.name for f in dataclasses.fields(cls)}
        common = {k: v for k, v in options.items() if k in names}
        rest = {k: v for k, v in options.items() if k not in names}
        for name, enum_type in (
            ("lr_scaling", LRScaling),
            ("data_policy", DataPolicy),
            ("batch_semantics", BatchSemantics),
        ):
            if name in common:
                common[name] = parse_option(enum_type, common[name], name)
        warmup = common.get("warmup_epochs", 0.0)
        if not isinstance(warmup, int | float) or isinstance(warmup, bool) or warmup < 0:
            raise OptionError(f"warmup_epochs={warmup!r} must be a number >= 0 (epochs of gradual warmup).")
        if not isinstance(common.get("check_agreement", True), bool):
            raise OptionError(f"check_agreement={common['check_agreement']!r} must be True or False.")
        notice = common.get("preemption_notice")
        if notice is not None and not callable(notice):
            raise OptionError(
                f"preemption_notice={notice!r} must be a function of no arguments that returns True once this "
                "worker is told it will be preempted (or None)."
            )
        minutes = common.get("backup_minutes")
        if minutes is not None and (
            not isinstance(minutes, int | float) or isinstance(minutes, bool) or minutes <= 0
        ):
            raise OptionError(
                f"backup_minutes={minutes!r} must be a number of minutes > 0 (fit's "
                "keras.callbacks.BackupAndRestore then backs up that often), or None."
            )
        if common.get("devices") is not None:
            common["devices"] = tuple(common["devices"])
        return cls(**common), rest

    @classmethod
    def names(cls) -> list[str]:
        return sorted(f.name for f in dataclasses.fields(cls))
