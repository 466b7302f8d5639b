"""The engines `kscale run` launches, and what each worker's environment must say to join its job.

- horovod: Horovod's own runner (kscale.cli.run, kscale.launch.pernode);
- tf: TensorFlow's MultiWorkerMirroredStrategy, one TF_CONFIG per worker (tf.keras: lanes A and B);
- jax: Keras 3 on JAX, keras.distribution.initialize()'s KERAS_DISTRIBUTION_* variables (lane C);
- torch: Keras 3 on PyTorch, handed to torchrun (torch's elastic agent, c10d rendezvous across hosts).

The default is what the installed stack can run with several processes: jax for Keras 3 on JAX,
horovod for tf.keras (or where tf_keras can stand in for Keras 3: TF >= 2.16, lane B) where Horovod is
installed, tf otherwise. Decided from package metadata and
variables, without importing a framework: the launcher must start fast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kscale import environment, frameworks
from kscale.errors import LaunchError

ENGINES = ("horovod", "tf", "jax", "torch")


def default_engine() -> str:
    keras = frameworks.process_keras()
    if keras.generation == 3 and keras.backend == "jax":
        return "jax"
    if keras.generation == 3 and keras.backend == "torch":
        return "torch"
    if keras.generation == 3 and keras.backend == "tensorflow" and not frameworks.legacy_keras_needed():
        return "tf"  # TF_CONFIG workers: MultiWorkerMirroredStrategy (Horovod never averages Keras 3)
    if keras.generation == 3 and not frameworks.legacy_keras_needed():
        raise LaunchError(
            f"Keras 3 on {keras.backend} trains in one process here (the 'single' backend). For several "
            "processes use KERAS_BACKEND=jax, tensorflow or torch; or name an engine with --engine."
        )
    return "horovod" if frameworks.is_installed("horovod") else "tf"


#: The launcher each engine starts its workers as: what environment.detect() finds in them.
LAUNCHERS = {
    "horovod": environment.Launcher.HOROVOD,
    "tf": environment.Launcher.TF_CONFIG,
    "jax": environment.Launcher.KERAS_DISTRIBUTION,
    "torch": environment.Launcher.TORCH,
}
Layout = environment.Layout


def worker_envs(engine: str, layout: Layout, base: Mapping[str, str]) -> dict[int, dict[str, str]]:
    """Each local worker's environment, by global rank."""
    inherited = {k: v for k, v in base.items() if not k.startswith(environment.LAUNCHER_VARIABLE_PREFIXES)}
    envs = {}
    for local in range(layout.nproc_per_node):
        env = dict(inherited)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(_engine_env(engine, layout, local))
        if engine == "jax" and layout.nproc_per_node > 1:
            # JAX takes every GPU it sees: one GPU per local worker (as kscale pins them for TensorFlow).
            visible = base.get("CUDA_VISIBLE_DEVICES")
            choices = visible.split(",") if visible else [str(i) for i in range(layout.nproc_per_node)]
            env["CUDA_VISIBLE_DEVICES"] = choices[local % len(choices)]
        envs[layout.global_rank(local)] = env
    return envs


def _engine_env(engine: str, layout: Layout, local: int) -> dict[str, str]:
    if engine not in ("tf", "jax"):
        raise LaunchError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}.")
    env = environment.worker_variables(LAUNCHERS[engine], layout, local)
    if engine == "jax":
        env["KERAS_BACKEND"] = "jax"
    elif frameworks.legacy_keras_needed():
        env["TF_USE_LEGACY_KERAS"] = "1"  # Keras 3 cannot run MultiWorkerMirroredStrategy's fit
    return env


def torchrun_command(
    layout: Layout, command: Sequence[str], python: str, local_address: str | None = None
) -> list[str]:
    """torchrun (`python -m torch.distributed.run`) starting `command` as this node's workers: on one host a
    standalone rendezvous on a free port; on several, c10d rendezvous at node 0's address, which every
    node's kscale run names with --master. No restarts: a worker that fails ends the job, as under the
    other engines."""
    run = [python, "-m", "torch.distributed.run", "--nproc-per-node", str(layout.nproc_per_node)]
    if layout.nnodes == 1:
        run.append("--standalone")
    else:
        endpoint = f"{layout.master_addr}:{layout.master_port}"
        # c10d numbers the nodes as they join (torchrun ignores --node-rank with it): the chief is the
        # first worker of whichever node is first, not always node 0's.
        run += ["--nnodes", str(layout.nnodes)]
        run += ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", f"kscale-{endpoint}"]
        # Node 0 serves the rendezvous store: torchrun would guess it from the host name, and a name that
        # resolves to 127.0.0.1 (a common /etc/hosts) makes every node a client, waiting for no server.
        run += ["--rdzv-conf", f"is_host={'true' if layout.node_rank == 0 else 'false'}"]
        if local_address:  # what the other nodes reach this one at (its host name may say 127.0.0.1)
            run += ["--local-addr", local_address]
    # --tee 3: every line of every worker, whole, prefixed with its rank ([default0]:), as horovodrun does.
    return [*run, "--max-restarts", "0", "--monitor-interval", "0.5", "--tee", "3", "--no-python", *command]


def torch_env(base: Mapping[str, str]) -> dict[str, str]:
    """What torchrun's workers inherit: this environment without another job's place in it, Keras on torch."""
    env = {k: v for k, v in base.items() if not k.startswith(environment.LAUNCHER_VARIABLE_PREFIXES)}
    return {**env, "PYTHONUNBUFFERED": "1", "KERAS_BACKEND": "torch"}


def forbidden_options(engine: str, options: Sequence[str]) -> None:
    """The tf and jax engines take -np (or the per-node options) only; horovodrun's options mean nothing there."""
    if options:
        raise LaunchError(
            f"the {engine} engine takes -np N (or --nnodes/--node-rank/--master/--nproc-per-node) and the "
            f"command after `--`; {' '.join(options)!r} {'is a' if len(options) == 1 else 'are'} horovodrun "
            "option(s), which only the horovod engine understands."
        )
