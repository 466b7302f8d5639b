"""Who am I: rank, local rank, world size and launcher, read from the environment once.

This is the only module that reads the launcher's environment variables. Each launcher is one small
class with a static ``detect()``; the first one that matches wins, like Lightning Fabric's cluster
environments. Values are computed once per process (``current()``); tests call ``reset()``. The variables
`kscale run` gives the workers it starts (TF_CONFIG, keras.distribution's) are written here too, by the
class that reads them (``worker_variables``): the launch contract is in this one module.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import os
from collections.abc import Mapping

from kscale.errors import EnvironmentDetectionError, LaunchError

#: Where `kscale run` tells its workers to record that they stopped for a preemption notice, and the exit
#: status of a worker that did, and of kscale run then: 128 + SIGTERM (kscale/preemption.py says why).
PREEMPTED_MARKER_VARIABLE = "KSCALE_PREEMPTED_MARKER"
PREEMPTED_EXIT_STATUS = 143

#: Prefixes of the variables that tell a process its place in a job, for every launcher kscale knows: a
#: worker must not inherit them from a surrounding job (kscale run's tf and jax engines drop them).
LAUNCHER_VARIABLE_PREFIXES = (
    "HOROVOD_",
    "OMPI_",
    "PMI_",
    "MPI_LOCAL",
    "SLURM_",
    "TF_CONFIG",
    "KERAS_DISTRIBUTION_",
    # jax.distributed's own names (Kubeflow Trainer's JAX runtime)
    "JAX_COORDINATOR_ADDRESS",
    "JAX_NUM_PROCESSES",
    "JAX_PROCESS_ID",
    "KSCALE_LOCAL_",
    # torchrun's (and Ray Train's, Kubeflow's torch runtime's): torch.distributed's env:// variables
    "TORCHELASTIC_",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)


class Launcher(str, enum.Enum):
    """What started this process."""

    NONE = "none"
    HOROVOD = "horovod"  # horovodrun / kscale run with Gloo: HOROVOD_RANK, HOROVOD_SIZE, ...
    MPI = "mpi"  # mpirun (Open MPI) or an MPICH/Intel MPI PMI launcher
    TF_CONFIG = "tf_config"  # tf.distribute multi-worker
    SLURM = "slurm"  # srun
    KERAS_DISTRIBUTION = "keras_distribution"  # kscale run / by hand: Keras 3's keras.distribution (JAX)
    TORCH = "torch"  # torchrun (or Ray Train, Kubeflow): torch.distributed's RANK, WORLD_SIZE, MASTER_ADDR
    # jax.distributed's JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID (Kubeflow's JAX runtime)
    JAX_DISTRIBUTED = "jax_distributed"


@dataclasses.dataclass(frozen=True)
class Environment:
    """The process's place in the job. Frozen: it never changes while the process runs."""

    launcher: Launcher = Launcher.NONE
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_size: int = 1
    #: `KSCALE_BACKEND`, if the user set it: overrides the backend kscale would pick.
    backend_override: str | None = None
    #: The parsed TF_CONFIG (cluster and task), when the launcher is TF_CONFIG.
    tf_config: Mapping | None = None
    #: TF_USE_LEGACY_KERAS: True/False if set (Keras 2 from tf_keras on TF >= 2.16), None if unset.
    legacy_keras: bool | None = None
    #: KERAS_BACKEND, if set: the backend Keras 3 runs on ("jax", "tensorflow", "torch").
    keras_backend: str | None = None
    #: KERAS_HOME, if set: where Keras keeps keras.json (default ~/.keras).
    keras_home: str | None = None
    #: XDG_CACHE_HOME, if set: where kscale keeps what it learnt about the installation (default ~/.cache).
    cache_home: str | None = None
    #: KERAS_DISTRIBUTION_JOB_ADDRESSES' first address, or JAX_COORDINATOR_ADDRESS: where a JAX job meets.
    coordinator: str | None = None
    #: MASTER_ADDR:MASTER_PORT, where torch.distributed's processes meet (env:// initialization), if set.
    torch_master: str | None = None
    #: HOROVOD_ELASTIC: started by an elastic horovodrun (--min-np/--max-np): workers may come and go, and
    #: rank and size change (ask Horovod for them; the launcher's HOROVOD_RANK/SIZE are the first ones).
    elastic: bool = False
    #: CUDA_VISIBLE_DEVICES, if set: the GPUs (indices or UUIDs) this process and its workers may use; ""
    #: hides them all.
    cuda_visible_devices: str | None = None
    #: KSCALE_PREEMPTION_FILE, if set: a path whose existence is a preemption notice, for schedulers that
    #: announce one otherwise than by SIGTERM (kscale/preemption.py).
    preemption_file: str | None = None
    #: KSCALE_PREEMPTED_MARKER, set by `kscale run` for its workers: a worker that stopped for a preemption
    #: notice creates this file, and kscale run then exits with status 143 whatever the engine's launcher
    #: reports (horovodrun and torchrun exit 1 when a worker fails).
    preempted_marker: str | None = None

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    def describe(self) -> str:
        return (
            f"launcher={self.launcher.value} rank={self.rank}/{self.world_size} "
            f"local_rank={self.local_rank}/{self.local_size}"
        )


