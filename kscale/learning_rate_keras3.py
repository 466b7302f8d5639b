"""Kept so that Keras 3 files saved by kscale before the family packages load without an import: their
schedule names this module. The schedule is kscale.keras3.learning_rate's."""

from kscale.keras3.learning_rate import ScaledLearningRate

__all__ = ["ScaledLearningRate"]
