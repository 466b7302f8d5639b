"""The framework versions kscale's guard tests ran on, and one warning where the installed ones are others.

kscale uses a few private Keras, TensorFlow, torch, Horovod and JAX APIs, each in its `_<name>_private.py`
with a guard test in the lane of `make test` that installs that framework (README, "Which stack?"). A
release outside those versions may have moved one: its guard test would say so, nothing else would. So
`import kscale` compares the installed versions with the ones below (the lanes' own; a test in each lane
fails when the lane installs another) and, outside them, warns once on the chief, naming `kscale test`.
"""

from __future__ import annotations

from kscale import environment, frameworks, log

#: By distribution, the (major, minor) versions `make test`'s lanes install, lowest and highest.
TESTED: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "tensorflow": ((2, 15), (2, 21)),  # A: 2.15, B: 2.18, C: 2.21 (tensorflow-cpu counts as tensorflow)
    "keras": ((2, 15), (3, 15)),  # A: 2.15; B and C: 3.15
    "tf-keras": ((2, 18), (2, 18)),
    "torch": ((2, 13), (2, 13)),
    "jax": ((0, 12), (0, 12)),
    "horovod": ((0, 28), (0, 28)),
}
_warned = False


def installed() -> dict[str, tuple[int, ...]]:
    """The installed versions of the distributions in TESTED (any TensorFlow build as `tensorflow`)."""
    found = {name: frameworks.version_of(name) for name in TESTED if name != "tensorflow"}
    found["tensorflow"] = frameworks.tensorflow_version()
    return {name: version for name, version in found.items() if version}


def untested(versions: dict[str, tuple[int, ...]]) -> list[str]:
    """'torch 2.14 (tested: 2.13)' for each of `versions` outside TESTED."""
    outside = []
    for name, version in sorted(versions.items()):
        low, high = TESTED[name]
        if not low <= tuple(version[:2]) <= high:
            tested = ".".join(map(str, low)) + ("" if low == high else "-" + ".".join(map(str, high)))
            outside.append(f"{name} {'.'.join(map(str, version[:3]))} (tested: {tested})")
    return outside


def warn_once_if_untested() -> None:
    """On the chief, once per process: name the installed frameworks kscale's guard tests did not run on."""
    global _warned
    if _warned or not environment.current().is_chief:
        return
    _warned = True
    outside = untested(installed())
    if outside:
        log.warning(
            f"kscale's checks of the framework internals it relies on ran on other versions than {', '.join(outside)}. "
            "Run `kscale test` (kscale's self-checking job, under your launcher) before training, or install "
            "the tested versions (README, 'Which stack?')."
        )
