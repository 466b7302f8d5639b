"""What Horovod was built with is asked of a fresh interpreter once per installation, then read from the
cache: `kscale run --engine horovod` no longer imports TensorFlow in a subprocess before every launch."""

from __future__ import annotations

import importlib.machinery
import os

import pytest

from kscale import environment
from kscale.launch import facts

BUILT = facts.BuildInfo(horovod_version="0.28.1", tensorflow_version="2.15.1", tensorflow=True, gloo=True)


@pytest.fixture
def installation(tmp_path, monkeypatch):
    """A fake Horovod and TensorFlow (their compiled files only), a fresh cache folder, a counted probe."""
    packages = {}
    for package, relative in (
        ("horovod", "tensorflow/mpi_lib.cpython-311-x86_64-linux-gnu.so"),
        ("tensorflow", "python/_pywrap_tensorflow_internal.so"),
    ):
        path = tmp_path / "site" / package / relative
        path.parent.mkdir(parents=True)
        path.write_bytes(b"compiled")
        packages[package] = path

    def find_spec(name, package=None):
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(tmp_path / "site" / name)]
        return spec if name in packages else None

    monkeypatch.setattr(facts.importlib.util, "find_spec", find_spec)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    environment.reset()
    probes = []

    def probe(gpus, timeout):
        probes.append(gpus)
        return BUILT

    monkeypatch.setattr(facts, "_probe", probe)
    facts.probe_build.cache_clear()
    yield packages, probes
    facts.probe_build.cache_clear()
    environment.reset()


def test_the_build_is_probed_once_per_installation(installation, tmp_path):
    _, probes = installation
    assert facts.probe_build() == BUILT and probes == [False]
    [written] = os.listdir(tmp_path / "cache" / "kscale")
    assert written.startswith("horovod-build-") and written.endswith(".json")
    facts.probe_build.cache_clear()  # a new launcher process
    assert facts.probe_build() == BUILT and probes == [False]  # read back, not probed


def test_a_rebuilt_horovod_or_another_tensorflow_is_probed_again(installation):
    packages, probes = installation
    facts.probe_build()
    for package in ("horovod", "tensorflow"):
        packages[package].write_bytes(b"compiled again, another size")
        facts.probe_build.cache_clear()
        facts.probe_build()
    assert probes == [False, False, False]


def test_a_failed_probe_and_the_gpus_are_never_taken_from_the_cache(installation, monkeypatch):
    _, probes = installation
    broken = facts.BuildInfo(error="ImportError: undefined symbol")
    monkeypatch.setattr(facts, "_probe", lambda gpus, timeout: probes.append(gpus) or broken)
    assert facts.probe_build().error and facts._cached_build(facts._installation_key()) is None
    facts.probe_build.cache_clear()
    facts.probe_build(gpus=True)
    facts.probe_build.cache_clear()
    facts.probe_build(gpus=True)
    assert probes == [False, True, True]


def test_without_horovod_nothing_is_cached(installation, monkeypatch):
    monkeypatch.setattr(facts.importlib.util, "find_spec", lambda name, package=None: None)
    assert facts._installation_key() is None


def test_the_key_of_this_installation_names_its_files():
    """On a lane with Horovod built, the real files are found (a renamed extension would stop caching)."""
    pytest.importorskip("horovod")
    environment.reset()
    assert facts._installation_key() is not None


def test_gpus_are_read_from_the_driver_and_filtered_as_cuda_filters_them(monkeypatch):
    first, second = "GPU 0: NVIDIA H100 (UUID: GPU-aaa)", "GPU 1: NVIDIA H100 (UUID: GPU-bbb)"
    monkeypatch.setattr(facts, "_run_text", lambda argv, timeout=10.0: f"{first}\n{second}\n")
    assert facts.nvidia_gpus() == (first, second)
    assert facts.nvidia_gpus("1") == (second,)
    assert facts.nvidia_gpus("GPU-aaa") == (first,)
    assert facts.nvidia_gpus("1,0") == (second, first)
    assert facts.nvidia_gpus("0,7,1") == (first,)  # CUDA stops at the first entry that names no GPU
    assert facts.nvidia_gpus("") == () and facts.nvidia_gpus("-1") == ()
    monkeypatch.setattr(facts, "_run_text", lambda argv, timeout=10.0: None)  # no NVIDIA driver
    assert facts.nvidia_gpus() == ()
