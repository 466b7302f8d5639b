"""kscale.environment: who am I, read from each launcher's variables (given as plain dicts)."""

from __future__ import annotations

import json

import pytest

from kscale import environment
from kscale.environment import Environment, Launcher, detect
from kscale.errors import EnvironmentDetectionError


def place(env: Environment) -> tuple:
    return env.launcher, env.rank, env.world_size, env.local_rank, env.local_size


def tf_config(cluster: dict, task_type: str, index: int) -> dict[str, str]:
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})}


def slurm(procid: int, ntasks: int, localid: int, **extra: str) -> dict[str, str]:
    env = {"SLURM_PROCID": str(procid), "SLURM_NTASKS": str(ntasks), "SLURM_LOCALID": str(localid)}
    env["SLURM_STEP_ID"] = "0"
    return {**env, **extra}


# -- each launcher ---------------------------------------------------------------------------------------
def test_no_launcher_is_one_chief_process():
    env = detect({"PATH": "/usr/bin", "HOME": "/root"})
    assert place(env) == (Launcher.NONE, 0, 1, 0, 1)
    assert env.is_chief and not env.is_distributed
    assert env.backend_override is None and env.tf_config is None


def test_horovod_gloo_variables():
    env = detect(
        {"HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2"}
    )
    assert place(env) == (Launcher.HOROVOD, 3, 4, 1, 2)
    assert not env.is_chief and env.is_distributed
    assert env.describe() == "launcher=horovod rank=3/4 local_rank=1/2"


