"""What scripts/h200-reliability.sh left: each trial's state and evidence, and every real server
log classified twice: with the engine's signatures, and as if it had none but the generic crash
lines (a release that reworded its errors), to check the raised-exception fallback on real logs.
usage: python scripts/reliability_report.py RUNS_DIR ENGINE"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import optuna

from tuner import engines
from tuner.engines import Category, classify
from tuner.orchestration.driver import grade

runs, engine = Path(sys.argv[1]), sys.argv[2]
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.load_study(study_name=runs.name, storage=f"sqlite:///{runs / 'study.db'}")
print(f"study {runs.name}: {len(study.trials)} trials")
for t in study.trials:
    ev = t.user_attrs.get("evidence") or {}
    details = {k: v for k, v in (ev.get("details") or {}).items() if k not in ("probe_began_at",)}
    print(
        f"trial {t.number} {t.state.name} params={t.params} signature={t.user_attrs.get('signature')} "
        f"exit={ev.get('returncode')} signal={ev.get('signal')} constraints={t.constraints}"
    )
    print(f"  error: {t.user_attrs.get('error', '')[:300]}")
    if details:
        print(f"  details: {json.dumps(details, default=str)[:900]}")
adapter = engines.get(engine)
generic = [s for s in adapter.signatures if s.category == Category.CRASH]
for log in sorted(runs.glob("trials/*/server.log"), key=lambda p: int(p.parent.name)):
    text = log.read_text(errors="replace")
    for label, signatures in (("signatures", adapter.signatures), ("reworded", generic)):
        match = classify(signatures, text)
        if match is None:
            print(f"{log.parent.name} [{label}]: no failure")
            continue
        print(
            f"{log.parent.name} [{label}]: {match.signature.name} ({match.signature.category}) grade {grade(match.details):.3f}"
        )
        print(f"    headline: {match.lines[0].text.strip()[:300]}")
        numbers = {k: v for k, v in match.details.items() if k != "exception"}
        if numbers:
            print(f"    numbers: {numbers}")
