"""What kscale's torch backend stands in for: Keras releases up to 3.15 have no distribution for torch.

Keras' development branch (3.16.0.dev: keras-team/keras#23316) adds `keras/src/backend/torch/
distribution_lib.py`: `DataParallel` wraps the model in DistributedDataParallel and shards the data. When
an installed Keras has it, this test fails: kscale should then train through Keras' own path on that
release (as it does on JAX with keras.distribution) and keep its own for the releases before.
"""

from __future__ import annotations

import importlib.util

import keras
import pytest


def test_this_keras_has_no_distribution_for_torch_so_kscale_brings_its_own():
    assert keras.config.backend() == "torch"
    assert importlib.util.find_spec("keras.src.backend.torch.distribution_lib") is None, (
        f"Keras {keras.__version__} has a distribution for torch: use it in kscale/backends/torch.py for this "
        "release (keras.distribution.DataParallel), as the jax backend does"
    )


def test_a_keras_that_wraps_the_model_in_ddp_itself_is_stopped_saying_what_works():
    """Measured on Keras' development branch (3.16.0): its trainer wraps the model in DistributedDataParallel
    whenever torch.distributed is initialized (`ddp_model`), under kscale too; a shared last step then
    trained 0.0072 off (sum_reduction) and a metric of declared maximum states hung. Simulated here with
    the attribute that branch's trainer has."""
    from kscale.backends import torch as torch_backend
    from kscale.errors import BackendError

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    assert not hasattr(model, "ddp_model")  # Keras 3.15: kscale's own data parallelism
    torch_backend._check_no_keras_data_parallel(model)
    model.ddp_model = None
    with pytest.raises(BackendError, match=r"keras==3\.15"):
        torch_backend._check_no_keras_data_parallel(model)
