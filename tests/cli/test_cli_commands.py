"""The subcommands in-process, with the Horovod build faked: broken setups fail fast with the fix."""

from __future__ import annotations

import json

import pytest

import kscale
import kscale.backends
from kscale.cli import doctor, run
from kscale.cli.main import build_parser, main
from kscale.launch.facts import BuildInfo

GOOD_BUILD = BuildInfo(
    horovod_version="0.28.1", tensorflow_version="2.15.1", keras_version="2.15.0", tensorflow=True, gloo=True
)
NO_TF_BUILD = BuildInfo(
    horovod_version="0.28.1",
    tensorflow_version="2.15.1",
    error="ImportError: Extension horovod.tensorflow has not been built: mpi_lib.so not found",
)


def run_cli(argv: list[str], build: BuildInfo | None) -> int:
    args, extras = build_parser().parse_known_args(argv)
    args.launcher_args = extras
    if args.subcommand == "run":
        return run.run_command(args, build=build)
    return doctor.doctor_command(args, build=build)


@pytest.fixture
def script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('training')\n")
    return "train.py"


def test_missing_script(script, capsys):
    assert run_cli(["run", "-np", "2", "--", "python", "nothere.py"], GOOD_BUILD) == 2
    err = capsys.readouterr().err
    assert "kscale run: error: training script 'nothere.py' not found" in err


def test_more_processes_than_slots(script, capsys):
    assert run_cli(["run", "-np", "5", "-H", "localhost:2", "--", "python", script], GOOD_BUILD) == 2
    err = capsys.readouterr().err
    assert "-np 5 asks for more processes than the host list has slots (localhost:2 = 2)" in err
    assert "-H localhost:5" in err


def test_more_processes_than_hostfile_slots(script, tmp_path, capsys):
    (tmp_path / "hosts").write_text("# one host\nlocalhost slots=1\n")
    assert run_cli(["run", "-np", "2", "--hostfile", "hosts", "--", "python", script], GOOD_BUILD) == 2
    assert "localhost:1 = 1" in capsys.readouterr().err


def test_horovod_built_without_tensorflow(script, capsys):
    assert run_cli(["run", "-np", "2", "--", "python", script], NO_TF_BUILD) == 2
    err = capsys.readouterr().err
    assert "built without TensorFlow support" in err and "HOROVOD_WITH_TENSORFLOW=1" in err
    assert "--no-preflight launches anyway" in err


def test_controller_not_built(script, capsys):
    assert run_cli(["run", "-np", "2", "--mpi", "--", "python", script], GOOD_BUILD) == 2
    assert "MPI controller but Horovod was built without it" in capsys.readouterr().err


def test_per_node_launch_checks_too(script, capsys):
    argv = ["run", "--nproc-per-node", "2", "--master", "127.0.0.1:29411", "--", "python", script]
    assert run_cli(argv, NO_TF_BUILD) == 2
    assert "built without TensorFlow support" in capsys.readouterr().err
    assert run_cli(["run", "--nproc-per-node", "2", "-np", "3", "--", "python", script], GOOD_BUILD) == 2
    assert "-np 3 does not match --nnodes 1 x --nproc-per-node 2" in capsys.readouterr().err
    assert run_cli(["run", "--nproc-per-node", "1", "-H", "a:1", "--", "python", script], GOOD_BUILD) == 2
    assert "takes no host list" in capsys.readouterr().err


def test_doctor_on_this_host(capsys):
    code = run_cli(["doctor"], GOOD_BUILD)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Horovod 0.28.1 built with TensorFlow + gloo" in out and "memlock" in out and "hostname" in out


def test_doctor_fails_when_a_launch_would(capsys):
    code = run_cli(["doctor", "-H", "localhost:1,no-such-host.invalid:1", "--no-ssh"], NO_TF_BUILD)
    out = capsys.readouterr().out
    assert code == 1
    assert "[FAIL] horovod" in out and "'no-such-host.invalid' does not resolve" in out
    assert "problem(s) that would make a launch fail" in out


@pytest.fixture
def one_gpu(monkeypatch):
    """A host whose NVIDIA driver shows one GPU, as the lent H200 did (benchmarks/RESULTS.md)."""
    from kscale.launch import facts

    real = facts._run_text

    def run_text(argv, timeout=10.0):
        return "GPU 0: NVIDIA H200 (UUID: GPU-367031c7)\n" if argv[0] == "nvidia-smi" else real(argv, timeout)

    monkeypatch.setattr(facts, "_run_text", run_text)


