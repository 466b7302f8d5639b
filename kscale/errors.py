"""Every error kscale raises on purpose: each says what it found, what it expected, and how to fix it.

Each class's docstring says what the error means and how to fix it in general; the documentation site's
troubleshooting page is generated from them (scripts/docs_hooks.py), so write one for every new class.
"""


class KScaleError(Exception):
    """The base of every error kscale raises on purpose: catch it to handle any of them.

    The message always says what was found, what was expected and how to fix it; read it first. kscale
    raises it on every rank at once where it can (a `DataError` found on one worker stops all of them),
    so a job stops instead of hanging. A bare `KScaleError` comes from the tf.estimator helpers
    (`kscale.estimator`): an input function or an optimizer they cannot wrap.

    Fix: what the message says. To see what kscale detected in a process (launcher, rank, backend),
    run `kscale env` there; for a cluster, `kscale doctor -H host1,host2`.
    """


class ModelError(KScaleError):
    """The object given to `distribute()` is not a model kscale can distribute as it is.

    Typical causes: it is not a built and compiled Keras model; it was built before `import kscale` under
    a tf.distribute strategy (`multi_worker`, `mirrored`) and kscale must copy it into the strategy's
    scope, but its `get_config()` does not return its `__init__` arguments; Keras cannot copy it (a model
    whose `__init__` takes other models) and it would be evaluated on a copy; its optimizer's learning
    rate is something kscale cannot scale.

    Fix: build and compile the model before `distribute()`; build it after `import kscale` (or inside
    `with kscale.scope():`) so that no copy is needed; or give a subclassed model a `get_config()` that
    returns its `__init__` arguments. Use a float or a `LearningRateSchedule` as the learning rate.
    """


class OptionError(KScaleError, ValueError):
    """An option of `distribute()` or a launcher (backend, lr_scaling, data_policy, a backend's own option)
    has a value kscale does not know, or one that does not fit this process.

    Another backend's option (e.g. Horovod's `compression` under `multi_worker`) is refused by name, after
    its value is checked, so a typo fails on a laptop as it would on the cluster; so are devices other than
    the ones the process's strategy was made with, and a second backend in one process.

    Fix: use one of the values the message lists; drop another backend's option, or launch the script so
    that it runs that backend; pass the same `devices` every time.
    """


class DataError(KScaleError, ValueError):
    """The training or evaluation data cannot be split so that every worker gets its own part and runs the
    same number of steps.

    Typical causes: the workers passed different arrays (an unseeded shuffle or split before `fit`, a
    `Sequence` that shuffles itself unseeded in `__init__`, data loaded per worker); fewer samples than
    workers; data of unknown length (a Python generator) without `steps_per_epoch`; a `tf.data` dataset
    whose `auto_shard_policy` asks for sharding by file that cannot be done.

    Fix: seed every shuffle and split (`np.random.default_rng(0)`, `kscale.set_seed(0)`) so that every
    worker passes the same data; pass `steps_per_epoch` for data of unknown length; or, for parts that
    each worker loads on purpose, `distribute(model, data_policy="none")` and shard them yourself.
    """


class MissingDependencyError(KScaleError, ImportError):
    """A package that what was asked needs is not installed: Horovod (the horovod backend, `kscale run`'s
    horovod engine, or built without Gloo and MPI), tensorflow-estimator (`kscale.estimator`), the
    framework of the backend picked (Keras reads `KERAS_BACKEND` to choose it), TensorFlow's file systems
    (a `gs://` path with Keras 3 on JAX or torch).

    Fix: install what the message names, or tell Keras which backend to use (`KERAS_BACKEND=jax`).
    Horovod has no wheels: build it against your TensorFlow with Gloo
    (`HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 pip install --no-build-isolation horovod==0.28.1`;
    the install page has the whole command); the extras `kscale[estimator]`, `kscale[jax]`, `kscale[tf]`,
    `kscale[torch]` bring the others.
    """


class LaunchError(KScaleError):
    """A launch (`kscale run`, `kscale test`, `kscale doctor`'s checks) cannot start, or a worker failed.

    Typical causes: a host name that resolves to 127.0.0.1 (Gloo then connects to itself), a port in use
    or blocked, `ulimit -l` below unlimited for MPI, an engine given another engine's options, a per-node
    launch without `--node-rank`/`--master`, several `kscale run` per node under srun; or a worker that
    exited non-zero or was killed (the message names its rank, host and signal).

    Fix: what the message says; `kscale doctor -H host1,host2` lists what would break a launch with the
    fix for each (the `/etc/hosts` line, the port to open). For a failed worker, read that rank's output
    above the message.
    """


class EnvironmentDetectionError(KScaleError):
    """The launcher's environment variables contradict each other or are malformed: a rank at or above its
    size, a variable that is not an integer, `TF_CONFIG` that is not JSON or whose task is not in its
    cluster, a SLURM task list in a form SLURM does not write.

    Fix: start the job with its launcher (horovodrun, `kscale run`, torchrun, srun) rather than setting the
    variables by hand, or correct the one the message names; unset them all to run one process.
    `kscale env` prints what kscale reads.
    """


class RanksDivergedError(KScaleError):
    """The workers' weights are no longer the same after an epoch: training would go on with N different
    models. kscale compares a fingerprint of every worker's weights at each epoch's end and stops every
    rank, naming the ranks and the weights that differ.

    Typical causes: a callback or a `train_step` that changes weights from per-process randomness (noise,
    dropout of its own outside the model's layers), a layer that updates a state from its own batches and
    is not averaged, weights set on one rank only.

    Fix: make the change the same on every worker (seed it alike, or do it on the chief and broadcast),
    or, if the divergence is intended, `distribute(model, check_agreement=False)`.
    """


class BackendError(KScaleError):
    """The chosen backend cannot run in this process as it is set up, or cannot run this model there.

    Typical causes: Keras 3 under Horovod (it would never average the gradients) or Keras 3's own
    `DataParallel` on TensorFlow; JAX run before `import kscale` joined the job; a Keras whose trainer
    lacks what kscale corrects; `compile(steps_per_execution>1)` under Keras 3's tf.distribute backends (a
    Keras bug); a `BackupAndRestore` folder not every process sees; srun tasks of Keras 3 on torch without
    `MASTER_ADDR`/`MASTER_PORT`.

    Fix: the working alternative the message names (Keras 3 on JAX or with `TF_CONFIG` workers instead of
    Horovod; lane B's tf_keras for Horovod); `import kscale` at the top of the script; a shared folder for
    the backup; export `MASTER_ADDR` and `MASTER_PORT` in the job script.
    """


class SaveError(KScaleError):
    """Another worker could not write the model, weights or checkpoint being saved, so this one stops too.

    Every worker learns, in one small gather after each save, whether the save failed where it was made
    (on the chief, or, where saving is collective, on any worker): the worker that failed raises Keras' or
    the file system's own error, every other one this, naming the ranks. Else the failed worker alone
    would stop while the others waited for it, in training's next collective, until a timeout.

    Fix: what the failed rank's own error names (a format this model cannot be saved in, a folder that
    cannot be written, a full disk), then run again; `BackupAndRestore` resumes from its last backup.
    """
