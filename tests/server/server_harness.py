"""Starts specdec-server on 127.0.0.1 with a free port (--port 0; the server
prints the port it got) and talks raw HTTP to it with the standard library."""
import http.client
import json
import os
import signal
import subprocess
import sys

# The server's start (its port read from its first lines) is the serving
# scripts' own: scripts/serving_client.py.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from serving_client import start_server  # noqa: E402


class Failures:
    def __init__(self):
        self.messages = []
        self.count = 0

    def check(self, condition, message):
        self.count += 1
        if not condition:
            self.messages.append(message)
            print("FAIL:", message, flush=True)
        return condition

    def exit(self):
        if self.messages:
            print(f"{len(self.messages)} of {self.count} checks failed", flush=True)
            sys.exit(1)
        print(f"all {self.count} checks passed", flush=True)
        sys.exit(0)


class Server:
    def __init__(self, binary, *arguments, start_seconds=120):
        command = [binary, "--port", "0", "--host", "127.0.0.1", *arguments]
        # Whatever the server prints later (errors, sanitizer reports) is shown,
        # and its pipe never fills.
        self.process, self.host, self.port = start_server(command, echo=True, seconds=start_seconds)
        self.url = f"http://{self.host}:{self.port}"

    def request(self, method, path, body=None, headers=None, timeout=120):
        """Returns (status, headers dict, body bytes). `body`: bytes, str or a JSON-able object."""
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            connection.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    def post(self, path, body, headers=None):
        status, response_headers, data = self.request("POST", path, body, headers)
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = None
        return status, parsed, data, response_headers

    def complete(self, **fields):
        """A non-streamed completion; returns (status, parsed body)."""
        status, parsed, _, _ = self.post("/v1/completions", fields)
        return status, parsed

    def stream(self, **fields):
        """A streamed completion: (status, list of parsed events, saw [DONE])."""
        status, _, data = self.request("POST", "/v1/completions", {**fields, "stream": True})
        events, done = [], False
        for block in data.decode().split("\n\n"):
            if not block.startswith("data: "):
                continue
            payload = block[len("data: "):]
            if payload == "[DONE]":
                done = True
            else:
                events.append(json.loads(payload))
        return status, events, done

    def metrics(self):
        status, _, data = self.request("GET", "/metrics")
        values = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return status, values

    def healthy(self):
        try:
            return self.request("GET", "/health", timeout=30)[0] == 200
        except OSError:
            return False

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise RuntimeError("the server did not stop within 30 s of SIGINT")
        self.process.reader.join(timeout=30)  # every line it printed is in self.process.output
        return self.process.returncode


def reference_tokens(reference, size, max_tokens, prompt):
    """The library's own greedy tokens for the prompt (AutoregressiveDecoder, one sequence)."""
    output = subprocess.run([reference, size, str(max_tokens), *map(str, prompt)], check=True, capture_output=True,
                            text=True, timeout=120).stdout
    return [int(t) for t in output.split()]


def chat_reference(reference, model, template, max_tokens, messages):
    """The library's greedy chat answer on a GGUF target (text::ChatTemplate by name,
    special tokens parsed, until an end-of-generation token): (token ids, text)."""
    arguments = [reference, "chat", model, template, str(max_tokens)]
    for m in messages:
        arguments += [m["role"], m["content"]]
    lines = subprocess.run(arguments, check=True, capture_output=True, text=True, timeout=300).stdout.split("\n")
    return [int(t) for t in lines[0].split()], bytes.fromhex(lines[1]).decode("utf-8", errors="replace")
