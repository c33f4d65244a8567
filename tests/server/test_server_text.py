"""specdec-server's text layer: /v1/chat/completions through a chat template,
and stop strings on both endpoints.

- Chat on GGUF pairs (qwen2 with --chat-template chatml, llama3 with llama3,
  mistral with mistral-v3; the fixtures carry no template of their own): the
  answer's tokens and text equal the library's own (text::ChatTemplate,
  SpecialTokens::parse, greedy AutoregressiveDecoder until an
  end-of-generation token), whole and streamed as delta.content chunks.
- Stop strings: one that straddles two tokens ends the text right before it,
  finish_reason "stop", and nothing at or after it is ever streamed.
- Refusals, each a 400 naming the field or the reason: bad messages (no
  role, an unknown role, non-string content, unknown fields), chat without
  a tokenizer (--synthetic) or without a known template (the llama3 fixture
  has no tokenizer.chat_template), stop strings without a tokenizer.

    test_server_text.py SERVER REFERENCE FIXTURES
"""
import json
import sys

from server_harness import Failures, Server, chat_reference

server_binary, reference, fixtures = sys.argv[1], sys.argv[2], sys.argv[3]
f = Failures()


def events(server, path, fields):
    status, _, data = server.request("POST", path, {**fields, "stream": True})
    parsed, done = [], False
    for block in data.decode().split("\n\n"):
        if block.startswith("data: "):
            payload = block[len("data: "):]
            if payload == "[DONE]":
                done = True
            else:
                parsed.append(json.loads(payload))
    return status, parsed, done


def refused(server, path, body, param, what):
    status, parsed, data, _ = server.post(path, body)
    ok = status == 400 and parsed is not None and parsed["error"]["param"] == param
    f.check(ok, f"{what}: expected 400 naming {param!r}, got {status} {data[:300]!r}")
    return parsed["error"]["message"] if ok else ""


def pick_stop(pieces):
    """A two-character stop string made of the end of one token and the start of
    the next, found in no single token's text (so every match straddles two)."""
    printable = lambda p: p and all(32 <= ord(c) < 127 for c in p)
    for a, b in zip(pieces, pieces[1:]):
        if printable(a) and printable(b):
            stop = a[-1] + b[0]
            if not any(stop in p for p in pieces):
                return stop
    return None


hi = [{"role": "user", "content": "Hello"}]

# --- Refusals on the synthetic pair (no tokenizer) ------------------------
server = Server(server_binary, "--synthetic", "-np", "1", "-t", "1")
try:
    for body, param, what in (
            ({"messages": [{"content": "hi"}]}, "messages[0].role", "a message without a role"),
            ({"messages": [{"role": "user"}]}, "messages[0].content", "a message without content"),
            ({"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]}, "messages[1].role",
             "an unknown role"),
            ({"messages": [{"role": 3, "content": "a"}]}, "messages[0].role", "a role that is not a string"),
            ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]}, "messages[0].content",
             "non-string content"),
            ({"messages": [{"role": "user", "content": None}]}, "messages[0].content", "null content"),
            ({"messages": [{"role": "user", "content": "a", "tool_calls": []}]}, "messages[0].tool_calls",
             "an unknown message field"),
            ({"messages": ["hi"]}, "messages[0]", "a message that is not an object"),
            ({"messages": []}, "messages", "no messages"),
            ({"messages": hi, "stop": ""}, "stop", "an empty stop string"),
            ({"messages": hi, "stop": {"a": 1}}, "stop", "a stop object")):
        refused(server, "/v1/chat/completions", body, param, what)
    message = refused(server, "/v1/chat/completions", {"messages": hi}, "messages", "chat on the synthetic pair")
    f.check("tokenizer" in message, f"the synthetic pair's chat refusal does not say why: {message!r}")
    message = refused(server, "/v1/completions", {"prompt": [1, 2], "stop": ["\n"]}, "stop",
                      "a stop string without a tokenizer")
    f.check("tokenizer" in message, f"the stop-string refusal does not say why: {message!r}")
    status, body = server.complete(prompt=[1, 2], max_tokens=4, temperature=0, stop=[5])
    f.check(status == 200, f"stop token ids still work without a tokenizer: {status} {body}")