def _int(env: Mapping[str, str], name: str) -> int:
    value = env[name]
    try:
        return int(value)
    except ValueError:
        raise EnvironmentDetectionError(
            f"{name}={value!r} is not an integer; the launcher that set it is misconfigured. "
            f"Unset {name} or start the job with horovodrun / kscale run."
        ) from None


def _first_int(env: Mapping[str, str], names: tuple[str, ...], default: int) -> int:
    for name in names:
        if name in env:
            return _int(env, name)
    return default


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where one node's workers sit in a job `kscale run` starts (what `worker_variables` tells them)."""

    nnodes: int
    node_rank: int
    nproc_per_node: int
    master_addr: str  # node 0's address (JAX's coordinator runs in node 0's first worker)
    master_port: int
    hosts: tuple[str, ...] = ()  # every node's address, in node-rank order (TF_CONFIG, several nodes)
    ports: tuple[int, ...] = ()  # one port per worker of a one-node job (picked free); else master port + i

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.nproc_per_node + local_rank


def worker_variables(launcher: Launcher, layout: Layout, local_rank: int) -> dict[str, str]:
    """The variables a worker that `kscale run` starts gets to join its job as `launcher`'s: written here,
    beside the detector that reads them back in the worker (the launch contract, in one place)."""
    writers = {d.launcher: d for d in (TFConfigDetector, KerasDistributionDetector)}
    if launcher not in writers:
        raise LaunchError(
            f"kscale starts workers as TF_CONFIG or keras.distribution ones, not {launcher.value}"
        )
    return {
        "KSCALE_LOCAL_RANK": str(local_rank),
        "KSCALE_LOCAL_SIZE": str(layout.nproc_per_node),
        **writers[launcher].variables(layout, local_rank),
    }


class _Detector:
    """One launcher: `detect()` says whether it started this process, `read()` builds the Environment."""

    launcher: Launcher

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        raise NotImplementedError

    @classmethod
    def read(cls, env: Mapping[str, str]) -> Environment:
        raise NotImplementedError


class HorovodDetector(_Detector):
    """horovodrun with Gloo (and kscale run) export HOROVOD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE."""

    launcher = Launcher.HOROVOD

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return "HOROVOD_RANK" in env and "HOROVOD_SIZE" in env

    @classmethod
    def read(cls, env: Mapping[str, str]) -> Environment:
        return Environment(
            launcher=cls.launcher,
            rank=_int(env, "HOROVOD_RANK"),
            world_size=_int(env, "HOROVOD_SIZE"),
            local_rank=_first_int(env, ("HOROVOD_LOCAL_RANK",), 0),
            local_size=_first_int(env, ("HOROVOD_LOCAL_SIZE",), 1),
        )


