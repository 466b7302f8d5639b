"""The private torch state kscale touches (default arguments of `torch.distributed.nn.functional`), with the
reason no public API serves.

tests/torch_lane/test_torch_private.py checks it on the installed torch, so an upgrade that changes it
fails there, loudly.
"""

from __future__ import annotations

import types
from typing import Any


def release_destroyed_groups() -> None:
    """Let destroyed process groups be freed: drop the references `torch.distributed.nn.functional` keeps.

    That module's collectives take `group=group.WORLD` as default arguments, so whatever group is the
    default when the module is first imported stays referenced by their defaults for good. Keras 3 on
    torch imports it (through torch._dynamo); where the group was made before (Ray Train's TorchTrainer,
    a script that calls init_process_group first), `destroy_process_group()` no longer frees the group:
    its gloo threads outlive it, the group is torn down with the interpreter, and the process aborts
    ("terminate called without an active exception", SIGABRT) about one run in six after training well.
    Defaults holding a group that is no longer the default one become None, which the module reads as
    the default group, as `group.WORLD` means.
    """
    import sys

    import torch.distributed as dist

    functional = sys.modules.get("torch.distributed.nn.functional")
    if functional is None:
        return
    live = dist.group.WORLD

    def stale(value: Any) -> bool:
        return isinstance(value, dist.ProcessGroup) and value is not live

    for value in vars(functional).values():
        defaults = getattr(value, "__defaults__", None)
        if isinstance(value, types.FunctionType) and defaults and any(stale(d) for d in defaults):
            value.__defaults__ = tuple(None if stale(d) else d for d in defaults)