def test_horovod_without_local_variables_is_alone_on_its_host():
    assert place(detect({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"})) == (Launcher.HOROVOD, 1, 2, 0, 1)


def test_open_mpi_variables():
    env = detect(
        {
            "OMPI_COMM_WORLD_RANK": "5",
            "OMPI_COMM_WORLD_SIZE": "8",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        }
    )
    assert place(env) == (Launcher.MPI, 5, 8, 1, 4)


def test_mpich_and_intel_mpi_variables():
    env = detect({"PMI_RANK": "2", "PMI_SIZE": "6", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "3"})
    assert place(env) == (Launcher.MPI, 2, 6, 2, 3)


def test_pmi_local_rank_fallback_names():
    env = detect({"PMI_RANK": "1", "PMI_SIZE": "2", "PMI_LOCAL_RANK": "1", "PMI_LOCAL_SIZE": "2"})
    assert place(env) == (Launcher.MPI, 1, 2, 1, 2)


@pytest.mark.parametrize(
    ("task_type", "index", "rank"), [("chief", 0, 0), ("worker", 0, 1), ("worker", 1, 2), ("worker", 2, 3)]
)
def test_tf_config_orders_the_chief_before_the_workers(task_type, index, rank):
    cluster = {"chief": ["h0:1000"], "worker": ["h1:1000", "h2:1000", "h3:1000"]}
    env = detect(tf_config(cluster, task_type, index))
    assert (env.launcher, env.rank, env.world_size) == (Launcher.TF_CONFIG, rank, 4)
    assert env.tf_config["cluster"] == cluster


def test_tf_config_workers_only():
    env = detect(tf_config({"worker": ["a:1", "b:1"]}, "worker", 1))
    assert place(env) == (Launcher.TF_CONFIG, 1, 2, 0, 1)


def test_tf_config_local_rank_counts_earlier_tasks_on_the_same_host():
    cluster = {"chief": ["a:1"], "worker": ["a:2", "b:1", "a:3"]}
    # Global order: chief a:1, worker0 a:2, worker1 b:1, worker2 a:3.
    assert place(detect(tf_config(cluster, "worker", 2))) == (Launcher.TF_CONFIG, 3, 4, 2, 3)
    assert place(detect(tf_config(cluster, "worker", 0))) == (Launcher.TF_CONFIG, 1, 4, 1, 3)
    assert place(detect(tf_config(cluster, "worker", 1))) == (Launcher.TF_CONFIG, 2, 4, 0, 1)


def test_blank_tf_config_is_no_launcher():
    assert detect({"TF_CONFIG": "  "}).launcher is Launcher.NONE


def test_tf_config_that_is_not_json_says_what_is_expected():
    with pytest.raises(EnvironmentDetectionError, match="TF_CONFIG is not valid JSON") as err:
        detect({"TF_CONFIG": "{cluster: worker}"})
    assert '"cluster"' in str(err.value) and '"task"' in str(err.value)


def test_tf_config_task_outside_its_cluster():
    with pytest.raises(EnvironmentDetectionError, match=r"task worker:2 is not in its cluster") as err:
        detect(tf_config({"worker": ["a:1", "b:1"]}, "worker", 2))
    assert "below the number of workers" in str(err.value)


def test_tf_config_without_workers():
    with pytest.raises(EnvironmentDetectionError, match="no 'chief' or 'worker' jobs"):
        detect(tf_config({"ps": ["a:1"]}, "ps", 0))


def test_slurm_task_counts_per_node():
    # '2(x3),1': nodes 0-2 run two tasks each, node 3 runs one (7 tasks in all).
    env = detect(slurm(5, 7, 1, SLURM_TASKS_PER_NODE="2(x3),1", SLURM_NODEID="2"))
    assert place(env) == (Launcher.SLURM, 5, 7, 1, 2)
    env = detect(slurm(6, 7, 0, SLURM_TASKS_PER_NODE="2(x3),1", SLURM_NODEID="3"))
    assert place(env) == (Launcher.SLURM, 6, 7, 0, 1)


@pytest.mark.parametrize(
    ("spec", "node", "expected"),
    [("2(x3),1", 0, 2), ("2(x3),1", 2, 2), ("2(x3),1", 3, 1), ("4", 0, 4), ("1,3", 1, 3), ("3(x2)", 1, 3)],
)
def test_slurm_tasks_per_node_spec(spec, node, expected):
    tasks = environment._slurm_tasks_on_this_node(
        {"SLURM_TASKS_PER_NODE": spec, "SLURM_NODEID": str(node)}, default=-1
    )
    assert tasks == expected


def test_slurm_without_tasks_per_node_divides_tasks_over_nodes():
    env = detect(slurm(3, 4, 1, SLURM_NNODES="2"))
    assert place(env) == (Launcher.SLURM, 3, 4, 1, 2)


def test_sbatch_without_a_job_step_is_not_a_launcher():
    env = slurm(0, 4, 0)
    del env["SLURM_STEP_ID"]
    assert detect(env).launcher is Launcher.NONE


# -- precedence ------------------------------------------------------------------------------------------
def test_horovod_wins_over_mpi_when_both_are_set():
    env = detect(
        {
            "HOROVOD_RANK": "1",
            "HOROVOD_SIZE": "2",
            "OMPI_COMM_WORLD_RANK": "3",
            "OMPI_COMM_WORLD_SIZE": "4",
        }
    )
    assert place(env) == (Launcher.HOROVOD, 1, 2, 0, 1)


def test_mpi_wins_over_tf_config_and_slurm():
    env = {
        "PMI_RANK": "1",
        "PMI_SIZE": "3",
        **tf_config({"worker": ["a:1", "b:1"]}, "worker", 0),
        **slurm(0, 5, 0),
    }
    assert place(detect(env))[:3] == (Launcher.MPI, 1, 3)


def test_tf_config_wins_over_slurm():
    env = {**tf_config({"worker": ["a:1", "b:1"]}, "worker", 1), **slurm(0, 5, 0)}
    assert place(detect(env))[:3] == (Launcher.TF_CONFIG, 1, 2)


# -- bad values ------------------------------------------------------------------------------------------
def test_non_integer_rank_names_the_variable():
    with pytest.raises(EnvironmentDetectionError, match=r"HOROVOD_RANK='one' is not an integer") as err:
        detect({"HOROVOD_RANK": "one", "HOROVOD_SIZE": "2"})
    assert "Unset HOROVOD_RANK" in str(err.value)


def test_empty_mpi_size_is_not_an_integer():
    with pytest.raises(EnvironmentDetectionError, match=r"OMPI_COMM_WORLD_SIZE='' is not an integer"):
        detect({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": ""})


@pytest.mark.parametrize(
    ("variables", "said"),
    [
        ({"HOROVOD_RANK": "2", "HOROVOD_SIZE": "2"}, "rank 2 of 2"),
        ({"HOROVOD_RANK": "-1", "HOROVOD_SIZE": "2"}, "rank -1 of 2"),
        ({"PMI_RANK": "0", "PMI_SIZE": "0"}, "rank 0 of 0"),
        ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "1"}, "local rank 1 of 1"),
        (slurm(4, 4, 0), "rank 4 of 4"),
    ],
)
def test_rank_outside_its_size_is_refused(variables, said):
    with pytest.raises(EnvironmentDetectionError, match="ranks must be below their sizes") as err:
        detect(variables)
    assert said in str(err.value)
    assert "unset them to run a single process" in str(err.value)


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"index": "one"}})}, "TF_CONFIG"),
        ({"TF_CONFIG": "[1, 2]"}, "TF_CONFIG"),
        (slurm(0, 2, 0, SLURM_TASKS_PER_NODE="2(x1),1", SLURM_NODEID="zero"), "SLURM_NODEID"),
        (slurm(0, 2, 0, SLURM_TASKS_PER_NODE="two", SLURM_NODEID="0"), "SLURM_TASKS_PER_NODE"),
    ],
)
def test_every_malformed_launcher_variable_is_an_environment_detection_error(variables, named):
    # A launcher's bad value must surface as the documented error naming the variable, not as a bare
    # ValueError/AttributeError from deep inside the parser at `import kscale`.
    with pytest.raises(EnvironmentDetectionError) as err:
        detect(variables)
    assert named in str(err.value)


