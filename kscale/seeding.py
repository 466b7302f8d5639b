"""`kscale.set_seed(seed)`: one call that seeds Python, NumPy and the framework in use, in every lane.

Like accelerate's `set_seed` and Lightning's `seed_everything`. It exists also because
`tf.keras.utils.set_random_seed` is broken in tf_keras 2.18.0 on Python >= 3.12 (its seed generator calls
`Random.randint(1, 1e9)`, which Python 3.12 rejects; fixed in tf_keras 2.19, which needs TensorFlow 2.19,
where Horovod 0.28.1 no longer builds). Seeding Python's `random`, NumPy and TensorFlow's op seed gives
tf.keras the same determinism without that code path; Keras 3 gets its own `set_random_seed`.
"""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Iterator

import numpy as np

from kscale import frameworks


def set_seed(seed: int) -> None:
    """Seed Python's `random`, NumPy, and TensorFlow or Keras 3, whichever this process trains with."""
    random.seed(seed)
    np.random.seed(seed)
    if frameworks.process_keras().generation == 3:
        import keras

        keras.utils.set_random_seed(seed)  # seeds TensorFlow too when it is Keras' backend
    if frameworks.process_keras().generation == 2 or "tensorflow" in sys.modules:
        import tensorflow as tf

        tf.random.set_seed(seed)


@contextlib.contextmanager
def users_random_state_kept() -> Iterator[None]:
    """Python's and NumPy's global random states as the user's script left them, around what kscale does
    for itself: a copy of the model built in a strategy's scope draws from them (each Keras 3 layer with a
    SeedGenerator, an LSTM's, takes a seed from Python's `random` when made), and then fit's shuffle,
    which kscale draws as one process draws it from the same states, would take another order."""
    python, numpy = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)
