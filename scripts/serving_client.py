"""What the serving scripts share: starting a server that prints the port it
listens on, and reading server-sent events as they arrive."""
import re
import select
import subprocess
import sys
import threading
import time


def start_server(command, echo=False, seconds=300):
    """Starts `command` (a specdec-server with --port 0) and waits for its
    'listening on http://HOST:PORT' line; returns (process, host, port).
    Its later output is drained (and printed with echo)."""
    print("starting:", " ".join(command), flush=True)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        if select.select([process.stdout], [], [], 1.0)[0]:
            line = process.stdout.readline()
            if echo:
                print("server:", line.rstrip(), flush=True)
            match = re.search(r"listening on http://([0-9.]+):(\d+)", line)
            if match:
                def drain():
                    for later in process.stdout:
                        if echo:
                            print("server:", later.rstrip(), flush=True)
                threading.Thread(target=drain, daemon=True).start()
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
