#!/usr/bin/env python3
"""specdec-server under load: many clients against few slots for a while.

    scripts/load_test.py --server build/tools/specdec-server [--clients 64] [--slots 8]
        [--seconds 120] [--max-queue 16] [--threads 2] [--seed 1] [-- SERVER ARGS...]

Starts the server (default: the embedded synthetic pair, `--synthetic`; any
other model through SERVER ARGS, e.g. `-- -m t.gguf -md d.gguf`) with --slots
slots and --max-queue waiting places, and runs --clients client threads for
--seconds. Each client loops over a seeded mix of requests:

  greedy, whole          max_tokens 16-96, T = 0
  seeded T = 1, streamed max_tokens 16-96
  streamed with logprobs T = 0.7, logprobs 2
  disconnect             a streamed request dropped after its first event
  malformed JSON         must be a 400

A request beyond the slots and the queue is answered 503 with Retry-After
(the client waits 0.1-0.5 s and goes on). Anything else (a 5xx other than
503, a reset connection, a stream without [DONE], a bad request that is not
400) is a failure.

It samples the server's resident memory (VmRSS) every second and prints:
requests by outcome, served tokens/s, latency p50/p99 of whole requests,
time to first token p50/p99 of streams, the 503s' answer time, resident
memory after the warm-up (the first 10% of the run), its largest value and
at the end; after the clients stop, how long until /metrics shows no request
running or waiting. Exit status 1 on any failure, when memory at the end
exceeds the warm-up's by more than --rss-growth (default 10%), or when the
server still runs requests 5 s after the clients stopped.
"""
import argparse
import http.client
import json
import random
import signal
import sys
import threading
import time

from serving_client import sse_events, start_server


def start_server_for(args, extra):
    return start_server([args.server, "--port", "0", "--host", "127.0.0.1", "-np", str(args.slots), "--max-queue",
                         str(args.max_queue), "-t", str(args.threads), *(extra or ["--synthetic"])], echo=True)


def resident_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


class Outcomes:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []
        self.latency, self.first_token, self.busy_answer = [], [], []
        self.tokens = 0

    def add(self, kind, **values):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if "latency" in values:
                self.latency.append(values["latency"])
            if "first_token" in values:
                self.first_token.append(values["first_token"])
            if "busy" in values:
                self.busy_answer.append(values["busy"])
            self.tokens += values.get("tokens", 0)

    def fail(self, message):
        with self.lock:
            self.failures.append(message)
            if len(self.failures) <= 10:
                print("FAIL:", message, flush=True)