finally:
    code = server.stop()
f.check(code == 0, f"the server exited with {code}")

# --- A file without a chat template ---------------------------------------
server = Server(server_binary, "-m", f"{fixtures}/llama3-f32.gguf", "-md", f"{fixtures}/llama3-q8_0.gguf", "-np", "1",
                "-t", "1")
try:
    message = refused(server, "/v1/chat/completions", {"messages": hi}, "messages", "chat without a template")
    f.check("chat_template" in message and "--chat-template" in message,
            f"the no-template refusal does not say why: {message!r}")
finally:
    code = server.stop()
f.check(code == 0, f"the server exited with {code}")

# --- Chat in the other families (by name: the fixtures carry no template) --
for family, template in (("llama3", "llama3"), ("mistral", "mistral-v3")):
    model = f"{fixtures}/{family}-f32.gguf"
    server = Server(server_binary, "-m", model, "-md", f"{fixtures}/{family}-q8_0.gguf", "-np", "1", "-t", "1",
                    "--chat-template", template)
    try:
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
        tokens, text = chat_reference(reference, model, template, 32, messages)
        fields = {"messages": messages, "max_tokens": 32, "temperature": 0}
        status, body, _, _ = server.post("/v1/chat/completions", fields)
        f.check(status == 200 and body["choices"][0]["tokens"] == tokens and
                body["choices"][0]["message"]["content"] == text,
                f"{template} chat: {status} {body} != the library's {tokens} {text!r}")
        status, chunks, done = events(server, "/v1/chat/completions", fields)
        streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        f.check(status == 200 and done and streamed == text, f"{template} chat streamed: {streamed!r} != {text!r}")
    finally:
        code = server.stop()
    f.check(code == 0, f"the server exited with {code}")

# --- Chat and stop strings on the qwen2 pair ------------------------------
model = f"{fixtures}/qwen2-f32.gguf"
server = Server(server_binary, "-m", model, "-md", f"{fixtures}/qwen2-q8_0.gguf", "-np", "2", "-t", "1",
                "--chat-template", "chatml")
