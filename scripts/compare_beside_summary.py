"""The verdicts and runs of scripts/compare_beside.sh, one line per folder and arrangement.

python scripts/compare_beside_summary.py LOGDIR [LOGDIR ...]
"""

import pathlib
import re
import statistics
import sys

for folder in sys.argv[1:]:
    d = pathlib.Path(folder)
    for arr in ("shared", "own"):
        vals: list[float] = []
        beats: list[str] = []
        floors: list[float] = []
        logs = sorted(d.glob(f"round*-{arr}.log"))
        for log in logs:
            t = log.read_text()
            vals += [float(v) for v in re.findall(r"run \d/\d: load.output_tok_s ([\d.]+)", t)]
            beats += re.findall(r"pick beats .* by ([+-][\d.]+%)", t)
            floors += [float(f) for f in re.findall(r"noise floor: ([\d.]+)%", t)]
        print(
            f"{d.name} {arr}: {len(logs)} compares, {len(vals)} runs, tok/s min {min(vals)} median "
            f"{statistics.median(vals)} max {max(vals)}; floors {min(floors)}-{max(floors)} %; "
            f"false 'beats': {len(beats)} {beats}"
        )
