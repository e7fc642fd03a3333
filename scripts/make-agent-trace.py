"""Make workloads/traces/agent-sample.jsonl: a small Mooncake-format trace of agent sessions.

Sessions arrive as a Poisson process (0.5/s); each has 2-6 turns, 8-40 s apart; a turn resends the
session's history (its blocks' hash_ids again, then new blocks for the last answer and the new
user text), as a coding agent does; every session opens with one shared 1,024-token system
prompt (blocks 0 and 1). Lengths fit SmolLM2's 8,192-token context.
usage: python scripts/make-agent-trace.py [OUT] [--sessions 40] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

BLOCK = 512


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?", default="workloads/traces/agent-sample.jsonl")
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows, next_id, start = [], 2, 0.0
    for _ in range(args.sessions):
        start += rng.expovariate(0.5)
        history, t = [0, 1], start  # the shared system prompt: 1,024 tokens
        for _turn in range(rng.randint(2, 6)):
            new = rng.randint(1, 3)  # the last answer and the user's new text, in whole blocks
            history += list(range(next_id, next_id + new))
            next_id += new
            tail = rng.randint(1, BLOCK)
            length = BLOCK * (len(history) - 1) + tail
            if length + 512 > 8192:
                break
            rows.append({"timestamp": round(t * 1000), "input_length": length,
                         "output_length": rng.randint(64, 384), "hash_ids": list(history)})  # fmt: skip
            t += rng.uniform(8, 40)
    rows.sort(key=lambda r: r["timestamp"])
    Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
