"""Rendering fronts: a PNG (matplotlib) and a self-contained interactive HTML page (plotly)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.base.level import levels_in
from tuner.base.metrics import LOAD_OUTPUT_TOK_S
from tuner.results.pareto import StudyFront
from tuner.trials import StudyRecord, TrialRecord

if TYPE_CHECKING:
    from tuner.space.schema import SloTargets

__all__ = [
    "concurrency_html",
    "front_html",
    "front_png",
    "importance_html",
    "level_metric",
    "power_html",
    "slo_html",
    "timeline_html",
]

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf")


def front_png(fronts: list[StudyFront], x: str, y: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    for color, f in zip(COLORS, fronts, strict=False):
        faint = f.faint
        ax.scatter([p.x or 0 for p in faint], [p.y or 0 for p in faint], color=color, alpha=0.25, marker="x", s=30)
        measured = [p for p in f.points if p.feasible and p.x is not None and p.y is not None]
        ok = [p.xy() for p in measured]
        ax.scatter([px for px, _ in ok], [py for _, py in ok], color=color, alpha=0.45, s=22)
        barred = [p for p in measured if p.x_hw or p.y_hw]
        if barred:
            ax.errorbar(
                [p.xy()[0] for p in barred],
                [p.xy()[1] for p in barred],
                xerr=[p.x_hw or 0.0 for p in barred],
                yerr=[p.y_hw or 0.0 for p in barred],
                fmt="none",
                ecolor=color,
                alpha=0.5,
                capsize=3,
                lw=1,
            )
        front = [p.xy() for p in f.front]
        # both maximized: the boundary of the dominated region drops at each point, then runs right
        ax.step(
            [px for px, _ in front],
            [py for _, py in front],
            where="pre",
            color=color,
            lw=2,
            label=f"{f.name}: front of {len(f.front)} (HV {f.hypervolume:,.0f})",
        )
        ax.scatter([px for px, _ in front], [py for _, py in front], color=color, s=50, edgecolor="black", zorder=3)
        for p in f.front:
            ax.annotate(f"#{p.trial}", p.xy(), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(f"{y} vs {x}\n(bars: 95 % CI; faint x: pruned or infeasible; unmeasured at 0)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def front_html(fronts: list[StudyFront], x: str, y: str, path: Path | None = None, *, full_html: bool = True) -> str:
    import plotly.graph_objects as go

    fig = go.Figure()
    for color, f in zip(COLORS, fronts, strict=False):
        faint = f.faint
        fig.add_trace(
            go.Scatter(
                x=[p.x if p.x is not None else 0 for p in faint],
                y=[p.y if p.y is not None else 0 for p in faint],
                mode="markers",
                marker={"color": color, "symbol": "x", "opacity": 0.25},
                name=f"{f.name}: pruned/infeasible (unmeasured at 0)",
                text=[f"trial {p.trial} {p.state}: {p.signature}<br>{p.params}" for p in faint],
                hoverinfo="text",
            )
        )
        ok = [p for p in f.points if p.feasible]
        fig.add_trace(
            go.Scatter(
                x=[p.x for p in ok],
                y=[p.y for p in ok],
                mode="markers",
                marker={"color": color, "opacity": 0.5},
                error_x={"type": "data", "array": [p.x_hw or 0.0 for p in ok], "visible": any(p.x_hw for p in ok)},
                error_y={"type": "data", "array": [p.y_hw or 0.0 for p in ok], "visible": any(p.y_hw for p in ok)},
                name=f"{f.name}: feasible (bars: 95 % CI)",
                text=[f"trial {p.trial}<br>{p.params}" for p in ok],
                hoverinfo="text+x+y",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=[p.x for p in f.front],
                y=[p.y for p in f.front],
                mode="lines+markers",
                line={"shape": "vh", "color": color, "width": 3},
                name=f"{f.name}: front (HV {f.hypervolume:,.0f})",
                text=[f"trial {p.trial}<br>{p.params}" for p in f.front],
                hoverinfo="text+x+y",
            )
        )
    fig.update_layout(title=f"{y} vs {x}", xaxis_title=x, yaxis_title=y, template="plotly_white")
    html = str(fig.to_html(include_plotlyjs=True, full_html=full_html, div_id="front"))
    if path is not None:
        path.write_text(html)
    return html


def power_html(study_trials: Sequence[TrialRecord], *, full_html: bool = False) -> str:
    """Power over time per trial (NVML/RAPL samples), each load level's window marked by its mean power."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for t in study_trials:
        sampled = t.telemetry
        trace = sampled.get("trace") or []
        if not trace:
            continue
        t0 = trace[0][0]
        fig.add_trace(go.Scatter(x=[p[0] - t0 for p in trace], y=[p[1] for p in trace], mode="lines", name=f"trial {t.number}"))
        metrics = t.metrics
        for level, window in (sampled.get("windows") or {}).items():
            watts = metrics.get(f"telemetry.power_w@{level}")
            if window and watts is not None:
                fig.add_trace(
                    go.Scatter(
                        x=[window[0] - t0, window[1] - t0],
                        y=[watts, watts],
                        mode="lines",
                        line={"dash": "dot"},
                        showlegend=False,
                        hoverinfo="text",
                        text=f"trial {t.number}, C={level}: {watts:,.0f} W, "
                        f"{metrics.get(f'telemetry.tokens_per_joule@{level}', 0):.2f} tok/J",
                    )
                )
    fig.update_layout(
        title="power during the probes (dotted: each load level's window, its mean)",
        xaxis_title="seconds",
        yaxis_title="W (partition)",
        template="plotly_white",
    )
    return str(fig.to_html(include_plotlyjs=False, full_html=full_html, div_id="power"))


