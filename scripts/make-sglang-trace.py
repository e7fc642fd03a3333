"""Make a Mooncake-format trace that SGLang's own bench and this tool replay alike (issue 46's
independent check).

`python -m sglang.benchmark.serving --dataset-name mooncake` (SGLang 0.5.17,
sglang/benchmark/datasets/mooncake.py) does not send ``input_length`` tokens: it writes each
hash id as the id followed by 128 words "hi", adds "Tell me a story based on this context.", puts
"Round 1: " before it as one user message and applies the model's chat template. This script
builds that same text for every row of IN, counts it with the model's own tokenizer and chat
template, and writes OUT: the same rows with ``input_length`` the count SGLang's prompt has. It
prints the ``block`` (tokens per hash id) to give the tool's workload, the smallest over the rows
(so the tool's blocks never outgrow a prompt; the rest of each prompt is fresh text).

Needs ``tokenizers`` and ``jinja2`` (not the tool's own dependencies) and SmolLM2's tokenizer
folder (the model kit in shared/gpu: tokenizer.json, chat_template.jinja).
usage: python scripts/make-sglang-trace.py TOKENIZER_DIR [IN] [OUT]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import jinja2
from tokenizers import Tokenizer

HEAD, TAIL = "Round 1: ", "Tell me a story based on this context."


def sglang_text(hash_ids: list[int], template: jinja2.Template) -> str:
    """The prompt SGLang's mooncake replay sends for one row (its first round)."""
    base = "".join(f"{h}" + " ".join(["hi"] * 128) for h in hash_ids) + TAIL
    return template.render(messages=[{"role": "user", "content": HEAD + base}], add_generation_prompt=True)


def reuse(rows: list[dict], tokens, template: jinja2.Template) -> float:
    """The share of SGLang's prompt tokens a prefix cache of unlimited size could serve: each
    row's longest run of leading hash ids an earlier row sent, with the chat template's text
    before them (the same for every row), counted as the text up to there tokenizes."""
    seen: set[tuple[int, ...]] = set()
    served = total = 0
    for n, row in enumerate(rows):
        ids = tuple(row["hash_ids"])
        lead = max((k for k in range(1, len(ids) + 1) if ids[:k] in seen), default=0)
        text = sglang_text(list(ids), template)
        cut = text.index(HEAD) + len(HEAD) + sum(len(f"{h}" + " ".join(["hi"] * 128)) for h in ids[:lead])
        served += tokens(text[:cut]) if n else 0
        total += row["input_length"]
        seen.update(ids[:k] for k in range(1, len(ids) + 1))
    return served / total


def main() -> None:
    folder = Path(sys.argv[1])
    source = Path(sys.argv[2] if len(sys.argv) > 2 else "workloads/traces/agent-sample.jsonl")
    out = Path(sys.argv[3] if len(sys.argv) > 3 else "workloads/traces/agent-sample-sglang.jsonl")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    # transformers renders chat templates with trim_blocks and lstrip_blocks
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string((folder / "chat_template.jinja").read_text())
    count = lambda ids: len(tokenizer.encode(sglang_text(ids, template)).ids)  # noqa: E731
    overhead = count([])
    rows = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    per_block = []
    for row in rows:
        row["input_length"] = count(row["hash_ids"])
        per_block.append((row["input_length"] - overhead) / len(row["hash_ids"]))
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tokens = lambda text: len(tokenizer.encode(text).ids)  # noqa: E731
    print(f"reuse SGLang's prompts allow: {reuse(rows, tokens, template):.1%} of their tokens")
    block = int(min(per_block))
    lengths = [r["input_length"] for r in rows]
    print(f"{out}: {len(rows)} rows; prompts {min(lengths)}-{max(lengths)} tokens (mean {statistics.fmean(lengths):.1f})")
    print(f"tokens per hash id: {min(per_block):.1f}-{max(per_block):.1f}; the prompt around them: {overhead}; block: {block}")


if __name__ == "__main__":
    main()
