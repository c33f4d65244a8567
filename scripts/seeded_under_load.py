#!/usr/bin/env python3
"""Seeded sampled requests under load against plain decoding and unseeded ones.

    scripts/seeded_under_load.py --server build/tools/specdec-server --target T.gguf --draft D.gguf
        [--batch 1,4,16] [--rounds 3] [--threads 2] [--new-tokens 64]

A seeded request at temperature > 0 verifies with coupled sampling, at the
length policy's lengths, so that its tokens do not depend on the load
(docs/serving.md). Per concurrency B, a server with B slots (restarted for
every run) serves 2 x B streamed requests of 16 prompt tokens at T = 1, in
modes taking turns round by round:
  off          speculative.n_max 0 (plain decoding)
  seeded       a seed (coupled sampling, AutoBatchLength's lengths)
  unseeded     no seed (token-wise rejection, AutoBatchLength's lengths)
Prints each mode's total tokens/s at the client (median over rounds, the
rounds, the ratio to off).
"""
import argparse
import concurrent.futures
import random
import statistics
import sys
import time

from compare_llama_server import Server, stream


def run(args, batch, mode, prompts):
    command = [args.server, "--engine", "specdec", "-m", args.target, "-md", args.draft, "-t", str(args.threads),
               "-np", str(batch), "-c", "256", "--max-queue", str(2 * batch)]
    server = Server(command, mode)
    try:
        def one(i):
            body = {"prompt": prompts[i], "max_tokens": args.new_tokens, "temperature": 1.0, "ignore_eos": True}
            if mode == "seeded":
                body["seed"] = 1 + i
            if mode == "off":
                body["speculative.n_max"] = 0
            return stream(server.port, "/v1/completions", body)

        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=batch) as pool:
            results = [r for pair in pool.map(lambda c: [one(c), one(c + batch)], range(batch)) for r in pair]
        end = max(arrivals[-1][0] for arrivals in results)
    except (OSError, RuntimeError, ValueError) as error:
        server.fail(f"request failed ({error})")
    finally:
        server.stop()
    return sum(n for arrivals in results for _, n in arrivals) / (end - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--batch", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
    modes = ["off", "seeded", "unseeded"]
    rng = random.Random(42)
    for batch in [int(b) for b in args.batch.split(",")]:
        prompts = [[rng.randrange(3, 1000) for _ in range(16)] for _ in range(2 * batch)]
        rates = {m: [] for m in modes}
        for r in range(args.rounds):
            for m in modes if r % 2 == 0 else modes[::-1]:
                rates[m].append(run(args, batch, m, prompts))
        median = {m: statistics.median(v) for m, v in rates.items()}
        print(f"B={batch}: " + "; ".join(f"{m} {median[m]:.0f} {[round(x) for x in rates[m]]} "
                                         f"({median[m] / median['off']:.2f}x off)" for m in modes), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
