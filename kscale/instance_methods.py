"""How kscale changes one Keras object without changing its class: a method bound to that instance, the way
Keras itself sets `model.train_function`. Every such binding goes through `bind`, so that a search for
`instance_methods.bind` lists them all:

- the distributed model's public methods (kscale/distributed_model.py: the class is left as the user's, so
  that saving, `clone_model` and nesting see the model they expect);
- Horovod's DistributedOptimizer's gradient hooks (kscale/backends/horovod.py, kscale/_horovod_private.py:
  its methods call `super(self.__class__, self)`, which a subclass would send back into them without end);
- Keras' development-branch torch `get_metrics_result` and a tf.keras batch normalization's moments
  (kscale/_keras_private.py: one instance's behaviour, where no public hook exists).

An object of kscale's own making, or a class kscale can subclass safely, gets a subclass instead
(kscale/subclassing.py)."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any


def bind(obj: Any, name: str, function: Callable[..., Any]) -> None:
    """`obj.name` becomes `function` bound to `obj` (it takes the object first, as a method does); the class
    and every other instance are unchanged. Set past a Keras layer's attribute tracking, which would wrap
    or track what it is given."""
    object.__setattr__(obj, name, types.MethodType(function, obj))
