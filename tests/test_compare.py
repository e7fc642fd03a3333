"""`tune compare`: two studies' picks re-measured side by side on the real llama-server."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from tests.conftest import REAL_STUDY_CORE
from tuner import objectives
from tuner.orchestration import compare


def _study(tok_s: float) -> optuna.Study:
    """A study of one trial, throughput-vs-context objectives."""
    study = optuna.create_study(directions=["maximize", "maximize"])
    study.set_user_attr(
        "tuner.objectives", {"objectives": [{"metric": "load.output_tok_s"}, {"metric": "recall.effective_context"}]}
    )
    trial = study.ask({"parallel": optuna.distributions.IntDistribution(1, 2)})
    trial.set_user_attr("metrics", {"load.output_tok_s": tok_s, "recall.effective_context": 512.0})
    study.tell(trial, [tok_s, 512.0])
    return study


def test_a_picks_disturbed_run_is_set_aside_and_the_verdict_uses_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    """a's third run drew a quarter of the core (a busy machine): counted, its spread would make a
    clear difference a tie; set aside, as the re-validation and the pick set it aside, a beats b."""
    runs = {
        "a-trial0": [(50.0, 512.0), (51.0, 512.0), (12.0, 512.0)],
        "b-trial0": [(40.0, 512.0), (40.5, 512.0), (39.5, 512.0)],
    }

    def remeasure(space, objective, run_dir, executor, items, *, repeats, on_run=None):
        assert [label for label, _ in items] == list(runs) and repeats == 3
        return {label: SimpleNamespace(values=values, failures=[], within=[{}] * len(values)) for label, values in runs.items()}

    monkeypatch.setattr(compare, "remeasure", remeasure)
    studies = {"a": _study(50.0), "b": _study(40.0)}
    unused: Any = None  # space, run folder and executor: only remeasure, replaced here, needs them
    results, floor, verdicts = compare.compare(
        studies, unused, objectives.load("throughput-vs-context"), unused, unused, repeats=3
    )
    a, b = results
    assert a.aside is not None and a.aside.index == 2 and b.aside is None
    assert a.mean[0] == pytest.approx(50.5) and len(a.runs) == 3  # every run shown, two counted
    assert floor.dof == 3  # a's two kept runs and b's three
    assert len(verdicts) == 1 and verdicts[0].startswith("a's pick beats b's on load.output_tok_s by +26.2%")


def test_runs_that_agree_by_chance_are_no_surer_than_their_own_cis(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny space's figures come in steps (40.0 tok/s, or 36.0 when a sub-window is a request
    short): two runs of 36.0 against two of 40.0 have no spread, yet each 36.0 run's own CI says
    +- 6.8. Bounded below by it, the same config against itself is a tie, not "+11 %"."""
    runs = {"a-trial0": [(36.0, 512.0), (36.0, 512.0)], "b-trial0": [(40.0, 512.0), (40.0, 512.0)]}
    within = {"a-trial0": [{0: 6.8}, {0: 6.8}], "b-trial0": [{}, {}]}  # b's sub-windows all alike: no CI

    def remeasure(space, objective, run_dir, executor, items, *, repeats, on_run=None):
        return {label: SimpleNamespace(values=values, failures=[], within=within[label]) for label, values in runs.items()}

    monkeypatch.setattr(compare, "remeasure", remeasure)
    unused: Any = None
    studies = {"a": _study(36.0), "b": _study(40.0)}
    results, _, verdicts = compare.compare(studies, unused, objectives.load("throughput-vs-context"), unused, unused, repeats=2)
    assert results[0].half_width[0] > 4.0 and verdicts[0].startswith("a's and b's picks tie on load.output_tok_s")
    within["a-trial0"] = [{}, {}]  # without the runs' own CIs: zero spread, a false difference
    _, _, verdicts = compare.compare(studies, unused, objectives.load("throughput-vs-context"), unused, unused, repeats=2)
    assert verdicts[0].startswith("b's pick beats a's on load.output_tok_s by +11.1%")


# Its runs are pinned to the core the real study's stored space names, where other workers' tests
# pin their servers too (worker_core() of gw0 and gw2 under 3 workers). Beside single-core tests
# there its runs served 16.0-32.0 tok/s (median 19.5), with the core to itself 25.5-40.0 (median
# 36.0) (measured in the session of stop 36; git history); CI's run at stop 36 said "a's
# pick beats b's by +38.6 %". settled: after the unit tests too, which run unpinned.
@pytest.mark.integration
@pytest.mark.quiet(core=REAL_STUDY_CORE, settled=True)
def test_a_study_compared_with_its_own_copy_ties(real_study, tmp_path: Path) -> None:
    """The same pick twice can only tie; the verdict says so with the numbers, and the studies
    are not written to."""
    _, run_dir, _ = real_study
    copy = tmp_path / "copy.db"
    shutil.copy(run_dir.root / "study.db", copy)
    before = copy.read_bytes()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner",
            "compare",
            "--study",
            f"a=sqlite:///{run_dir.root / 'study.db'}",
            "--study",
            f"b=sqlite:///{copy}",
            "--repeats",
            "2",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    # One verdict for the pair. The same config twice ties at the 95 % level, i.e. not always: a
    # false "beats" may appear (seen once: +1.8 %), but only by a small margin.
    verdict = [line for line in out.stdout.splitlines() if "picks tie" in line or "pick beats" in line]
    assert len(verdict) == 1, out.stdout
    tie = verdict[0].startswith("a's and b's picks tie on load.output_tok_s")
    margin = re.search(r"by ([+-][\d.]+)%, beyond the noise", verdict[0])
    assert tie or (margin is not None and abs(float(margin.group(1))) < 10.0), verdict[0]
    assert out.stdout.count(" runs)") == 2 and "(2 runs)" in out.stdout
    assert copy.read_bytes() == before, "compare wrote to a study"


@pytest.mark.integration
def test_compare_needs_two_studies(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tuner", "compare", "--study", "a"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and out.stderr.strip() == "error: --study: give two or more studies to compare"
