"""`kscale`: the console script (`setup.cfg`: kscale = kscale.cli.main:main)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kscale import __version__
from kscale.cli.bench import bench_command_parser
from kscale.cli.doctor import doctor_command_parser
from kscale.cli.env import env_command_parser
from kscale.cli.run import run_command_parser
from kscale.cli.test import test_command_parser

#: Subcommands that pass the options they do not know on to Horovod's parser.
_PASS_THROUGH = {"run", "test"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        "kscale", description="Scale Keras training with Horovod or tf.distribute.", allow_abbrev=False
    )
    parser.add_argument("--version", action="version", version=f"kscale {__version__}")
    subparsers = parser.add_subparsers(dest="subcommand", metavar="{run,test,doctor,env,bench}")
    run_command_parser(subparsers)
    test_command_parser(subparsers)
    doctor_command_parser(subparsers)
    env_command_parser(subparsers)
    bench_command_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if args.subcommand is None:
        parser.print_help()
        return 2
    if extras and args.subcommand not in _PASS_THROUGH:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    args.launcher_args = extras
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
