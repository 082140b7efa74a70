"""An LLM server as Ollama's and vLLM's documentation describe their HTTP calls, holding real RAM.

Neither Ollama nor vLLM can be installed on the test machine; this server answers the calls
comem's recipes make exactly as their documentation says, and holds its model where the real
servers do: in a child process (Ollama's ``ollama runner``, vLLM's engine core), a real bytearray
of --mib MiB, so what comem measures (RSS) and asks for (unload, sleep) is real memory.

  --kind ollama: GET /api/ps (the loaded models: name, model, size, size_vram, digest);
                 POST /api/generate {"model", "keep_alive": 0} unloads (the runner exits),
                 {"model"} with no prompt loads.
  --kind vllm:   GET /v1/models, GET /is_sleeping, POST /sleep?level=1|2 (the engine drops its
                 memory), POST /wake_up, GET /metrics (vllm:num_requests_running).
  --unload ok | noop (answers success, keeps the memory) | fail (answers HTTP 500)
  POST /test/running {"n": N} sets the requests in flight /metrics reports (vLLM); GET /test/log lists
  what loaded the model ("load": a load call; "autoload": a request found it unloaded) and each
  "generate" (a request with a prompt), in order.

Prints one JSON line when it listens: {"port": ..., "pid": ...}.
"""

import argparse
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import urllib.parse

MiB = 1 << 20
HOLDER = r"""
import sys
held = None
def load(n):
    global held
    held = bytearray(n)
    for i in range(0, n, 4096):
        held[i] = 1
load(int(sys.argv[1]))
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "drop":
        held = None
    elif line.strip() == "load":
        load(int(sys.argv[1]))
    print("ok", flush=True)
"""

p = argparse.ArgumentParser()
p.add_argument("--kind", choices=("ollama", "vllm"), required=True)
p.add_argument("--mib", type=int, default=256)
p.add_argument("--model", default="tiny:latest")
p.add_argument("--unload", choices=("ok", "noop", "fail"), default="ok")
a = p.parse_args()
DIGEST = hashlib.sha256(a.model.encode()).hexdigest()
lock = threading.Lock()
state = {"child": None, "sleeping": False, "running": 0, "log": []}


def start_child():
    # Ollama's runner names its model blob in its arguments; the recipe finds it by the digest.
    c = subprocess.Popen([sys.executable, "-c", HOLDER, str(a.mib * MiB), "--model", f"sha256-{DIGEST}"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert c.stdout.readline().strip() == "ready"
    state["child"] = c


def stop_child():
    c = state["child"]
    if c is not None:
        c.stdin.close()
        c.wait()
        state["child"] = None


def tell(cmd):
    c = state["child"]
    c.stdin.write(cmd + "\n")
    c.stdin.flush()
    assert c.stdout.readline().strip() == "ok"


class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, obj=None, text=None):
        body = (json.dumps(obj) if text is None else text).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if text is None else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        with lock:
            if a.kind == "ollama" and u.path == "/api/ps":
                loaded = state["child"] is not None
                m = {"name": a.model, "model": a.model, "size": a.mib * MiB, "size_vram": 0, "digest": DIGEST}
                return self.reply(200, {"models": [m] if loaded else []})
            if a.kind == "vllm" and u.path == "/v1/models":
                return self.reply(200, {"object": "list", "data": [{"id": a.model, "object": "model"}]})
            if a.kind == "vllm" and u.path == "/is_sleeping":
                return self.reply(200, {"is_sleeping": state["sleeping"]})
            if u.path == "/test/log":
                return self.reply(200, state["log"])
            if a.kind == "vllm" and u.path == "/metrics":
                return self.reply(200, text=f'vllm:num_requests_running{{model_name="{a.model}"}} {state["running"]}.0\n')
        self.reply(404, {"error": "not found"})

    def do_POST(self):
        u = urllib.parse.urlsplit(self.path)
        body = self.body()
        with lock:
            if u.path == "/test/running":
                state["running"] = int(body["n"])
                return self.reply(200, {})
            unloading = (a.kind == "ollama" and u.path == "/api/generate" and body.get("keep_alive") == 0) or \
                        (a.kind == "vllm" and u.path == "/sleep")
            if unloading and a.unload == "fail":
                return self.reply(500, {"error": "out of cheese"})
            if a.kind == "ollama" and u.path == "/api/generate":
                if body.get("model") != a.model:
                    return self.reply(404, {"error": f"model '{body.get('model')}' not found"})
                if body.get("keep_alive") == 0:
                    if a.unload == "ok":
                        stop_child()
                    return self.reply(200, {"model": a.model, "done": True, "done_reason": "unload"})
                if body.get("prompt"):  # a request: Ollama loads the model for it by itself
                    if state["child"] is None:
                        state["log"].append("autoload")
                        start_child()
                    state["log"].append("generate")
                    return self.reply(200, {"model": a.model, "response": "hi", "done": True})
                if state["child"] is None:
                    state["log"].append("load")
                    start_child()
                return self.reply(200, {"model": a.model, "done": True, "done_reason": "load"})
            if a.kind == "vllm" and u.path == "/sleep":
                if a.unload == "ok":
                    tell("drop")
                state["sleeping"] = True
                return self.reply(200)
            if a.kind == "vllm" and u.path == "/wake_up":
                if state["sleeping"]:
                    tell("load")
                state["sleeping"] = False
                return self.reply(200)
        self.reply(404, {"error": "not found"})


start_child()
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(json.dumps({"port": srv.server_address[1], "pid": os.getpid()}), flush=True)
try:
    srv.serve_forever()
finally:
    stop_child()
