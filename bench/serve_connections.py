#!/usr/bin/env python3
"""Idle connections against `maslens serve` (issue 35: "20,100 idle connections exhaust the file
descriptors and new clients time out"; must show: "20,000 idle connections do not stop a new client").

Setup: `maslens serve --db TMP/store.db --port 0` started with the soft descriptor limit raised to the
hard one, so its connection cap is its default (4,096; `crates/server/src/listen.rs`). Load: --idle
TCP connections (default 20,000) opened by --procs client processes and never sent a byte, opened as
fast as the kernel takes them (non-blocking connects). While they are held, a new client sends
`GET /health` every --every seconds for --seconds seconds; each answer's latency is printed. At the
end the idle sockets are closed and a last client must be answered at once.

Checks (exit 1 when one fails): every new client answered 200 within --max-latency seconds (default
5); the server's open descriptors stayed under its limit (read from /proc); it still serves after.

usage: bench/serve_connections.py [--bin target/debug/maslens] [--idle 20000] [--procs 4] [--seconds 30]
       [--server-nofile N]
"""

from __future__ import annotations

import argparse
import errno
import multiprocessing as mp
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def hold(port: int, n: int, ready: mp.Queue, done: mp.Event) -> None:  # type: ignore[type-arg]
    """Opens `n` connections that never send anything, reports how many, holds them until `done`."""
    raise_nofile()
    socks, failed = [], 0
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        err = s.connect_ex(("127.0.0.1", port))
        if err not in (0, errno.EINPROGRESS):
            failed += 1
            s.close()
            continue
        socks.append(s)
    ready.put((len(socks), failed))
    done.wait()
    for s in socks:
        s.close()


def get_health(port: int, timeout: float) -> tuple[float, str]:
    """A new client's `GET /health`: (seconds, status line or error)."""
    t = time.time()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        return time.time() - t, data.split(b"\r\n", 1)[0].decode(errors="replace") or "closed"
    except OSError as e:
        return time.time() - t, f"error: {e}"


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "debug", "maslens"))
    ap.add_argument("--idle", type=int, default=20_000)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--max-latency", type=float, default=5.0)
    ap.add_argument("--server-nofile", type=int, help="the server's soft descriptor limit (default: the hard "
                    "limit; its connection cap is this minus 128, at most 4,096)")
    a = ap.parse_args()
    hard = raise_nofile()
    limit = min(a.server_nofile or hard, hard)

    def server_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    tmp = tempfile.mkdtemp(prefix="maslens-conn-")
    log = os.path.join(tmp, "serve.log")
    proc = subprocess.Popen([a.bin, "serve", "--db", os.path.join(tmp, "store.db"), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=open(log, "w"), text=True, preexec_fn=server_limit)
    assert proc.stdout is not None
    m = re.search(r"http://[\d.]+:(\d+)", proc.stdout.readline())
    if not m:
        proc.kill()
        raise SystemExit(f"serve did not start (log: {log})")
    port = int(m.group(1))
    ready: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    done = mp.Event()
    per = -(-a.idle // a.procs)
    holders = [mp.Process(target=hold, args=(port, per, ready, done)) for _ in range(a.procs)]
    problems: list[str] = []
    try:
        t0 = time.time()
        for h in holders:
            h.start()
        opened = [ready.get(timeout=300) for _ in holders]
        print(f"{sum(o for o, _ in opened)} idle connections opened ({sum(f for _, f in opened)} failed) "
              f"in {time.time() - t0:.1f} s; server descriptor limit {limit}")
        worst, peak_fds = 0.0, 0
        end = time.time() + a.seconds
        while time.time() < end:
            secs, status = get_health(port, timeout=a.max_latency * 4)
            fds = open_fds(proc.pid)
            peak_fds = max(peak_fds, fds)
            worst = max(worst, secs)
            print(f"  t={time.time() - t0:5.1f} s  new client: {status} in {secs:.3f} s  (server fds {fds})")
            if not status.startswith("HTTP/1.1 200") or secs > a.max_latency:
                problems.append(f"a new client got {status!r} after {secs:.2f} s")
            time.sleep(a.every)
        print(f"worst new-client latency {worst:.3f} s; peak server descriptors {peak_fds} (limit {limit})")
        if peak_fds >= limit:
            problems.append(f"the server reached its descriptor limit ({peak_fds})")
    finally:
        done.set()
        for h in holders:
            h.join(timeout=60)
    secs, status = get_health(port, timeout=10)
    print(f"after the idle clients left: {status} in {secs:.3f} s")
    if not status.startswith("HTTP/1.1 200"):
        problems.append(f"after: {status}")
    proc.terminate()
    proc.wait(timeout=30)
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
