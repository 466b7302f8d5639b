"""Keras' own torch data parallelism stays off under kscale, which keeps its own on every Keras.

Keras releases up to 3.15 have no distribution for torch. Keras' development branch (3.16.0: its
`keras/src/backend/torch/distribution_lib.py` and a trainer that wraps the model in DistributedDataParallel
whenever torch.distributed is initialized, `ddp_model`, and sums every metric variable over the processes
at each read) has one; measured there under kscale with Keras' path on: a last step the processes share
unevenly trained 0.0072 off (sum_reduction: DDP's unweighted mean) and a metric of declared maximum
states hung. kscale keeps its one all-reduce of gradients and its one reduction of metric states and
switches Keras' off (`_keras_private.keep_torch_data_parallel_off`; backends/torch.py says why). The whole
torch lane passes on that branch so (docs/launch/torchrun.md, "Keras' own torch data parallelism").
"""

from __future__ import annotations

import keras
import numpy as np


def _model() -> keras.Model:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    return model


def test_only_a_keras_with_data_parallelism_of_its_own_is_changed():
    from kscale import _keras_private

    model = _model()
    its_own = hasattr(model, "ddp_model")  # Keras 3.15: none
    assert _keras_private.keep_torch_data_parallel_off(model) == its_own
    assert ("get_metrics_result" in vars(model)) == its_own


def test_a_keras_that_wraps_the_model_in_ddp_itself_is_kept_from_it(tmp_path):
    """As Keras' development branch makes its trainer (simulated on a release by the attribute it adds):
    no wrapper is made, the model is called, it saves (Keras' saving walks its attributes), and metric results are read from this process's states
    without Keras' collective (torch.distributed is not initialized here: Keras' version would not reduce
    either, so its result is compared as well)."""
    from kscale import _keras_private

    model = _model()
    object.__setattr__(model, "ddp_model", None)
    assert _keras_private.keep_torch_data_parallel_off(model)
    assert model.ddp_model is False  # Keras wraps only while it is None; its steps call `ddp_model or self`
    x = np.arange(12, dtype="float32").reshape(4, 3)
    model.fit(x, x.sum(axis=1), batch_size=2, epochs=1, verbose=0)
    model.save_weights(str(tmp_path / "saved.weights.h5"))
    results = model.get_metrics_result()
    assert set(results) == {"loss", "mae"} and all(np.isfinite(float(v)) for v in results.values())
    assert {k: float(v) for k, v in results.items()} == {
        k: float(v) for k, v in type(model).get_metrics_result(model).items()
    }
