"""The `kscale` command: `run`, `test`, `doctor` and `env`, one module each (`kscale.cli.<name>`).

Each module has a `<name>_command_parser(subparsers=None)` / `<name>_command(args)` pair, so a
subcommand also runs on its own (`python -m kscale.cli.run ...`). Horovod and TensorFlow are imported
only when a subcommand needs them, so `kscale --help` and `kscale env` stay fast.
"""
