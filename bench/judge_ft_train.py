#!/usr/bin/env python3
"""Helpers of bench/judge_ft_lora.sh (AgentLocate Variant III, LoRA on CPU).

Two subcommands, run in the venv of python/requirements/lora.txt:

  convert GGUF_FILE OUT_DIR
      Load a GGUF model (e.g. the embedded SmolLM2-135M-Instruct.Q4_1.gguf) with transformers'
      GGUF support -- the weights are dequantized to float32 -- and save it, with its tokenizer and
      chat template, as a Hugging Face model directory that `trl sft --model_name_or_path` and
      peft can load. There is no Hugging Face hub here, so this is how the base model is made.
      Skipped when OUT_DIR/config.json already exists (idempotent).

  losses TRAINER_OUTPUT_DIR
      Print the per-step training loss from the newest trainer_state.json under the `trl sft`
      output directory (the trainer's own log, one entry per step with --logging_steps 1), and
      the adapter's files and size.
"""
import glob
import json
import os
import sys


def convert(gguf_file: str, out_dir: str) -> None:
    if os.path.exists(os.path.join(out_dir, "config.json")):
        print(f"[convert] {out_dir} exists, reusing it")
        return
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src_dir, name = os.path.split(os.path.abspath(gguf_file))
    # transformers reads the GGUF metadata (architecture, vocabulary, chat template) and
    # dequantizes the tensors (Q4_1 included) to float32.
    tok = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    gguf_model = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name, dtype=torch.float32)
    # The loaded model still counts as "quantized with gguf", which save_pretrained refuses; its
    # tensors are plain float32 already, so copy them into a model built from the same config
    # without the quantization entry.
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    # Tied embeddings (lm_head = embed_tokens) may be missing from the state dict; nothing else.
    if [k for k in missing if k != "lm_head.weight"] or unexpected:
        sys.exit(f"[convert] weights do not match: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    if tok.chat_template is None:
        sys.exit(f"[convert] {gguf_file}: no chat template in the GGUF metadata")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    n = sum(p.numel() for p in model.parameters())
    print(f"[convert] {gguf_file} -> {out_dir}: {model.config.model_type}, {n / 1e6:.1f}M parameters")


def losses(out_dir: str) -> None:
    states = sorted(
        glob.glob(os.path.join(out_dir, "**", "trainer_state.json"), recursive=True),
        key=os.path.getmtime,
    )
    if not states:
        sys.exit(f"[losses] no trainer_state.json under {out_dir}")
    state = json.load(open(states[-1]))
    for entry in state["log_history"]:
        if "loss" in entry:
            print(f"step {entry['step']}: loss {entry['loss']:.4f}"
                  + (f", grad_norm {entry['grad_norm']:.3f}" if "grad_norm" in entry else "")
                  + (f", lr {entry['learning_rate']:.2e}" if "learning_rate" in entry else ""))
        elif "train_runtime" in entry:
            print(f"train_runtime {entry['train_runtime']:.1f} s, train_loss {entry.get('train_loss', float('nan')):.4f}")
    for f in ("adapter_model.safetensors", "adapter_config.json"):
        p = os.path.join(out_dir, f)
        if os.path.exists(p):
            print(f"{f}: {os.path.getsize(p) / 1e6:.2f} MB")
        else:
            sys.exit(f"[losses] {p} missing: the adapter was not saved")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "convert":
        convert(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "losses":
        losses(sys.argv[2])
    else:
        sys.exit(__doc__)
