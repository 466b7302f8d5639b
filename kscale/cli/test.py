"""`kscale test`: run kscale's self-checking training script under the real launcher and say PASS or FAIL.

It takes the same launch options as `kscale run` (default: 2 processes on this host), so it checks the
exact path a user's job takes: `kscale test -np 8 -H node1:4,node2:4`, or on every node
`kscale test --nnodes 2 --node-rank R --master ADDR --nproc-per-node 4`.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from typing import Any, TextIO

from kscale import environment
from kscale.cli.run import add_launch_arguments, run_command, split_command
from kscale.errors import LaunchError
from kscale.launch import engines
from kscale.launch.checks import ONE_GPU_PER_PROCESS_ENGINES
from kscale.launch.facts import BuildInfo, nvidia_gpus
from kscale.selftest.script import FAIL, PASS

DESCRIPTION = "Check allreduce, broadcast and synchronous training on the launcher you will use."


def test_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    epilog = "Other options (-np, -H, --gloo, ...) are passed to the launcher as for `kscale run`."
    if subparsers is not None:
        parser = subparsers.add_parser(
            "test", help=DESCRIPTION, description=DESCRIPTION, epilog=epilog, allow_abbrev=False
        )
    else:
        parser = argparse.ArgumentParser(
            "kscale test", description=DESCRIPTION, epilog=epilog, allow_abbrev=False
        )
    add_launch_arguments(parser)
    parser.add_argument("--steps", type=int, default=4, help="training steps the self-test runs (default 4)")
    parser.set_defaults(func=test_command, launcher_args=[])
    return parser


class _Tee(io.TextIOBase):
    """Pass output through and keep the self-test's verdict lines for the summary."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.verdicts: list[str] = []

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if PASS in line or FAIL in line:
                self.verdicts.append(line.strip())
        self.stream.write(text)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def selftest_command(steps: int) -> list[str]:
    return [sys.executable, "-m", "kscale.selftest", "--steps", str(steps)]


def test_command(args: argparse.Namespace, build: BuildInfo | None = None) -> int:
    options, extra_command = split_command(args.launcher_args)
    if extra_command:
        print(
            "kscale test: error: kscale test runs its own script; drop the command after --", file=sys.stderr
        )
        return 2
    if args.engine is None:
        try:
            engines.default_engine()
        except LaunchError as err:  # this stack trains in one process: check that process
            print(f"kscale test: {err}\nkscale test: checking training in one process instead.")
            return _verdict(*_run_one_process(args.steps))
    per_node = any(v is not None for v in (args.nnodes, args.node_rank, args.master, args.nproc_per_node))
    if not per_node and not any(o in ("-np", "--num-proc") or o.startswith("--num-proc=") for o in options):
        options = ["-np", str(_default_processes(args.engine)), *options]
    args.launcher_args = [*options, "--", *selftest_command(args.steps)]
    tee = _Tee(sys.stdout)
    saved, sys.stdout = sys.stdout, tee
    try:
        code = run_command(args, build=build)
    finally:
        sys.stdout = saved
    return _verdict(code, tee)


def _default_processes(engine: str | None) -> int:
    """Two processes, to check the collectives between them; one on a host with one GPU, where the torch
    and jax engines give each process a GPU of its own (checks.shared_gpu_problem): that GPU is checked
    instead, and the collectives with `CUDA_VISIBLE_DEVICES= kscale test` (on CPUs)."""
    if (engine or engines.default_engine()) not in ONE_GPU_PER_PROCESS_ENGINES:
        return 2  # TensorFlow's engines pin GPUs themselves: the driver is not asked
    if len(nvidia_gpus(environment.current().cuda_visible_devices)) == 1:
        print(
            "kscale test: one GPU here, and the torch and jax engines give each process a GPU of its own: "
            "checking one process on it (for two processes on CPUs: CUDA_VISIBLE_DEVICES= kscale test)."
        )
        return 1
    return 2


def _run_one_process(steps: int) -> tuple[int, _Tee]:
    tee = _Tee(sys.stdout)
    done = subprocess.run(
        selftest_command(steps), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    tee.write(done.stdout)
    return done.returncode, tee


def _verdict(code: int, tee: _Tee) -> int:
    failed = [line for line in tee.verdicts if FAIL in line]
    passed = [line for line in tee.verdicts if PASS in line]
    if code == 0 and passed and not failed:
        print(f"kscale test: PASS ({len(passed)} rank(s) on this node passed every check)")
        return 0
    if failed:
        reasons = failed
    elif code:
        reasons = [f"the launch exited with status {code} before the self-test gave a verdict"]
    else:  # exit 0 and no verdict: the self-test never ran to its end (or its output was lost)
        reasons = ["the launch exited with status 0 but no rank printed the self-test's verdict"]
    print("kscale test: FAIL\n" + "\n".join(f"  {reason}" for reason in reasons))
    return code or 1


def main(argv: list[str] | None = None) -> int:
    parser = test_command_parser()
    args, extras = parser.parse_known_args(argv)
    args.launcher_args = extras
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