@pytest.mark.parametrize("engine", ["torch", "jax"])
def test_two_workers_on_one_gpu_stop_before_the_launch_with_the_fix(engine, script, one_gpu, capsys):
    assert run_cli(["run", "--engine", engine, "-np", "2", "--", "python", script], None) == 2
    err = capsys.readouterr().err
    assert "kscale run: error: 2 worker processes on this host, but only 1 GPU(s) are visible" in err
    assert "-np 1" in err and "CUDA_VISIBLE_DEVICES= kscale run" in err


def test_doctor_names_the_gpu_and_fails_two_workers_on_it(one_gpu, capsys):
    assert run_cli(["doctor", "--engine", "torch", "--no-ssh"], None) == 0
    assert (
        "[ok  ] gpus: 1 visible to the NVIDIA driver (nvidia-smi): GPU 0: NVIDIA H200"
        in capsys.readouterr().out
    )
    assert run_cli(["doctor", "--engine", "jax", "-np", "2", "--no-ssh"], None) == 1
    assert "[FAIL] gpus: 2 worker processes on this host" in capsys.readouterr().out


def test_kscale_test_checks_one_process_on_a_one_gpu_host(one_gpu, capsys):
    from kscale.cli import test as test_cli

    assert test_cli._default_processes("torch") == 1 and test_cli._default_processes("jax") == 1
    assert "checking one process on it" in capsys.readouterr().out
    assert test_cli._default_processes("horovod") == 2  # TensorFlow's engines pin GPUs themselves


def test_doctor_reports_a_bad_host_list(capsys):
    assert run_cli(["doctor", "-H", "hosta"], GOOD_BUILD) == 2
    assert "host:slots" in capsys.readouterr().err


def test_env_reads_the_launcher(monkeypatch, capsys):
    monkeypatch.setenv("HOROVOD_RANK", "1")
    monkeypatch.setenv("HOROVOD_SIZE", "2")
    monkeypatch.setenv("HOROVOD_LOCAL_RANK", "1")
    monkeypatch.setenv("HOROVOD_LOCAL_SIZE", "2")
    monkeypatch.setenv("KSCALE_BACKEND", "horovod")
    assert main(["env", "--json", "--no-backend"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["launcher"] == "horovod" and info["rank"] == 1 and info["world_size"] == 2
    assert info["is_chief"] is False and info["backend_override"] == "horovod" and "backend" not in info


@pytest.mark.parametrize(
    ("variables", "launcher", "backend"),
    [
        ({}, "none", "single"),  # this CPU machine, no launcher: one process
        (
            {
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}
                )
            },
            "tf_config",
            "multi_worker",
        ),
    ],
)
def test_env_names_the_backend_distribute_would_pick(
    clean_launcher_env, monkeypatch, capsys, variables, launcher, backend
):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    kscale.environment.reset()
    assert main(["env", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["launcher"], info["backend"]) == (launcher, backend)
    assert kscale.backends.resolve(env=kscale.environment.current()).name == backend


def test_env_with_broken_launcher_variables(monkeypatch, capsys):
    monkeypatch.setenv("HOROVOD_RANK", "x")
    monkeypatch.setenv("HOROVOD_SIZE", "2")
    assert main(["env", "--no-backend"]) == 2
    assert "HOROVOD_RANK='x' is not an integer" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("code", "lines", "verdict"),
    [
        (0, ["[0]<stdout>:kscale selftest PASS", "[1]<stdout>:kscale selftest PASS"], 0),
        (0, [], 1),  # exit 0, yet no rank said it passed: not a PASS
        (0, ["kscale selftest PASS", "kscale selftest FAIL: ranks differ"], 1),
        (3, ["kscale selftest PASS"], 3),
    ],
)
def test_kscale_test_passes_only_on_a_verdict_and_no_failure(code, lines, verdict, capsys):
    import io

    from kscale.cli import test as test_cli

    tee = test_cli._Tee(io.StringIO())
    tee.write("\n".join(lines) + "\n")
    assert test_cli._verdict(code, tee) == verdict
    assert ("kscale test: PASS" in capsys.readouterr().out) is (verdict == 0)
