"""Every error kscale raises on purpose: each says what it found, what it expected, and how to fix it."""


class KScaleError(Exception):
    """Base class: catch this to handle any kscale usage error."""


class ModelError(KScaleError):
    """The object given to `distribute()` is not a model kscale can distribute."""


class OptionError(KScaleError, ValueError):
    """An option (backend, lr_scaling, data_policy, ...) has a value kscale does not know."""


class DataError(KScaleError, ValueError):
    """The training data cannot be split so that every worker runs the same number of steps."""


class MissingDependencyError(KScaleError, ImportError):
    """An optional package (horovod, tensorflow-estimator) is needed for what was asked."""


class LaunchError(KScaleError):
    """A launch (kscale run / kscale test) cannot start or a worker failed."""


class EnvironmentDetectionError(KScaleError):
    """The launcher's environment variables contradict each other."""


class RanksDivergedError(KScaleError):
    """The workers' weights are no longer the same: training would go on with N different models."""


class BackendError(KScaleError):
    """The chosen backend cannot run in this process as it is set up."""
