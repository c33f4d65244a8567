#!/usr/bin/env python3
"""Speculation under load: llama-server with a draft model beside specdec's batched decoder, same files.

    scripts/compare_llama_server.py --llama-bin DIR --target T.gguf --draft D.gguf
        [--batch 1,2,4,8] [--threads 2] [--rounds 3] [--new-tokens 64] [--draft-max 3]
        [--temperature 0] [--specdec-bench build/benchmarks/specdec-bench]

DIR holds llama.cpp's llama-server (a llama.cpp build with its tools; the
pinned source of scripts/build-llama-cpp.sh builds it with
-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON and the target llama-server).

For each batch size B the server runs with B slots (-np B), once without a
draft model and once with --model-draft (llama.cpp's draft-simple
speculation, --spec-draft-n-max, its default p_min), and serves 2 x B
requests at a concurrency of B: each request is a seeded 16-token prompt
(token ids) and --new-tokens tokens at --temperature with ignore_eos, the
same requests in both runs. At T > 0 both sides sample from the plain
softmax (the server: top_k 0, top_p 1, min_p 0). Throughput is the generated tokens over the wall
time from the first request sent to the last answer. So each side's ratio
(with a draft / without) compares the server with itself, as specdec-bench
--batch compares AutoBatchLength and fixed k with batched plain decoding.

With --specdec-bench (built against llama.cpp), every round also runs
specdec-bench --engine llama.cpp --batch with the same files, batch sizes and
temperature (at T > 0 with block verification): its auto and best fixed k
over batched plain decoding, both on llama.cpp.

Rounds alternate the order of the two server runs. It prints the median over
the rounds (with their range). Exit status: 0, or 1 when a tool failed.
"""
import argparse
import concurrent.futures
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, timeout):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


class Server:
    def __init__(self, args, batch, with_draft):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [os.path.join(args.llama_bin, "llama-server"), "-m", args.target, "-t", str(args.threads),
                   "-tb", str(args.threads), "-np", str(batch), "-c", str(batch * args.context), "-ngl", "0",
                   "--host", "127.0.0.1", "--port", str(self.port), "--cache-ram", "0"]
        if with_draft:
            command += ["--model-draft", args.draft, "--spec-type", "draft-simple", "--spec-draft-n-max", str(args.draft_max),
                        "--spec-draft-n-min", "0", "--spec-draft-ngl", "0", "--threads-draft", str(args.threads)]
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        self.command = command
        deadline = time.time() + 120
        while True:
            if self.process.poll() is not None:
                self.fail("exited before it was ready")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.time() > deadline:
                self.fail("not ready after 120 s")
            time.sleep(0.25)

    def fail(self, why):
        self.log.seek(0)
        sys.stderr.write(f"llama-server {why}: {' '.join(self.command)}\n{self.log.read()[-4000:]}\n")
        self.stop()
        sys.exit(1)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def serve(args, batch, with_draft, prompts):
    server = Server(args, batch, with_draft)
    try:
        def one(index):
            body = {"prompt": prompts[index], "n_predict": args.new_tokens, "temperature": args.temperature,
                    "top_k": 0, "top_p": 1.0, "min_p": 0.0, "ignore_eos": True, "cache_prompt": False,
                    "seed": 1 + index}
            answer = post(server.url + "/completion", body, timeout=600)
            timings = answer.get("timings", {})
            return (int(timings.get("predicted_n", answer.get("tokens_predicted", 0))),
                    int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0)))

        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=batch) as pool:
            results = list(pool.map(one, range(len(prompts))))
        seconds = time.perf_counter() - start
    except (urllib.error.URLError, OSError, ValueError) as error:
        server.fail(f"request failed ({error})")
    finally:
        server.stop()
    tokens = sum(r[0] for r in results)
    drafted = sum(r[1] for r in results)
    accepted = sum(r[2] for r in results)
    if tokens != len(prompts) * args.new_tokens:
        sys.stderr.write(f"llama-server generated {tokens} tokens, expected {len(prompts) * args.new_tokens}\n")
        sys.exit(1)
    return tokens / seconds, (accepted / drafted if drafted else None)


