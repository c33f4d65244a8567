"""The inputs of the sampler-chain references: fixed logits rows, histories and
settings, the same for every run (seeded, standard library only).

Run as a script it prints them as JSON for the llama.cpp generator; the
Hugging Face generator imports `cases()`. Logits are rounded to float32 here so
that every consumer (llama.cpp's float candidates, torch's float32 tensors,
specdec's float rows) starts from the same numbers.
"""
import json
import math
import random
import struct
import sys

SEED = 33


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def ranked(logits):
    """Token ids by decreasing logit, ties by increasing id."""
    return sorted(range(len(logits)), key=lambda t: (-logits[t], t))


MARGIN = 1e-5


def ill_conditioned_cut(case):
    """Where a cut of the chain is not decided by the chain's definition but
    by rounding or by the order among equal logits, the name of that stage,
    else None. Such a case has no reference: llama.cpp ranks equal logits in
    whatever order std::partial_sort leaves them, Hugging Face's top-k keeps
    every token tied with the k-th, and float32 and float64 sums may fall on
    either side of a threshold. A cut is ill-conditioned when the last kept
    and the first removed candidate have logits within MARGIN, when top-p's
    cumulative mass before or at the cut is within MARGIN of top_p, or when a
    logit is within MARGIN of min-p's threshold (all at the scale the stage
    sees). Double precision, the definition's ranking."""
    o = case["options"]
    x = [float(v) for v in case["logits"]]
    for t, b in o["logit_bias"]:
        x[t] += -math.inf if b == "-inf" else b
    window = o["penalty_last_n"]
    if window != 0:
        seen = case["history"] if window < 0 else case["history"][-window:]
        counts = {}
        for t in seen:
            counts[t] = counts.get(t, 0) + 1
        for t, c in counts.items():
            v = x[t] / o["repeat_penalty"] if x[t] > 0 else x[t] * o["repeat_penalty"]
            x[t] = v - c * o["frequency_penalty"] - o["presence_penalty"]
    if o["temperature"] == 0.0:
        finite = sorted((v for v in x if v != -math.inf), reverse=True)
        return "greedy" if len(finite) > 1 and finite[0] - finite[1] < MARGIN else None
    order = (["top_k", "top_p", "min_p", "temperature"] if case["chain"] == "llama_cpp"
             else ["temperature", "top_k", "top_p", "min_p"])
    scale = 1.0
    candidates = ranked(x)

    def values():
        return [x[t] / scale for t in candidates]

    def probabilities(v):
        top = v[0]
        e = [math.exp(u - top) if u != -math.inf else 0.0 for u in v]
        s = sum(e)
        return [u / s for u in e]

    for stage in order:
        v = values()
        if stage == "temperature":
            scale = o["temperature"]
            continue
        if stage == "top_k":
            if not 0 < o["top_k"] < len(candidates):
                continue
            kept = o["top_k"]
        elif stage == "top_p":
            if o["top_p"] >= 1.0:
                continue
            p, mass, kept = probabilities(v), 0.0, len(candidates)
            for i, q in enumerate(p):
                if abs(mass - o["top_p"]) < MARGIN or abs(mass + q - o["top_p"]) < MARGIN:
                    return stage
                mass += q
                if mass >= o["top_p"]:
                    kept = i + 1
                    break
        else:
            if o["min_p"] <= 0.0:
                continue
            threshold = v[0] + math.log(o["min_p"])
            if any(abs(u - threshold) < MARGIN for u in v):
                return stage
            kept = sum(1 for u in v if u >= threshold)
        if kept < len(candidates) and v[kept - 1] - v[kept] < MARGIN:
            return stage
        candidates = candidates[:kept]
    return None


def rows(rng):
    out = {}
    # Plain Gaussian logits.
    out["gauss64"] = [f32(rng.gauss(0.0, 2.0)) for _ in range(64)]
    # Groups of two to four tokens with exactly equal logits, the leading
    # token's among them.
    ties = [f32(rng.gauss(0.0, 2.5)) for _ in range(128)]
    for leader in [max(range(128), key=lambda t: ties[t])] + rng.sample(range(128), 14):
        for t in rng.sample(range(128), rng.randint(1, 3)):
            ties[t] = ties[leader]
    out["ties128"] = ties
    # Extreme values: a few large logits (as large as real models' leading
    # ones), many hugely negative ones. Logits of 1e4 would measure float
    # rounding rather than the chain: at that size float32 steps by 1e-3, so
    # llama.cpp's logit / T alone moves probabilities by ~1e-4.
    extreme = [f32(rng.gauss(-5.0, 3.0)) for _ in range(256)]
    for t in rng.sample(range(256), 40):
        extreme[t] = f32(-1.0e4 + rng.random())
    for t, v in zip(rng.sample(range(256), 4), (31.0, 29.5, 28.75, 24.0)):
        extreme[t] = f32(v)
    out["extreme256"] = extreme
    # A flat row: top-p keeps many tokens.
    out["flat200"] = [f32(rng.gauss(0.0, 0.35)) for _ in range(200)]
    # A peaked row: one token carries most of the mass.
    peaked = [f32(rng.gauss(-2.0, 1.0)) for _ in range(96)]
    peaked[rng.randrange(96)] = f32(9.0)
    out["peaked96"] = peaked
    return out


