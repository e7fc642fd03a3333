"""`tune report`: one self-contained HTML page and a markdown twin for a study — trials by state,
time spent starting vs probing, failures grouped by signature with an evidence excerpt each,
the front, the chosen config and its limits table."""

from __future__ import annotations

import html
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tuner.base.exceptions import ConfigError
from tuner.base.level import levels_in
from tuner.base.metrics import (
    CAPACITY_CONTEXT_PER_REQUEST,
    LOAD_OUTPUT_TOK_S,
    LOAD_TTFT_P99,
    SLO_CONCURRENCY,
    SLO_CONCURRENCY_VIOLATED,
    SLO_GOODPUT,
    SLO_GOODPUT_CI,
    SLO_LEVELS,
)
from tuner.results.confirmation import describe as describe_confirmation
from tuner.results.export import build_export
from tuner.results.gain import gains
from tuner.results.hosts import unlike_hosts
from tuner.results.limits import default_contexts
from tuner.results.pareto import fronts
from tuner.results.pick import candidates, context_metric, describe_noise, objective_metrics, pick, role_index
from tuner.results.plots import concurrency_html, front_html, importance_html, level_metric, power_html, slo_html, timeline_html
from tuner.results.screen import describe_screen, screen_for
from tuner.space import SearchSpace
from tuner.trials import Studied, StudyRecord, TrialRecord, record_of
from tuner.trials.lock import stale_running

__all__ = ["Report", "build_report"]


@dataclass(frozen=True)
class Report:
    html: str
    markdown: str


def _time_split(trials: list[TrialRecord]) -> dict[str, float]:
    split = {"starting (served trials)": 0.0, "probing": 0.0, "failed starts": 0.0}
    for t in trials:
        split["starting (served trials)"] += t.timings.get("startup_s", 0.0)
        split["probing"] += t.timings.get("probe_s", 0.0)
        if t.evidence is not None:
            split["failed starts"] += t.evidence.get("elapsed_s", 0.0)
    return split


def _failures(trials: list[TrialRecord]) -> dict[str, list[TrialRecord]]:
    groups: dict[str, list[TrialRecord]] = defaultdict(list)
    for t in trials:
        if t.evidence is not None:
            groups[t.signature or "unclassified"].append(t)
    return dict(groups)


