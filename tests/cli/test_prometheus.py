"""A real Prometheus scrapes what `comemd --metrics FILE` writes, and its HTTP API gives comem's figures back.

comemd runs on a simulated card with ``--metrics FILE`` (every 0.5 s) and one
worker holds 1 GiB. Prometheus (Debian's ``prometheus`` package, 2.42) runs on
127.0.0.1 with a private storage folder and a scrape config naming one target,
every second. The test polls its HTTP API (``/api/v1/query``, bounded waits, no
timing asserted) until ``comem_up`` is 1, then checks what it stored against
comemd's own status: the card's capacity, the worker's resident bytes, and that
it took every sample of the file (``scrape_samples_scraped`` equals the file's
count). Stopping comemd leaves ``comem_up 0`` in the file, and Prometheus reads
0. Everything listens on 127.0.0.1 only; every process is stopped.

Prometheus scrapes HTTP, not files, so something must serve the file. In a
deployment that is node_exporter's textfile collector (``docs/cluster.md``);
here it is a small HTTP server in this process that answers ``/metrics`` with
the file's bytes as comemd last wrote them (``text/plain; version=0.0.4``).
Chosen over node_exporter because it adds no package (Debian's
prometheus-node-exporter is another 13 MB and another daemon, whose own
thousand series about this machine would only be noise here) and nothing sits
between the file and Prometheus' parser that could merge, rewrite or drop a
family: what Prometheus accepts is exactly what comemd wrote. The file's
strictness against node_exporter's and promtool's rules is test_metrics'.

Skipped, saying why, when no ``prometheus`` binary is on PATH
(``scripts/deps.sh`` installs it).
"""
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import prom_parse
from comem_cli import GiB, Machine

WAIT_S = 120.0  #: bound on each wait for Prometheus (its start, a scrape showing a figure)
_http = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only: never a proxy


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FileServer:
    """Serves one file as ``/metrics`` on 127.0.0.1 (a free port), from a thread of this process."""

    def __init__(self, path):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                with open(path, "rb") as f:  # comemd replaces the file whole (rename): one version per read
                    body = f.read()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # quiet: Prometheus scrapes every second
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="metrics-file", daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


class TestPrometheus(unittest.TestCase):
    def setUp(self):
        self.prometheus = shutil.which("prometheus")
        if not self.prometheus:
            self.skipTest("prometheus: no `prometheus` binary on PATH (Debian's package prometheus; scripts/deps.sh)")
        self.tmp = tempfile.mkdtemp(prefix="comem-prom-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.m = Machine("sim:8GiB", metrics_interval=0.5)
        self.addCleanup(self.m.close)
        self.proc = None
        self.addCleanup(self.stop_prometheus)

    def stop_prometheus(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log(self):
        with open(os.path.join(self.tmp, "prometheus.log"), encoding="utf-8", errors="replace") as f:
            return "---- prometheus log (tail) ----\n" + f.read()[-4000:]

    def query(self, expr):
        """The instant vector ``expr`` evaluates to: [(labels, float value)]."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with _http.open(url, timeout=10) as r:
            body = json.loads(r.read())
        self.assertEqual(body["status"], "success", body)
        self.assertEqual(body["data"]["resultType"], "vector", body)
        return [(s["metric"], float(s["value"][1])) for s in body["data"]["result"]]

    def wait_value(self, expr, want):
        """Polls until ``expr`` is one sample equal to ``want`` (bounded); returns what it last saw."""
        deadline = time.monotonic() + WAIT_S
        got = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.fail(f"prometheus exited ({self.proc.returncode})\n" + self.log())
            try:
                got = self.query(expr)
                if len(got) == 1 and got[0][1] == want:
                    return got
            except (urllib.error.URLError, ConnectionError, socket.timeout):
                got = "not answering"
            time.sleep(0.25)
        self.fail(f"{expr}: {got!r} after {WAIT_S:.0f} s, not {want}\n" + self.log())

    def test_prometheus_scrapes_the_metrics_file(self):
        path = self.m.metrics_path
        self.m.wait_for(lambda: os.path.exists(path), "the metrics file")
        w1 = self.m.worker("w1", GiB)
        files = FileServer(path)
        self.addCleanup(files.close)

        config = os.path.join(self.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: comem\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{files.port}']\n")
        self.port = free_port()
        with open(os.path.join(self.tmp, "prometheus.log"), "w") as log:
            self.proc = subprocess.Popen(
                [self.prometheus, f"--config.file={config}", f"--storage.tsdb.path={os.path.join(self.tmp, 'data')}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                cwd=self.tmp, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

        self.wait_value('up{job="comem"}', 1)  # the scrape itself worked
        got = self.wait_value("comem_up", 1)
        self.assertEqual(got[0][0]["job"], "comem")

        st = self.m.status()
        dev = st["devices"][0]
        self.assertEqual(dev["capacity"], 8 * GiB)
        self.wait_value('comem_device_capacity_bytes{device="0"}', dev["capacity"])
        me = [p for p in dev["processes"] if p["name"] == "w1"]
        self.assertEqual([p["pid"] for p in me], [w1.pid])
        self.wait_value(f'comem_session_resident_bytes{{process="w1",pid="{w1.pid}"}}', me[0]["resident"])
        self.assertEqual(me[0]["resident"], GiB)

        # Prometheus kept every sample of the file (none refused, none dropped).
        with open(path) as f:
            fams = prom_parse.parse(f.read())
        self.wait_value('scrape_samples_scraped{job="comem"}', sum(len(fam["samples"]) for fam in fams.values()))

        # comemd stopped: its file says down, and so does Prometheus.
        self.m.daemon.terminate()
        self.assertEqual(self.m.daemon.wait(timeout=10), 0)
        self.wait_value("comem_up", 0)

        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(30), 0, self.log())


if __name__ == "__main__":
    unittest.main()
