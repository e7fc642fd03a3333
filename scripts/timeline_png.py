"""A study's trials over time by GPU, from each launch to its end (tuner.results.table.launched), as a PNG:
where a GPU sat idle and which trial waited for which.

usage: python scripts/timeline_png.py DB STUDY OUT.png [DEVICE-WORD, default GPU]"""

from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import optuna

from tuner.results.table import launched
from tuner.trials import read_trials


def main(db: str, name: str, out: str, device: str = "GPU") -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
    ran = [t for t in read_trials(study) if launched(t) is not None and t.datetime_complete]
    t0 = min(launched(t) for t in ran)
    fig, ax = plt.subplots(figsize=(9, 2.6), dpi=110)
    colors = {1: "#1f77b4", 2: "#d62728", 4: "#2ca02c", 8: "#9467bd"}
    for t in ran:
        start = (launched(t) - t0).total_seconds()
        width = (t.datetime_complete - launched(t)).total_seconds()
        waited = (launched(t) - t.datetime_start).total_seconds()
        size = len(t.partition)
        for gpu in t.partition:
            ax.barh(gpu, width, left=start, color=colors.get(size, "#7f7f7f"), edgecolor="white")
            ax.text(
                start + width / 2,
                gpu,
                f"#{t.number}: {size} {device}"
                + ("s" if size > 1 else "")
                + (f"\n(waited {waited:.0f} s)" if waited > 5 else ""),
                ha="center",
                va="center",
                color="white",
                fontsize=8,
            )
    ax.set_yticks(
        sorted({g for t in ran for g in t.partition}), [f"{device} {g}" for g in sorted({g for t in ran for g in t.partition})]
    )
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first launch")
    ax.set_title(f"{name}: each trial from its launch to its end (white gaps: the {device} was idle)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out)


if __name__ == "__main__":
    main(*sys.argv[1:5])