def _telemetry_rows(everything: list[TrialRecord]) -> list[str]:
    """Power, energy and tokens per joule per measured trial, or what the machine could not measure."""
    trials = [t for t in everything if t.telemetry]
    if not trials:
        return ["no telemetry recorded"]
    rows = [
        "| trial | source | W mean | W p99 | tokens/J | W per request | max temp C | min SM MHz | samples |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for t in trials:

        def cell(key: str, fmt: str = "{:,.1f}", m: Mapping[str, float] = t.metrics) -> str:
            return fmt.format(m[f"telemetry.{key}"]) if f"telemetry.{key}" in m else "-"

        rows.append(
            f"| {t.number} | {t.telemetry.get('source')} | {cell('power_w')} | {cell('power_w_p99')} | "
            f"{cell('tokens_per_joule', '{:.3f}')} | {cell('watts_per_request')} | {cell('temp_c_max')} | "
            f"{cell('sm_clock_mhz_min', '{:,.0f}')} | {cell('samples', '{:.0f}')} |"
        )
    return rows


def build_report(studied: Studied, space: SearchSpace, *, run_dir: Path | None = None) -> Report:
    study = record_of(studied)  # read once: everything below computes from this record
    name = study.name
    states = Counter(t.state.name for t in study.trials)
    metric_names = list(study.metric_names or [])
    throughput = role_index(study, "throughput")
    y = metric_names[throughput or 0] if metric_names else LOAD_OUTPUT_TOK_S
    x = context_metric(study)
    the_fronts = fronts({name: study}, x, y)
    try:
        chosen = build_export(study, space, pick(study, "knee"), run_dir=run_dir)
    except ConfigError:
        chosen = None
    everything = list(study.trials)
    split = _time_split(everything)
    failures = _failures(everything)

    md = [f"# tuner report: {name}", "", f"engine **{space.engine}**, model `{space.model.path}`", ""]
    if said := space.describe_workload():  # what every load was: the figures below hold for this traffic
        md += ["## Workload", "", *(f"- {line.strip()}" for line in said), ""]
    md += [
        "## Trials by state",
        "",
        "| state | trials |",
        "|---|---|",
        *[f"| {s} | {n} |" for s, n in sorted(states.items())],
        "",
    ]
    if states.get("RUNNING") and (stale := stale_running(study)):
        md += [f"**{stale}**", ""]
    md += ["## Time", "", "| spent on | seconds |", "|---|---|", *[f"| {k} | {v:,.1f} |" for k, v in split.items()], ""]
    md += ["## Failures by signature", ""]
    for sig, trials in failures.items():
        ev = trials[0].evidence or {}
        excerpt = "\n".join(f"{line['number']:>6}: {line['text'][:200]}" for line in ev.get("lines", [])[:4])
        md += [
            f"### {sig}: {len(trials)} trial(s) ({', '.join('#' + str(t.number) for t in trials)})",
            "",
            "```",
            excerpt,
            "```",
            "",
        ]
    if not failures:
        md += ["none", ""]
    md += [f"## Front: {y} vs {x}", "", f"| trial | {x} | {y} | params |", "|---|---|---|---|"]
    for f in the_fronts:
        md += [f"| {p.trial} | {p.x:,.1f} | {p.y:,.1f} | {_params_cell(p.params)} |" for p in f.front]
        md += ["", f"hypervolume {f.hypervolume:,.1f} (reference 0, 0)", ""]
    on_front = {p.trial for f in the_fronts for p in f.front}
    if (unlike := unlike_hosts([t for t in everything if t.number in on_front])) is not None:
        md += [f"warning: {unlike}", ""]
    md += ["## Trials", "", *_trials_rows(everything, metric_names), ""]
    md += ["## Re-validation on fresh servers (means, 95 % CI)", "", *_revalidation_rows(study), ""]
    md += ["## Noise", "", *describe_noise(study), ""]
    screened = describe_screen(everything, screen_for(space.engine), space.values)
    md += [
        "## Pre-screen (configs not launched, and the trial each prediction came from)",
        "",
        *(f"- {line}" for line in screened or ["none skipped"]),
        "",
    ]
    md += ["## Power and energy (at the target concurrency)", "", *_telemetry_rows(everything), ""]
    md += ["## Chosen config (knee of the front)", ""]
    if chosen is None:
        md += ["no complete, feasible trial yet", ""]
    else:
        md += [
            chosen.candidate.describe(objective_metrics(study)),
            "",
            f"trial {chosen.candidate.number}" + (" (re-validated)" if chosen.candidate.revalidated else " (not re-validated)"),
            "",
            *(
                [*describe_confirmation(found, chosen.candidate.number), ""]
                if (found := chosen.candidate.trial.confirmed)
                else []
            ),
            "```",
            chosen.render("cmd").strip(),
            "```",
            "",
            "```",
            chosen.limits.render(default_contexts(chosen.limits)),
            "```",
            "",
        ]
        md += [f"- warning: {w}" for w in chosen.warnings()]
    md += ["## What tuning bought (the pick against the baseline, on fresh servers)", "", *_gain_rows(study), ""]
    md += ["## Load within the SLO (the SLO probe's levels)", "", *_slo_rows(everything), ""]
    markdown = "\n".join(md) + "\n"

    plot = front_html(the_fronts, x, y, full_html=False)  # carries plotly.js once; the other plots reuse it
    measured = [t for t in everything if t.telemetry.get("trace")]
    metric = level_metric(everything, y.split("@")[0])
    slo = space.probes.slo
    plots: list[tuple[str, str | None, str]] = [
        ("Timeline", timeline_html(everything), ""),
        (
            "Throughput vs concurrency",
            concurrency_html(everything, metric) if metric else None,
            "no trial measured its throughput at two load levels or more",
        ),
    ]
    if slo is not None and slo.targets is not None:
        drawn = slo_html(everything, slo.targets, rate=slo.mode == "rate")
        plots.append(("Latency against load, with the SLO", drawn, "no trial ran the SLO probe"))
    importance = importance_html(study, throughput or 0, y) if metric_names else None
    why = "not computable yet (needs two or more complete trials that differ)"
    plots.append(("Parameter importance (Optuna)", importance, why))
    plots.append(("Power per trial", power_html(measured) if measured else None, "no trial sampled power (telemetry)"))
    power = "".join(
        f"<h2>{html.escape(title)}</h2>{div}" if div else f"<p>{html.escape(title)}: left out, {html.escape(why)}</p>"
        for title, div, why in plots
    )
    body = _markdown_to_html(markdown)
    page = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>tuner report: {html.escape(name)}</title>"
        "<style>body{font-family:sans-serif;max-width:1400px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:13px;max-width:100%}td,th{border:1px solid #ccc;padding:3px 8px;"
        "overflow-wrap:anywhere}th{white-space:nowrap}"
        "pre{background:#f6f6f6;padding:8px;overflow-x:auto}</style>"
        f"</head><body>{body}<h2>Front (interactive)</h2>{plot}{power}</body></html>"
    )
    return Report(page, markdown)