class MPIDetector(_Detector):
    """Open MPI (OMPI_COMM_WORLD_*), MPICH / Intel MPI (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID)."""

    launcher = Launcher.MPI

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return ("OMPI_COMM_WORLD_RANK" in env and "OMPI_COMM_WORLD_SIZE" in env) or (
            "PMI_RANK" in env and "PMI_SIZE" in env
        )

    @classmethod
    def read(cls, env: Mapping[str, str]) -> Environment:
        if "OMPI_COMM_WORLD_RANK" in env:
            return Environment(
                launcher=cls.launcher,
                rank=_int(env, "OMPI_COMM_WORLD_RANK"),
                world_size=_int(env, "OMPI_COMM_WORLD_SIZE"),
                local_rank=_first_int(env, ("OMPI_COMM_WORLD_LOCAL_RANK",), 0),
                local_size=_first_int(env, ("OMPI_COMM_WORLD_LOCAL_SIZE",), 1),
            )
        return Environment(
            launcher=cls.launcher,
            rank=_int(env, "PMI_RANK"),
            world_size=_int(env, "PMI_SIZE"),
            local_rank=_first_int(env, ("MPI_LOCALRANKID", "PMI_LOCAL_RANK"), 0),
            local_size=_first_int(env, ("MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"), 1),
        )


class TFConfigDetector(_Detector):
    """tf.distribute multi-worker: TF_CONFIG names the cluster and this task.

    Parsed here with json rather than TensorFlow's `TFConfigClusterResolver`, so that detection never
    imports TensorFlow (the `kscale` command must start fast); ranks follow the resolver's order, chief
    first and then the workers, as `MultiWorkerMirroredStrategy` numbers them. The strategy itself is
    built by TensorFlow's resolver (and `SlurmClusterResolver` under srun) in the multi_worker backend.
    """

    launcher = Launcher.TF_CONFIG

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return bool(env.get("TF_CONFIG", "").strip())

    @classmethod
    def read(cls, env: Mapping[str, str]) -> Environment:
        raw = env["TF_CONFIG"]
        try:
            config = json.loads(raw)
        except json.JSONDecodeError as err:
            raise EnvironmentDetectionError(
                f"TF_CONFIG is not valid JSON ({err}). Expected e.g. "
                '{"cluster": {"worker": ["host1:port", "host2:port"]}, "task": {"type": "worker", "index": 0}}'
            ) from None
        if not isinstance(config, dict) or not isinstance(config.get("task") or {}, dict):
            raise EnvironmentDetectionError(
                f"TF_CONFIG must be a JSON object with 'cluster' and 'task', got {raw!r}. Expected e.g. "
                '{"cluster": {"worker": ["host1:port", "host2:port"]}, "task": {"type": "worker", "index": 0}}'
            )
        cluster = config.get("cluster") or {}
        task = config.get("task") or {}
        task_type = task.get("type", "worker")
        try:
            task_index = int(task.get("index", 0))
        except (TypeError, ValueError):
            raise EnvironmentDetectionError(
                f"TF_CONFIG task.index={task.get('index')!r} is not an integer; give this worker's position "
                "in cluster.worker (0, 1, ...)."
            ) from None
        # Chief first, then workers: the same global order MultiWorkerMirroredStrategy uses.
        ordered = [("chief", i) for i in range(len(cluster.get("chief", [])))]
        ordered += [("worker", i) for i in range(len(cluster.get("worker", [])))]
        if not ordered:
            raise EnvironmentDetectionError(
                f"TF_CONFIG has no 'chief' or 'worker' jobs in its cluster: {cluster!r}. "
                "List every worker's host:port under cluster.worker."
            )
        if (task_type, task_index) not in ordered:
            raise EnvironmentDetectionError(
                f"TF_CONFIG task {task_type}:{task_index} is not in its cluster {cluster!r}; "
                "task.index must be below the number of workers listed."
            )
        rank = ordered.index((task_type, task_index))
        my_host = _host_of(cluster[task_type][task_index])
        hosts = [_host_of(cluster[t][i]) for t, i in ordered]
        return Environment(
            launcher=cls.launcher,
            rank=rank,
            world_size=len(ordered),
            local_rank=hosts[:rank].count(my_host),
            local_size=hosts.count(my_host),
            tf_config=config,
        )

    @classmethod
    def variables(cls, layout: Layout, local_rank: int) -> dict[str, str]:
        cluster = {"worker": cls.workers(layout)}
        task = {"type": "worker", "index": layout.global_rank(local_rank)}
        return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": task})}

    @staticmethod
    def workers(layout: Layout) -> list[str]:
        """Every worker's host:port: node r's workers on its address, at the master port and the ones after."""
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


