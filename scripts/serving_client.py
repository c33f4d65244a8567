"""What the serving scripts share: starting a server that prints the port it
listens on, and reading server-sent events as they arrive."""
import queue
import re
import subprocess
import sys
import threading
import time


def start_server(command, echo=False, seconds=300):
    """Starts `command` (a specdec-server with --port 0) and waits for its
    'listening on http://HOST:PORT' line; returns (process, host, port).
    Its later output is drained (and printed with echo, but for --log-steps'
    lines) and kept in process.output, a list of lines."""
    print("starting:", " ".join(command), flush=True)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # One thread reads every line as it comes (a select() on the pipe would
    # miss lines already read into the file object's buffer).
    lines = queue.Queue()
    process.output = []

    def read_lines():
        for line in process.stdout:
            lines.put(line)
            process.output.append(line)
            if echo and not line.startswith("step "):
                print("server:", line.rstrip(), flush=True)
        lines.put(None)

    process.reader = threading.Thread(target=read_lines, daemon=True)
    process.reader.start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            continue
        if line is None:
            break
        match = re.search(r"listening on http://([0-9.]+):(\d+)", line)
        if match:
            return process, match.group(1), int(match.group(2))
    process.kill()
    sys.exit("the server did not start: " + " ".join(command))


def sse_events(response):
    """The payloads (bytes after 'data: ') of an HTTP response's server-sent
    events, each as soon as it has arrived; b'[DONE]' included."""
    buffer = b""
    while True:
        chunk = response.read1(65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            if event.startswith(b"data: "):
                yield event[len(b"data: "):]
