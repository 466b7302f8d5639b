"""`kscale env`: print what kscale detects in this process (rank, sizes, launcher, backend), for bug reports.

Run it under the launcher to see what a worker sees: `kscale run -np 2 -- kscale env`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
from importlib import metadata
from typing import Any

from kscale import __version__, environment, frameworks
from kscale.errors import KScaleError

DESCRIPTION = "Print the environment kscale detects (launcher, rank, sizes, backend) for bug reports."


def env_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    if subparsers is not None:
        parser = subparsers.add_parser("env", help=DESCRIPTION, description=DESCRIPTION)
    else:
        parser = argparse.ArgumentParser("kscale env", description=DESCRIPTION)
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text")
    parser.add_argument(
        "--no-backend", action="store_true", help="do not resolve the backend (it imports TensorFlow)"
    )
    parser.set_defaults(func=env_command)
    return parser


def _version(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _backend(env: environment.Environment) -> str:
    """The backend `kscale.distribute` would pick here, once `kscale.backends` exists."""
    try:
        backends = importlib.import_module("kscale.backends")
    except ImportError as err:
        return f"(kscale.backends not importable: {err})"
    resolve = getattr(backends, "resolve", None)
    if resolve is None:
        return "(kscale.backends has no resolve())"
    try:
        return resolve(env=env).name
    except KScaleError as err:
        return f"(error: {err})"


def _keras_in_use() -> str:
    keras = frameworks.process_keras()
    return "tf.keras (Keras 2)" if keras.generation == 2 else f"Keras 3 on {keras.backend}"


def _run_engine() -> str:
    """What `kscale run -np N` would launch here (kscale.launch.engines decides without importing frameworks)."""
    from kscale.launch import engines

    try:
        return engines.default_engine()
    except KScaleError as err:
        return f"(none for several processes: {str(err).split(':')[0]})"


def collect(with_backend: bool = True) -> dict[str, Any]:
    env = environment.current()
    info: dict[str, Any] = {
        "kscale": __version__,
        "python": platform.python_version(),
        "tensorflow": _version("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos"),
        "keras": _version("keras"),
        "tf_keras": _version("tf-keras", "tf_keras"),
        "jax": _version("jax"),
        "horovod": _version("horovod"),
        "keras_in_use": _keras_in_use(),
        "run_engine": _run_engine(),
        "launcher": env.launcher.value,
        "rank": env.rank,
        "local_rank": env.local_rank,
        "world_size": env.world_size,
        "local_size": env.local_size,
        "is_chief": env.is_chief,
        "backend_override": env.backend_override,
    }
    if with_backend:
        info["backend"] = _backend(env)
    return info


def env_command(args: argparse.Namespace) -> int:
    try:
        info = collect(with_backend=not args.no_backend)
    except KScaleError as err:
        print(f"kscale env: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(info, sort_keys=True))
    else:
        width = max(map(len, info))
        for key, value in info.items():
            print(f"{key:<{width}}  {value if value is not None else '-'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = env_command_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
