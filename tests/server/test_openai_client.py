"""specdec-server through the official openai Python package: completions,
streaming, seeds, logprobs, chat's refusal on the synthetic pair arriving as
the package's BadRequestError; with FIXTURES, chat (whole and streamed) on
the qwen2 pair equal to the library's answer, and a stop string. Skips (exit code 77) where the package is not installed
(scripts/test.sh installs it; by hand: scripts/install-openai.sh build/openai-venv, then reconfigure).

    test_openai_client.py SERVER REFERENCE [FIXTURES]
"""
import sys

try:
    import openai
except ImportError:
    print("SKIP: the openai package is not installed (scripts/install-openai.sh build/openai-venv, then reconfigure)")
    sys.exit(77)

from server_harness import Failures, Server, chat_reference, reference_tokens

server_binary, reference = sys.argv[1], sys.argv[2]
fixtures = sys.argv[3] if len(sys.argv) > 3 else None
f = Failures()
print("openai", openai.__version__, flush=True)
server = Server(server_binary, "--synthetic", "-np", "4", "-t", "1", "--api-key", "k")
try:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    f.check(model == "synthetic-tiny", f"models: {model}")

    prompt = [1, 2, 3, 4]
    expected = reference_tokens(reference, "tiny", 24, prompt)
    done = client.completions.create(model=model, prompt=prompt, max_tokens=24, temperature=0)
    choice = done.choices[0]
    f.check(choice.model_extra.get("tokens") == expected, f"greedy: {choice.model_extra.get('tokens')} != {expected}")
    f.check(choice.finish_reason == "length" and done.usage.completion_tokens == 24, f"completion: {done}")

    stream = client.completions.create(model=model, prompt=prompt, max_tokens=24, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    streamed, usage = [], None
    for chunk in stream:
        for c in chunk.choices:
            streamed += c.model_extra.get("tokens", [])
        usage = chunk.usage or usage
    f.check(streamed == expected, f"streamed: {streamed} != {expected}")
    f.check(usage is not None and usage.completion_tokens == 24, f"stream usage: {usage}")

    runs = [client.completions.create(model=model, prompt=prompt, max_tokens=32, temperature=1.0, seed=99)
            .choices[0].model_extra["tokens"] for _ in range(2)]
    f.check(runs[0] == runs[1], f"seed 99 twice: {runs}")
    other = client.completions.create(model=model, prompt=prompt, max_tokens=32, temperature=1.0, seed=100)
    f.check(other.choices[0].model_extra["tokens"] != runs[0], "seeds 99 and 100 gave the same 32 tokens")

    scored = client.completions.create(model=model, prompt=prompt, max_tokens=5, temperature=0, logprobs=2)
    lp = scored.choices[0].logprobs
    f.check(lp is not None and len(lp.token_logprobs) == 5 and all(len(t) == 2 for t in lp.top_logprobs),
            f"logprobs: {lp}")
    # Greedy tokens are the most probable, so each token's logprob is its row's best.
    f.check(lp is not None and all(abs(v - max(t.values())) < 1e-6 for v, t in zip(lp.token_logprobs, lp.top_logprobs)),
            f"greedy tokens are not their rows' most probable: {lp}")
    streamed_lp = [v for chunk in client.completions.create(model=model, prompt=prompt, max_tokens=5, temperature=0,
                                                             logprobs=2, stream=True)
                   for c in chunk.choices if c.logprobs for v in c.logprobs.token_logprobs]
    f.check(lp is not None and streamed_lp == lp.token_logprobs, f"streamed logprobs {streamed_lp} != {lp}")

    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
        f.check(False, "chat without a template was answered")
    except openai.BadRequestError as error:
        f.check(error.status_code == 400 and error.body.get("param") == "messages", f"chat refusal: {error.body}")

    try:
        client.completions.create(model=model, prompt=prompt, n=2)
        f.check(False, "n = 2 was answered")
    except openai.BadRequestError as error:
        f.check(error.body.get("param") == "n", f"n = 2: {error.body}")

    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        f.check(False, "a wrong key was accepted")
    except openai.AuthenticationError:
        pass
finally:
    code = server.stop()
f.check(code == 0, f"the server exited with {code}")

if fixtures:
    model = f"{fixtures}/qwen2-f32.gguf"
    server = Server(server_binary, "-m", model, "-md", f"{fixtures}/qwen2-q8_0.gguf", "-np", "2", "-t", "1",
                    "--chat-template", "chatml")
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
        tokens, text = chat_reference(reference, model, "chatml", 32, messages)
        answer = client.chat.completions.create(model="qwen2", messages=messages, max_tokens=32, temperature=0)
        f.check(answer.choices[0].message.role == "assistant" and answer.choices[0].message.content == text,
                f"chat: {answer.choices[0].message!r} != the library's {text!r}")
        f.check(answer.choices[0].model_extra.get("tokens") == tokens, f"chat tokens: {answer.choices[0]}")
        streamed = "".join(c.choices[0].delta.content or "" for c in
                           client.chat.completions.create(model="qwen2", messages=messages, max_tokens=32,
                                                          temperature=0, stream=True) if c.choices)
        f.check(streamed == text, f"chat streamed: {streamed!r} != {text!r}")
        whole = client.completions.create(model="qwen2", prompt="Once upon a time", max_tokens=32, temperature=0,
                                          extra_body={"ignore_eos": True}).choices[0].text
        stop = next((whole[i:i + 2] for i in range(4, len(whole) - 1) if whole[i:i + 2].isascii()
                     and whole[i:i + 2].isprintable()), None)
        if f.check(stop is not None, f"no printable two-character stop string in {whole!r}"):
            cut = client.completions.create(model="qwen2", prompt="Once upon a time", max_tokens=32, temperature=0,
                                            stop=[stop], extra_body={"ignore_eos": True}).choices[0]
            f.check(cut.text == whole[:whole.index(stop)] and cut.finish_reason == "stop",
                    f"stop {stop!r}: {cut.text!r}, {cut.finish_reason}")
    finally:
        code = server.stop()
    f.check(code == 0, f"the server exited with {code}")
f.exit()
