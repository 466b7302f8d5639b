"""Backends, one file each, picked by the first `detect()` that matches among those for the model's Keras.

A backend trains one generation of Keras (2: tf.keras; 3: Keras 3) on some of Keras' own backends; the
table below says which, so that a lane only ever imports its own backends (the JAX lane has no
TensorFlow). `current()` holds the one backend of this process: a strategy, Horovod or a
`keras.distribution` is set up once, and a second `distribute()` or `kscale.scope()` reuses it.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from typing import Any

from kscale import environment, frameworks
from kscale.backends.base import Backend
from kscale.errors import BackendError, MissingDependencyError, OptionError
from kscale.frameworks import KerasInfo


@dataclasses.dataclass(frozen=True)
class Entry:
    """One backend: its name, the Keras it trains, and where its class lives (imported on first use)."""

    name: str
    keras: int  # 2: tf.keras (Keras 2); 3: Keras 3
    keras_backends: tuple[str, ...]  # the Keras backends it runs on
    target: str  # "module:Class"

    def load(self) -> type[Backend]:
        module, _, cls = self.target.partition(":")
        try:
            return getattr(importlib.import_module(module), cls)
        except ImportError as err:
            if isinstance(err, MissingDependencyError):
                raise
            runs_on = (
                "tf.keras (TensorFlow)" if self.keras == 2 else f"Keras 3 on {', '.join(self.keras_backends)}"
            )
            missing = f"{err.name} is not installed here" if err.name else f"importing it failed here: {err}"
            raise MissingDependencyError(
                f"the {self.name!r} backend runs {runs_on}, and {missing}. "
                "If Keras should use another backend, say which: KERAS_BACKEND=jax (or tensorflow), as Keras "
                "reads it (else ~/.keras/keras.json, else tensorflow). Otherwise install the lane's extra: "
                "pip install 'kscale[jax]', 'kscale[tf]', 'kscale[tf218]' or 'kscale[tf215]'."
            ) from err

    def fits(self, keras: KerasInfo) -> bool:
        return self.keras == keras.generation and keras.backend in self.keras_backends


#: In detection order: for a model, the first entry that fits its Keras and whose detect() is true.
REGISTRY: tuple[Entry, ...] = (
    Entry("horovod", 2, ("tensorflow",), "kscale.backends.horovod:HorovodBackend"),
    Entry("multi_worker", 2, ("tensorflow",), "kscale.backends.multi_worker:MultiWorkerBackend"),
    Entry("mirrored", 2, ("tensorflow",), "kscale.backends.mirrored:MirroredBackend"),
    Entry("single", 2, ("tensorflow",), "kscale.backends.single:SingleBackend"),
    Entry("jax", 3, ("jax",), "kscale.backends.jax:JaxBackend"),
    Entry("torch", 3, ("torch",), "kscale.backends.torch:TorchBackend"),
    Entry("multi_worker", 3, ("tensorflow",), "kscale.backends.keras3_multi_worker:Keras3MultiWorkerBackend"),
    Entry("mirrored", 3, ("tensorflow",), "kscale.backends.keras3_mirrored:Keras3MirroredBackend"),
    Entry("single", 3, ("jax", "tensorflow", "torch"), "kscale.backends.keras3_single:Keras3SingleBackend"),
)
NAMES: tuple[str, ...] = tuple(dict.fromkeys(entry.name for entry in REGISTRY))

_current: Backend | None = None

#: What works instead, for the combinations that cannot (said in every refusal).
_KERAS_3_MULTI_PROCESS = (
    "For several processes with a Keras 3 model use Keras 3 on JAX (KERAS_BACKEND=jax; `kscale run -np N "
    "-- python train.py` starts the processes and kscale sets up keras.distribution), on TensorFlow with "
    "TF_CONFIG workers (`kscale run --engine tf -np N -- python train.py`: the 'multi_worker' backend), or "
    "on PyTorch under torchrun (KERAS_BACKEND=torch; `kscale run --engine torch -np N -- python train.py`). "
    "In one process, the 'single' and (on TensorFlow) 'mirrored' backends train Keras 3."
)
_WHY_NOT = {
    ("horovod", 3): "Horovod cannot train Keras 3 models: with a Keras 3 optimizer it runs without error "
    "but never averages gradients, so the workers silently drift apart.",
    ("jax", 2): "the jax backend trains Keras 3 models with keras.distribution; this is a tf.keras (Keras 2) "
    "model. Build it with Keras 3 (`import keras`, keras>=3, KERAS_BACKEND=jax), or use horovod / "
    "multi_worker for tf.keras.",
}


def resolve(
    name: str | None = None, env: environment.Environment | None = None, keras: KerasInfo | None = None
) -> type[Backend]:
    """The backend class for `name`, else KSCALE_BACKEND, else the first that detects itself, for `keras`."""
    env = environment.current() if env is None else env
    keras = frameworks.process_keras() if keras is None else keras
    name = name or env.backend_override
    fitting = [entry for entry in REGISTRY if entry.fits(keras)]
    if name is not None:
        for entry in fitting:
            if entry.name == name:
                return entry.load()
        if name not in NAMES:
            raise OptionError(
                f"unknown backend {name!r}; valid backends are {', '.join(map(repr, NAMES))} "
                "(or leave it unset to pick from the environment)."
            )
        raise BackendError(_cannot(name, keras))
    for entry in fitting:
        backend = entry.load()
        if backend.detect(env):
            return backend
    launched_by = _multi_process_launcher(env)
    raise BackendError(
        f"this process was started by {launched_by} as worker {env.rank} of {env.world_size}, but no kscale "
        f"backend can train a {_describe(keras)} model that way. "
        + _WHY_NOT.get((_backend_for(env.launcher), keras.generation), "")
        + " "
        + _KERAS_3_MULTI_PROCESS
    )


def _cannot(name: str, keras: KerasInfo) -> str:
    why = _WHY_NOT.get((name, keras.generation))
    if why is None:
        runs_on = sorted({b for e in REGISTRY if e.name == name for b in e.keras_backends})
        why = (
            f"the {name!r} backend does not run a {_describe(keras)} model (it runs on: "
            f"{', '.join(runs_on)})."
        )
    hint = _KERAS_3_MULTI_PROCESS if keras.generation == 3 else ""
    return f"{why} {hint}".strip()


def _describe(keras: KerasInfo) -> str:
    return "tf.keras (Keras 2)" if keras.generation == 2 else f"Keras 3 ({keras.backend})"


def _multi_process_launcher(env: environment.Environment) -> str:
    return {
        environment.Launcher.HOROVOD: "horovodrun / kscale run (Horovod)",
        environment.Launcher.MPI: "mpirun",
        environment.Launcher.TF_CONFIG: "TF_CONFIG",
        environment.Launcher.SLURM: "srun",
        environment.Launcher.KERAS_DISTRIBUTION: "kscale run (keras.distribution variables)",
        environment.Launcher.TORCH: "torchrun (torch.distributed variables)",
        environment.Launcher.JAX_DISTRIBUTED: "jax.distributed variables (Kubeflow's JAX runtime)",
    }.get(env.launcher, env.launcher.value)


def _backend_for(launcher: environment.Launcher) -> str:
    if launcher in (environment.Launcher.HOROVOD, environment.Launcher.MPI):
        return "horovod"
    if launcher in (environment.Launcher.TF_CONFIG, environment.Launcher.SLURM):
        return "multi_worker"
    if launcher is environment.Launcher.TORCH:
        return "torch"
    return "jax"


def parse_options(backend: Backend, keywords: dict[str, Any], common: list[str]) -> Any:
    """`backend`'s own options from the keywords `distribute()` did not know, or an error naming them.

    An option of another backend is checked by that backend (a bad value fails the same way on a laptop
    as on the cluster) and then refused here, so a script never silently trains without it.
    """
    if set(keywords) <= {f.name for f in dataclasses.fields(backend.Options)}:
        return backend.Options(**keywords)  # the backend's own (or none): no other backend is imported
    owners: dict[str, list[type[Backend]]] = {}
    loaded = _importable(backend.family.generation)
    for cls in loaded:
        for field in dataclasses.fields(cls.Options):
            owners.setdefault(field.name, []).append(cls)
    unknown = sorted(k for k in keywords if k not in owners)
    if unknown:
        per_backend = "; ".join(
            f"{cls.name}: {', '.join(sorted(f.name for f in dataclasses.fields(cls.Options)))}"
            for cls in loaded
            if dataclasses.fields(cls.Options)
        )
        raise OptionError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for kscale.distribute(); valid options are "
            f"{', '.join(common)}" + (f", and those of one backend ({per_backend})." if per_backend else ".")
        )
    own = {f.name for f in dataclasses.fields(backend.Options)}
    foreign = sorted(k for k in keywords if k not in own)
    if foreign:
        owner = owners[foreign[0]][0]
        owner.Options(**{k: keywords[k] for k in foreign if owner in owners[k]})
        one = len(foreign) == 1
        raise OptionError(
            f"{', '.join(foreign)} {'is an option' if one else 'are options'} of the {owner.name!r} "
            f"backend, but this process runs the {backend.name!r} backend, which does not have "
            f"{'it' if one else 'them'}. Drop {'it' if one else 'them'}, or launch the script so that it "
            f"runs the {owner.name!r} backend."
        )
    return backend.Options(**keywords)


def current(
    name: str | None = None, devices: list[str] | None = None, keras: KerasInfo | None = None
) -> Backend:
    """This process's backend, created and set up on first use."""
    global _current
    wanted = resolve(name, keras=keras)
    if _current is not None:
        if not isinstance(_current, wanted):
            raise OptionError(
                f"this process already runs the {_current.name!r} backend; it cannot switch to "
                f"{wanted.name!r}. Use one backend per process (set it once, or via KSCALE_BACKEND)."
            )
        if devices and not _current.runs_on(devices):
            raise OptionError(
                f"this process's {_current.name!r} backend already runs on {', '.join(_current.devices)} "
                f"(made at `import kscale` or by an earlier call), not on {', '.join(devices)}. Pass the "
                "same devices every time, or make only those visible (CUDA_VISIBLE_DEVICES) before "
                "starting Python."
            )
        return _current
    backend = wanted(environment.current(), devices=devices)
    backend.setup()
    _current = backend
    return backend


