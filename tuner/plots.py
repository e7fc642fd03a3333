"""Rendering fronts: a PNG (matplotlib) and a self-contained interactive HTML page (plotly)."""

from __future__ import annotations

from pathlib import Path

from tuner.pareto import StudyFront

__all__ = ["front_html", "front_png"]

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf")


def front_png(fronts: list[StudyFront], x: str, y: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    for color, f in zip(COLORS, fronts, strict=False):
        faint = f.faint
        ax.scatter([p.x or 0 for p in faint], [p.y or 0 for p in faint], color=color, alpha=0.25, marker="x", s=30)
        ok = [p for p in f.points if p.feasible and p.x is not None and p.y is not None]
        ax.scatter([p.x for p in ok], [p.y for p in ok], color=color, alpha=0.45, s=22)
        # both maximized: the boundary of the dominated region drops at each point, then runs right
        ax.step([p.x for p in f.front], [p.y for p in f.front], where="pre", color=color, lw=2,
                label=f"{f.name}: front of {len(f.front)} (HV {f.hypervolume:,.0f})")
        ax.scatter([p.x for p in f.front], [p.y for p in f.front], color=color, s=50, edgecolor="black", zorder=3)
        for p in f.front:
            ax.annotate(f"#{p.trial}", (p.x, p.y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(f"{y} vs {x} (faint x: pruned or infeasible; unmeasured at 0)")
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
        fig.add_trace(go.Scatter(
            x=[p.x if p.x is not None else 0 for p in faint], y=[p.y if p.y is not None else 0 for p in faint],
            mode="markers", marker={"color": color, "symbol": "x", "opacity": 0.25},
            name=f"{f.name}: pruned/infeasible (unmeasured at 0)",
            text=[f"trial {p.trial} {p.state}: {p.signature}<br>{p.params}" for p in faint], hoverinfo="text",
        ))
        ok = [p for p in f.points if p.feasible]
        fig.add_trace(go.Scatter(
            x=[p.x for p in ok], y=[p.y for p in ok], mode="markers", marker={"color": color, "opacity": 0.5},
            name=f"{f.name}: feasible", text=[f"trial {p.trial}<br>{p.params}" for p in ok], hoverinfo="text+x+y",
        ))
        fig.add_trace(go.Scatter(
            x=[p.x for p in f.front], y=[p.y for p in f.front], mode="lines+markers", line={"shape": "vh", "color": color, "width": 3},
            name=f"{f.name}: front (HV {f.hypervolume:,.0f})", text=[f"trial {p.trial}<br>{p.params}" for p in f.front], hoverinfo="text+x+y",
        ))
    fig.update_layout(title=f"{y} vs {x}", xaxis_title=x, yaxis_title=y, template="plotly_white")
    html = fig.to_html(include_plotlyjs=True, full_html=full_html, div_id="front")
    if path is not None:
        path.write_text(html)
    return html


def power_html(study_trials: list, *, full_html: bool = False) -> str:  # noqa: ANN001 - FrozenTrials
    """Power over time per trial (NVML/RAPL samples), each load level's window marked by its mean power."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for t in study_trials:
        sampled = t.user_attrs.get("telemetry") or {}
        trace = sampled.get("trace") or []
        if not trace:
            continue
        t0 = trace[0][0]
        fig.add_trace(go.Scatter(x=[p[0] - t0 for p in trace], y=[p[1] for p in trace], mode="lines", name=f"trial {t.number}"))
        metrics = t.user_attrs.get("metrics", {})
        for level, window in (sampled.get("windows") or {}).items():
            watts = metrics.get(f"telemetry.power_w@{level}")
            if window and watts is not None:
                fig.add_trace(go.Scatter(
                    x=[window[0] - t0, window[1] - t0], y=[watts, watts], mode="lines", line={"dash": "dot"}, showlegend=False,
                    hoverinfo="text", text=f"trial {t.number}, C={level}: {watts:,.0f} W, {metrics.get(f'telemetry.tokens_per_joule@{level}', 0):.2f} tok/J",
                ))
    fig.update_layout(title="power during the probes (dotted: each load level's window, its mean)", xaxis_title="seconds",
                      yaxis_title="W (partition)", template="plotly_white")
    return fig.to_html(include_plotlyjs=False, full_html=full_html, div_id="power")