def timeline_html(study_trials: Sequence[TrialRecord]) -> str:
    """Each trial as a bar on its partition's row, start to end, colored by state: launches,
    failures and the gaps where a partition sat idle."""
    import plotly.graph_objects as go

    colors = {"COMPLETE": "#2ca02c", "PRUNED": "#ff7f0e", "FAIL": "#d62728", "RUNNING": "#1f77b4"}
    rows: dict[str, list[tuple[str, Any, Any, TrialRecord]]] = {}
    for t in study_trials:
        if t.datetime_start is None:
            continue
        start = t.launched_when or t.datetime_start  # from its launch: waiting for GPUs is not holding them
        end = max(t.datetime_complete or start, start)
        partition = "devices " + ",".join(map(str, t.partition)) if t.partition else "not launched"
        rows.setdefault(t.state.name, []).append((partition, start, end, t))
    fig = go.Figure()
    for state, items in rows.items():
        fig.add_trace(
            go.Bar(
                y=[p for p, *_ in items],
                base=[s.isoformat() for _, s, _, _ in items],
                x=[max((e - s).total_seconds() * 1000, 500) for _, s, e, _ in items],
                orientation="h",
                name=state,
                marker={"color": colors.get(state, "#7f7f7f")},
                text=[f"#{t.number}" for *_, t in items],
                textposition="inside",
                hovertext=[
                    f"trial {t.number} {state} {(e - s).total_seconds():.0f}s {t.signature or ''}" for _, s, e, t in items
                ],
                hoverinfo="text",
            )
        )
    fig.update_layout(
        title="trials over time by partition (gaps: the partition was idle)",
        barmode="overlay",
        xaxis={"type": "date"},
        yaxis_title="partition",
        template="plotly_white",
        height=260 + 30 * len({p for v in rows.values() for p, *_ in v}),
    )
    return str(fig.to_html(include_plotlyjs=False, full_html=False, div_id="timeline"))


def level_metric(study_trials: Sequence[TrialRecord], preferred: str) -> str | None:
    """The metric to draw against load: ``preferred`` where some trial measured it per level
    (``metric@C``), else the load probe's throughput; None where no trial has two levels of either."""
    for metric in dict.fromkeys((preferred, LOAD_OUTPUT_TOK_S)):
        if any(len(_levels(t.metrics, metric)) >= 2 for t in study_trials):
            return metric
    return None


