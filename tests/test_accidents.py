"""Every accident on every kind of run leaves what the docs say.

The cells of `verification.accidents` the suite runs: the fast slice (one
process) in the quick loop, `accidents.SLOW` in the whole suite (the
whole product is the runner's, an hour on 2 shared cores); a cell listed in
`accident_cells.KNOWN_FAILURES` must fail (strict), so a fix that makes it
pass is seen. docs/survival.md's table of kinds x accidents and the cells
say the same.
"""

import os
import re

import pytest
from conftest import REPO

from multigpu.distributed import kinds
from verification import accident_cells, accident_expect, accidents


def _param(cell):
    marks = [] if cell in accidents.FAST else [pytest.mark.slow]
    known = accident_cells.KNOWN_FAILURES.get(cell)
    if known:
        marks.append(pytest.mark.xfail(strict=True, reason=known))
    return pytest.param(cell, marks=marks, id=cell)


@pytest.mark.parametrize(
    "cell", [_param(cell) for cell in accidents.FAST + accidents.SLOW]
)
def test_the_accident_leaves_what_the_docs_say_on_the_kind(cell, tmp_path):
    outcome, expected = accidents.run_cell(cell, tmp_path)
    if outcome is None:
        # Does not apply: the reason is what the docs' table says.
        assert expected
        return
    assert outcome.codes == expected.codes
    assert outcome.lines == expected.lines
    assert outcome.steps == expected.steps
    assert outcome.files == expected.files


def _survival_table():
    """docs/survival.md's accidents table: [heading row, *rows] of cells."""
    text = (REPO / "docs" / "survival.md").read_text()
    table = text.split("## Every accident on every kind\n", 1)[1]
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in table.split("\n\n")[1].split("\n")
        if line.startswith("|") and not line.startswith("| ---")
    ]
    return rows


def test_the_suites_cells_are_cells_of_the_product():
    assert set(accidents.FAST + accidents.SLOW) <= set(accidents.cells())


def test_the_docs_table_has_a_column_per_kind_and_a_row_per_accident():
    heading, *rows = _survival_table()
    assert heading == ["accident"] + [kind.name for kind in kinds.KINDS]
    assert [row[0] for row in rows] == [
        a.heading for a in accident_cells.ACCIDENTS.values()
    ]


def test_the_docs_table_says_where_an_accident_does_not_apply_and_why():
    _, *rows = _survival_table()
    for row, accident in zip(rows, accident_cells.ACCIDENTS.values()):
        for text, kind in zip(row[1:], kinds.KINDS):
            why = accident.expect.get(kind.name)
            said = re.fullmatch(r"does not apply: (.*)", text)
            assert (said and said[1]) == (
                why if isinstance(why, str) else None
            ), (accident.heading, kind.name)


def test_the_docs_table_marks_the_known_failures_and_only_them():
    _, *rows = _survival_table()
    marked = {
        "%s:%s" % (name, accidents.KIND_IDS[kind.name])
        for row, name in zip(rows, accident_cells.ACCIDENTS)
        for text, kind in zip(row[1:], kinds.KINDS)
        if "(fails today" in text
    }
    assert marked == set(accident_cells.KNOWN_FAILURES)


def test_the_cells_of_two_hosts_are_skipped_without_root_saying_why(
    monkeypatch, capsys
):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert accidents.main(["--cells=lost_link:ps,lost_link:local"]) == 0
    assert capsys.readouterr().out.split("\n")[2:5] == [
        "| ps cluster | the link between two hosts goes down mid-run "
        "| | | | | n/a: network namespaces need root and iproute2's ip |",
        "| one process | the link between two hosts goes down mid-run "
        "| | | | | n/a: one process runs on one host |",
        "2 cell(s), 0 failing",
    ]


def test_a_step_outside_its_expected_range_reads_as_minus_1():
    found = [accident_expect.within(step, 3, 5) for step in (2, 3, 5, 6)]

    assert found == [-1, 3, 5, -1]


def test_a_cell_the_runner_does_not_have_is_one_line_naming_the_choices(
    capsys,
):
    with pytest.raises(SystemExit) as ended:
        accidents.main(["--cells=mid_run:local,mid_run:everywhere"])

    assert ended.value.code == 2
    last = capsys.readouterr().err.strip().split("\n")[-1]
    assert last.split(": error: ")[1] == (
        "--cells: no cell mid_run:everywhere; a cell is "
        "ACCIDENT:KIND, an accident of %s and a kind of local, ps, ps_sync, "
        "workers_only" % ", ".join(accident_cells.ACCIDENTS)
    )