# -- override and caching --------------------------------------------------------------------------------
def test_kscale_backend_override_is_kept_beside_the_launcher():
    env = detect({"KSCALE_BACKEND": "mirrored", "HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"})
    assert env.backend_override == "mirrored"
    assert env.launcher is Launcher.HOROVOD


def test_empty_kscale_backend_is_no_override():
    assert detect({"KSCALE_BACKEND": ""}).backend_override is None


def test_detect_reads_os_environ_by_default(monkeypatch, clean_launcher_env):
    monkeypatch.setenv("HOROVOD_RANK", "1")
    monkeypatch.setenv("HOROVOD_SIZE", "3")
    assert place(detect()) == (Launcher.HOROVOD, 1, 3, 0, 1)


def test_current_is_detected_once_until_reset(monkeypatch, clean_launcher_env):
    monkeypatch.setenv("HOROVOD_RANK", "1")
    monkeypatch.setenv("HOROVOD_SIZE", "2")
    first = environment.current()
    assert first.rank == 1
    monkeypatch.setenv("HOROVOD_RANK", "0")
    assert environment.current() is first  # cached: the change is not seen
    environment.reset()
    assert environment.current().rank == 0
    assert environment.current() is environment.current()


def test_environment_is_frozen():
    env = Environment()
    with pytest.raises(AttributeError):
        env.rank = 3  # type: ignore[misc]