def _levels(metrics: Mapping[str, float], metric: str) -> list[int]:
    return sorted(int(k.rsplit("@", 1)[1]) for k in metrics if k.startswith(f"{metric}@") and k.rsplit("@", 1)[1].isdigit())


def concurrency_html(study_trials: Sequence[TrialRecord], metric: str = LOAD_OUTPUT_TOK_S) -> str | None:
    """Throughput against concurrency, one line per trial measured at two levels or more
    (``metric@C`` of each level); None when no trial was (a chart of axes alone says nothing)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for t in study_trials:
        metrics = t.metrics
        levels = _levels(metrics, metric)
        if len(levels) >= 2:
            fig.add_trace(
                go.Scatter(
                    x=levels,
                    y=[metrics[f"{metric}@{c}"] for c in levels],
                    mode="lines+markers",
                    name=f"trial {t.number}",
                    hovertext=str(t.params),
                    hoverinfo="text+x+y",
                )
            )
    if not fig.data:
        return None
    fig.update_layout(
        title=f"{metric} vs concurrency, per trial", xaxis_title="concurrency", yaxis_title=metric, template="plotly_white"
    )
    return str(fig.to_html(include_plotlyjs=False, full_html=False, div_id="concurrency"))


def importance_html(record: StudyRecord, target_index: int, target_name: str) -> str | None:
    """Optuna's own parameter-importance plot for one objective, on an in-memory study of the
    record's complete trials (no storage read); None while it cannot be computed."""
    import warnings

    import optuna

    directions = [optuna.study.StudyDirection[d.upper()] for d in record.directions]
    study = optuna.create_study(directions=directions)
    study.add_trials([t for t in record.frozen if t.state == optuna.trial.TrialState.COMPLETE])

    # Optuna's default evaluator (PED-ANOVA) rates what it takes to get a LOW target: a maximized
    # objective is handed over negated (it warns about exactly this, every time: silenced)
    sign = -1.0 if study.directions[target_index] == optuna.study.StudyDirection.MAXIMIZE else 1.0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            fig = optuna.visualization.plot_param_importances(
                study,
                target=lambda t: sign * t.values[target_index],
                target_name=f"{target_name} (importance for a better value)",
            )
    except (ValueError, RuntimeError, ZeroDivisionError):
        return None
    return str(fig.to_html(include_plotlyjs=False, full_html=False, div_id="importance"))


def slo_html(study_trials: Sequence[TrialRecord], targets: SloTargets, *, rate: bool = False) -> str | None:
    """Each trial's p99 latencies against load (the SLO probe's levels: clients, or requests/s
    with ``rate``), the SLO as dashed lines; None when no trial ran the SLO probe."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = targets.latencies
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=[f"{n} (s)" for n in names])
    for t in study_trials:
        levels = sorted(((float(c), v) for c, v in levels_in(t.slo).items()), key=lambda cv: cv[0])
        for col, name in enumerate(names, start=1):
            points = [(c, y) for c, v in levels if (y := getattr(v, name)) is not None]
            if points:
                fig.add_trace(
                    go.Scatter(
                        x=[c for c, _ in points],
                        y=[y for _, y in points],
                        mode="lines+markers",
                        name=f"trial {t.number}",
                        legendgroup=str(t.number),
                        showlegend=col == 1,
                        hovertext=str(dict(t.params)),
                        hoverinfo="text+x+y",
                    ),
                    row=1,
                    col=col,
                )
    if not fig.data:
        return None
    for col, name in enumerate(names, start=1):
        fig.add_hline(y=getattr(targets, name), line_dash="dash", line_color="red", row=1, col=col)
    fig.update_xaxes(title_text="requests/s (Poisson arrivals)" if rate else "concurrent clients", type="log")
    fig.update_layout(title="p99 latency against load (dashed: the SLO)", template="plotly_white")
    return str(fig.to_html(include_plotlyjs=False, full_html=False, div_id="slo"))
