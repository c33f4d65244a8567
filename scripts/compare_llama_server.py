#!/usr/bin/env python3
"""Speculation under load, over HTTP: llama-server and specdec-server on the
same files, the same requests, the same clients.

    scripts/compare_llama_server.py [--llama-bin DIR] --target T.gguf --draft D.gguf
        [--specdec-server build/tools/specdec-server] [--engines specdec,llama.cpp]
        [--batch 1,2,4,8,16,32] [--temperatures 0,1] [--threads 2] [--rounds 3]
        [--new-tokens 64] [--requests-per-client 2] [--draft-max 3] [--json out.json] [--svg out.svg]
        [--specdec-bench build/benchmarks/specdec-bench]

DIR holds llama.cpp's llama-server (scripts/build-llama-cpp.sh with
SPECDEC_LLAMA_EXAMPLES=llama-server builds it from the pinned source);
without --llama-bin only specdec-server runs (speculation on against off).

Servers, each started per concurrency B with B slots and stopped after:
  llama-server            plain decoding
  llama-server + draft    --model-draft, --spec-type draft-simple, --spec-draft-n-max --draft-max
  specdec-server          (with --specdec-server) per engine in --engines:
                          speculation on (its default: AutoBatchLength) and
                          off (each request's speculative.n_max = 0)

Each serves R x B requests at concurrency B (B client threads, each sending
R = --requests-per-client requests one after another): a seeded 16-token
prompt (token ids), --new-tokens tokens with ignore_eos, streamed, at each
temperature (T > 0: the plain softmax, top_k 0, top_p 1, min_p 0 on both).
llama-server's requests carry a seed; specdec's only at T = 0 (at T > 0 an
unseeded request verifies by token-wise rejection at the length policy's
lengths, a seeded one by coupled sampling, see docs/serving.md).
Measured at the client: total tokens/s (all tokens over the wall time from
the first request sent to the last token), time to first token (mean, p99)
and inter-token latency (the gaps between a request's consecutive tokens,
tokens of one event 0 apart; mean, p99).

Rounds alternate the order of the servers. It prints medians over rounds
(with their range) and the ratios the serving goals name; --json keeps every
number, --svg draws tokens/s against concurrency per temperature.

With --specdec-bench (built against llama.cpp), every round also runs
specdec-bench --engine llama.cpp --batch on the same files (in-process, no
HTTP): its auto and best fixed k over its batched plain decoding.
Exit status: 0, or 1 when a server or tool failed.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from serving_client import sse_events


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process on a free port, ready once /health answers 200."""

    def __init__(self, command, name):
        self.port = free_port()
        self.name = name
        self.command = command + ["--host", "127.0.0.1", "--port", str(self.port)]
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while True:
            if self.process.poll() is not None:
                self.fail("exited before it was ready")
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                connection.request("GET", "/health")
                if connection.getresponse().status == 200:
                    return
            except OSError:
                pass
            if time.time() > deadline:
                self.fail("not ready after 300 s")
            time.sleep(0.25)

    def fail(self, why):
        self.log.seek(0)
        sys.stderr.write(f"{self.name} {why}: {' '.join(self.command)}\n{self.log.read()[-4000:]}\n")
        self.stop()
        sys.exit(1)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def stream(port, path, body):
    """Sends a streamed request; returns [(arrival time, tokens in the event)]."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        connection.request("POST", path, body=json.dumps({**body, "stream": True}),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
        arrivals = []
        for data in sse_events(response):
            if data == b"[DONE]":
                break
            parsed = json.loads(data)
            if "error" in parsed:
                raise RuntimeError(f"error event: {parsed['error']}")
            done = False
            if "choices" in parsed:  # specdec-server (OpenAI's shape, with the token ids)
                count = sum(len(c.get("tokens", [])) for c in parsed["choices"])
            else:  # llama-server's /completion: a token per event, the last one's maybe in the final event
                count = len(parsed.get("tokens", [])) if "tokens" in parsed else (1 if parsed.get("content") else 0)
                if parsed.get("stop", False):
                    done = True
                    count = max(count, int(parsed.get("tokens_predicted", 0)) - sum(n for _, n in arrivals))
            if count:
                arrivals.append((time.perf_counter(), count))
            if done:
                break
        return arrivals
    finally:
        connection.close()


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] if ordered else float("nan")


def serve(args, config, batch, temperature, prompts):
    kind, engine, speculative = config
    if kind == "llama-server":
        command = [os.path.join(args.llama_bin, "llama-server"), "-m", args.target, "-t", str(args.threads),
                   "-tb", str(args.threads), "-np", str(batch), "-c", str(batch * args.context), "-ngl", "0",
                   "--cache-ram", "0"]
        if speculative:
            command += ["--model-draft", args.draft, "--spec-type", "draft-simple", "--spec-draft-n-max",
                        str(args.draft_max), "--spec-draft-n-min", "0", "--spec-draft-ngl", "0", "--threads-draft",
                        str(args.threads)]
    else:
        command = [args.specdec_server, "--engine", engine, "-m", args.target, "-md", args.draft, "-t", str(args.threads),
                   "-np", str(batch), "-c", str(args.context), "--max-queue", str(2 * batch)] + args.server_args.split()
    server = Server(command, config_name(config))
    try:
        def one(index):
            if kind == "llama-server":
                body = {"prompt": prompts[index], "n_predict": args.new_tokens, "temperature": temperature, "top_k": 0,
                        "top_p": 1.0, "min_p": 0.0, "ignore_eos": True, "cache_prompt": False, "seed": 1 + index,
                        "return_tokens": True}
                path = "/completion"
            else:
                body = {"prompt": prompts[index], "max_tokens": args.new_tokens, "temperature": temperature,
                        "ignore_eos": True}
                if temperature == 0:
                    body["seed"] = 1 + index
                if not speculative:
                    body["speculative.n_max"] = 0
                path = "/v1/completions"
            sent = time.perf_counter()
            return sent, stream(server.port, path, body)

        def client(c):
            return [one(c + j * batch) for j in range(args.requests_per_client)]

        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=batch) as pool:
            results = [r for pair in pool.map(client, range(batch)) for r in pair]
        end = max(arrivals[-1][0] for _, arrivals in results)
    except (OSError, RuntimeError, ValueError) as error:
        server.fail(f"request failed ({error})")
    finally:
        server.stop()
    tokens = sum(n for _, arrivals in results for _, n in arrivals)
    if tokens != len(prompts) * args.new_tokens:
        sys.stderr.write(f"{config_name(config)} generated {tokens} tokens, expected {len(prompts) * args.new_tokens}\n")
        sys.exit(1)
    first = [arrivals[0][0] - sent for sent, arrivals in results]
    gaps = []
    for _, arrivals in results:
        for (a, _), (b, n) in zip(arrivals, arrivals[1:]):
            gaps.append(b - a)
            gaps.extend([0.0] * (n - 1))
        gaps.extend([0.0] * (arrivals[0][1] - 1))
    return {"tokens_per_second": tokens / (end - start), "ttft_mean": statistics.mean(first), "ttft_p99": percentile(first, 99),
            "itl_mean": statistics.mean(gaps), "itl_p99": percentile(gaps, 99)}


def config_name(config):
    kind, engine, speculative = config
    if kind == "llama-server":
        return "llama-server + draft" if speculative else "llama-server"
    return f"specdec-server ({engine}){'' if speculative else ', no speculation'}"


def specdec_batch(args, temperature):
    with tempfile.TemporaryDirectory() as folder:
        report = os.path.join(folder, "batch.json")
        command = [args.specdec_bench, "--engine", "llama.cpp", "--target", args.target, "--draft", args.draft,
                   "--threads", str(args.threads), "--batch", ",".join(map(str, args.batch)),
                   "--temperature", str(temperature), "--json", report]
        if temperature > 0:
            command += ["--rule", "block"]
        result = subprocess.run(command, capture_output=True, text=True, errors="replace")
        if result.returncode != 0:
            sys.stderr.write(f"failed ({result.returncode}): {' '.join(command)}\n{result.stdout}\n{result.stderr}\n")
            sys.exit(1)
        with open(report) as f:
            sizes = json.load(f)["batch"]["sizes"]
    return {s["batch"]: (s["auto_over_autoregressive"], s["best_fixed_over_autoregressive"], s["best_fixed"])
            for s in sizes}


def svg(path, table, configs, batches, temperatures):
    """tokens/s (median) against concurrency, one panel per temperature, one line per server."""
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#98df8a", "#d62728", "#ff9896"]
    width, height, pad = 420, 300, 50
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * len(temperatures)}" height="{height + 40 + 18 * len(configs)}" '
             'font-family="sans-serif" font-size="11">']
    for p, t in enumerate(temperatures):
        x0 = p * width
        top = max(statistics.median(table[(config_name(c), t, b)]) for c in configs for b in batches) * 1.1
        def x(i):
            return x0 + pad + i * (width - 2 * pad) / max(1, len(batches) - 1)
        def y(v):
            return height - pad + 10 - v / top * (height - 2 * pad)
        parts.append(f'<text x="{x0 + width / 2}" y="16" text-anchor="middle">T = {t:g}: tokens/s against concurrency</text>')
        parts.append(f'<line x1="{x(0)}" y1="{y(0)}" x2="{x(len(batches) - 1)}" y2="{y(0)}" stroke="black"/>')
        parts.append(f'<line x1="{x(0)}" y1="{y(0)}" x2="{x(0)}" y2="{y(top)}" stroke="black"/>')
        for i, b in enumerate(batches):
            parts.append(f'<text x="{x(i)}" y="{y(0) + 14}" text-anchor="middle">{b}</text>')
        for k in range(5):
            v = top * k / 4
            parts.append(f'<text x="{x(0) - 4}" y="{y(v) + 4}" text-anchor="end">{v:.0f}</text>')
        for c, config in enumerate(configs):
            points = " ".join(f"{x(i):.1f},{y(statistics.median(table[(config_name(config), t, b)])):.1f}"
                              for i, b in enumerate(batches))
            parts.append(f'<polyline points="{points}" fill="none" stroke="{colours[c % len(colours)]}" stroke-width="2"/>')
    for c, config in enumerate(configs):
        yy = height + 30 + 18 * c
        parts.append(f'<line x1="20" y1="{yy - 4}" x2="44" y2="{yy - 4}" stroke="{colours[c % len(colours)]}" stroke-width="2"/>')
        parts.append(f'<text x="50" y="{yy}">{config_name(config)}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-bin", default=None, help="llama-server's folder (none: specdec-server alone)")
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--specdec-server", default=None)
    parser.add_argument("--engines", default="specdec", help="specdec-server engines: specdec, llama.cpp or both")
    parser.add_argument("--server-args", default="", help="more specdec-server flags, space-separated (e.g. '--prefill-chunk 0')")
    parser.add_argument("--batch", default="1,2,4,8,16,32")
    parser.add_argument("--temperatures", default="0,1")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--requests-per-client", type=int, default=2,
                        help="requests each client sends one after another (more: a longer, steadier measurement)")
    parser.add_argument("--draft-max", type=int, default=3, help="llama-server's --spec-draft-n-max (its default: 3)")
    parser.add_argument("--context", type=int, default=256, help="positions per slot")
    parser.add_argument("--vocab-ids", type=int, default=1000, help="prompt token ids are drawn from [3, this)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", default=None)
    parser.add_argument("--svg", default=None)
    parser.add_argument("--specdec-bench", default=None)
    args = parser.parse_args()
    args.batch = [int(b) for b in args.batch.split(",")]
    temperatures = [float(t) for t in args.temperatures.split(",")]
    if min(args.batch) < 1 or args.rounds < 1 or args.new_tokens < 1 or args.draft_max < 1 \
            or args.requests_per_client < 1:
        parser.error("--batch sizes, --rounds, --new-tokens, --requests-per-client and --draft-max must be positive")
    if min(temperatures) < 0:
        parser.error("--temperatures must be at least 0")
    if args.context < 16 + args.new_tokens:
        parser.error(f"--context {args.context} cannot hold a 16-token prompt and {args.new_tokens} new tokens")

    if not args.llama_bin and not args.specdec_server:
        parser.error("nothing to run: give --llama-bin, --specdec-server or both")
    configs = [("llama-server", None, False), ("llama-server", None, True)] if args.llama_bin else []
    if args.specdec_server:
        for engine in args.engines.split(","):
            configs += [("specdec-server", engine, True), ("specdec-server", engine, False)]
    rng = random.Random(args.seed)
    prompts = {b: [[rng.randrange(3, args.vocab_ids) for _ in range(16)] for _ in range(args.requests_per_client * b)]
               for b in args.batch}
    table, specdec = {}, {}
    for round_index in range(args.rounds):
        for t in temperatures:
            for b in args.batch:
                order = configs if round_index % 2 == 0 else list(reversed(configs))
                for config in order:
                    measured = serve(args, config, b, t, prompts[b])
                    for key, value in measured.items():
                        table.setdefault((config_name(config), t, b, key), []).append(value)
                    table.setdefault((config_name(config), t, b), []).append(measured["tokens_per_second"])
                print(f"round {round_index + 1}/{args.rounds}, T = {t:g}, B = {b}: " + "; ".join(
                    f"{config_name(c)} {table[(config_name(c), t, b)][-1]:.1f}" for c in configs) + " tok/s", flush=True)
            if args.specdec_bench:
                for b, ratios in specdec_batch(args, t).items():
                    specdec.setdefault((t, b), []).append(ratios)

    def spread(values, digits=1):
        return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"

    print(f"\n{args.target} / {args.draft}, {args.threads} threads, {args.rounds} rounds, medians (range); "
          f"{args.requests_per_client} x B "
          f"requests of 16 prompt tokens and {args.new_tokens} new tokens, streamed, concurrency B")
    for t in temperatures:
        print(f"\nT = {t:g}: tokens/s; time to first token mean / p99 (ms); inter-token latency mean / p99 (ms)")
        for b in args.batch:
            for config in configs:
                n = config_name(config)
                print(f"  B={b:<3} {n:38s} {spread(table[(n, t, b)]):>22}   ttft "
                      f"{statistics.median(table[(n, t, b, 'ttft_mean')]) * 1000:6.0f} / "
                      f"{statistics.median(table[(n, t, b, 'ttft_p99')]) * 1000:6.0f}   itl "
                      f"{statistics.median(table[(n, t, b, 'itl_mean')]) * 1000:6.1f} / "
                      f"{statistics.median(table[(n, t, b, 'itl_p99')]) * 1000:6.1f}")
        if args.specdec_server:
            print(f"  ratios of medians at T = {t:g}:")
            for b in args.batch:
                med = {config_name(c): statistics.median(table[(config_name(c), t, b)]) for c in configs}
                parts = []
                for engine in args.engines.split(","):
                    on, off = med[f"specdec-server ({engine})"], med[f"specdec-server ({engine}), no speculation"]
                    paired = [x / y for x, y in zip(table[(f"specdec-server ({engine})", t, b)],
                                                    table[(f"specdec-server ({engine}), no speculation", t, b)])]
                    parts.append(f"{engine}: on/off {on / off:.2f} (rounds {min(paired):.2f}-{max(paired):.2f})")
                    if not args.llama_bin:
                        continue
                    if engine == "specdec":
                        better = max(med["llama-server"], med["llama-server + draft"])
                        parts.append(f"on / better llama-server {on / better:.2f}, on / llama-server + draft "
                                     f"{on / med['llama-server + draft']:.2f}")
                    else:
                        parts.append(f"on / llama-server {on / med['llama-server']:.2f}")
                print(f"    B={b:<3} " + "; ".join(parts))
        if args.specdec_bench:
            for b in args.batch:
                runs = specdec.get((t, b), [])
                if runs:
                    print(f"  specdec-bench --engine llama.cpp B={b}: auto / batched plain {spread([r[0] for r in runs], 2)}, "
                          f"best fixed k / batched plain {spread([r[1] for r in runs], 2)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": [{"server": k[0], "temperature": k[1], "batch": k[2],
                                                     "measure": k[3] if len(k) > 3 else "tokens_per_second", "values": v}
                                                    for k, v in table.items()]}, f, indent=1)
    if args.svg:
        svg(args.svg, table, configs, args.batch, temperatures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
