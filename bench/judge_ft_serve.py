#!/usr/bin/env python3
"""A minimal OpenAI-compatible server for base model + LoRA adapter (bench/judge_ft_lora.sh).

Stands in for the exported serve_adapter.sh (vLLM, GPU) on a CPU-only machine:

  judge_ft_serve.py --base HF_DIR --adapter LORA_DIR [--name judge-ft] [--host 127.0.0.1] [--port 8000]

Routes (stdlib http.server, one request at a time):
  GET  /v1/models            -> {"object": "list", "data": [{"id": NAME, ...}]}
  POST /v1/chat/completions  -> non-streamed chat completion: the messages go through the
                                tokenizer's chat template (add_generation_prompt), greedy
                                decoding, at most `max_tokens` (or `max_completion_tokens`) new
                                tokens. `response_format`, `temperature`, `seed` etc. are ignored
                                (decoding is always greedy); `stream: true` is refused.
Not for production: no auth, no batching, no streaming.
"""
import argparse
import json
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

ap = argparse.ArgumentParser()
ap.add_argument("--base", required=True, help="Hugging Face model directory of the base model")
ap.add_argument("--adapter", required=True, help="LoRA adapter directory (trl sft --output_dir)")
ap.add_argument("--name", default="judge-ft", help="model id the server answers to")
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--port", type=int, default=8000)
ap.add_argument("--default-max-tokens", type=int, default=384)
args = ap.parse_args()

# Load base + adapter once; merge the LoRA weights into the base for faster CPU decoding.
tok = AutoTokenizer.from_pretrained(args.base)
base = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
model = PeftModel.from_pretrained(base, args.adapter).merge_and_unload()
model.eval()
print(f"[serve] {args.base} + {args.adapter} as {args.name!r} on http://{args.host}:{args.port}/v1",
      file=sys.stderr, flush=True)


def complete(body: dict) -> dict:
    messages = body["messages"]
    # OpenAI content may be a list of parts; keep the text parts.
    for m in messages:
        if isinstance(m.get("content"), list):
            m["content"] = "".join(p.get("text", "") for p in m["content"] if isinstance(p, dict))
    max_new = body.get("max_tokens") or body.get("max_completion_tokens") or args.default_max_tokens
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                  return_dict=True)
    prompt_len = ids["input_ids"].shape[1]
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=int(max_new), do_sample=False,
                             pad_token_id=tok.pad_token_id or tok.eos_token_id)
    new = out[0, prompt_len:]
    text = tok.decode(new, skip_special_tokens=True)
    finish = "length" if len(new) >= int(max_new) and new[-1].item() != tok.eos_token_id else "stop"
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": args.name,
        "choices": [{"index": 0, "finish_reason": finish,
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": prompt_len, "completion_tokens": len(new),
                  "total_tokens": prompt_len + len(new)},
    }


class Handler(BaseHTTPRequestHandler):
    def _send(self, code: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/v1/models"):
            self._send(200, {"object": "list", "data": [
                {"id": args.name, "object": "model", "created": 0, "owned_by": "maslens-bench"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self):
        if not self.path.rstrip("/").endswith("/v1/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if body.get("stream"):
                self._send(400, {"error": {"message": "stream is not supported"}})
                return
            t0 = time.time()
            resp = complete(body)
            print(f"[serve] {resp['usage']['prompt_tokens']} prompt + "
                  f"{resp['usage']['completion_tokens']} completion tokens, {time.time() - t0:.1f} s",
                  file=sys.stderr, flush=True)
            self._send(200, resp)
        except Exception as e:  # report the error to the client as an OpenAI-style error
            self._send(500, {"error": {"message": f"{type(e).__name__}: {e}"}})

    def log_message(self, *a):  # the per-request line above is enough
        pass


HTTPServer((args.host, args.port), Handler).serve_forever()
