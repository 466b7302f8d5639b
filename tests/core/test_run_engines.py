"""`kscale run` for the tf and jax engines, end to end: the workers it starts, and the variables they get.

The workers here print what they were given instead of training (tests/stack trains through the same
launches), so every lane runs these, with or without a framework.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kscale import environment
from kscale.launch import workers

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]

KSCALE = Path(sys.executable).parent / "kscale"
SHOW = (
    "import json, os; print('ENV ' + json.dumps({k: v for k, v in os.environ.items() "
    "if k.startswith(('KERAS_', 'TF_CONFIG', 'KSCALE_LOCAL'))}))"
)


def _clean_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith((*environment.LAUNCHER_VARIABLE_PREFIXES, "KSCALE_"))
    }


def _seen(output: str) -> list[dict]:
    return [json.loads(line.split("ENV ", 1)[1]) for line in output.splitlines() if "ENV " in line]


def test_two_nodes_of_a_jax_job_without_ssh():
    port = workers.free_ports(1)[0]
    nodes = [
        subprocess.Popen(
            [
                KSCALE,
                "run",
                "--engine",
                "jax",
                "--nnodes",
                "2",
                "--node-rank",
                str(rank),
                "--master",
                f"127.0.0.1:{port}",
                "--nproc-per-node",
                "2",
                "--",
                sys.executable,
                "-c",
                SHOW,
            ],
            env=_clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=90)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    seen = sorted(
        (s for out in outputs for s in _seen(out)), key=lambda s: int(s["KERAS_DISTRIBUTION_PROCESS_ID"])
    )
    assert [s["KERAS_DISTRIBUTION_PROCESS_ID"] for s in seen] == ["0", "1", "2", "3"]
    assert {s["KERAS_DISTRIBUTION_JOB_ADDRESSES"] for s in seen} == {f"127.0.0.1:{port}"}
    assert {s["KERAS_DISTRIBUTION_NUM_PROCESSES"] for s in seen} == {"4"}
    assert [s["KSCALE_LOCAL_RANK"] for s in seen] == ["0", "1", "0", "1"]
    assert all(s["KERAS_BACKEND"] == "jax" for s in seen)
    assert "[2]<stdout>:ENV" in outputs[1]  # output prefixed by the global rank


def test_a_tf_node_lists_every_worker_of_every_node_in_tf_config():
    command = [
        KSCALE,
        "run",
        "--engine",
        "tf",
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--master",
        "10.9.9.1:7000",
        "-H",
        "10.9.9.1,10.9.9.2",
        "--nproc-per-node",
        "2",
        "--",
        sys.executable,
        "-c",
        SHOW,
    ]
    done = subprocess.run(command, env=_clean_env(), capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    configs = sorted(
        (json.loads(s["TF_CONFIG"]) for s in _seen(done.stdout)), key=lambda c: c["task"]["index"]
    )
    workers_listed = ["10.9.9.1:7000", "10.9.9.1:7001", "10.9.9.2:7000", "10.9.9.2:7001"]
    assert [c["cluster"]["worker"] for c in configs] == [workers_listed, workers_listed]
    assert [c["task"]["index"] for c in configs] == [2, 3]  # this node's workers only


def test_a_failing_worker_ends_the_local_job_with_its_status():
    script = "import os, sys, time\nif os.environ['KERAS_DISTRIBUTION_PROCESS_ID'] == '1': sys.exit(7)\ntime.sleep(60)"
    done = subprocess.run(
        [KSCALE, "run", "--engine", "jax", "-np", "2", "--", sys.executable, "-c", script],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 7
    assert "rank 1 on " in done.stderr and "exited with status 7" in done.stderr


@pytest.mark.parametrize("engine", ["jax", "tf"])
def test_the_python_api_launches_what_kscale_run_launches(engine):
    """kscale.launch.run(...) from a script: the workers, their variables, their output, the status."""
    launch = (
        "import sys, kscale.launch\n"
        f"sys.exit(kscale.launch.run([sys.executable, '-c', {SHOW!r}], num_proc=2, engine={engine!r}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", launch], env=_clean_env(), capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = _seen(done.stdout)
    assert [s["KSCALE_LOCAL_RANK"] for s in sorted(seen, key=lambda s: s["KSCALE_LOCAL_RANK"])] == ["0", "1"]
    if engine == "jax":
        assert sorted(s["KERAS_DISTRIBUTION_PROCESS_ID"] for s in seen) == ["0", "1"]
    else:
        tasks = sorted(json.loads(s["TF_CONFIG"])["task"]["index"] for s in seen)
        assert tasks == [0, 1]
    assert "[1]<stdout>:ENV" in done.stdout  # output prefixed by the rank, as kscale run does


def test_the_python_api_raises_what_kscale_run_prints(tmp_path):
    import kscale.launch
    from kscale.errors import LaunchError

    with pytest.raises(LaunchError, match=r"training script 'missing\.py' not found"):
        kscale.launch.run(["python", "missing.py"], num_proc=2, engine="jax")
    with pytest.raises(LaunchError, match="'--gloo' is a horovodrun option"):
        kscale.launch.run(["python", "-c", "0"], num_proc=2, engine="tf", horovod_options=["--gloo"])


def test_horovodrun_options_are_refused_by_the_jax_engine():
    done = subprocess.run(
        [KSCALE, "run", "--engine", "jax", "-np", "2", "--gloo", "--", sys.executable, "-c", "0"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "'--gloo' is a horovodrun option" in done.stderr


def test_doctor_checks_what_the_engine_needs_and_jax_needs_no_horovod():
    done = subprocess.run(
        [KSCALE, "doctor", "--engine", "jax", "--no-ssh"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "[info] engine: jax (--engine)" in done.stdout
    assert "horovod" not in done.stdout.lower()  # no Horovod build check for an engine that does not use it


def test_the_horovod_engine_gives_its_workers_legacy_keras_and_leaves_the_callers_environment(monkeypatch):
    """TF >= 2.16 with tf_keras: Horovod's workers need TF_USE_LEGACY_KERAS=1 (they inherit this process's
    environment); a program calling kscale.launch.run gets its own environment back."""
    from kscale import frameworks
    from kscale.launch import launcher

    seen = []
    monkeypatch.setattr(frameworks, "legacy_keras_needed", lambda: True)
    monkeypatch.setattr(
        launcher, "_launch_horovod", lambda *args: seen.append(os.environ.get("TF_USE_LEGACY_KERAS")) or 0
    )
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    assert launcher.launch([], ["python", "train.py"], engine="horovod") == 0
    assert seen == ["1"] and "TF_USE_LEGACY_KERAS" not in os.environ
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "0")  # the user's own choice is kept
    launcher.launch([], ["python", "train.py"], engine="horovod")
    assert seen == ["1", "0"] and os.environ["TF_USE_LEGACY_KERAS"] == "0"
