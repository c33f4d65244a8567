"""Writes the Hugging Face reference of the processed distribution: for each
case of cases.py whose chain is "hugging_face", the row's logits (a float32
torch tensor, as a model returns them) go through transformers' own logits
processors in the order GenerationMixin._get_logits_processor builds them:
SequenceBiasLogitsProcessor (the single-token logit biases), then
RepetitionPenaltyLogitsProcessor (over the whole history: transformers has no
window and no presence or frequency penalty), then, when sampling,
TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper
(min_tokens_to_keep = 1, generate's value without beams). The probabilities
are the softmax of the result, as generate's sampling step computes them.

    python hugging_face_reference.py OUT.json
"""
import json
import math
import sys

import torch
import transformers
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import cases as case_inputs


def bias_value(value):
    return -math.inf if value == "-inf" else float(value)


def processors(options):
    o = options
    chain = LogitsProcessorList()
    if o["logit_bias"]:
        tokens = [t for t, _ in o["logit_bias"]]
        if len(set(tokens)) != len(tokens):
            raise ValueError("transformers' sequence_bias holds one bias per token")
        chain.append(SequenceBiasLogitsProcessor(sequence_bias=[[[t], bias_value(b)] for t, b in o["logit_bias"]]))
    if o["repeat_penalty"] != 1.0:
        if o["penalty_last_n"] != -1 or o["frequency_penalty"] != 0.0 or o["presence_penalty"] != 0.0:
            raise ValueError("transformers' repetition penalty has no window and no presence or frequency penalty")
        chain.append(RepetitionPenaltyLogitsProcessor(float(o["repeat_penalty"])))
    if o["temperature"] == 0.0:
        return chain, True  # greedy search: the argmax of the processed logits
    if o["temperature"] != 1.0:
        chain.append(TemperatureLogitsWarper(float(o["temperature"])))
    if o["top_k"] != 0:
        chain.append(TopKLogitsWarper(top_k=int(o["top_k"]), min_tokens_to_keep=1))
    if o["top_p"] < 1.0:
        chain.append(TopPLogitsWarper(top_p=float(o["top_p"]), min_tokens_to_keep=1))
    if o["min_p"] > 0.0:
        chain.append(MinPLogitsWarper(min_p=float(o["min_p"]), min_tokens_to_keep=1))
    return chain, False


def probabilities(case):
    chain, greedy = processors(case["options"])
    input_ids = torch.tensor([case["history"]], dtype=torch.long)
    scores = torch.tensor([case["logits"]], dtype=torch.float32)
    scores = chain(input_ids, scores)
    if greedy:
        p = torch.zeros_like(scores, dtype=torch.float64)
        p[0, int(torch.argmax(scores, dim=-1))] = 1.0
        return p[0].tolist()
    return torch.softmax(scores, dim=-1)[0].double().tolist()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: hugging_face_reference.py OUT.json")
    kept, left_out = case_inputs.split_cases()
    out = []
    for case in kept:
        if case["chain"] != "hugging_face":
            continue
        entry = dict(case)
        entry["probabilities"] = probabilities(case)
        out.append(entry)
    document = {
        "description": "The processed distribution of Hugging Face transformers' logits processors (generate's order: "
                       "sequence bias, repetition penalty, temperature, top-k, top-p, min-p) for fixed logits rows, "
                       "histories and settings, then the softmax. Written by scripts/sampling_references (see its "
                       "README); do not edit by hand.",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "seed": case_inputs.SEED,
        "left_out": [entry for entry in left_out if entry[0].startswith("hugging_face/")],
    }
    # One case a line: the file stays readable and its diffs small.
    head = json.dumps(document, indent=1)
    with open(sys.argv[1], "w") as f:
        f.write(head[: head.rfind("}")].rstrip() + ',\n "cases": [\n')
        f.write(",\n".join("  " + json.dumps(entry) for entry in out))
        f.write("\n ]\n}\n")
    print(f"hugging_face_reference: {len(out)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