def client(index, host, port, deadline, seed, vocab, out):
    rng = random.Random(seed * 1000 + index)
    while time.monotonic() < deadline:
        kind = rng.choices(["greedy", "seeded_stream", "logprobs_stream", "disconnect", "malformed"],
                           weights=[4, 3, 1, 1, 1])[0]
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(4, 24))]
        body = {"prompt": prompt, "max_tokens": rng.randint(16, 96), "ignore_eos": True}
        if kind == "greedy":
            body["temperature"] = 0
        elif kind == "seeded_stream":
            body.update(temperature=1.0, seed=rng.randrange(1 << 30), stream=True)
        else:
            body.update(temperature=0.7, logprobs=2, stream=True)
        payload = b'{"prompt": [1, 2,' if kind == "malformed" else json.dumps(body).encode()
        connection = http.client.HTTPConnection(host, port, timeout=300)
        start = time.monotonic()
        try:
            connection.request("POST", "/v1/completions", body=payload, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            if response.status == 503:
                response.read()
                if response.getheader("Retry-After") is None:
                    out.fail("a 503 without Retry-After")
                out.add("busy (503)", busy=time.monotonic() - start)
                time.sleep(rng.uniform(0.1, 0.5))
                continue
            if kind == "malformed":
                response.read()
                if response.status != 400:
                    out.fail(f"malformed JSON answered {response.status}")
                out.add("malformed (400)")
                continue
            if response.status != 200:
                out.fail(f"{kind}: HTTP {response.status} {response.read()[:200]!r}")
                continue
            if not body.get("stream"):
                answer = json.loads(response.read())
                tokens = len(answer["choices"][0]["tokens"])
                if tokens != body["max_tokens"]:
                    out.fail(f"greedy: {tokens} tokens, asked {body['max_tokens']}")
                out.add(kind, latency=time.monotonic() - start, tokens=tokens)
                continue
            first, tokens, done = None, 0, False
            for data in sse_events(response):
                if data == b"[DONE]":
                    done = True
                    break
                parsed = json.loads(data)
                if "error" in parsed:
                    out.fail(f"{kind}: error event {parsed['error']}")
                    done = True
                    break
                for choice in parsed["choices"]:
                    tokens += len(choice["tokens"])
                    if kind == "logprobs_stream" and choice["tokens"] and (
                            choice["logprobs"] is None or len(choice["logprobs"]["token_logprobs"]) != len(choice["tokens"])):
                        out.fail("a streamed chunk whose logprobs do not match its tokens")
                if first is None and tokens:
                    first = time.monotonic() - start
                if kind == "disconnect" and tokens:
                    done = True
                    break
            if kind == "disconnect":
                out.add(kind, tokens=tokens)
                continue
            if not done:
                out.fail(f"{kind}: the stream ended without [DONE]")
                continue
            out.add(kind, latency=time.monotonic() - start, first_token=first, tokens=tokens)
        except (OSError, http.client.HTTPException, ValueError) as error:
            out.fail(f"{kind}: {type(error).__name__}: {error}")
        finally:
            connection.close()


def metric(host, port, name):
    connection = http.client.HTTPConnection(host, port, timeout=30)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--max-queue", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=256, help="prompt token ids are drawn below this (default 256)")
    parser.add_argument("--rss-growth", type=float, default=0.10)
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    process, host, port = start_server_for(args, extra)
    out = Outcomes()
    rss = []
    start = time.monotonic()
    deadline = start + args.seconds
    threads = [threading.Thread(target=client, args=(i, host, port, deadline, args.seed, args.vocab, out))
               for i in range(args.clients)]
    for t in threads:
        t.start()
    while time.monotonic() < deadline:
        rss.append((time.monotonic() - start, resident_kib(process.pid)))
        time.sleep(1.0)
    for t in threads:
        t.join()
    clients_stopped = time.monotonic()
    drained = None
    while time.monotonic() < clients_stopped + 5:
        if metric(host, port, "specdec_requests_running") == 0 and metric(host, port, "specdec_requests_waiting") == 0:
            drained = time.monotonic() - clients_stopped
            break
        time.sleep(0.05)
    cancelled = metric(host, port, 'specdec_requests_ended_total{status="cancelled"}')
    rss.append((time.monotonic() - start, resident_kib(process.pid)))
    process.send_signal(signal.SIGINT)
    code = process.wait(timeout=60)

    elapsed = clients_stopped - start
    warm = [kib for t, kib in rss if t >= 0.1 * args.seconds][0]
    end, peak = rss[-1][1], max(kib for _, kib in rss)
    print(f"\n{args.clients} clients, {args.slots} slots, --max-queue {args.max_queue}, {elapsed:.0f} s")
    for kind, count in sorted(out.counts.items()):
        print(f"  {kind:18s} {count:6d}")
    print(f"  failures           {len(out.failures):6d}")
    print(f"served tokens: {out.tokens} ({out.tokens / elapsed:.0f}/s)")
    print(f"latency of answered requests: p50 {percentile(out.latency, 50):.2f} s, p99 {percentile(out.latency, 99):.2f} s")
    firsts = [v for v in out.first_token if v is not None]
    print(f"time to first token (streams): p50 {percentile(firsts, 50):.3f} s, p99 {percentile(firsts, 99):.3f} s")
    print(f"503 answered in: p99 {percentile(out.busy_answer, 99) * 1000:.1f} ms")
    print(f"resident memory: {warm / 1024:.1f} MiB after the warm-up, peak {peak / 1024:.1f} MiB, "
          f"{end / 1024:.1f} MiB at the end ({(end - warm) / warm * 100:+.1f}%)")
    marks = [0.1, 0.25, 0.5, 0.75, 1.0]
    series = [next((kib for t, kib in rss if t >= m * args.seconds), rss[-1][1]) for m in marks]
    print("resident memory over the run: " + ", ".join(f"{m * 100:.0f}% {kib / 1024:.1f} MiB" for m, kib in zip(marks, series)))
    print(f"disconnects: {out.counts.get('disconnect', 0)}; requests the server counted cancelled: {cancelled:.0f}")
    print("after the clients stopped: " + (f"no request running or waiting within {drained * 1000:.0f} ms" if drained is not None
                                           else "requests still running 5 s later"))
    ok = not out.failures and end <= warm * (1 + args.rss_growth) and drained is not None and code == 0
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
