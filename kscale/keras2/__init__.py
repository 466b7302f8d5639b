"""tf.keras (Keras 2): what kscale does that depends on this Keras family. Keras 3's is in kscale.keras3,
with the same module names; what both share is written once outside them (e.g. kscale.learning_rate)."""
