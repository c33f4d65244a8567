#!/usr/bin/env python3
"""specdec beside llama.cpp on the same GGUF files and thread count.

    scripts/compare_llama_cpp.py --llama-bin DIR --target T.gguf --draft D.gguf
        [--specdec-bench build/benchmarks/specdec-bench] [--threads 2] [--rounds 5]
        [--prompt-tokens 512] [--new-tokens 128] [--draft-tokens 2,4] [--prompt "hello world"]

DIR holds llama.cpp's llama-bench and llama-speculative-simple (built by you;
specdec does not need llama.cpp). `specdec-bench --export-gguf DIR` writes the
synthetic pair as such files. Each round runs, one after the other:
llama-bench (prefill of --prompt-tokens, decode of --new-tokens), specdec's
prefill of a prompt that long, llama-speculative-simple at each draft length
(greedy), and specdec-bench at the same lengths (greedy, token-wise rule), so
that load from elsewhere falls on both engines alike. It prints the median
over the rounds of each figure and the ratios. Exit status: 0, or 1 when a
tool failed (its output is printed).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.stderr.write(f"failed ({result.returncode}): {' '.join(command)}\n{result.stdout}\n{result.stderr}\n")
        sys.exit(1)
    return result.stdout + result.stderr


def llama_bench(args):
    out = run([os.path.join(args.llama_bin, "llama-bench"), "-m", args.target, "-t", str(args.threads),
               "-p", str(args.prompt_tokens), "-n", str(args.new_tokens), "-r", "1", "-o", "json"])
    rows = json.loads(out[out.index("["):out.rindex("]") + 1])
    prefill = next(r["avg_ts"] for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0)
    decode = next(r["avg_ts"] for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0)
    return prefill, decode


def llama_speculative(args, k):
    out = run([os.path.join(args.llama_bin, "llama-speculative-simple"), "-m", args.target, "-md", args.draft,
               "--spec-type", "draft-simple", "--spec-draft-n-max", str(k), "-p", args.prompt,
               "-n", str(args.new_tokens), "-t", str(args.threads), "--temp", "0", "--seed", "1"])
    speed = re.search(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", out)
    accept = re.search(r"accept\s+=\s+([\d.]+)%", out)
    if not speed:
        sys.stderr.write(out)
        sys.exit(1)
    return float(speed.group(1)), float(accept.group(1)) / 100 if accept else float("nan")


def specdec(args, draft_tokens, prompt_tokens):
    with tempfile.TemporaryDirectory() as folder:
        report = os.path.join(folder, "report.json")
        command = [args.specdec_bench, "--target", args.target, "--draft", args.draft, "--threads", str(args.threads),
                   "--temperatures", "0", "--rule", "tokenwise", "--repetitions", "1", "--prompt", args.prompt,
                   "--quiet", "--json", report, "--draft-tokens", ",".join(map(str, draft_tokens)),
                   "--new-tokens", str(args.new_tokens)]
        if prompt_tokens:
            command += ["--prompt-tokens", str(prompt_tokens)]
        run(command)
        with open(report) as f:
            return json.load(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-bin", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--specdec-bench", default="build/benchmarks/specdec-bench")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--draft-tokens", default="2,4")
    parser.add_argument("--prompt", default="hello world")
    args = parser.parse_args()
    lengths = [int(k) for k in args.draft_tokens.split(",")]

    figures = {}
    def add(name, value):
        figures.setdefault(name, []).append(value)

    for round_index in range(args.rounds):
        prefill, decode = llama_bench(args)
        add("llama.cpp prefill", prefill)
        add("llama.cpp decode", decode)
        report = specdec(args, lengths, args.prompt_tokens)
        add("specdec prefill", next(p["tokens_per_second"] for p in report["costs"]["prefill"]
                                    if p["tokens"] == args.prompt_tokens))
        add("specdec decode", report["costs"]["decode_tokens_per_second"])
        for run_row in report["runs"]:
            k = run_row["draft_tokens"]
            if run_row["method"] == "autoregressive":
                add(f"specdec autoregressive (k={k} pair)", run_row["tokens_per_second"])
            else:
                add(f"specdec speculative k={k}", run_row["tokens_per_second"])
                add(f"specdec acceptance k={k}", run_row["acceptance_rate"])
        for k in lengths:
            speed, accept = llama_speculative(args, k)
            add(f"llama.cpp speculative k={k}", speed)
            add(f"llama.cpp acceptance k={k}", accept)
        sys.stderr.write(f"round {round_index + 1}/{args.rounds} done\n")

    median = {name: statistics.median(values) for name, values in figures.items()}
    print(f"{args.target} / {args.draft}, {args.threads} threads, median of {args.rounds} interleaved rounds")
    for name, value in median.items():
        spread = f"{min(figures[name]):.3g}-{max(figures[name]):.3g}"
        print(f"  {name:42s} {value:9.3g}   (rounds: {spread})")
    print(f"prefill of {args.prompt_tokens} tokens, specdec / llama.cpp: "
          f"{median['specdec prefill'] / median['llama.cpp prefill']:.2f}x")
    print(f"decode, specdec / llama.cpp: {median['specdec decode'] / median['llama.cpp decode']:.2f}x")
    print(f"specdec prefill / its own decode: {median['specdec prefill'] / median['specdec decode']:.1f}x; "
          f"llama.cpp: {median['llama.cpp prefill'] / median['llama.cpp decode']:.1f}x")
    for k in lengths:
        print(f"k={k}: specdec speculative / llama.cpp speculative "
              f"{median[f'specdec speculative k={k}'] / median[f'llama.cpp speculative k={k}']:.2f}x; "
              f"specdec speculative / llama.cpp autoregressive "
              f"{median[f'specdec speculative k={k}'] / median['llama.cpp decode']:.2f}x")


if __name__ == "__main__":
    main()
