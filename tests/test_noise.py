"""Noise arithmetic: the floor between fresh servers, half-widths, ties; and picks that use them."""

from __future__ import annotations

import math
import statistics

import optuna
import pytest

from tuner.engines._openai import counter_total
from tuner.noise import NoiseFloor, differs, half_width, noise_floor
from tuner.pick import candidates, pareto_front, pick, signs
from tuner.space import RemeasureSpec


def test_the_floor_pools_relative_variance_over_repeated_configs() -> None:
    a = [[100.0, 1024], [110.0, 1024]]
    b = [[50.0, 2048], [50.0, 2048], [50.0, 2048]]
    floor = noise_floor([a, b, [[70.0, 512]]], noisy=[True, False])
    rel_a = statistics.stdev([100, 110]) / 105
    assert floor.dof == 3  # 1 + 2; a single run adds nothing
    assert floor.relative_sd[0] == pytest.approx(math.sqrt(rel_a**2 / 3))
    assert floor.relative_sd[1] == 0.0  # context is not noisy


def test_half_width_of_one_run_combines_the_probe_ci_with_the_floor() -> None:
    floor = NoiseFloor((0.05, 0.0), dof=4)
    hw = half_width((100.0, 2048.0), [[100.0, 2048.0]], floor, [True, False], within={0: 3.0})
    assert hw[0] == pytest.approx(math.hypot(3.0, 1.959964 * 5.0)) and hw[1] == 0.0
    several = half_width((100.0, 2048.0), [[95.0, 2048.0], [105.0, 2048.0]], floor, [True, False])
    assert several[0] == pytest.approx(2.571 * max(statistics.stdev([95, 105]), 5.0) / math.sqrt(2))  # t(1 + 4)


def test_differs_only_beyond_the_combined_half_widths() -> None:
    assert not differs(100, 3, 104, 4)  # 4 < 5
    assert differs(100, 3, 106, 4)


def _study(values: dict[int, tuple[float, float, float]]) -> optuna.Study:
    """Trials (tok/s, context, probe CI of tok/s), throughput-vs-context objectives."""
    study = optuna.create_study(directions=["maximize", "maximize"])
    study.set_user_attr("tuner.objectives", {"objectives": [{"metric": "load.output_tok_s"}, {"metric": "recall.effective_context"}]})
    for tok_s, ctx, ci in values.values():
        trial = study.ask()
        trial.set_user_attr("metrics", {"load.output_tok_s": tok_s, "load.output_tok_s_ci": ci, "recall.effective_context": ctx})
        study.tell(trial, [tok_s, ctx])
    return study


def test_a_pick_inside_the_noise_is_reported_as_a_tie() -> None:
    study = _study({0: (100.0, 1024, 4.0), 1: (103.0, 1024, 4.0), 2: (60.0, 1024, 2.0)})
    chosen = pick(study, "max-throughput")
    assert chosen.number == 1 and chosen.ties == (0,)  # 3 apart, half-widths 4 and 4: a tie
    assert "ties within noise with trial(s) 0" in chosen.describe(["tok/s", "ctx"])
    narrow = pick(_study({0: (100.0, 1024, 0.5), 1: (103.0, 1024, 0.5)}), "max-throughput")
    assert narrow.number == 1 and narrow.ties == ()


def test_a_config_within_noise_of_a_better_one_stays_on_the_front() -> None:
    study = _study({0: (100.0, 1024, 4.0), 1: (98.0, 1024, 4.0), 2: (60.0, 1024, 1.0)})
    knee = pick(study, "knee")
    assert {knee.number, *knee.ties} == {0, 1}  # trial 2 is dominated beyond noise


def test_a_wide_ci_does_not_push_a_faster_config_off_the_front() -> None:
    """The x2 night's trials 3 and 10: the most KV at 2,000 +- 1,956 tok/s (two batches) must not
    dominate 3,346 +- 1,020 tok/s with less KV; a config slower in mean and with less KV still goes."""
    night = {3: (1999.6, 1812108, 1956.1), 10: (3345.7, 684832, 1019.6), 6: (1500.0, 456777, 100.0), 9: (1787.4, 1812108, 116.5)}
    study = _study(night)  # its trials are numbered 0..3 in this order
    front = {list(night)[c.number] for c in pareto_front(candidates(study), signs(study))}
    assert front == {3, 10, 9}  # 9 ties with 3 (same KV, within noise); 6 has less of both than 10, beyond noise on KV
    assert pick(study, "max-throughput").number == 1


def test_prometheus_counters_are_summed_over_samples() -> None:
    text = 'vllm:prefix_cache_hits_total{engine="0"} 12.0\nvllm:prefix_cache_hits_total{engine="1"} 3\n# HELP x\n'
    assert counter_total(text, "vllm:prefix_cache_hits") == 15.0
    assert counter_total(text, "vllm:prefix_cache_queries") is None


def test_the_remeasure_plan_stays_within_its_budget_share() -> None:
    spec = RemeasureSpec(share=0.5, reference_runs=1, top=3, repeats=1)
    assert spec.plan(trials=10, front=5) == (3, 1)  # 1 at the start + (3 + 1) at the end <= 5
    assert spec.plan(trials=6, front=5) == (1, 1)  # 1 + (1 + 1) <= 3
    assert spec.plan(trials=3, front=5) == (0, 0)
    assert RemeasureSpec(share=1.0, repeats=2).plan(trials=10, front=2) == (2, 2)


def test_periodic_reference_runs_come_out_of_the_same_share() -> None:
    spec = RemeasureSpec(share=0.6, reference_runs=1, every=5, top=3, repeats=1)
    assert spec.pauses(10) == [5]
    assert spec.plan(trials=10, front=5) == (3, 1)  # 1 + 1 pause + (3 + 1) <= 6
    assert RemeasureSpec(every=0).pauses(10) == [] and RemeasureSpec(every=3, reference_runs=0).pauses(10) == []
