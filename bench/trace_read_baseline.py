#!/usr/bin/env python3
"""Baseline for bench/trace_read.sh: read a native JSONL corpus with json.loads per line.

Prints one JSON object: traces, steps, bytes, seconds, mb_per_s.
"""
import json
import os
import sys
import time

path = sys.argv[1]
size = os.path.getsize(path)
start = time.perf_counter()
traces = steps = 0
with open(path, "rb") as f:
    for line in f:
        if not line.strip():
            continue
        t = json.loads(line)
        traces += 1
        steps += len(t["steps"])
secs = time.perf_counter() - start
print(json.dumps({"traces": traces, "steps": steps, "bytes": size, "seconds": round(secs, 3),
                  "mb_per_s": round(size / 1e6 / secs, 1)}))
