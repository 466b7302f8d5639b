"""kscale: one line to scale Keras training from one device to many GPUs and hosts."""

__version__ = "0.1.0"
