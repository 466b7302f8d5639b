"""One rank-aware logger: every line says which rank wrote it; `chief` lines print on rank 0 only."""

from __future__ import annotations

import logging
import sys

from kscale import environment

_logger = logging.getLogger("kscale")


def _setup() -> None:
    if _logger.level == logging.NOTSET:
        _logger.setLevel(logging.INFO)  # also when a user attached their own handler first
    if _logger.handlers:
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    _logger.addHandler(handler)
    _logger.propagate = False


def _prefix() -> str:
    env = environment.current()
    return f"[kscale rank {env.rank}/{env.world_size}] " if env.world_size > 1 else "[kscale] "


def info(message: str) -> None:
    _setup()
    _logger.info(_prefix() + message)


def warning(message: str) -> None:
    _setup()
    _logger.warning(_prefix() + "WARNING: " + message)


def chief(message: str, is_chief: bool | None = None) -> None:
    """Print on the chief only (user-facing progress and the plan)."""
    if is_chief if is_chief is not None else environment.current().is_chief:
        _setup()
        _logger.info(message)
