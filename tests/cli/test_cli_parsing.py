"""`kscale` argument handling: subcommand dispatch, pass-through to Horovod's parser, per-node and SLURM."""

from __future__ import annotations

import argparse

import pytest

from kscale.cli.main import build_parser, main
from kscale.cli.run import split_command
from kscale.errors import LaunchError
from kscale.launch import pernode
from kscale.launch.launcher import check_command, node_spec, parse_horovod_args


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    return build_parser().parse_known_args(argv)


def test_run_keeps_horovodrun_options_and_the_command_in_order():
    args, extras = parse(
        ["run", "-np", "4", "--nnodes", "2", "--timeline-filename", "t.json", "--", "python", "x.py"]
    )
    assert args.subcommand == "run" and args.nnodes == 2
    assert split_command(extras) == (["-np", "4", "--timeline-filename", "t.json"], ["python", "x.py"])


def test_options_after_double_dash_belong_to_the_script():
    args, extras = parse(["run", "-np", "2", "--", "python", "train.py", "--nnodes", "5", "-np", "1"])
    assert args.nnodes is None
    assert split_command(extras)[1] == ["python", "train.py", "--nnodes", "5", "-np", "1"]


def test_horovod_parses_the_options_people_use():
    hvd = parse_horovod_args(
        [
            "-np", "4", "-H", "localhost:2,10.0.0.2:2", "-p", "12345", "--gloo", "--network-interfaces", "eth0,ib0",
            "--timeline-filename", "/tmp/t.json", "--fusion-threshold-mb", "32", "--cycle-time-ms", "2.5",
            "--autotune", "--verbose", "--start-timeout", "60", "python", "train.py", "--epochs", "3",
        ]
    )  # fmt: skip
    assert hvd.num_proc == 4 and hvd.hosts == "localhost:2,10.0.0.2:2" and hvd.ssh_port == 12345
    assert hvd.use_gloo and hvd.nics == {"eth0", "ib0"} and hvd.start_timeout == 60 and hvd.verbose
    assert hvd.timeline_filename == "/tmp/t.json" and hvd.fusion_threshold_mb == 32
    assert hvd.cycle_time_ms == 2.5 and hvd.autotune
    assert hvd.command == ["python", "train.py", "--epochs", "3"]


def test_a_horovod_usage_error_exits_like_argparse(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_horovod_args(["--gloo", "python", "x.py"])  # -np missing
    assert exit_info.value.code == 2
    assert "-np" in capsys.readouterr().err


def test_unknown_options_are_refused_outside_run_and_test(capsys):
    with pytest.raises(SystemExit):
        main(["doctor", "--frobnicate"])
    assert "unrecognized arguments: --frobnicate" in capsys.readouterr().err


def test_no_subcommand_prints_help(capsys):
    assert main([]) == 2
    assert "run" in capsys.readouterr().out


def _run_args(argv: list[str]) -> argparse.Namespace:
    return parse(["run", *argv])[0]


def test_per_node_spec_from_arguments():
    spec = node_spec(
        _run_args(
            ["--nnodes", "2", "--node-rank", "1", "--master", "10.0.0.1:1234", "--nproc-per-node", "4"]
        ),
        {},
    )
    assert (spec.nnodes, spec.node_rank, spec.master_addr, spec.master_port, spec.nproc_per_node) == (
        2, 1, "10.0.0.1", 1234, 4,
    )  # fmt: skip
    assert node_spec(_run_args(["-np", "2"]), {}) is None  # horovodrun-style launch
    single = node_spec(_run_args(["--nproc-per-node", "2"]), {})
    assert (single.nnodes, single.master_addr, single.master_port) == (1, "127.0.0.1", pernode.DEFAULT_PORT)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nnodes", "2", "--nproc-per-node", "1"], "needs --node-rank and --master"),
        (["--nnodes", "2", "--node-rank", "2", "--master", "h"], "node ranks go from 0 to 1"),
        (["--nnodes", "1", "--nproc-per-node", "0"], "at least 1 process"),
        (["--nnodes", "2", "--node-rank", "0", "--master", "h:port"], "ADDR or ADDR:PORT"),
    ],
)
def test_per_node_mistakes_say_what_to_pass(argv, message):
    with pytest.raises(LaunchError, match=message):
        node_spec(_run_args(argv), {})


SLURM = {
    "SLURM_JOB_ID": "4242",
    "SLURM_NODEID": "1",
    "SLURM_NNODES": "3",
    "SLURM_JOB_NODELIST": "gpu[07-09]",
    "SLURM_TASKS_PER_NODE": "1(x3)",
    "SLURM_LOCALID": "0",
}


def test_slurm_fills_nodes_rank_and_master(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)  # no scontrol here: the parser is used
    assert pernode.from_slurm(SLURM) == (3, 1, "gpu07", pernode.DEFAULT_PORT + 242)
    spec = node_spec(_run_args(["--nproc-per-node", "4"]), SLURM)
    assert (spec.nnodes, spec.node_rank, spec.master_addr, spec.nproc_per_node) == (3, 1, "gpu07", 4)
    assert pernode.from_slurm({}) is None


def test_slurm_with_several_tasks_per_node_is_refused():
    with pytest.raises(LaunchError, match="--ntasks-per-node=1"):
        pernode.from_slurm(dict(SLURM, SLURM_TASKS_PER_NODE="4(x3)"))


def test_command_checks(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    check_command(["python", "train.py"], cwd=tmp_path)
    check_command(["python3.11", "-u", "-W", "ignore", "train.py", "--x"], cwd=tmp_path)
    check_command(["python", "-c", "print(1)"], cwd=tmp_path)
    check_command(["python", "-m", "kscale.selftest"], cwd=tmp_path)
    check_command(["true"], cwd=tmp_path)
    with pytest.raises(LaunchError, match=r"'missing\.py' not found"):
        check_command(["python", "missing.py"], cwd=tmp_path)
    with pytest.raises(LaunchError, match="no module named 'no_such_module_kscale'"):
        check_command(["python", "-m", "no_such_module_kscale"], cwd=tmp_path)
    with pytest.raises(LaunchError, match="not on PATH"):
        check_command(["no-such-program-kscale"], cwd=tmp_path)
    with pytest.raises(LaunchError, match="no command"):
        check_command([], cwd=tmp_path)
    with pytest.raises(LaunchError, match="names no script"):
        check_command(["python", "-u"], cwd=tmp_path)