def specdec_batch(args):
    with tempfile.TemporaryDirectory() as folder:
        report = os.path.join(folder, "batch.json")
        command = [args.specdec_bench, "--engine", "llama.cpp", "--target", args.target, "--draft", args.draft,
                   "--threads", str(args.threads), "--batch", ",".join(map(str, args.batch)),
                   "--temperature", str(args.temperature), "--json", report]
        if args.temperature > 0:
            command += ["--rule", "block"]
        result = subprocess.run(command, capture_output=True, text=True, errors="replace")
        if result.returncode != 0:
            sys.stderr.write(f"failed ({result.returncode}): {' '.join(command)}\n{result.stdout}\n{result.stderr}\n")
            sys.exit(1)
        with open(report) as f:
            sizes = json.load(f)["batch"]["sizes"]
    return {s["batch"]: (s["auto_over_autoregressive"], s["best_fixed_over_autoregressive"], s["best_fixed"])
            for s in sizes}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-bin", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--batch", default="1,2,4,8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--draft-max", type=int, default=3, help="llama-server's --spec-draft-n-max (its default: 3)")
    parser.add_argument("--context", type=int, default=256, help="positions per slot")
    parser.add_argument("--vocab-ids", type=int, default=1000, help="prompt token ids are drawn from [3, this)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--specdec-bench", default=None)
    args = parser.parse_args()
    args.batch = [int(b) for b in args.batch.split(",")]
    if min(args.batch) < 1 or args.rounds < 1 or args.new_tokens < 1 or args.draft_max < 1:
        parser.error("--batch sizes, --rounds, --new-tokens and --draft-max must be positive")
    if args.temperature < 0:
        parser.error("--temperature must be at least 0")
    if args.context < 16 + args.new_tokens:
        parser.error(f"--context {args.context} cannot hold a 16-token prompt and {args.new_tokens} new tokens")

    rng = random.Random(args.seed)
    prompts = {b: [[rng.randrange(3, args.vocab_ids) for _ in range(16)] for _ in range(2 * b)] for b in args.batch}
    plain, drafted, acceptance, specdec = ({b: [] for b in args.batch} for _ in range(4))
    for round_index in range(args.rounds):
        for b in args.batch:
            order = [False, True] if round_index % 2 == 0 else [True, False]
            for with_draft in order:
                rate, accepted = serve(args, b, with_draft, prompts[b])
                (drafted if with_draft else plain)[b].append(rate)
                if with_draft and accepted is not None:
                    acceptance[b].append(accepted)
        if args.specdec_bench:
            for b, ratios in specdec_batch(args).items():
                specdec[b].append(ratios)
        print(f"round {round_index + 1}/{args.rounds}: " + "; ".join(
            f"B={b} server {plain[b][-1]:.1f} -> {drafted[b][-1]:.1f} tok/s" for b in args.batch), flush=True)

    def spread(values, digits):
        return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"

    print(f"{args.target} / {args.draft}, {args.threads} threads, {args.rounds} rounds, medians (range); "
          f"2 x B requests of 16 prompt tokens and {args.new_tokens} new tokens at T = {args.temperature:g}, concurrency B")
    header = f"{'B':>3}  {'server plain tok/s':>20}  {'server + draft':>20}  {'ratio':>17}  {'acceptance':>17}"
    if args.specdec_bench:
        header += f"  {'specdec auto / batched AR':>26}  {'best fixed k / batched AR':>26}"
    print(header)
    for b in args.batch:
        ratios = [d / p for d, p in zip(drafted[b], plain[b])]
        line = (f"{b:>3}  {spread(plain[b], 1):>20}  {spread(drafted[b], 1):>20}  {spread(ratios, 2):>17}  "
                f"{spread(acceptance[b], 2) if acceptance[b] else '-':>17}")
        if args.specdec_bench:
            auto = [s[0] for s in specdec[b]]
            best = [s[1] for s in specdec[b]]
            names = sorted({s[2] for s in specdec[b]})
            line += f"  {spread(auto, 2):>26}  {spread(best, 2) + ' ' + '/'.join(names):>26}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
