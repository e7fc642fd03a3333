"""A copy of a study whose stored confirmation ends above a load, so that `tune validate --confirm
--resume` runs that load next: as if the confirmation had been cut before its run there.

Used to run one step of a committed confirmation again after a fix to how it measures (docs/goodput.md:
the 38.88 requests/s step of data/goodput/h200-sglang-2026-12-04b, first sent by one sender). The
copy is written beside the original, which is never changed; the runs dropped are listed.

    python scripts/confirm_trim.py SRC.db DST.db --study NAME --trial N --below 40
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.app.read import open_existing
from tuner.trials import record_of, save_confirmation


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--study", required=True)
    ap.add_argument("--trial", type=int, default=0)
    ap.add_argument("--below", type=float, required=True, help="drop the runs at this load and under it, and all after them")
    args = ap.parse_args()
    if args.dst.exists():
        sys.exit(f"confirm_trim: {args.dst} exists: not overwritten")
    shutil.copyfile(args.src, args.dst)
    study = open_existing(args.study, f"sqlite:///{args.dst}")
    trial = next(t for t in record_of(study).trials if t.number == args.trial)
    stored = dict(trial.confirmed or {})
    runs = list(stored.get("runs") or [])
    cut = next((i for i, r in enumerate(runs) if float(r["at"]) <= args.below), len(runs))
    if cut == 0:
        sys.exit(f"confirm_trim: every stored run is at or below {args.below:g}: nothing would remain to resume from")
    dropped = runs[cut:]
    stored.update(runs=runs[:cut], confirmed_answer=None, confirmed_goodput=None, confirmed_ci=None, cut_run=None)
    stored["failure"] = f"trimmed by scripts/confirm_trim.py: {len(dropped)} run(s) at or below {args.below:g} dropped"
    save_confirmation(study, args.trial, stored)
    kept = ", ".join(f"{r['at']:g}" for r in runs[:cut])
    gone = ", ".join(f"{r['at']:g} ({'held' if r.get('held') else 'not held'})" for r in dropped)
    print(f"{args.dst}: trial {args.trial}'s confirmation keeps the runs at {kept}; dropped {gone or 'none'}")


if __name__ == "__main__":
    main()
