"""A fifth kind of run is a row of `kinds` and its functions.

The table's columns hold behaviour (the row's functions, its flags and its
lines), so a new kind touches the table alone: no product module names a
row or compares a column with a code, and a row made of another row's
functions answers every column through the task.
"""

import ast

from helpers.modules import ROOT, project_modules

from multigpu.distributed import cluster, kinds, sessions

TABLE = "multigpu.distributed.kinds"
# The rows, and the table of them: what a module outside must not name.
ROWS = ("LOCAL", "PS", "PS_SYNC", "WORKERS_ONLY", "KINDS")
# The columns that are text, for the lines only, never compared.
LINES = ("name", "lost_peer_advice")


def _outside_the_table():
    """{module: its syntax tree} of the product modules but the table."""
    return {
        name: ast.parse(path.read_text())
        for name, path in project_modules(ROOT).items()
        if name != TABLE
    }


def _is_column(node):
    """Whether node reads a column of a task's row: `X.kind.COLUMN`."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "kind"
    )


def _rows_named(tree):
    return sorted(
        {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "kinds"
            and node.attr in ROWS
        }
    )


def _columns_compared(tree):
    return sorted(
        {
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Compare)
            and any(map(_is_column, [node.left, *node.comparators]))
        }
    )


def test_the_files_a_fifth_row_touches_are_the_table_alone():
    named = {
        name: _rows_named(tree) for name, tree in _outside_the_table().items()
    }
    assert {name: rows for name, rows in named.items() if rows} == {}


def test_no_module_outside_the_table_compares_a_column_with_a_code():
    compared = {
        name: _columns_compared(tree)
        for name, tree in _outside_the_table().items()
    }
    assert {name: lines for name, lines in compared.items() if lines} == {}


def test_the_finders_find_a_row_named_and_a_column_compared():
    tree = ast.parse(
        "if task.kind.session == 'own' or kinds.PS is kind:\n    pass\n"
    )
    assert (_rows_named(tree), _columns_compared(tree)) == (["PS"], [1])


def test_a_fifth_row_of_another_rows_functions_answers_through_the_task(
    monkeypatch,
):
    fifth = kinds.WORKERS_ONLY._replace(name="a fifth kind")
    monkeypatch.setattr(kinds, "of", lambda spec, sync_replicas: fifth)
    task = cluster.cluster_task("", "h:2,h:3,h:4", "worker", 1)

    assert task.kind is fifth
    # Every column is behaviour or a plain value of the row, no code that
    # a module outside would branch on.
    for column in kinds.Kind._fields:
        value = getattr(fifth, column)
        assert (
            callable(value)
            or isinstance(value, (bool, tuple, dict))
            or (column in LINES)
        ), column
    assert task.replicas_per_step == 3
    assert task.kind.done_signals(task) == []
    assert [type(hook) for hook in task.kind.finished_hooks(9, task)] == [
        sessions.FinishedHook
    ]
