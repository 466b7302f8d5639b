"""`kscale.set_seed(seed)`: one call that seeds Python, NumPy and the framework in use, in every lane.

Like accelerate's `set_seed` and Lightning's `seed_everything`. It exists also because
`tf.keras.utils.set_random_seed` is broken in tf_keras 2.18.0 on Python >= 3.12 (its seed generator calls
`Random.randint(1, 1e9)`, which Python 3.12 rejects; fixed in tf_keras 2.19, which needs TensorFlow 2.19,
where Horovod 0.28.1 no longer builds). Seeding Python's `random`, NumPy and TensorFlow's op seed gives
tf.keras the same determinism without that code path; Keras 3 gets its own `set_random_seed`.
"""

from __future__ import annotations

import random
import sys

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