def _importable(generation: int) -> list[type[Backend]]:
    """The backend classes for a Keras generation that this process can import (a lane has only its own
    frameworks: Keras 3 on TensorFlow has no jax, the JAX lane no TensorFlow)."""
    classes = []
    for entry in REGISTRY:
        if entry.keras != generation:
            continue
        try:
            classes.append(entry.load())
        except ImportError:
            continue
    return list(dict.fromkeys(classes))


def reset() -> None:
    """Forget the process's backend (tests only: a real strategy cannot be torn down and rebuilt)."""
    global _current
    _current = None


def startup() -> None:
    """Work that must happen before the framework runs its first operation; called by `import kscale`.

    Under a multi-process launcher: use tf_keras where Horovod or MultiWorkerMirroredStrategy need it,
    pin one GPU per process (TensorFlow), and create the backends that must exist before the first op
    (MultiWorkerMirroredStrategy; keras.distribution for JAX, so that models built after `import kscale`
    are created on every process's devices). In one process that TensorFlow will replicate over several
    devices (MirroredStrategy), create the strategy too, so that every model built after `import kscale`
    has its variables in it: kscale then trains the user's own model, whatever its `__init__` takes.
    """
    env = environment.current()
    one_process = env.world_size < 2
    if one_process and not _may_replicate_in_one_process(env):
        return
    if not one_process:
        frameworks.use_legacy_keras_under_launchers(env)
    keras = frameworks.process_keras()
    if keras.backend == "tensorflow" and not one_process:
        _pin_gpu(env.local_rank)
    if one_process and keras.backend != "tensorflow":
        return
    try:
        chosen = resolve(keras=keras)
    except (OptionError, BackendError, MissingDependencyError):
        return  # distribute() reports it, with the model in hand
    if chosen.create_at_import and chosen.one_process == one_process:
        current(keras=keras).at_import()


def _may_replicate_in_one_process(env: environment.Environment) -> bool:
    """Whether this one process may run MirroredStrategy: started by no launcher, and TensorFlow already
    imported by the script (or the mirrored backend asked for). `import kscale` alone never imports a
    framework, so `kscale --help` and a launcher's own process stay light."""
    if env.launcher is not environment.Launcher.NONE:
        return False
    return "tensorflow" in sys.modules or env.backend_override == "mirrored"


def _pin_gpu(local_rank: int) -> None:
    import tensorflow as tf

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
