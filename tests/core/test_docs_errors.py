"""The documentation site's troubleshooting page lists every KScaleError with its docstring (what it means
and how to fix it), generated from the code at build time by scripts/docs_hooks.py: this checks the
generated list against the classes Python itself finds, so a new error cannot be left off the page."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

from kscale.errors import KScaleError

REPO = Path(__file__).resolve().parents[2]


def _hooks():
    """scripts/docs_hooks.py, as MkDocs loads it (a file, not a package's module)."""
    if "docs_hooks" not in sys.modules:
        spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "scripts/docs_hooks.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["docs_hooks"] = module  # its dataclass looks its module up
        spec.loader.exec_module(module)
    return sys.modules["docs_hooks"]


def _subclasses(cls: type) -> set[type]:
    return {sub for direct in cls.__subclasses__() for sub in {direct, *_subclasses(direct)}}


def test_every_kscale_error_is_on_the_troubleshooting_page_with_its_docstring():
    hooks = _hooks()
    page = hooks.errors_markdown()
    found = hooks.error_classes()
    # The classes Python finds: kscale.errors' and those of every module the generator found one in (each
    # imports without a framework), so a subclass the source scan missed there fails here.
    for module in {e.module for e in found}:
        importlib.import_module(module)
    classes = {c for c in {KScaleError, *_subclasses(KScaleError)} if c.__module__.startswith("kscale.")}
    assert {"ModelError", "DataError", "BackendError", "BenchError"} <= {c.__qualname__ for c in classes}
    assert {c.__qualname__ for c in classes} == {e.name for e in found}
    for cls in classes:
        doc = cls.__dict__.get("__doc__") or ""
        assert doc.strip(), f"{cls.__module__}.{cls.__qualname__} has no docstring of its own"
        assert "Fix" in doc, f"{cls.__qualname__}'s docstring does not say how to fix it"
        assert f"### {cls.__qualname__}\n\n`{cls.__module__}.{cls.__qualname__}(" in page, cls


def test_a_kscale_error_without_a_docstring_fails_the_build(tmp_path):
    package = tmp_path / "kscale"
    package.mkdir()
    (package / "errors.py").write_text(
        'class KScaleError(Exception):\n    """Base."""\n\n\nclass NewError(KScaleError):\n    pass\n'
    )
    with pytest.raises(ValueError, match=r"kscale\.errors\.NewError has no docstring"):
        _hooks().errors_markdown(package)