def history_for(rng, logits, length=40, window=16):
    """A history that repeats the row's leading tokens: some only inside the
    last `window` tokens, some only before it, some in both, some often."""
    top = ranked(logits)[:12]
    vocab = len(logits)
    before = [top[0], top[1], top[1], top[4], top[7]]           # top[1], top[4], top[7] only outside the window
    inside = [top[0], top[2], top[2], top[2], top[3], top[5]]   # top[2] three times, top[0] in both
    filler_choices = [t for t in range(vocab) if t not in top]
    head = [rng.choice(filler_choices) for _ in range(length - window - len(before))] + before
    rng.shuffle(head)
    tail = inside + [rng.choice(filler_choices) for _ in range(window - len(inside))]
    rng.shuffle(tail)
    return head + tail


def options(**kw):
    base = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0, "penalty_last_n": 64, "logit_bias": []}
    base.update(kw)
    return base


def cases():
    rng = random.Random(SEED)
    r = rows(rng)
    hist = {name: history_for(rng, logits) for name, logits in r.items()}
    top = {name: ranked(logits) for name, logits in r.items()}
    out = []

    def add(chain, name, row, opts, history=None):
        out.append({"name": f"{chain}/{name}/{row}", "chain": chain, "logits": r[row],
                    "history": hist[row] if history is None else history, "options": opts})

    # llama.cpp's chain: its own defaults and each stage alone and together.
    for chain in ("llama_cpp", "hugging_face"):
        for row in r:
            add(chain, "softmax", row, options())
            add(chain, "top_k=10", row, options(top_k=10))
            add(chain, "top_p=0.9", row, options(top_p=0.9))
            add(chain, "top_k=40,top_p=0.95,T=0.8", row, options(top_k=40, top_p=0.95, temperature=0.8))
            add(chain, "min_p=0.05", row, options(min_p=0.05))
            for t in (0.7, 1.0, 1.3):
                add(chain, f"top_k=20,top_p=0.9,min_p=0.02,T={t}", row,
                    options(top_k=20, top_p=0.9, min_p=0.02, temperature=t))
            add(chain, "min_p=0.1,T=1.3", row, options(min_p=0.1, temperature=1.3))
            add(chain, "top_p=0.5,T=0.7", row, options(top_p=0.5, temperature=0.7))
            add(chain, "T=0", row, options(temperature=0.0))
            # Logit bias: a boost, a ban (-inf) of the leading token, a small nudge.
            bias = [[top[row][3], 2.5], [top[row][0], "-inf"], [top[row][10], -0.75]]
            add(chain, "logit_bias", row, options(logit_bias=bias, top_k=30, top_p=0.95))
            # The repetition penalty over the whole history (Hugging Face has no window).
            for rp in (1.3, 0.85):
                add(chain, f"repeat={rp},whole", row,
                    options(repeat_penalty=rp, penalty_last_n=-1, top_k=40, top_p=0.95, temperature=0.8))
            add(chain, "bias+repeat=1.2,whole+min_p", row,
                options(repeat_penalty=1.2, penalty_last_n=-1, logit_bias=[[top[row][2], 1.5], [top[row][6], "-inf"]],
                        min_p=0.05, temperature=1.3))
        if chain == "llama_cpp":
            # llama.cpp only: a window, presence and frequency penalties, a token biased twice.
            for row in r:
                add(chain, "repeat=1.3,freq=0.5,presence=0.3,last_n=16", row,
                    options(repeat_penalty=1.3, frequency_penalty=0.5, presence_penalty=0.3, penalty_last_n=16,
                            top_k=40, top_p=0.95, temperature=0.8))
                add(chain, "freq=0.4,presence=-0.2,last_n=64", row,
                    options(frequency_penalty=0.4, presence_penalty=-0.2, penalty_last_n=64, min_p=0.05))
                add(chain, "everything", row,
                    options(repeat_penalty=1.1, frequency_penalty=0.2, presence_penalty=0.1, penalty_last_n=24,
                            logit_bias=[[top[row][5], 1.0], [top[row][5], 0.5], [top[row][1], "-inf"]],
                            top_k=25, top_p=0.9, min_p=0.03, temperature=1.3))
    return out


def split_cases():
    """(the cases that have a reference, [(name, stage) of those left out])"""
    kept, left_out = [], []
    for case in cases():
        stage = ill_conditioned_cut(case)
        if stage is None:
            kept.append(case)
        else:
            left_out.append([case["name"], stage])
    return kept, left_out


if __name__ == "__main__":
    kept, left_out = split_cases()
    json.dump({"seed": SEED, "cases": kept, "left_out": left_out}, sys.stdout)
    sys.stdout.write("\n")
