"""Launching training jobs: the engines, their workers, the per-node agent and its rendezvous, and the
checks that a launch can work. `kscale run` (kscale.cli.run) only parses arguments for `run` here.

- launcher.py: `run()`, the one entry point, for every engine;
- engines.py: horovod, tf, jax, and the variables each worker gets to join its job;
- workers.py: this node's worker processes (tf and jax engines): started, watched, stopped together;
- pernode.py: what starts workers on another node without SSH: node 0's rendezvous, each node's agent;
- hosts.py: host lists and hostfiles; facts.py and checks.py: what `kscale doctor` and the preflight see
  and judge; exits.py: how a worker's exit is told.
"""

from __future__ import annotations

from kscale.launch.launcher import run

__all__ = ["run"]
