"""specdec-server --engine llama.cpp: llama.cpp runs the models, tokenises and
applies the chat template; the decoding (drafting, acceptance, the batch) is
specdec's. On the qwen2 fixture pair (F32 target, Q8_0 draft):

- greedy completions with speculation equal the same requests without it
  (speculative.n_max = 0: one llama.cpp target pass a token), whole and
  streamed, and equal the specdec engine's answer to the same request;
- chat through llama_chat_apply_template (chatml) equals the library's own
  template + greedy decoding, stopping at the end of the turn;
- eight concurrent greedy requests on four slots each equal their answer
  alone; a seeded T = 1 request returns the same tokens alone and among
  seven others;
- a prompt too long for the slot's context is a 400, and the server goes on.

    test_server_llama_cpp.py SERVER REFERENCE FIXTURES
"""
import concurrent.futures
import json
import sys

from server_harness import Failures, Server, chat_reference

server_binary, reference, fixtures = sys.argv[1], sys.argv[2], sys.argv[3]
f = Failures()
target, draft = f"{fixtures}/qwen2-f32.gguf", f"{fixtures}/qwen2-q8_0.gguf"
prompts = ["Once upon a time, there was", "The cat sat on the mat", "Hello world", "In the beginning",
           "A B C D E F", "once more, with feeling", "1 2 3 4 5", "the quick brown fox"]
chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]


def tokens(server, **fields):
    status, body = server.complete(**fields)
    if not f.check(status == 200, f"{fields}: HTTP {status} {body}"):
        return None
    return body["choices"][0]["tokens"]


def streamed_tokens(server, **fields):
    status, events, done = server.stream(**fields)
    f.check(status == 200 and done, f"streamed {fields}: HTTP {status}, [DONE] {done}")
    return [t for e in events for c in e["choices"] for t in c.get("tokens", [])]


def answers(server):
    """Each prompt's greedy tokens alone, with and without speculation."""
    greedy = {"max_tokens": 40, "temperature": 0, "ignore_eos": True}
    alone = {p: tokens(server, prompt=p, **greedy) for p in prompts}
    for p in prompts[:3]:
        plain = tokens(server, prompt=p, **greedy, **{"speculative.n_max": 0})
        f.check(alone[p] == plain, f"{p!r}: speculative {alone[p]} != plain llama.cpp decoding {plain}")
        f.check(streamed_tokens(server, prompt=p, **greedy) == alone[p], f"{p!r}: streamed tokens differ")
    return alone


specdec_answers = None
server = Server(server_binary, "-m", target, "-md", draft, "-np", "4", "-t", "1")
try:
    specdec_answers = {p: tokens(server, prompt=p, max_tokens=40, temperature=0, ignore_eos=True) for p in prompts[:3]}
finally:
    f.check(server.stop() == 0, "the specdec engine's server did not stop cleanly")

server = Server(server_binary, "--engine", "llama.cpp", "-m", target, "-md", draft, "-np", "4", "-t", "1",
                "--chat-template", "chatml")
try:
    alone = answers(server)
    for p, expected in specdec_answers.items():
        f.check(alone[p] == expected, f"{p!r}: llama.cpp engine {alone[p]} != specdec engine {expected}")
    f.check(all(len(alone[p] or []) == 40 for p in prompts), "every greedy answer has its 40 tokens")

    # Chat: llama.cpp's template code against the library's ChatTemplate.
    expected_ids, expected_text = chat_reference(reference, target, "chatml", 120, chat)
    status, body, data, _ = server.post("/v1/chat/completions", {"messages": chat, "max_tokens": 120, "temperature": 0})
    if f.check(status == 200, f"chat: HTTP {status} {data[:300]!r}"):
        choice = body["choices"][0]
        f.check(choice["finish_reason"] == "stop", f"chat: finish_reason {choice['finish_reason']} (end of turn expected)")
        f.check(choice["tokens"] == expected_ids, f"chat: tokens {choice['tokens']} != library {expected_ids}")
        f.check(choice["message"]["content"] == expected_text, "chat: text differs from the library's")

    # Eight concurrent greedy requests on four slots: each equals its answer alone.
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        together = dict(zip(prompts, pool.map(
            lambda p: tokens(server, prompt=p, max_tokens=40, temperature=0, ignore_eos=True), prompts)))
    for p in prompts:
        f.check(together[p] == alone[p], f"{p!r} among 7 others: {together[p]} != alone {alone[p]}")

    # A seeded T = 1 request: the same tokens alone and among seven others.
    seeded = {"prompt": prompts[0], "max_tokens": 40, "temperature": 1.0, "seed": 11, "ignore_eos": True}
    seeded_alone = tokens(server, **seeded)
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        others = [pool.submit(tokens, server, prompt=p, max_tokens=60, temperature=0.8, ignore_eos=True) for p in prompts[1:]]
        seeded_among = tokens(server, **seeded)
        for other in others:
            other.result()
    f.check(seeded_among == seeded_alone, f"seeded T = 1: among others {seeded_among} != alone {seeded_alone}")

    # A prompt longer than the slot's context (256 tokens) is refused, and the server goes on.
    status, body, data, _ = server.post("/v1/completions", {"prompt": " ".join(["cat"] * 600), "max_tokens": 4})
    f.check(status == 400 and body["error"]["code"] == "context_length_exceeded", f"long prompt: {status} {data[:200]!r}")
    f.check(tokens(server, prompt=prompts[0], max_tokens=40, temperature=0, ignore_eos=True) == alone[prompts[0]],
            "after a refusal the server answers as before")
finally:
    f.check(server.stop() == 0, "the llama.cpp engine's server did not stop cleanly")
f.exit()
