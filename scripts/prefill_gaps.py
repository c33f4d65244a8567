#!/usr/bin/env python3
"""Chunked prefill, measured: how long running streams stall while a long
prompt is admitted, with --prefill-chunk and without.

    scripts/prefill_gaps.py --server build/tools/specdec-server [--chunks 0,256,512]
        [--streams 8] [--prompt-tokens 2000] [--threads 2] [--rounds 1] [-- SERVER ARGS...]

For each chunk size (0 = whole prompts) it starts the server (default: the
embedded 100m synthetic pair, `--synthetic --synthetic-size 100m -c 2048`)
with --streams + 1 slots, and:

1. times the long prompt alone on the idle server (max_tokens 1: its time
   to first token is its whole prefill plus one step);
2. starts --streams greedy streams (short prompts, long answers) and, once
   all of them stream, records their steps' gaps for a second (the median:
   one step);
3. sends the long prompt (--prompt-tokens tokens) and records the largest
   gap between two events of any stream from then until one step after the
   long request was answered.

It prints per chunk size: one step, the prefill alone, one chunk's pass (the
longest time a step spent prefilling, from the server's
specdec_prefill_step_seconds_max: the last chunks attend over the most
positions), the bound (a chunk's pass plus one step; without chunking the
whole prefill plus one step), the largest gap seen, and by how much it
exceeds the bound (the clients see events a few milliseconds late).
Exit status 1 when a server fails; the bound is reported, not enforced (the
host is shared and noisy).
"""
import argparse
import http.client
import json
import signal
import statistics
import subprocess
import sys
import threading
import time

from serving_client import sse_events, start_server


def complete(host, port, body):
    connection = http.client.HTTPConnection(host, port, timeout=600)
    try:
        connection.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
        if response.status != 200:
            sys.exit(f"HTTP {response.status}: {data[:300]!r}")
        return json.loads(data)
    finally:
        connection.close()


class StreamClient(threading.Thread):
    """A greedy stream that records when each of its events arrived."""

    def __init__(self, host, port, prompt, tokens, stop):
        super().__init__(daemon=True)
        self.host, self.port, self.prompt, self.tokens, self.stop = host, port, prompt, tokens, stop
        self.arrivals = []

    def run(self):
        connection = http.client.HTTPConnection(self.host, self.port, timeout=600)
        body = {"prompt": self.prompt, "max_tokens": self.tokens, "temperature": 0, "ignore_eos": True, "stream": True}
        connection.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        for data in sse_events(response):
            if self.stop.is_set():
                break
            if data.startswith(b"{"):
                self.arrivals.append(time.monotonic())
        connection.close()


def metric(host, port, name):
    connection = http.client.HTTPConnection(host, port, timeout=30)
    try:
        connection.request("GET", "/metrics")
        for line in connection.getresponse().read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    finally:
        connection.close()
    return float("nan")


def gaps_between(arrivals, start, end):
    inside = [t for t in arrivals if start <= t <= end]
    before = [t for t in arrivals if t < start]
    if before:
        inside.insert(0, before[-1])
    return [b - a for a, b in zip(inside, inside[1:])]


def measure(args, extra, chunk):
    command = [args.server, "--port", "0", "--host", "127.0.0.1", "-np", str(args.streams + 1), "-t", str(args.threads),
               "--prefill-chunk", str(chunk), *extra]
    process, host, port = start_server(command)
    try:
        long_prompt = [1 + (i * 7919) % (args.vocab - 1) for i in range(args.prompt_tokens)]
        complete(host, port, {"prompt": long_prompt[:64], "max_tokens": 4, "temperature": 0})  # warm up
        start = time.monotonic()
        complete(host, port, {"prompt": long_prompt, "max_tokens": 1, "temperature": 0, "speculative.n_max": 0})
        alone = time.monotonic() - start
        # A different prompt from here on (no cached prefix to reuse).
        long_prompt = [1 + (i * 104729) % (args.vocab - 1) for i in range(args.prompt_tokens)]
        stop = threading.Event()
        streams = [StreamClient(host, port, [2 + s, 3 + s, 5 + s, 7 + s], args.stream_tokens, stop) for s in range(args.streams)]
        for s in streams:
            s.start()
        deadline = time.monotonic() + 120
        while any(len(s.arrivals) < 3 for s in streams) and time.monotonic() < deadline:
            time.sleep(0.01)
        calm_start = time.monotonic()
        time.sleep(1.0)
        calm = [g for s in streams for g in gaps_between(s.arrivals, calm_start, time.monotonic())]
        step = statistics.median(calm)
        sent = time.monotonic()
        complete(host, port, {"prompt": long_prompt, "max_tokens": 1, "temperature": 0})
        answered = time.monotonic()
        time.sleep(max(0.5, 3 * step))
        stop.set()
        largest = max(max(gaps_between(s.arrivals, sent, answered + step), default=0.0) for s in streams)
        return {"chunk": chunk, "step": step, "alone": alone, "admitted_in": answered - sent, "largest": largest,
                "longest_prefill": metric(host, port, "specdec_prefill_step_seconds_max")}
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True)
    parser.add_argument("--chunks", default="0,256,512")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--stream-tokens", type=int, default=1500, help="each stream's max_tokens (default 1500)")
    parser.add_argument("--vocab", type=int, default=32000, help="prompt ids are drawn below this (default 32000)")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"] or ["--synthetic", "--synthetic-size", "100m", "-c", "2048"]
    rows = []
    for _ in range(args.rounds):
        for chunk in [int(c) for c in args.chunks.split(",")]:
            rows.append(measure(args, extra, chunk))
    print(f"\n{args.streams} greedy streams; a {args.prompt_tokens}-token prompt admitted among them")
    print(f"{'chunk':>6} {'step':>8} {'prefill alone':>14} {'chunk pass':>11} {'bound':>8} {'largest gap':>12} "
          f"{'admitted in':>12}  {'gap - bound':>11}")
    for r in rows:
        share = r["longest_prefill"]
        bound = share + r["step"]
        print(f"{r['chunk'] or 'whole':>6} {r['step'] * 1000:7.0f}ms {r['alone'] * 1000:12.0f}ms {share * 1000:9.0f}ms "
              f"{bound * 1000:6.0f}ms {r['largest'] * 1000:10.0f}ms {r['admitted_in'] * 1000:10.0f}ms  "
              f"{(r['largest'] - bound) * 1000:+9.0f}ms")


if __name__ == "__main__":
    main()
