"""Make workloads/traces/agent-sample.jsonl: a small Mooncake-format trace of agent sessions.

Sessions arrive as a Poisson process (0.5/s); each has 2-6 turns, 8-40 s apart; a turn resends the
session's history (its blocks' hash_ids again, then new blocks for the last answer and the new
user text), as a coding agent does; every session opens with one shared 1,024-token system
prompt (blocks 0 and 1). Lengths fit SmolLM2's 8,192-token context.
usage: python scripts/make-agent-trace.py [OUT] [--sessions 40] [--seed 0]

``--block B --context C --output-max N``: the same shape at another scale (the CPU's aiperf check,
benchmarks/trace_crosscheck.py: ``--block 32 --context 512 --output-max 24``). ``--tail-id``: a
prompt's last, partial block gets an id of its own, as in Mooncake's own traces (a block's hash
covers its content, so a block that grows is another block); aiperf refuses a trace where one id
is a partial block in one request and a whole one in another. The shipped sample reuses the id
(this tool reads a partial block as the first tokens of the whole one).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?", default="workloads/traces/agent-sample.jsonl")
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--block", type=int, default=512, help="tokens a hash id stands for")
    parser.add_argument("--context", type=int, default=8192, help="a prompt and its longest answer fit this")
    parser.add_argument("--output-max", type=int, default=384, help="output tokens: uniform from output-max/6 to this")
    parser.add_argument("--tail-id", action="store_true", help="a prompt's partial last block gets its own id")
    args = parser.parse_args()
    rng, block = random.Random(args.seed), args.block
    rows, next_id, start = [], 2, 0.0
    for _ in range(args.sessions):
        start += rng.expovariate(0.5)
        history, t = [0, 1], start  # the shared system prompt: two blocks (1,024 tokens at 512)
        for _turn in range(rng.randint(2, 6)):
            new = rng.randint(1, 3)  # the last answer and the user's new text, in whole blocks
            history += list(range(next_id, next_id + new))
            next_id += new
            tail = rng.randint(1, block)
            length = block * (len(history) - 1) + tail
            if length + args.output_max + block // 4 > args.context:  # 512 of 8,192 at the default scale
                break
            ids = list(history)
            if args.tail_id and tail < block:  # the partial block is its own; the next turn's history has it whole
                ids[-1], next_id = next_id, next_id + 1
            rows.append({"timestamp": round(t * 1000), "input_length": length,
                         "output_length": rng.randint(args.output_max // 6, args.output_max), "hash_ids": ids})  # fmt: skip
            t += rng.uniform(8, 40)
    rows.sort(key=lambda r: r["timestamp"])
    Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