class KerasDistributionDetector(_Detector):
    """Keras 3's `keras.distribution.initialize()` variables (JAX multi-process), as kscale run sets them.

    KERAS_DISTRIBUTION_PROCESS_ID / NUM_PROCESSES / JOB_ADDRESSES are Keras' own names; local rank and
    size come from KSCALE_LOCAL_RANK / KSCALE_LOCAL_SIZE, which kscale run adds (default: one per host).
    """

    launcher = Launcher.KERAS_DISTRIBUTION

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return "KERAS_DISTRIBUTION_PROCESS_ID" in env and "KERAS_DISTRIBUTION_NUM_PROCESSES" in env

    @classmethod
    def read(cls, env: Mapping[str, str]) -> Environment:
        addresses = env.get("KERAS_DISTRIBUTION_JOB_ADDRESSES", "")
        return Environment(
            launcher=cls.launcher,
            rank=_int(env, "KERAS_DISTRIBUTION_PROCESS_ID"),
            world_size=_int(env, "KERAS_DISTRIBUTION_NUM_PROCESSES"),
            local_rank=_first_int(env, ("KSCALE_LOCAL_RANK",), 0),
            local_size=_first_int(env, ("KSCALE_LOCAL_SIZE",), 1),
            coordinator=addresses.split(",")[0].strip() or None,
        )

    @staticmethod
    def variables(layout: Layout, local_rank: int) -> dict[str, str]:
        return {
            "KERAS_DISTRIBUTION_JOB_ADDRESSES": f"{layout.master_addr}:{layout.master_port}",
            "KERAS_DISTRIBUTION_NUM_PROCESSES": str(layout.world_size),
            "KERAS_DISTRIBUTION_PROCESS_ID": str(layout.global_rank(local_rank)),
        }


class TorchDetector(_Detector):
    """torch.distributed's env:// variables: torchrun's elastic agent sets RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT for every worker it starts; Ray Train's TorchTrainer and
    Kubeflow's torch runtime set the same ones."""

    launcher = Launcher.TORCH

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return (
            "RANK" in env and "WORLD_SIZE" in env and ("MASTER_ADDR" in env or "TORCHELASTIC_RUN_ID" in env)
        )

    @classmethod
    def read(cls, env: Mapping[str, str]) -> Environment:
        world_size = _int(env, "WORLD_SIZE")
        return Environment(
            launcher=cls.launcher,
            rank=_int(env, "RANK"),
            world_size=world_size,
            local_rank=_first_int(env, ("LOCAL_RANK",), 0),
            local_size=_first_int(env, ("LOCAL_WORLD_SIZE",), world_size),
        )


class JaxDistributedDetector(_Detector):
    """jax.distributed's own variables, one process per host: Kubeflow Trainer's JAX runtime (`jax-distributed`)
    sets JAX_NUM_PROCESSES, JAX_PROCESS_ID (the pod's job completion index) and JAX_COORDINATOR_ADDRESS
    (node 0's pod, port 29500) in every pod (kubeflow/trainer, pkg/runtime/framework/plugins/jax/jax.go)."""

    launcher = Launcher.JAX_DISTRIBUTED

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return "JAX_PROCESS_ID" in env and "JAX_NUM_PROCESSES" in env and "JAX_COORDINATOR_ADDRESS" in env

    @classmethod
    def read(cls, env: Mapping[str, str]) -> Environment:
        return Environment(
            launcher=cls.launcher,
            rank=_int(env, "JAX_PROCESS_ID"),
            world_size=_int(env, "JAX_NUM_PROCESSES"),
            coordinator=env["JAX_COORDINATOR_ADDRESS"].strip() or None,
        )


def _host_of(address: str) -> str:
    return address.rsplit(":", 1)[0]


