"""What kscale's torch backend stands in for: Keras releases up to 3.15 have no distribution for torch.

Keras' development branch (3.16.0.dev: keras-team/keras#23316) adds `keras/src/backend/torch/
distribution_lib.py`: `DataParallel` wraps the model in DistributedDataParallel and shards the data. When
an installed Keras has it, this test fails: kscale should then train through Keras' own path on that
release (as it does on JAX with keras.distribution) and keep its own for the releases before.
"""

from __future__ import annotations

import importlib.util

import keras


def test_this_keras_has_no_distribution_for_torch_so_kscale_brings_its_own():
    assert keras.config.backend() == "torch"
    assert importlib.util.find_spec("keras.src.backend.torch.distribution_lib") is None, (
        f"Keras {keras.__version__} has a distribution for torch: use it in kscale/backends/torch.py for this "
        "release (keras.distribution.DataParallel), as the jax backend does"
    )
