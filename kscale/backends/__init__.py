"""Backends, one file each, picked by the first `detect()` that matches (or by name).

`current()` holds the one backend of this process: a strategy or Horovod is set up once, and a
second `distribute()` or `kscale.scope()` reuses it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from kscale import environment
from kscale.backends.base import Backend
from kscale.backends.horovod import HorovodBackend
from kscale.backends.mirrored import MirroredBackend
from kscale.backends.multi_worker import MultiWorkerBackend
from kscale.backends.single import SingleBackend
from kscale.errors import OptionError

#: In detection order: the first whose detect() is true is picked when the user names none.
REGISTRY: dict[str, type[Backend]] = {
    backend.name: backend for backend in (HorovodBackend, MultiWorkerBackend, MirroredBackend, SingleBackend)
}

_current: Backend | None = None


def resolve(name: str | None = None, env: environment.Environment | None = None) -> type[Backend]:
    """The backend class for `name`, else KSCALE_BACKEND, else the first that detects itself."""
    env = environment.current() if env is None else env
    name = name or env.backend_override
    if name is not None:
        if name not in REGISTRY:
            raise OptionError(
                f"unknown backend {name!r}; valid backends are {', '.join(map(repr, REGISTRY))} "
                "(or leave it unset to pick from the environment)."
            )
        return REGISTRY[name]
    return next(backend for backend in REGISTRY.values() if backend.detect(env))


def current(name: str | None = None, devices: list[str] | None = None) -> Backend:
    """This process's backend, created and set up on first use."""
    global _current
    wanted = resolve(name)
    if _current is not None:
        if not isinstance(_current, wanted):
            raise OptionError(
                f"this process already runs the {_current.name!r} backend; it cannot switch to "
                f"{wanted.name!r}. Use one backend per process (set it once, or via KSCALE_BACKEND)."
            )
        return _current
    backend = wanted(environment.current(), devices=devices)
    backend.setup()
    _current = backend
    return backend


def parse_options(backend: Backend, keywords: dict[str, Any], common: list[str]) -> Any:
    """`backend`'s own options from the keywords `distribute()` did not know, or an error naming them.

    An option of another backend is checked by that backend (a bad value fails the same way on a laptop
    as on the cluster) and then refused here, so a script never silently trains without it.
    """
    owners: dict[str, list[type[Backend]]] = {}
    for cls in REGISTRY.values():
        for field in dataclasses.fields(cls.Options):
            owners.setdefault(field.name, []).append(cls)
    unknown = sorted(k for k in keywords if k not in owners)
    if unknown:
        per_backend = "; ".join(
            f"{cls.name}: {', '.join(sorted(f.name for f in dataclasses.fields(cls.Options)))}"
            for cls in REGISTRY.values()
            if dataclasses.fields(cls.Options)
        )
        raise OptionError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for kscale.distribute(); valid options are "
            f"{', '.join(common)}, and those of one backend ({per_backend})."
        )
    own = {f.name for f in dataclasses.fields(backend.Options)}
    foreign = sorted(k for k in keywords if k not in own)
    if foreign:
        owner = owners[foreign[0]][0]
        owner.Options(**{k: keywords[k] for k in foreign if owner in owners[k]})
        raise OptionError(
            f"{', '.join(foreign)} {'is an option' if len(foreign) == 1 else 'are options'} of the "
            f"{owner.name!r} backend, but this process runs the {backend.name!r} backend, which does not "
            f"have {'it' if len(foreign) == 1 else 'them'}. Drop {'it' if len(foreign) == 1 else 'them'}, "
            f"or launch the script so that it runs the {owner.name!r} backend."
        )
    return backend.Options(**keywords)


def reset() -> None:
    """Forget the process's backend (tests only: a real strategy cannot be torn down and rebuilt)."""
    global _current
    _current = None


def startup() -> None:
    """Work that must happen before TensorFlow runs its first op; called by `import kscale`.

    Pins one GPU per process under a multi-process launcher (by local rank, with memory growth), and
    creates the multi-worker strategy when TF_CONFIG names several workers, because TensorFlow only
    accepts both before its runtime starts.
    """
    env = environment.current()
    if env.world_size > 1:
        _pin_gpu(env.local_rank)
    try:
        chosen = resolve()
    except OptionError:
        return  # an unknown KSCALE_BACKEND is reported by distribute(), not at import
    if chosen is MultiWorkerBackend:
        current()


def _pin_gpu(local_rank: int) -> None:
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return
    try:
        gpu = gpus[local_rank % len(gpus)]
        tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.set_visible_devices(gpu, "GPU")
    except RuntimeError:
        from kscale import log

        log.warning(
            f"could not pin GPU {local_rank} to this process: TensorFlow had already started. Import kscale "
            "before building models so each process gets its own GPU."
        )
