#!/usr/bin/env python3
"""specdec beside llama.cpp's own speculative decoding on the same GGUF files and thread count.

    scripts/compare_llama_cpp.py --llama-bin DIR --target T.gguf --draft D.gguf
        [--engine specdec|llama.cpp] [--temperatures 0,1]
        [--specdec-bench build/benchmarks/specdec-bench] [--threads 2] [--rounds 5]
        [--prompt-tokens 512] [--new-tokens 128] [--draft-tokens 2,4] [--prompt "hello world"]

DIR holds llama.cpp's llama-speculative-simple (and, for --engine specdec,
llama-bench): SPECDEC_LLAMA_EXAMPLES="llama-speculative-simple"
scripts/build-llama-cpp.sh PREFIX builds the first into PREFIX/bin, llama-bench
comes with a llama.cpp build of its tools (specdec itself does not need
llama.cpp). `specdec-bench --export-gguf DIR` writes the synthetic pair as
such files. Run it on a quiet machine: llama.cpp's OpenMP threads stall
when other work takes their cores (docs/benchmark.md).

--engine specdec (the default): specdec's own CPU engine against llama.cpp.
Each round runs llama-bench (prefill of --prompt-tokens, decode of
--new-tokens), specdec's prefill of a prompt that long, llama-speculative-simple
at each draft length and temperature, and specdec-bench at the same lengths
and temperatures (token-wise rule).

--engine llama.cpp: both sides run on llama.cpp, the same forward passes on
the same files, so that what differs is the speculative algorithm alone.
specdec-bench --engine llama.cpp (built against llama.cpp) runs its
autoregressive baseline and specdec's rows (each draft length, the auto row,
token-wise rejection and, at T > 0, block verification) through specdec's
llama.cpp adapter; llama-speculative-simple runs at each draft length and
temperature. At T > 0 both sample from the plain softmax (llama.cpp:
--top-k 0 --top-p 1 --min-p 0, as specdec-bench samples).

The rounds alternate which side runs first, so that load from elsewhere falls
on both alike. It prints the median over the rounds of each figure (with the
rounds' range) and the ratios: specdec / llama-speculative-simple at each
draft length, and the best row of each side per temperature. Acceptance is
accepted / drafted tokens on both sides. Exit status: 0, or 1 when a tool
failed (its output is printed).
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
    # errors="replace": the generated text of a synthetic vocabulary need not be valid UTF-8.
    result = subprocess.run(command, capture_output=True, text=True, errors="replace")
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


def llama_speculative(args, k, temperature, seed):
    command = [os.path.join(args.llama_bin, "llama-speculative-simple"), "-m", args.target, "-md", args.draft,
               "--spec-type", "draft-simple", "--spec-draft-n-max", str(k), "-p", args.prompt,
               "-n", str(args.new_tokens), "-t", str(args.threads), "-td", str(args.threads),
               "--temp", f"{temperature:g}", "--seed", str(seed)]
    if temperature > 0:  # the plain softmax, as specdec-bench samples
        command += ["--top-k", "0", "--top-p", "1", "--min-p", "0"]
    out = run(command)
    speed = re.search(r"decoded\s+(\d+) tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", out)
    accept = re.search(r"accept\s+=\s+([\d.]+)%", out)
    if not speed:
        sys.stderr.write(out)
        sys.exit(1)
    return float(speed.group(2)), float(accept.group(1)) / 100 if accept else float("nan"), int(speed.group(1))


def specdec(args, lengths, temperatures, seed, prompt_tokens):
    with tempfile.TemporaryDirectory() as folder:
        report = os.path.join(folder, "report.json")
        command = [args.specdec_bench, "--engine", args.engine, "--target", args.target, "--draft", args.draft,
                   "--threads", str(args.threads), "--temperatures", ",".join(f"{t:g}" for t in temperatures),
                   "--repetitions", "1", "--seed", str(seed), "--prompt", args.prompt, "--quiet", "--json", report,
                   "--new-tokens", str(args.new_tokens)]
        if args.engine == "llama.cpp":
            command += ["--draft-tokens", ",".join(map(str, lengths)) + ",auto", "--rule", "tokenwise,block"]
        else:
            command += ["--draft-tokens", ",".join(map(str, lengths)), "--rule", "tokenwise"]
        if prompt_tokens:
            command += ["--prompt-tokens", str(prompt_tokens)]
        run(command)
        with open(report) as f:
            return json.load(f)


def row_name(run_row):
    length = run_row["draft_length"]
    name = f"k={length}" if length != "auto" else "k=auto"
    return name + (" block" if run_row["rule"] == "block" else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-bin", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--engine", choices=["specdec", "llama.cpp"], default="specdec",
                        help="what runs specdec's models: its own engine, or llama.cpp through the adapter")
    parser.add_argument("--temperatures", default=None, help="comma-separated (default: 0; --engine llama.cpp: 0,1)")
    parser.add_argument("--specdec-bench", default="build/benchmarks/specdec-bench")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prompt-tokens", type=int, default=512, help="prefill comparison (--engine specdec only)")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--draft-tokens", default="2,4")
    parser.add_argument("--prompt", default="hello world")
    args = parser.parse_args()
    lengths = [int(k) for k in args.draft_tokens.split(",")]
    temperatures = [float(t) for t in (args.temperatures or ("0,1" if args.engine == "llama.cpp" else "0")).split(",")]
    same_engine = args.engine == "llama.cpp"

    figures = {}
    def add(name, value):
        figures.setdefault(name, []).append(value)

    def run_specdec(round_index):
        report = specdec(args, lengths, temperatures, 42 + round_index, 0 if same_engine else args.prompt_tokens)
        if not same_engine:
            add("specdec prefill", next(p["tokens_per_second"] for p in report["costs"]["prefill"]
                                        if p["tokens"] == args.prompt_tokens))
            add("specdec decode", report["costs"]["decode_tokens_per_second"])
        baseline_seen = set()
        for run_row in report["runs"]:
            t = run_row["temperature"]
            if run_row["method"] == "autoregressive":
                if t not in baseline_seen:  # one baseline per temperature serves every row
                    baseline_seen.add(t)
                    add(f"T={t:g} specdec autoregressive", run_row["tokens_per_second"])
            else:
                add(f"T={t:g} specdec {row_name(run_row)} tok/s", run_row["tokens_per_second"])
                add(f"T={t:g} specdec {row_name(run_row)} acceptance", run_row["acceptance_rate"])

    def run_llama(round_index):
        if not same_engine:
            prefill, decode = llama_bench(args)
            add("llama.cpp prefill", prefill)
            add("llama.cpp decode", decode)
        for t in temperatures:
            for k in lengths:
                speed, accept, tokens = llama_speculative(args, k, t, 1 + round_index)
                add(f"T={t:g} llama.cpp k={k} tok/s", speed)
                add(f"T={t:g} llama.cpp k={k} acceptance", accept)
                add(f"T={t:g} llama.cpp k={k} tokens", tokens)

    for round_index in range(args.rounds):
        # Alternate which side runs first in the round.
        sides = [run_specdec, run_llama] if round_index % 2 == 0 else [run_llama, run_specdec]
        for side in sides:
            side(round_index)
        # Each round's figures as they come: a run cut short still has them.
        sys.stderr.write(f"round {round_index + 1}/{args.rounds}: " +
                         "; ".join(f"{name} {values[-1]:.4g}" for name, values in figures.items()) + "\n")

    median = {name: statistics.median(values) for name, values in figures.items()}
    engine = "llama.cpp (through specdec's adapter)" if same_engine else "specdec's own engine"
    print(f"{args.target} / {args.draft}, {args.threads} threads, median of {args.rounds} interleaved rounds; "
          f"specdec runs on {engine}; llama.cpp: llama-speculative-simple --spec-type draft-simple")
    for name, value in median.items():
        spread = f"{min(figures[name]):.3g}-{max(figures[name]):.3g}"
        print(f"  {name:42s} {value:9.4g}   (rounds: {spread})")
    if not same_engine:
        print(f"prefill of {args.prompt_tokens} tokens, specdec / llama.cpp: "
              f"{median['specdec prefill'] / median['llama.cpp prefill']:.2f}x")
        print(f"decode, specdec / llama.cpp: {median['specdec decode'] / median['llama.cpp decode']:.2f}x")
    for t in temperatures:
        plain = median[f"T={t:g} specdec autoregressive"]
        for k in lengths:
            ours, theirs = median[f"T={t:g} specdec k={k} tok/s"], median[f"T={t:g} llama.cpp k={k} tok/s"]
            print(f"T={t:g} k={k}: specdec / llama-speculative-simple {ours / theirs:.2f}x; over plain decoding: "
                  f"specdec {ours / plain:.2f}x, llama-speculative-simple {theirs / plain:.2f}x")
        ours = {name[len(f'T={t:g} specdec '):-len(' tok/s')]: value for name, value in median.items()
                if name.startswith(f"T={t:g} specdec k=") and name.endswith(" tok/s")}
        theirs = {k: median[f"T={t:g} llama.cpp k={k} tok/s"] for k in lengths}
        best_ours, best_theirs = max(ours, key=ours.get), max(theirs, key=theirs.get)
        print(f"T={t:g} best: specdec {best_ours} {ours[best_ours]:.3g} tok/s / llama-speculative-simple "
              f"k={best_theirs} {theirs[best_theirs]:.3g} tok/s = {ours[best_ours] / theirs[best_theirs]:.2f}x "
              f"(plain decoding {plain:.3g} tok/s)")


if __name__ == "__main__":
    main()