class SlurmDetector(_Detector):
    """srun exports SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID per task (sbatch alone is not a job step)."""

    launcher = Launcher.SLURM

    @staticmethod
    def detect(env: Mapping[str, str]) -> bool:
        return "SLURM_PROCID" in env and "SLURM_NTASKS" in env and "SLURM_STEP_ID" in env

    @classmethod
    def read(cls, env: Mapping[str, str]) -> Environment:
        world_size = _int(env, "SLURM_NTASKS")
        nodes = _first_int(env, ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"), 1)
        local_size = _slurm_tasks_on_this_node(env, default=max(1, world_size // max(nodes, 1)))
        return Environment(
            launcher=cls.launcher,
            rank=_int(env, "SLURM_PROCID"),
            world_size=world_size,
            local_rank=_first_int(env, ("SLURM_LOCALID",), 0),
            local_size=local_size,
        )


def _slurm_tasks_on_this_node(env: Mapping[str, str], default: int) -> int:
    """SLURM_TASKS_PER_NODE looks like '2(x3),1'; this node's count needs SLURM_NODEID to index it."""
    spec = env.get("SLURM_TASKS_PER_NODE")
    node_id = env.get("SLURM_NODEID")
    if not spec or node_id is None:
        return default
    counts: list[int] = []
    try:
        for part in spec.split(","):
            if "(x" in part:
                value, repeat = part.rstrip(")").split("(x")
                counts += [int(value)] * int(repeat)
            else:
                counts.append(int(part))
    except ValueError:
        raise EnvironmentDetectionError(
            f"SLURM_TASKS_PER_NODE={spec!r} is not in SLURM's form, e.g. '2(x3),1' (2 tasks on each of 3 "
            "nodes, then 1). Start the job with srun, or unset the variable."
        ) from None
    index = _int(env, "SLURM_NODEID")
    return counts[index] if index < len(counts) else default


#: Checked in order; the first that matches wins. Horovod before MPI because `horovodrun --mpi` sets both;
#: torch's before SLURM's because a cluster's srun starts one torchrun per node, whose workers have both.
DETECTORS: tuple[type[_Detector], ...] = (
    HorovodDetector,
    MPIDetector,
    TFConfigDetector,
    TorchDetector,
    SlurmDetector,
    KerasDistributionDetector,
    JaxDistributedDetector,
)


def detect(env: Mapping[str, str] | None = None) -> Environment:
    """Read the environment from `env` (default: os.environ) without caching."""
    env = os.environ if env is None else env
    override = env.get("KSCALE_BACKEND") or None
    for detector in DETECTORS:
        if detector.detect(env):
            found = detector.read(env)
            break
    else:
        found = Environment()
    if not 0 <= found.rank < found.world_size or not 0 <= found.local_rank < found.local_size:
        raise EnvironmentDetectionError(
            f"{found.launcher.value} says rank {found.rank} of {found.world_size}, local rank "
            f"{found.local_rank} of {found.local_size}: ranks must be below their sizes. "
            "Check the launcher's variables (or unset them to run a single process)."
        )
    return dataclasses.replace(
        found,
        backend_override=override,
        legacy_keras=_flag(env, "TF_USE_LEGACY_KERAS"),
        elastic=bool(_flag(env, "HOROVOD_ELASTIC")),
        keras_backend=env.get("KERAS_BACKEND") or None,
        keras_home=env.get("KERAS_HOME") or None,
        cache_home=env.get("XDG_CACHE_HOME") or None,
        torch_master=f"{env['MASTER_ADDR']}:{env.get('MASTER_PORT', '')}" if env.get("MASTER_ADDR") else None,
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
        preemption_file=env.get("KSCALE_PREEMPTION_FILE") or None,
        preempted_marker=env.get(PREEMPTED_MARKER_VARIABLE) or None,
    )


def _flag(env: Mapping[str, str], name: str) -> bool | None:
    """A boolean variable read as TensorFlow reads TF_USE_LEGACY_KERAS ('1', 'true', 'True'), None if unset."""
    value = env.get(name)
    if value is None or value == "":
        return None
    return value in ("1", "true", "True")


@functools.cache
def current() -> Environment:
    """The environment of this process, detected once."""
    return detect()


def reset() -> None:
    """Forget the cached environment (tests, and launchers that change the variables)."""
    current.cache_clear()
