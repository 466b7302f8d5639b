"""MkDocs hooks for the documentation site (mkdocs.yml, `hooks:`): what is generated from the code at build
time, so that it cannot drift from it.

- The troubleshooting page's list of errors: every `KScaleError` subclass in the package, found by reading
  kscale's source (no import: the docs venv has no framework), with its docstring, which says what the
  error means and how to fix it, and the modules that raise it. A subclass without a docstring fails
  the build; tests/core/test_docs_errors.py checks the page against the classes Python finds.
- The bench page's plot: benchmarks/results/bench/scaling.png, served as assets/bench-scaling.png.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: Where the troubleshooting page wants the generated list.
MARKER = "<!-- kscale-errors -->"
#: Files outside docs/ that pages show, as (where the site serves them, the file).
ASSETS = (("assets/bench-scaling.png", REPO / "benchmarks/results/bench/scaling.png"),)


@dataclasses.dataclass(frozen=True)
class ErrorClass:
    """One error class as the source defines it."""

    name: str
    module: str  # dotted, e.g. kscale.errors
    bases: tuple[str, ...]
    doc: str | None
    raised_in: tuple[str, ...]  # the modules with a `raise Name(...)`


def error_classes(package: Path = REPO / "kscale") -> list[ErrorClass]:
    """`KScaleError` and every class of the package that derives from it, base first, then by module."""
    trees = {
        ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"): ast.parse(
            path.read_text(), filename=str(path)
        )
        for path in sorted(package.rglob("*.py"))
    }
    classes = {
        node.name: (module, node)
        for module, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }
    errors = {"KScaleError"}
    grew = True
    while grew:  # subclasses of subclasses
        grew = False
        for name, (_, node) in classes.items():
            if name not in errors and any(_name(base) in errors for base in node.bases):
                errors.add(name)
                grew = True
    raised: dict[str, set[str]] = {name: set() for name in errors}
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Raise)
                and isinstance(node.exc, ast.Call)
                and _name(node.exc.func) in errors
            ):
                raised[_name(node.exc.func)].add(module)
    found = [
        ErrorClass(
            name=name,
            module=classes[name][0],
            bases=tuple(_name(base) for base in classes[name][1].bases),
            doc=ast.get_docstring(classes[name][1]),
            raised_in=tuple(sorted(raised[name])),
        )
        for name in errors
    ]
    return sorted(
        found, key=lambda e: (e.name != "KScaleError", e.module != "kscale.errors", e.module, e.name)
    )


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def errors_markdown(package: Path = REPO / "kscale") -> str:
    """The troubleshooting page's list: one section per error, its docstring as what it means and the fix."""
    errors = error_classes(package)
    missing = [f"{e.module}.{e.name}" for e in errors if not e.doc]
    if missing:
        raise ValueError(
            f"{', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no docstring: the troubleshooting "
            "page shows each KScaleError's docstring as what it means and how to fix it. Write one."
        )
    parts = []
    for error in errors:
        bases = ", ".join(f"`{base}`" for base in error.bases)
        where = ", ".join(f"`{module}`" for module in error.raised_in) or "none in kscale itself (catch it)"
        doc = inspect.cleandoc(error.doc or "")
        for label in ("Typical causes:", "Fix:"):  # the docstrings' own headings, bold on the page
            doc = doc.replace(f"\n{label} ", f"\n**{label}** ")
        parts.append(
            f"### {error.name}\n\n`{error.module}.{error.name}({', '.join(error.bases)})`\n\n"
            f"{doc}\n\n*Derives from* {bases}. *Raised in* {where}.\n"
        )
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: the generated list in place of the marker."""
    if MARKER in markdown:
        return markdown.replace(MARKER, errors_markdown())
    return markdown


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: the files outside docs/ that pages show."""
    from mkdocs.structure.files import File

    for uri, path in ASSETS:
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