def _trials_rows(trials: list[TrialRecord], names: list[str]) -> list[str]:
    """Every trial: state, params, headline metrics, feasibility, failure, partition, start and end."""
    shown = [*names, *(m for m in (LOAD_TTFT_P99, CAPACITY_CONTEXT_PER_REQUEST) if m not in names)]
    head = ["trial", "state", "params", *shown, "feasible", "failure", "partition", "start", "end"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in trials:
        m = t.metrics
        cells = [f"{m[k]:,.2f}" if k in m else "-" for k in shown]
        params = _params_cell(t.params)
        when = [d.strftime("%Y-%m-%d %H:%M:%S") if d else "-" for d in (t.datetime_start, t.datetime_complete)]
        failure = t.signature or t.invalid_combination or (t.error or "")[:60]
        ok = "-" if t.state.name != "COMPLETE" else ("yes" if t.feasible else "no")
        partition = ",".join(map(str, t.partition)) or "-"
        rows.append(
            "| "
            + " | ".join(
                [
                    str(t.number),
                    t.state.name,
                    params,
                    *cells,
                    ok,
                    failure.replace("|", "/") or "-",
                    partition,
                    *when,
                ]
            )
            + " |"
        )
    return rows


def _params_cell(params: Mapping[str, object]) -> str:
    """Parameters as ``k=v`` pairs a table cell can wrap between (a code span never wraps)."""
    return ", ".join(f"{k}={v}" for k, v in params.items()).replace("|", "/")


def _gain_rows(study: StudyRecord) -> list[str]:
    chosen, found = gains(study)
    if chosen is None:
        return ["no pick yet"]
    if not found:
        return ["unknown: no baseline run on fresh servers (enqueue one, keep remeasure on)"]
    return [f"trial {chosen.number} against the baseline (the reference config):", "", *(f"- {g.describe()}" for g in found)]


def _slo_rows(trials: list[TrialRecord]) -> list[str]:
    """Per trial: the largest load that held the SLO, the smallest that broke it, and what broke."""
    measured = [t for t in trials if SLO_CONCURRENCY in t.metrics]
    if not measured:
        return ["no SLO probe in this space (probes.slo)"]
    rows = ["| trial | holds (clients) | goodput tok/s | breaks at | what broke | levels run |", "|---|---|---|---|---|---|"]
    for t in measured:
        m = t.metrics
        ci = f" +- {m[SLO_GOODPUT_CI]:,.1f}" if SLO_GOODPUT_CI in m else ""
        broke = f"{m[SLO_CONCURRENCY_VIOLATED]:.0f}" if SLO_CONCURRENCY_VIOLATED in m else "-"
        cells = [str(t.number), f"{m[SLO_CONCURRENCY]:.0f}", f"{m[SLO_GOODPUT]:,.1f}{ci}", broke, _what_broke(t)]
        rows.append("| " + " | ".join([*cells, f"{m.get(SLO_LEVELS, 0):.0f}"]) + " |")
    return rows


def _what_broke(t: TrialRecord) -> str:
    level = levels_in(t.slo).get(str(int(t.metrics.get(SLO_CONCURRENCY_VIOLATED, -1))))
    return "; ".join(level.broke or () if level is not None else ()) or "-"


def _revalidation_rows(study: StudyRecord) -> list[str]:
    """Trials measured on more than one fresh server: the mean of each objective with its 95 % half-width."""
    names = objective_metrics(study)
    again = [c for c in candidates(study) if c.runs > 1]
    if not again:
        return ["none yet (`tune validate`, or `remeasure` in the space, re-measures the front on fresh servers)"]
    rows = ["| trial | runs | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for c in again:
        cells = [f"{v:,.1f} +- {hw:,.1f}" for v, hw in zip(c.values, c.half_widths or [0.0] * len(c.values), strict=True)]
        rows.append(f"| {c.number} | {c.runs} | " + " | ".join(cells) + " |")
    return rows


def _markdown_to_html(text: str) -> str:
    """The report's markdown as HTML (markdown-it-py, CommonMark with tables; raw HTML escaped)."""
    from markdown_it import MarkdownIt

    return str(MarkdownIt("commonmark", {"html": False}).enable("table").render(text))