# -- Keras 3's keras.distribution variables, and what says which Keras to use ---------------------------------
def test_keras_distribution_variables_as_kscale_run_sets_them():
    env = detect(
        {
            "KERAS_DISTRIBUTION_JOB_ADDRESSES": "10.0.0.1:1234,10.0.0.2:1234",
            "KERAS_DISTRIBUTION_NUM_PROCESSES": "4",
            "KERAS_DISTRIBUTION_PROCESS_ID": "3",
            "KSCALE_LOCAL_RANK": "1",
            "KSCALE_LOCAL_SIZE": "2",
        }
    )
    assert env.launcher is Launcher.KERAS_DISTRIBUTION
    assert (env.rank, env.world_size, env.local_rank, env.local_size) == (3, 4, 1, 2)
    assert env.coordinator == "10.0.0.1:1234"


def test_keras_distribution_without_kscale_run_is_one_process_per_host():
    env = detect({"KERAS_DISTRIBUTION_NUM_PROCESSES": "2", "KERAS_DISTRIBUTION_PROCESS_ID": "1"})
    assert (env.rank, env.world_size, env.local_rank, env.local_size, env.coordinator) == (1, 2, 0, 1, None)


@pytest.mark.parametrize(
    ("value", "legacy"),
    [("1", True), ("true", True), ("True", True), ("0", False), ("yes", False), ("", None)],
)
def test_tf_use_legacy_keras_is_read_as_tensorflow_reads_it(value, legacy):
    assert detect({"TF_USE_LEGACY_KERAS": value}).legacy_keras is legacy
    assert detect({}).legacy_keras is None


def test_keras_backend_and_home():
    env = detect({"KERAS_BACKEND": "jax", "KERAS_HOME": "/opt/keras"})
    assert (env.keras_backend, env.keras_home) == ("jax", "/opt/keras")
    assert (detect({}).keras_backend, detect({}).keras_home) == (None, None)


@pytest.mark.parametrize(
    "launcher", [environment.Launcher.TF_CONFIG, environment.Launcher.KERAS_DISTRIBUTION]
)
def test_what_kscale_run_writes_for_a_worker_is_what_the_worker_reads(launcher):
    """The launch contract both ways: every worker of a 2-node x 2-worker layout detects its own place."""
    layout = environment.Layout(2, 1, 2, "10.0.0.1", 7000, hosts=("10.0.0.1", "10.0.0.2"))
    for local in range(2):
        seen = environment.detect(environment.worker_variables(launcher, layout, local))
        assert seen.launcher is launcher
        assert (seen.rank, seen.world_size) == (layout.global_rank(local), 4)
        assert (seen.local_rank, seen.local_size) == (local, 2)


def test_torchrun_variables():
    env = detect(
        {
            "RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "node0",
            "MASTER_PORT": "29500",
            "TORCHELASTIC_RUN_ID": "job",
        }
    )
    assert env.launcher is Launcher.TORCH
    assert (env.rank, env.world_size, env.local_rank, env.local_size) == (3, 4, 1, 2)
    assert env.torch_master == "node0:29500"


def test_torchrun_under_srun_is_torch_not_slurm():
    # A cluster's srun starts one torchrun per node: its workers see both, and RANK is the true one.
    slurm = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_LOCALID": "0"}
    env = detect({**slurm, "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "n0"})
    assert env.launcher is Launcher.TORCH and env.rank == 5 and env.world_size == 8


def test_a_rank_variable_alone_is_no_torch_job():
    assert detect({"RANK": "1", "WORLD_SIZE": "2"}).launcher is Launcher.NONE


def test_jax_distributed_variables_as_kubeflows_jax_runtime_sets_them():
    # kubeflow/trainer, pkg/runtime/framework/plugins/jax/jax.go: one process per pod
    env = detect(
        {
            "JAX_NUM_PROCESSES": "2",
            "JAX_PROCESS_ID": "1",
            "JAX_COORDINATOR_ADDRESS": "job-node-0-0.job:29500",
        }
    )
    assert place(env) == (Launcher.JAX_DISTRIBUTED, 1, 2, 0, 1)
    assert env.coordinator == "job-node-0-0.job:29500"


def test_jax_variables_without_a_coordinator_are_no_launcher():
    assert detect({"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"}).launcher is Launcher.NONE
