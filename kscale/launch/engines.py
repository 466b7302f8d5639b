"""The engines `kscale run` launches, and what each worker's environment must say to join its job.

- horovod: Horovod's own runner (kscale.cli.run, kscale.launch.pernode);
- tf: TensorFlow's MultiWorkerMirroredStrategy, one TF_CONFIG per worker (tf.keras: lanes A and B);
- jax: Keras 3 on JAX, keras.distribution.initialize()'s KERAS_DISTRIBUTION_* variables (lane C).

The default is what the installed stack can run with several processes: jax for Keras 3 on JAX,
horovod for tf.keras (or where tf_keras can stand in for Keras 3: TF >= 2.16, lane B) where Horovod is
installed, tf otherwise. Decided from package metadata and
variables, without importing a framework: the launcher must start fast.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence

from kscale import environment, frameworks
from kscale.errors import LaunchError

ENGINES = ("horovod", "tf", "jax")


def default_engine() -> str:
    keras = frameworks.process_keras()
    if keras.generation == 3 and keras.backend == "jax":
        return "jax"
    if keras.generation == 3 and keras.backend == "tensorflow" and not frameworks.legacy_keras_needed():
        return "tf"  # TF_CONFIG workers: MultiWorkerMirroredStrategy (Horovod never averages Keras 3)
    if keras.generation == 3 and not frameworks.legacy_keras_needed():
        raise LaunchError(
            f"Keras 3 on {keras.backend} trains in one process here (the 'single' backend). For several "
            "processes use KERAS_BACKEND=jax or KERAS_BACKEND=tensorflow; or name an engine with --engine."
        )
    return "horovod" if frameworks.is_installed("horovod") else "tf"


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where this node's workers sit in the job."""

    nnodes: int
    node_rank: int
    nproc_per_node: int
    master_addr: str  # node 0's address (JAX's coordinator runs in node 0's first worker)
    master_port: int
    hosts: tuple[str, ...] = ()  # every node's address, in node-rank order (tf engine, several nodes)
    ports: tuple[int, ...] = ()  # one port per worker of a one-node job (picked free); else master port + i

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.nproc_per_node + local_rank


def worker_envs(engine: str, layout: Layout, base: Mapping[str, str]) -> dict[int, dict[str, str]]:
    """Each local worker's environment, by global rank."""
    inherited = {k: v for k, v in base.items() if not k.startswith(environment.LAUNCHER_VARIABLE_PREFIXES)}
    envs = {}
    for local in range(layout.nproc_per_node):
        env = dict(inherited)
        env.update(
            PYTHONUNBUFFERED="1", KSCALE_LOCAL_RANK=str(local), KSCALE_LOCAL_SIZE=str(layout.nproc_per_node)
        )
        env.update(_engine_env(engine, layout, local))
        if engine == "jax" and layout.nproc_per_node > 1:
            # JAX takes every GPU it sees: one GPU per local worker (as kscale pins them for TensorFlow).
            visible = base.get("CUDA_VISIBLE_DEVICES")
            choices = visible.split(",") if visible else [str(i) for i in range(layout.nproc_per_node)]
            env["CUDA_VISIBLE_DEVICES"] = choices[local % len(choices)]
        envs[layout.global_rank(local)] = env
    return envs


def _engine_env(engine: str, layout: Layout, local: int) -> dict[str, str]:
    if engine == "jax":
        return {
            "KERAS_BACKEND": "jax",
            "KERAS_DISTRIBUTION_JOB_ADDRESSES": f"{layout.master_addr}:{layout.master_port}",
            "KERAS_DISTRIBUTION_NUM_PROCESSES": str(layout.world_size),
            "KERAS_DISTRIBUTION_PROCESS_ID": str(layout.global_rank(local)),
        }
    if engine == "tf":
        cluster = {"worker": tf_workers(layout)}
        task = {"type": "worker", "index": layout.global_rank(local)}
        env = {"TF_CONFIG": json.dumps({"cluster": cluster, "task": task})}
        if frameworks.legacy_keras_needed():
            env["TF_USE_LEGACY_KERAS"] = "1"  # Keras 3 cannot run MultiWorkerMirroredStrategy's fit
        return env
    raise LaunchError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}.")


def tf_workers(layout: Layout) -> list[str]:
    """Every worker's host:port: node r's workers on its address, at the master port and the ones after it."""
    if layout.nnodes > 1 and len(layout.hosts) != layout.nnodes:
        raise LaunchError(
            f"the tf engine on {layout.nnodes} nodes needs every node's address, in node-rank order: add "
            f"-H node0,node1,... ({layout.nnodes} names) to every node's kscale run (TF_CONFIG lists each "
            "worker's host:port, and a node cannot learn the others' addresses from --master alone)."
        )
    if layout.ports:
        return [f"{layout.master_addr}:{port}" for port in layout.ports]
    hosts = layout.hosts or (layout.master_addr,)
    return [
        f"{hosts[node]}:{layout.master_port + local}"
        for node in range(layout.nnodes)
        for local in range(layout.nproc_per_node)
    ]


def forbidden_options(engine: str, options: Sequence[str]) -> None:
    """The tf and jax engines take -np (or the per-node options) only; horovodrun's options mean nothing there."""
    if options:
        raise LaunchError(
            f"the {engine} engine takes -np N (or --nnodes/--node-rank/--master/--nproc-per-node) and the "
            f"command after `--`; {' '.join(options)!r} {'is a' if len(options) == 1 else 'are'} horovodrun "
            "option(s), which only the horovod engine understands."
        )
