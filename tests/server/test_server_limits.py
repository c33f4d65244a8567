"""specdec-server's limits: a client that disconnects mid-stream ends its
request (the server stops decoding it), --max-queue answers 503 with
Retry-After, --api-key answers 401 without the key. The 100m synthetic pair
makes a long request last seconds, so that the checks do not race it.

With the fixtures folder, also a GGUF pair with its tokenizer: text prompts.

    test_server_limits.py SERVER [FIXTURES]
"""
import json
import socket
import sys
import threading
import time

from server_harness import Failures, Server

server_binary = sys.argv[1]
fixtures = sys.argv[2] if len(sys.argv) > 2 else None
f = Failures()


def open_stream(server, fields):
    """Sends a streamed completion on a raw socket and waits for its first event."""
    sock = socket.create_connection((server.host, server.port), timeout=60)
    body = json.dumps({**fields, "stream": True}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    received = b""
    while b"data: " not in received:
        chunk = sock.recv(4096)
        if not chunk:
            break
        received += chunk
    return sock, received


def ended(values):
    return sum(v for k, v in values.items() if k.startswith("specdec_requests_ended_total"))


def wait_ended(server, count, seconds):
    """Waits until `count` decoder requests have ended in all; returns the metrics then."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _, values = server.metrics()
        if ended(values) >= count:
            return values
        time.sleep(0.05)
    return None


server = Server(server_binary, "--synthetic", "--synthetic-size", "100m", "-np", "1", "-c", "600", "-t", "1",
                "--max-queue", "1")
try:
    # --- A disconnect mid-stream ends the request ---------------------------
    long_request = {"prompt": [1, 2, 3], "max_tokens": 500, "temperature": 0, "speculative.n_max": 0}
    _, before = server.metrics()
    start = time.monotonic()
    sock, received = open_stream(server, long_request)
    f.check(b"HTTP/1.1 200" in received and b"data: " in received, f"stream start: {received[:200]!r}")
    first_event = time.monotonic() - start
    sock.close()
    after = wait_ended(server, ended(before) + 1, 120)
    f.check(after is not None, "the disconnected request still ran 120 s later")
    if after is not None:
        f.check(after.get('specdec_requests_ended_total{status="cancelled"}', 0) == 1,
                f"the disconnected request did not end cancelled: {after}")
        generated = after["specdec_generated_tokens_total"] - before.get("specdec_generated_tokens_total", 0)
        elapsed = time.monotonic() - start
        print(f"disconnect: first event after {first_event:.2f} s, {generated:.0f} of 500 tokens decoded, "
              f"idle after {elapsed:.2f} s", flush=True)
        f.check(generated < 50, f"the disconnected request decoded {generated:.0f} of its 500 tokens")
    f.check(server.healthy(), "the server stopped answering after a disconnect")

    # --- Beyond --max-queue: 503 with Retry-After ---------------------------
    running, _ = open_stream(server, long_request)            # holds the one slot
    queued = threading.Thread(target=lambda: server.complete(prompt=[4, 5], max_tokens=2, temperature=0))
    queued.start()                                               # waits: the queue holds one
    time.sleep(0.5)
    status, body, _, headers = server.post("/v1/completions", {"prompt": [6], "max_tokens": 2})
    f.check(status == 503 and headers.get("retry-after") == "1" and body["error"]["code"] == "queue_full",
            f"queue full: {status} {headers} {body}")
    running.close()
    queued.join(timeout=120)
    f.check(not queued.is_alive(), "the queued request did not finish after the slot was freed")
    f.check(wait_ended(server, ended(before) + 3, 120) is not None, "requests still running after the queue test")
    status, body = server.complete(prompt=[6], max_tokens=2, temperature=0)
    f.check(status == 200, f"after the queue drained: {status} {body}")
finally:
    code = server.stop()
f.check(code == 0, f"the server exited with {code}")

# --- --api-key -----------------------------------------------------------
server = Server(server_binary, "--synthetic", "-np", "1", "-t", "1", "--api-key", "sesame")
try:
    for name, headers, expected in (("no key", {}, 401), ("wrong key", {"Authorization": "Bearer sesam"}, 401),
                                    ("not a bearer", {"Authorization": "sesame"}, 401),
                                    ("the key", {"Authorization": "Bearer sesame"}, 200)):
        status, _, data = server.request("GET", "/v1/models", headers=headers)
        f.check(status == expected, f"api key, {name}: {status} {data[:200]!r}")
        if expected == 401:
            f.check(json.loads(data)["error"]["type"] == "authentication_error", f"api key, {name}: {data!r}")
        status, body, _, _ = server.post("/v1/completions", {"prompt": [1], "max_tokens": 2}, headers)
        f.check(status == expected, f"api key, {name}, completion: {status} {body}")
    f.check(server.request("GET", "/health")[0] == 200, "/health needs no key")
finally:
    code = server.stop()
f.check(code == 0, f"the server exited with {code}")

# --- A GGUF pair: text prompts through the target's tokenizer -------------
if fixtures:
    server = Server(server_binary, "-m", f"{fixtures}/llama3-f32.gguf", "-md", f"{fixtures}/llama3-q8_0.gguf",
                    "-np", "2", "-t", "1")
    try:
        fields = {"prompt": "Once upon a time, there was", "max_tokens": 24, "temperature": 0, "ignore_eos": True}
        status, whole = server.complete(**fields)
        f.check(status == 200 and isinstance(whole["choices"][0]["text"], str) and whole["choices"][0]["text"] and
                len(whole["choices"][0]["tokens"]) == 24, f"text prompt: {status} {whole}")
        status, events, done = server.stream(**fields)
        streamed = [t for e in events for c in e["choices"] for t in c["tokens"]]
        f.check(status == 200 and done and streamed == whole["choices"][0]["tokens"], f"text prompt streamed: {streamed}")
        status, same = server.complete(prompt=whole["choices"][0]["tokens"][:1], max_tokens=1, temperature=0)
        f.check(status == 200, f"token-id prompt on a GGUF pair: {status} {same}")
        f.check(server.post("/v1/completions", {"prompt": [10**6]})[0] == 400, "a GGUF pair took an id beyond its vocabulary")
    finally:
        code = server.stop()
    f.check(code == 0, f"the server exited with {code}")
f.exit()
