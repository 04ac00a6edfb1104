"""The Python the package declares is the one its code runs on, and CI's.

pyproject.toml's requires-python names the oldest Python the package
installs on; every module must parse as that Python's syntax, the syntax
the code needs (`X | None` in an annotation evaluated at import, a
parenthesized `with` of several items: Python 3.10) must not be newer, and
.ci/run makes its environment with that Python.
"""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
# A parenthesized `with` of several items and `X | Y` in an annotation
# read at import (no `from __future__ import annotations`) need 3.10.
UNION_AND_WITH_PYTHON = (3, 10)


def setting(pyproject, key):
    """The string value of a key of pyproject.toml, e.g. '>=3.10' (read
    as text: tomllib is not in the oldest Python declared)."""
    found = re.search(r'^%s = "([^"]*)"$' % key, pyproject.read_text(), re.M)
    assert found, key
    return found[1]


def declared_minimum(pyproject):
    """(major, minor) of requires-python's '>=X.Y'."""
    declared = setting(pyproject, "requires-python")
    found = re.fullmatch(r">=(\d+)\.(\d+)", declared)
    assert found, declared
    return int(found[1]), int(found[2])


def project_files(root):
    """Every .py file of the checkout, but those of hidden folders (the
    virtual environment) and of the build."""
    return sorted(
        path
        for path in root.rglob("*.py")
        if not any(
            part.startswith(".") or part.endswith((".egg-info", "build"))
            for part in path.relative_to(root).parts
        )
    )


def _annotations(tree):
    """The annotations of a module evaluated when it is imported."""
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign):
            yield node.annotation
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            for argument in (
                arguments.posonlyargs
                + arguments.args
                + arguments.kwonlyargs
                + [arguments.vararg, arguments.kwarg]
            ):
                if argument is not None and argument.annotation is not None:
                    yield argument.annotation
            if node.returns is not None:
                yield node.returns


def needed_python(source):
    """(3, 10) if source uses 3.10's unions or grouped `with`, else None."""
    tree = ast.parse(source)
    lines = source.split("\n")
    postponed = any(
        isinstance(node, ast.ImportFrom)
        and node.module == "__future__"
        and any(alias.name == "annotations" for alias in node.names)
        for node in tree.body
    )
    unions = not postponed and any(
        isinstance(part, ast.BinOp) and isinstance(part.op, ast.BitOr)
        for annotation in _annotations(tree)
        for part in ast.walk(annotation)
    )
    grouped = any(
        isinstance(node, ast.With)
        and len(node.items) > 1
        and "(" in _between(lines, node, node.items[0].context_expr)
        for node in ast.walk(tree)
    )
    return UNION_AND_WITH_PYTHON if unions or grouped else None


def _between(lines, start, end):
    """The source text from node start to node end."""
    if start.lineno == end.lineno:
        return lines[start.lineno - 1][start.col_offset : end.col_offset]
    return "\n".join(
        [lines[start.lineno - 1][start.col_offset :]]
        + lines[start.lineno : end.lineno - 1]
        + [lines[end.lineno - 1][: end.col_offset]]
    )


def test_every_module_parses_as_the_declared_minimum_python():
    minimum = declared_minimum(ROOT / "pyproject.toml")
    failed = []
    for path in project_files(ROOT):
        try:
            ast.parse(path.read_text(), str(path), feature_version=minimum)
        except SyntaxError as e:
            failed.append("%s:%s: %s" % (path, e.lineno, e.msg))
    assert failed == []


def test_no_module_needs_a_python_newer_than_the_declared_one():
    minimum = declared_minimum(ROOT / "pyproject.toml")
    newer = [
        "%s needs Python %d.%d" % ((path.relative_to(ROOT),) + needed)
        for path in project_files(ROOT)
        if (needed := needed_python(path.read_text())) and needed > minimum
    ]
    assert newer == []


def test_the_check_sees_a_union_annotation_and_a_grouped_with():
    assert needed_python("x: int | None = None\n") == (3, 10)
    assert needed_python("with (\n    a() as b,\n    c(),\n):\n    pass\n")
    assert needed_python("with a() as b, c():\n    pass\n") is None
    assert (
        needed_python(
            "from __future__ import annotations\ndef f(x: int | None): pass\n"
        )
        is None
    )


def test_ci_runs_the_tests_on_the_declared_minimum_python():
    venv = re.findall(
        r"^(python\S*) -m venv ", (ROOT / ".ci/run").read_text(), re.M
    )
    assert venv == ["python%d.%d" % declared_minimum(ROOT / "pyproject.toml")]


def test_ruff_targets_the_declared_minimum_python():
    pyproject = ROOT / "pyproject.toml"
    assert setting(pyproject, "target-version") == "py%d%d" % (
        declared_minimum(pyproject)
    )
