"""The end-of-run trials table a person reads in a 100-column terminal: every header in full,
no cell cut, no line wider than the terminal, the notes listed under it."""

from __future__ import annotations

import pytest

from tuner.app.prepare import load
from tuner.cli._common import echo_wide

SPACES = ("cpu-llamacpp", "b300")  # the embedded default; an 8-GPU space's seven SGLang flags


def _rows(params: list[str]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for n in range(12):
        row: dict[str, object] = {"#": n, "state": "PRUNED" if n % 5 == 1 else "COMPLETE"}
        row.update({p: str(131072 * (n + 1)) if "length" in p else str(0.62 + n / 100) for p in params})
        row.update({"slo.goodput": f"{12_345.6 * n:,.1f} +-{1_234 * n:,}", "recall.effective_context": 524_288.0, "ok": "yes"})
        long = "raised_kv_cache_does_not_fit: the KV cache for 1,048,576 tokens needs more memory than left"
        row["note"] = long if n % 5 == 1 else ""
        rows.append(row)
    return rows


@pytest.mark.parametrize("name", SPACES)
def test_every_column_reads_in_full_within_100_columns(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    space, _ = load(name)
    params = list(space.parameters)
    rows = _rows(params)
    echo_wide(rows, lead=["#"], groups=[["state", "slo.goodput", "recall.effective_context", "ok"], params], width=100)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 100, out
    assert "…" not in out
    headers = " ".join(line for line in lines if line.lstrip().startswith("#"))
    for column in [*params, "slo.goodput", "recall.effective_context"]:
        assert f" {column} " in f" {headers} ", (column, out)
    for row in rows:
        for value in (row["slo.goodput"], *(row[p] for p in params)):
            assert str(value) in out
    assert "notes:" in out and "1 (PRUNED)" not in out and "  1: raised_kv_cache_does_not_fit" in out


def test_a_table_that_fits_stays_one_table(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"#": 0, "state": "COMPLETE", "x": "1", "y": 2.0, "note": "copy of 3"}]
    echo_wide(rows, lead=["#"], groups=[["state", "y"], ["x"]], width=100)
    out = capsys.readouterr().out
    assert "notes:" not in out and "copy of 3" in out and sum(line.lstrip().startswith("#") for line in out.splitlines()) == 1
