"""specdec-server over raw HTTP on the embedded tiny pair: the bad-input table
(each answered with OpenAI's error shape and the right status while the
server keeps serving), greedy tokens equal to the library's own single-request
decoding, streaming equal to the whole answer, 1 to 16 concurrent clients
and 64 on 16 slots, a seeded T = 1 request whose tokens are the same alone, among 15
concurrent others and at every draft length (plain sampling's for the seed), and a long prompt admitted in chunks (--prefill-chunk 16)
beside four streams, every answer the library's.

    test_server.py SERVER REFERENCE
"""
import concurrent.futures
import json
import re
import sys

from server_harness import Failures, Server, reference_tokens

server_binary, reference = sys.argv[1], sys.argv[2]
f = Failures()
server = Server(server_binary, "--synthetic", "-np", "4", "-t", "1", "--max-body", "65536", "--max-queue", "32")
try:
    # --- Endpoints ---------------------------------------------------------
    status, _, body = server.request("GET", "/health")
    f.check(status == 200 and json.loads(body)["status"] == "ok", f"/health: {status} {body!r}")
    status, _, body = server.request("GET", "/v1/models")
    models = json.loads(body)
    f.check(status == 200 and models["object"] == "list" and models["data"][0]["id"] == "synthetic-tiny",
            f"/v1/models: {status} {body!r}")
    model = models["data"][0]["id"]

    # --- Bad input: (name, method, path, body, expected status, expected param) ---
    long_prompt = [1] * 600
    cases = [
        ("malformed JSON", "POST", "/v1/completions", b'{"prompt": [1, 2', 400, None),
        ("body is not an object", "POST", "/v1/completions", b"[1, 2, 3]", 400, None),
        ("invalid UTF-8", "POST", "/v1/completions", b'{"prompt": "\xff\xfe", "max_tokens": 2}', 400, None),
        ("empty body", "POST", "/v1/completions", b"", 400, None),
        ("no prompt", "POST", "/v1/completions", {"max_tokens": 2}, 400, "prompt"),
        ("empty prompt", "POST", "/v1/completions", {"prompt": []}, 400, "prompt"),
        ("prompt of the wrong type", "POST", "/v1/completions", {"prompt": 5}, 400, "prompt"),
        ("token id beyond the vocabulary", "POST", "/v1/completions", {"prompt": [1, 100000]}, 400, "prompt[1]"),
        ("negative token id", "POST", "/v1/completions", {"prompt": [-3]}, 400, "prompt[0]"),
        ("fractional token id", "POST", "/v1/completions", {"prompt": [1.5]}, 400, "prompt[0]"),
        ("several prompts", "POST", "/v1/completions", {"prompt": [[1, 2], [3, 4]]}, 400, "prompt"),
        ("prompt longer than the context", "POST", "/v1/completions", {"prompt": long_prompt}, 400, "prompt"),
        ("text prompt without a tokenizer", "POST", "/v1/completions", {"prompt": "hello"}, 400, "prompt"),
        ("temperature as a string", "POST", "/v1/completions", {"prompt": [1], "temperature": "hot"}, 400, "temperature"),
        ("negative temperature", "POST", "/v1/completions", {"prompt": [1], "temperature": -1}, 400, "temperature"),
        ("top_p 0", "POST", "/v1/completions", {"prompt": [1], "top_p": 0}, 400, "top_p"),
        ("top_p above 1", "POST", "/v1/completions", {"prompt": [1], "top_p": 1.5}, 400, "top_p"),
        ("min_p above 1", "POST", "/v1/completions", {"prompt": [1], "min_p": 2}, 400, "min_p"),
        ("negative top_k", "POST", "/v1/completions", {"prompt": [1], "top_k": -1}, 400, "top_k"),
        ("max_tokens 0", "POST", "/v1/completions", {"prompt": [1], "max_tokens": 0}, 400, "max_tokens"),
        ("max_tokens as a string", "POST", "/v1/completions", {"prompt": [1], "max_tokens": "5"}, 400, "max_tokens"),
        ("max_tokens beyond the context", "POST", "/v1/completions", {"prompt": [1], "max_tokens": 10**12}, 400, "max_tokens"),
        ("seed as a string", "POST", "/v1/completions", {"prompt": [1], "seed": "x"}, 400, "seed"),
        ("repetition_penalty 0", "POST", "/v1/completions", {"prompt": [1], "repetition_penalty": 0}, 400, "repetition_penalty"),
        ("presence_penalty out of range", "POST", "/v1/completions", {"prompt": [1], "presence_penalty": 9}, 400, "presence_penalty"),
        ("logit_bias key not a token", "POST", "/v1/completions", {"prompt": [1], "logit_bias": {"abc": 1}}, 400, "logit_bias"),
        ("logit_bias beyond 100", "POST", "/v1/completions", {"prompt": [1], "logit_bias": {"5": 500}}, 400, "logit_bias.5"),
        ("logprobs beyond 20", "POST", "/v1/completions", {"prompt": [1], "logprobs": 50}, 400, "logprobs"),
        ("stream as a string", "POST", "/v1/completions", {"prompt": [1], "stream": "yes"}, 400, "stream"),
        ("stop string without a tokenizer", "POST", "/v1/completions", {"prompt": [1], "stop": "\n"}, 400, "stop"),
        ("stop strings without a tokenizer", "POST", "/v1/completions", {"prompt": [1], "stop": ["a", "b"]}, 400, "stop"),
        ("n = 2", "POST", "/v1/completions", {"prompt": [1], "n": 2}, 400, "n"),
        ("response_format", "POST", "/v1/completions", {"prompt": [1], "response_format": {"type": "json_object"}}, 400, "response_format"),
        ("echo (unsupported)", "POST", "/v1/completions", {"prompt": [1], "echo": True}, 400, "echo"),
        ("unknown field", "POST", "/v1/completions", {"prompt": [1], "frobnicate": 1}, 400, "frobnicate"),
        ("speculation beyond --draft-max", "POST", "/v1/completions", {"prompt": [1], "speculative.n_max": 99}, 400, "speculative.n_max"),
        ("chat without a tokenizer", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, 400, "messages"),
        ("chat without messages", "POST", "/v1/chat/completions", {"model": model}, 400, "messages"),
        ("30000 nested arrays", "POST", "/v1/completions", b'{"prompt": ' + b"[" * 30000 + b"]" * 30000 + b"}", 400, "prompt"),
        ("body over --max-body", "POST", "/v1/completions", b'{"prompt": [' + b"1, " * 40000 + b"1]}", 413, None),
        ("unknown endpoint", "GET", "/v1/nothing", None, 404, None),
        ("GET on a POST endpoint", "GET", "/v1/completions", None, 404, None),
    ]
    for name, method, path, body, expected, param in cases:
        status, _, data = server.request(method, path, body)
        try:
            error = json.loads(data)["error"]
            shaped = all(k in error for k in ("message", "type", "param", "code")) and error["message"]
        except (ValueError, KeyError, TypeError):
            error, shaped = None, False
        f.check(status == expected, f"{name}: status {status}, expected {expected} ({data[:200]!r})")
        f.check(shaped, f"{name}: not OpenAI's error shape: {data[:200]!r}")
        if param is not None and error is not None:
            f.check(error["param"] == param, f"{name}: param {error.get('param')!r}, expected {param!r}")
        f.check(server.healthy(), f"{name}: the server stopped answering /health")

    # --- Greedy: the library's own single-request decoding ------------------
    prompts = [[1, 2, 3, 4], [7], [100, 200, 300, 400, 500, 10, 20], [42] * 30]
    for prompt in prompts:
        expected = reference_tokens(reference, "tiny", 48, prompt)
        for n_max in (None, 0, 1, 4, 8):
            fields = {"prompt": prompt, "max_tokens": 48, "temperature": 0}
            if n_max is not None:
                fields["speculative.n_max"] = n_max
            status, body = server.complete(**fields)
            ok = status == 200
            f.check(ok, f"greedy {prompt[:4]} n_max {n_max}: status {status} {body}")
            if ok:
                f.check(body["choices"][0]["tokens"] == expected,
                        f"greedy {prompt[:4]} n_max {n_max}: {body['choices'][0]['tokens']} != library {expected}")
                f.check(n_max != 0 or body["specdec"]["draft_tokens_proposed"] == 0,
                        f"speculative.n_max 0 still drafted: {body['specdec']}")
                f.check(body["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": 48,
                                          "total_tokens": len(prompt) + 48}, f"usage: {body['usage']}")

    # --- Streaming equals the whole answer ----------------------------------
    status, events, done = server.stream(prompt=[5, 6, 7], max_tokens=40, temperature=0,
                                         stream_options={"include_usage": True})
    streamed = [t for e in events for c in e["choices"] for t in c["tokens"]]
    f.check(status == 200 and done, f"stream: status {status}, [DONE] {done}")
    f.check(streamed == reference_tokens(reference, "tiny", 40, [5, 6, 7]), f"stream tokens {streamed}")
    f.check(events and events[-1]["usage"]["completion_tokens"] == 40, f"stream usage: {events[-1] if events else None}")
    finishes = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
    f.check(finishes == ["length"], f"stream finish reasons {finishes}")

    # --- Stop tokens, logit bias, logprobs ----------------------------------
    greedy = reference_tokens(reference, "tiny", 20, [9, 8, 7])
    status, body = server.complete(prompt=[9, 8, 7], max_tokens=20, temperature=0, stop=[greedy[5]])
    cut = greedy[:greedy.index(greedy[5]) + 1]
    f.check(status == 200 and body["choices"][0]["tokens"] == cut and body["choices"][0]["finish_reason"] == "stop",
            f"stop token: {body}")
    status, body = server.complete(prompt=[9, 8, 7], max_tokens=5, temperature=0, logit_bias={"17": 100})
    f.check(status == 200 and body["choices"][0]["tokens"] == [17] * 5, f"logit_bias +100: {body}")
    status, body = server.complete(prompt=[9, 8, 7], max_tokens=6, temperature=0.7, seed=3, logprobs=3)
    lp = body["choices"][0]["logprobs"] if status == 200 else None
    f.check(lp is not None and len(lp["token_logprobs"]) == 6 and all(len(t) == 3 for t in lp["top_logprobs"]) and
            all(v <= 0 for v in lp["token_logprobs"]), f"logprobs: {body}")
    # Streamed, each chunk carries its own tokens' logprobs: together the same as the whole answer's.
    status, events, done = server.stream(prompt=[9, 8, 7], max_tokens=6, temperature=0.7, seed=3, logprobs=3)
    chunks = [c for e in events for c in e["choices"] if c["tokens"]]
    f.check(status == 200 and done and all(c["logprobs"] is not None and
                                           len(c["logprobs"]["token_logprobs"]) == len(c["tokens"]) for c in chunks),
            f"streamed logprobs: every chunk's logprobs match its tokens: {events}")
    if status == 200 and lp is not None and all(c["logprobs"] for c in chunks):
        joined = {k: [v for c in chunks for v in c["logprobs"][k]] for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
        f.check(joined == lp, f"streamed logprobs {joined} != whole {lp}")

    # --- Concurrency: 1, 4 and 16 clients, greedy and streamed --------------
    def client(i):
        prompt = [1 + i, 2 + i, 3 + i]
        if i % 2:
            status, events, done = server.stream(prompt=prompt, max_tokens=32, temperature=0)
            return i, status == 200 and done, [t for e in events for c in e["choices"] for t in c["tokens"]]
        status, body = server.complete(prompt=prompt, max_tokens=32, temperature=0)
        return i, status == 200, body["choices"][0]["tokens"] if status == 200 else None

    for clients in (1, 4, 16):
        expected = {i: reference_tokens(reference, "tiny", 32, [1 + i, 2 + i, 3 + i]) for i in range(clients)}
        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            for i, ok, tokens in pool.map(client, range(clients)):
                f.check(ok and tokens == expected[i], f"{clients} clients, client {i}: ok {ok}, {tokens} != {expected[i]}")

    # --- A seeded T = 1 request: the same tokens alone and among 15 others ---
    seeded = {"prompt": [3, 1, 4, 1, 5], "max_tokens": 64, "temperature": 1.0, "seed": 1234}
    alone = server.complete(**seeded)[1]["choices"][0]["tokens"]

    def neighbour(i):
        fields = {"prompt": [i + 10, i + 20], "max_tokens": 40 + 3 * i, "temperature": [0, 0.8, 1.0][i % 3]}
        if i % 4 == 0:
            fields["seed"] = i
        if i % 5 == 0:
            fields["speculative.n_max"] = 2
        status, body = server.complete(**fields)
        return status

    for attempt in range(3):
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            others = [pool.submit(neighbour, i) for i in range(15)]
            among = pool.submit(lambda: server.complete(**seeded)[1]["choices"][0]["tokens"])
            statuses = [o.result() for o in others]
            f.check(all(s == 200 for s in statuses), f"neighbours: {statuses}")
            f.check(among.result() == alone, f"seeded T = 1 among 15 others (round {attempt}): {among.result()} != alone {alone}")
    # Its tokens do not depend on the draft lengths either: the same with
    # speculation off and with a cap of 1 or 3. (How many drafts the policy
    # runs here follows this machine's timings; the in-process test of the
    # request path, tests/serving/, forces lengths that vary and reach the cap.)
    status, plain = server.complete(**seeded, **{"speculative.n_max": 0})
    f.check(plain["choices"][0]["tokens"] == alone,
            f"seeded T = 1 without speculation: {plain['choices'][0]['tokens']} != with it {alone}")
    f.check(plain["specdec"]["draft_tokens_proposed"] == 0, f"speculative.n_max 0 drafted: {plain['specdec']}")
    for cap in (1, 3):
        status, body = server.complete(**seeded, **{"speculative.n_max": cap})
        f.check(body["choices"][0]["tokens"] == alone,
                f"seeded T = 1 with speculative.n_max {cap}: {body['choices'][0]['tokens']} != {alone}")
    f.check(server.complete(**{**seeded, "seed": 4321})[1]["choices"][0]["tokens"] != alone,
            "another seed gave the same tokens: the equalities above cannot fail")

    # --- Metrics ------------------------------------------------------------
    status, values = server.metrics()
    f.check(status == 200, f"/metrics status {status}")
    for name in ('specdec_requests_total{endpoint="/v1/completions",status="200"}',
                 'specdec_requests_total{endpoint="/v1/completions",status="400"}',
                 'specdec_requests_total{endpoint="/v1/completions",status="413"}',
                 'specdec_requests_total{endpoint="other",status="404"}',
                 "specdec_generated_tokens_total", "specdec_draft_tokens_total", "specdec_acceptance_rate",
                 "specdec_mean_draft_length", "specdec_time_to_first_token_seconds_count",
                 "specdec_inter_token_seconds_count"):
        f.check(values.get(name, 0) > 0, f"/metrics: {name} = {values.get(name)}")
    f.check("specdec_requests_waiting" in values and "specdec_requests_running" in values, "/metrics: queue gauges")
    f.check(server.healthy(), "the server stopped answering after the tests")
finally:
    code = server.stop()
f.check(code == 0, f"the server exited with {code} after SIGINT")

# --- 64 concurrent clients on 16 slots, 48 of them queued at first ---------
server = Server(server_binary, "--synthetic", "-np", "16", "-t", "1", "--max-queue", "64")
try:
    expected = {i: reference_tokens(reference, "tiny", 24, [1 + i, 2 + i, 3 + i]) for i in range(64)}

    def client64(i):
        prompt = [1 + i, 2 + i, 3 + i]
        if i % 2:
            status, events, done = server.stream(prompt=prompt, max_tokens=24, temperature=0)
            return i, status, [t for e in events for c in e["choices"] for t in c["tokens"]]
        status, body = server.complete(prompt=prompt, max_tokens=24, temperature=0)
        return i, status, body["choices"][0]["tokens"] if status == 200 else body

    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        for i, status, tokens in pool.map(client64, range(64)):
            f.check(status == 200 and tokens == expected[i], f"64 clients, client {i}: {status} {tokens}")
    _, values = server.metrics()
    f.check(values.get('specdec_requests_ended_total{status="finished"}') == 64, f"64 clients: {values}")
finally:
    code = server.stop()
f.check(code == 0, f"the server exited with {code} after SIGINT")

# --- Chunked prefill: a 400-token prompt goes in 16 tokens a step while four
# streams run; every answer equals the library's alone. --log-steps: a line
# per step, whose counts add up to what the clients received.
server = Server(server_binary, "--synthetic", "-np", "5", "-t", "1", "--prefill-chunk", "16", "--log-steps")
try:
    long_prompt = [1 + (i * 37) % 500 for i in range(400)]
    expected_long = reference_tokens(reference, "tiny", 24, long_prompt)
    expected = {i: reference_tokens(reference, "tiny", 64, [1 + i, 2 + i, 3 + i]) for i in range(4)}

    def streamed(i):
        status, events, done = server.stream(prompt=[1 + i, 2 + i, 3 + i], max_tokens=64, temperature=0)
        return i, status, [t for e in events for c in e["choices"] for t in c["tokens"]]

    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        streams = pool.map(streamed, range(4))
        status, body = server.complete(prompt=long_prompt, max_tokens=24, temperature=0)
        f.check(status == 200 and body["choices"][0]["tokens"] == expected_long, f"chunked 400-token prompt: {status} {body}")
        for i, status, tokens in streams:
            f.check(status == 200 and tokens == expected[i], f"stream {i} beside a chunked prefill: {status} {tokens}")
finally:
    code = server.stop()
f.check(code == 0, f"the server exited with {code} after SIGINT")
step_pattern = re.compile(r"step (\d+): requests (\d+), target tokens (\d+), drafts (\d+) in (\d+) rounds, emitted (\d+), "
                          r"[0-9.]+ ms \(prefill (\d+) tokens, [0-9.]+ ms; admitted (\d+), retired (\d+)\)")
steps = [[int(g) for g in m.groups()] for m in map(step_pattern.match, server.process.output) if m]
if f.check(len(steps) > 24, f"--log-steps: {len(steps)} step lines"):
    f.check([s[0] for s in steps] == list(range(1, len(steps) + 1)), "--log-steps: steps numbered 1, 2, ...")
    f.check(sum(s[5] for s in steps) == 4 * 64 + 24, f"--log-steps: {sum(s[5] for s in steps)} tokens emitted, not 280")
    f.check(all(s[2] == s[1] + s[3] for s in steps), "--log-steps: a target pass is each request's pending token and its drafts")
    f.check(all(s[6] <= 16 for s in steps) and sum(s[6] for s in steps) >= 399,
            f"--log-steps: prefill {[s[6] for s in steps if s[6]]} (16 tokens a step at most, the long prompt's 399 in all)")
    f.check(sum(s[7] for s in steps) == 5 and sum(s[8] for s in steps) == 5, "--log-steps: five requests admitted and retired")
f.exit()
