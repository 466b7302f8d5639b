"""The private torch state kscale touches (kscale/_torch_private.py), on the installed torch, in a fresh
process: a group made before Keras is imported (as Ray Train's TorchTrainer and scripts that call
init_process_group first make it) is freed when kscale leaves it, its gloo threads gone before the
interpreter's teardown, where they aborted one run in six ("terminate called without an active
exception")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kscale.launch.workers import free_ports

GROUP_BEFORE_KERAS = """
import json, os, sys
import torch.distributed as dist
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
import torch.distributed.nn.functional as functional  # what Keras imports (through torch._dynamo)
captured = [name for name, f in vars(functional).items()
            if any(d is dist.group.WORLD for d in getattr(f, "__defaults__", None) or ())]
import keras, kscale
from kscale.backends import torch as torch_backend

def threads():
    names = []
    for t in os.listdir("/proc/self/task"):
        try:
            names.append(open(f"/proc/self/task/{t}/comm").read().strip())
        except FileNotFoundError:  # a thread that ended since the listing: not running
            pass
    return sorted(names)

before = threads()
if sys.argv[2] == "launcher":  # Ray Train leaves the group itself, before kscale's exit handler runs
    dist.destroy_process_group()
torch_backend._leave_process_group()
print(json.dumps({"captured": captured, "before": before, "after": threads()}))
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("leaves_first", ["kscale", "launcher"])
def test_a_group_made_before_keras_is_freed_when_kscale_leaves_it(worker_env, leaves_first):
    done = subprocess.run(
        [sys.executable, "-c", GROUP_BEFORE_KERAS, str(free_ports(1)[0]), leaves_first],
        env=worker_env(KERAS_BACKEND="torch"),
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # torch still keeps the group in those defaults: when this fails, torch stopped doing it, and
    # _torch_private.release_destroyed_groups can go
    assert "all_reduce" in seen["captured"], seen["captured"]
    assert "pt_gloo_runloop" in seen["before"], seen["before"]  # the group's worker threads
    assert "pt_gloo_runloop" not in seen["after"], seen["after"]
