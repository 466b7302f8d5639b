"""Keras 3 (on JAX or TensorFlow): what kscale does that depends on this Keras family. tf.keras's is in
kscale.keras2, with the same module names; what both share is written once outside them."""
