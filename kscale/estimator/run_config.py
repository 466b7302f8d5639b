"""A tf.estimator RunConfig that is right for every Horovod worker, not only the chief."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

from kscale import environment, log
from kscale.estimator._deps import estimator_module

if TYPE_CHECKING:
    import tensorflow as tf

#: RunConfig settings that write into model_dir; ranks other than 0 get these values instead of the user's.
NON_CHIEF_OVERRIDES: dict[str, Any] = {
    "save_checkpoints_steps": None,
    "save_checkpoints_secs": None,
    "save_summary_steps": None,
}


def run_config(model_dir: str, **user_kwargs: Any) -> tf.estimator.RunConfig:
    """`tf.estimator.RunConfig(model_dir=model_dir, **user_kwargs)`, adjusted for this worker.

    - Under several workers each one sees only the GPU of its local rank (`visible_device_list`,
      `allow_growth`), so N workers on a host do not all allocate GPU 0. A `session_config` you pass keeps
      its other settings.
    - Rank 0 keeps `model_dir` and your checkpoint and summary settings.
    - Other ranks get checkpoints and summaries off and a private temporary `model_dir` outside yours
      (removed at exit): their variables equal rank 0's, so their files would be duplicates, and N processes
      writing one directory overwrite each other's checkpoints and event files.

    In a single process the config is what `RunConfig` itself would build.
    """
    estimator = estimator_module()
    env = environment.current()
    kwargs = dict(user_kwargs, model_dir=model_dir)
    if env.is_distributed:
        kwargs["session_config"] = _pinned_session_config(kwargs.get("session_config"), env)
        if not env.is_chief:
            kwargs.update(NON_CHIEF_OVERRIDES, model_dir=_private_model_dir(env.rank))
            log.info(
                f"estimator model_dir {kwargs['model_dir']} with checkpoints and summaries off; "
                f"rank 0 writes {model_dir}"
            )
    return estimator.RunConfig(**kwargs)


def _pinned_session_config(user_config: Any, env: environment.Environment) -> Any:
    """A copy of the user's ConfigProto (or the Estimator's default) that pins this worker's local GPU."""
    from tensorflow_estimator.python.estimator.run_config import get_default_session_config

    config = get_default_session_config()
    if user_config is not None:
        config.CopyFrom(user_config)
    gpu = str(_gpu_index(env.local_rank))
    asked = config.gpu_options.visible_device_list
    if asked and asked != gpu:
        log.warning(
            f"session_config asks for GPUs {asked!r}; kscale pins local rank {env.local_rank} to GPU {gpu}, "
            "one per worker."
        )
    config.gpu_options.visible_device_list = gpu
    config.gpu_options.allow_growth = True
    return config


def _gpu_index(local_rank: int) -> int:
    """The GPU for this local rank: the same choice `import kscale` makes, so the two never disagree."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    return local_rank % len(gpus) if gpus else local_rank


def _private_model_dir(rank: int) -> str:
    """A temporary directory for a worker other than rank 0, removed when the process exits."""
    path = tempfile.mkdtemp(prefix=f"kscale-estimator-rank{rank}-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