try:
    conversations = [
        hi,
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story."},
         {"role": "assistant", "content": "Once upon a time."}, {"role": "user", "content": "And then?"}],
    ]
    for n, messages in enumerate(conversations):
        tokens, text = chat_reference(reference, model, "chatml", 48, messages)
        status, body, _, _ = server.post("/v1/chat/completions", {"messages": messages, "max_tokens": 48,
                                                                  "temperature": 0})
        ok = f.check(status == 200 and body["object"] == "chat.completion", f"chat {n}: {status} {body}")
        if not ok:
            continue
        choice = body["choices"][0]
        f.check(choice["tokens"] == tokens, f"chat {n}: tokens {choice['tokens']} != the library's {tokens}")
        f.check(choice["message"] == {"role": "assistant", "content": text},
                f"chat {n}: message {choice['message']!r} != the library's text {text!r}")
        # Fewer than 48 tokens: the library stopped at an end-of-generation token.
        f.check(len(tokens) == 48 or choice["finish_reason"] == "stop", f"chat {n}: finish_reason {choice['finish_reason']}")
        status, chunks, done = events(server, "/v1/chat/completions", {"messages": messages, "max_tokens": 48,
                                                                      "temperature": 0})
        deltas = [c["choices"][0]["delta"] for c in chunks]
        f.check(status == 200 and done and deltas and deltas[0].get("role") == "assistant",
                f"chat {n} streamed: {status} {done} {deltas[:2]}")
        f.check(all(c["object"] == "chat.completion.chunk" for c in chunks), f"chat {n} streamed: chunk objects")
        streamed = "".join(d.get("content", "") for d in deltas)
        f.check(streamed == text, f"chat {n} streamed: {streamed!r} != {text!r}")
        f.check([t for c in chunks for t in c["choices"][0]["tokens"]] == tokens, f"chat {n} streamed: tokens")
        f.check(chunks[-1]["choices"][0]["finish_reason"] == choice["finish_reason"], f"chat {n} streamed: finish")

    # A stop string across two tokens, on a completion long enough to hold one.
    fields = {"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0, "ignore_eos": True}
    status, whole = server.complete(**fields, logprobs=0)
    full = whole["choices"][0]["text"] if status == 200 else ""
    pieces = whole["choices"][0]["logprobs"]["tokens"] if status == 200 else []
    stop = pick_stop(pieces)
    print(f"stop string {stop!r} across two of {pieces}", flush=True)
    if f.check(stop is not None and stop in full, f"no stop string straddling two tokens in {pieces}"):
        expected = full[:full.index(stop)]
        for form in ([stop], stop, ["\u0001never", stop]):
            status, body = server.complete(**fields, stop=form)
            choice = body["choices"][0] if status == 200 else {}
            f.check(status == 200 and choice["text"] == expected and choice["finish_reason"] == "stop",
                    f"stop {form!r}: {status} {choice.get('text')!r} != {expected!r}")
            f.check(status == 200 and choice["tokens"] == whole["choices"][0]["tokens"][:len(choice["tokens"])] and
                    body["usage"]["completion_tokens"] == len(choice["tokens"]),
                    f"stop {form!r}: tokens {choice.get('tokens')} are not a prefix of the whole answer's")
            status, chunks, done = events(server, "/v1/completions", {**fields, "stop": form})
            texts = [c["choices"][0]["text"] for c in chunks]
            f.check(status == 200 and done and "".join(texts) == expected,
                    f"stop {form!r} streamed: {''.join(texts)!r} != {expected!r}")
            f.check(stop not in "".join(texts), f"stop {form!r}: the stop string was streamed: {texts}")
            f.check(chunks and chunks[-1]["choices"][0]["finish_reason"] == "stop", f"stop {form!r} streamed: finish")
            f.check([t for c in chunks for t in c["choices"][0]["tokens"]] == choice["tokens"],
                    f"stop {form!r} streamed: tokens differ from the whole answer's")
        # Streamed logprobs under a stop string: those of the shown tokens, offsets running on.
        status, chunks, done = events(server, "/v1/completions", {**fields, "stop": stop, "logprobs": 2})
        shown = [c["choices"][0] for c in chunks if c["choices"][0]["tokens"]]
        joined = {k: [v for c in shown for v in c["logprobs"][k]] for k in ("tokens", "token_logprobs", "text_offset")}
        status_whole, cut = server.complete(**fields, stop=stop, logprobs=2)
        expected_lp = cut["choices"][0]["logprobs"] if status_whole == 200 else {}
        f.check(status == 200 and done and joined == {k: expected_lp.get(k) for k in joined},
                f"stop {stop!r} streamed logprobs {joined} != whole {expected_lp}")
        # The same in a chat answer, when its text holds such a string.
        long_chat = {"messages": hi, "max_tokens": 48, "temperature": 0, "logprobs": True}
        status, body, _, _ = server.post("/v1/chat/completions", long_chat)
        content = body["choices"][0]["message"]["content"] if status == 200 else ""
        chat_pieces = [e["token"] for e in body["choices"][0]["logprobs"]["content"]] if status == 200 else []
        chat_stop = pick_stop(chat_pieces)
        status, chunks, done = events(server, "/v1/chat/completions", long_chat)
        streamed_lp = [e for c in chunks if c["choices"][0]["logprobs"] for e in c["choices"][0]["logprobs"]["content"]]
        f.check(status == 200 and done and streamed_lp == body["choices"][0]["logprobs"]["content"],
                "chat: streamed logprobs differ from the whole answer's")
        if chat_stop and chat_stop in content:
            expected = content[:content.index(chat_stop)]
            status, chunks, done = events(server, "/v1/chat/completions",
                                          {"messages": hi, "max_tokens": 48, "temperature": 0, "stop": chat_stop})
            streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
            f.check(status == 200 and streamed == expected and chunks[-1]["choices"][0]["finish_reason"] == "stop",
                    f"chat stop {chat_stop!r}: {streamed!r} != {expected!r}")
        else:
            print(f"note: the chat answer {content!r} holds no stop string across two printable tokens", flush=True)
finally:
    code = server.stop()
f.check(code == 0, f"the server exited with {code}")
f.exit()
