"""`kscale run`: launch a training script on every engine, after checking that the launch can work.

The launching itself is kscale.launch (`kscale.launch.run(...)` from Python); this module only parses
the command line for it. `--engine` picks what runs the workers (kscale.launch.engines); the per-node
launch (`--nnodes/--node-rank/--master/--nproc-per-node`, no SSH) is kscale.launch.pernode.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from kscale.errors import KScaleError
from kscale.launch import engines, launcher, pernode
from kscale.launch.facts import BuildInfo

DESCRIPTION = (
    "Launch a training script on one or more hosts: Horovod (Gloo or MPI), TensorFlow multi-worker or "
    "Keras 3 on JAX."
)

EPILOG = """\
Any horovodrun option is passed to Horovod, e.g. -np N, -H host1:2,host2:2, --hostfile F, --gloo,
--mpi, -p/--ssh-port PORT, -i/--ssh-identity-file F, --network-interfaces eth0, --start-timeout S,
--timeline-filename F, --fusion-threshold-mb MB, --cycle-time-ms MS, --autotune, --gloo-timeout-seconds S,
--verbose (see `horovodrun --help`). Put `--` before the command.

examples:
  kscale run -np 2 -- python train.py
  kscale run -np 8 -H node1:4,node2:4 -p 12345 -- python train.py
  # no SSH: run on every node (node 0 at 10.0.0.1)
  kscale run --nnodes 2 --node-rank 0 --master 10.0.0.1:29400 --nproc-per-node 4 -- python train.py
  # inside an sbatch script: nodes, ranks and master come from SLURM
  srun --ntasks-per-node=1 kscale run --nproc-per-node 4 -- python train.py
"""


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """kscale's own launch options (shared by `kscale run` and `kscale test`)."""
    parser.add_argument(
        "--engine",
        choices=engines.ENGINES,
        help="horovod (horovodrun), tf (TF_CONFIG workers: MultiWorkerMirroredStrategy) or jax (Keras 3 "
        "keras.distribution). Default: jax for Keras 3 on JAX, horovod for tf.keras where Horovod is "
        "installed, else tf",
    )
    group = parser.add_argument_group("per-node launch (no SSH; run once on every node)")
    group.add_argument("--nnodes", type=int, help="number of nodes taking part")
    group.add_argument(
        "--node-rank", type=int, help="this node's rank, 0 .. nnodes-1 (0 serves the rendezvous)"
    )
    group.add_argument(
        "--master",
        help=f"node 0's address and rendezvous port, ADDR[:PORT] (default port {pernode.DEFAULT_PORT})",
    )
    group.add_argument("--nproc-per-node", type=int, help="worker processes to start on this node")
    group.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=30.0,
        help="seconds without news from a node before the job is stopped (default 30)",
    )
    parser.add_argument(
        "--no-preflight",
        action="store_true",
        help="launch even if the preflight checks find a problem",
    )


def run_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    kwargs = dict(
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if subparsers is not None:
        parser = subparsers.add_parser("run", help=DESCRIPTION, allow_abbrev=False, **kwargs)
    else:
        parser = argparse.ArgumentParser("kscale run", allow_abbrev=False, **kwargs)
    add_launch_arguments(parser)
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        help="start the job again, up to N times, when a worker fails or the workers stop for a preemption "
        "notice; the script's BackupAndRestore resumes it from its last backup (default 0, as torchrun's)",
    )
    parser.set_defaults(func=run_command, launcher_args=[])
    return parser


def split_command(tokens: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split `[options] -- command` at the first `--`. Without `--` the command stays in the options and
    Horovod's parser finds where it starts (its REMAINDER)."""
    tokens = list(tokens)
    if "--" in tokens:
        at = tokens.index("--")
        return tokens[:at], tokens[at + 1 :]
    return tokens, []


def run_command(args: argparse.Namespace, build: BuildInfo | None = None) -> int:
    """Entry point of `kscale run` (also used by `kscale test`). `build` fakes the Horovod build in tests."""
    try:
        options, command = split_command(args.launcher_args)
        return launcher.launch(
            options,
            command,
            engine=args.engine,
            nodes=args,
            preflight=not args.no_preflight,
            build=build,
            max_restarts=getattr(args, "max_restarts", 0),  # kscale test launches once
        )
    except KScaleError as err:  # LaunchError, MissingDependencyError: the message says the fix
        print(f"kscale run: error: {err}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = run_command_parser()
    args, extras = parser.parse_known_args(argv)
    args.launcher_args = extras
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
