"""kscale.tested_versions: the framework versions the guard tests ran on, and the one warning outside them."""

from __future__ import annotations

import pytest

from kscale import log, tested_versions


def test_versions_inside_the_tested_ranges_say_nothing():
    versions = {"tensorflow": (2, 18, 1), "keras": (3, 15, 1), "tf-keras": (2, 18, 0), "horovod": (0, 28, 1)}
    assert tested_versions.untested(versions) == []


def test_a_newer_or_older_release_is_named_with_what_was_tested():
    versions = {"torch": (2, 14, 0), "keras": (3, 16, 0), "tensorflow": (2, 12, 0)}
    assert tested_versions.untested(versions) == [
        "keras 3.16.0 (tested: 2.15-3.15)",
        "tensorflow 2.12.0 (tested: 2.15-2.21)",
        "torch 2.14.0 (tested: 2.13)",
    ]


@pytest.fixture
def warnings_said(monkeypatch):
    said = []
    monkeypatch.setattr(log, "warning", said.append)
    monkeypatch.setattr(tested_versions, "_warned", False)
    return said


def test_the_chief_warns_once_naming_kscale_test(monkeypatch, warnings_said):
    monkeypatch.setattr(tested_versions, "installed", lambda: {"torch": (2, 14, 0)})
    tested_versions.warn_once_if_untested()
    tested_versions.warn_once_if_untested()
    assert len(warnings_said) == 1
    assert "torch 2.14.0 (tested: 2.13)" in warnings_said[0] and "`kscale test`" in warnings_said[0]


def test_this_lanes_frameworks_are_the_tested_versions(warnings_said):
    """Fails when a lane of `make test` installs a release outside TESTED: its guard tests then ran on it,
    and TESTED must say so (or the lane pin the tested one)."""
    assert tested_versions.untested(tested_versions.installed()) == []
    tested_versions.warn_once_if_untested()
    assert warnings_said == []


def test_any_tensorflow_build_counts_as_tensorflow(monkeypatch):
    monkeypatch.setattr(tested_versions.frameworks, "tensorflow_version", lambda: (2, 22, 0))
    monkeypatch.setattr(tested_versions.frameworks, "version_of", lambda name: None)
    assert tested_versions.installed() == {"tensorflow": (2, 22, 0)}
