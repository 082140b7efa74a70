"""Shared helpers for the CLI tests: where the binary is, and how to run it."""
import json
import os
import subprocess

SOURCE_DIR = os.environ.get("COMEM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN_DIR = os.environ.get("COMEM_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
COMEM = os.path.join(BIN_DIR, "comem")


def run(*args, check=False, env=None, timeout=60):
    """Runs comem with args; returns the CompletedProcess (text mode)."""
    return subprocess.run([COMEM, *map(str, args)], capture_output=True, text=True, check=check,
                          env=env, timeout=timeout)


def run_json(*args, env=None):
    p = run(*args, env=env)
    if p.returncode != 0:
        raise AssertionError(f"comem {' '.join(map(str, args))} exited {p.returncode}: {p.stderr}")
    return json.loads(p.stdout)


COMEMD = os.path.join(BIN_DIR, "comemd")
GiB, MiB = 1 << 30, 1 << 20


class Machine:
    """A private runtime directory, a real comemd on a simulated card, and real worker processes.

    Workers are `comem demo-worker`: each joins as a worker, is admitted for its bytes, allocates them on
    the card, and answers sized and idle release asks by freeing whole 64 MiB modules. Use as a context
    manager; everything it started is stopped at the end.
    """

    def __init__(self, card="sim:8GiB", metrics_interval=None):
        import tempfile
        self.dir = tempfile.TemporaryDirectory(prefix="comem-cli-")
        self.socket = os.path.join(self.dir.name, "comem.sock")
        extra = []
        if metrics_interval is not None:  # comemd keeps <dir>/textfile/comem.prom current
            self.metrics_path = os.path.join(self.dir.name, "textfile", "comem.prom")
            os.mkdir(os.path.dirname(self.metrics_path))
            extra = ["--metrics", self.metrics_path, "--metrics-interval", str(metrics_interval)]
        self.card = card
        self.env = dict(os.environ, COMEM_RUNTIME_DIR=self.dir.name, COMEM_SOCKET=self.socket, COMEM_LOG="warn",
                        COMEM_DEVICE=card)
        self.daemon = subprocess.Popen([COMEMD, "--socket", self.socket, "--device", card, "--check", *extra],
                                       env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.workers = []
        self.wait_for(lambda: run("status", "--socket", self.socket, env=self.env, timeout=10).returncode == 0,
                      "comemd to answer")

    def wait_for(self, cond, what, timeout=15.0):
        import time
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if cond():
                return
            if self.daemon.poll() is not None:
                raise AssertionError(f"comemd exited {self.daemon.returncode}: {self.daemon.stderr.read()}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    def worker(self, name, nbytes):
        """A worker process holding nbytes in one entry of its holder 'models'; returns its Popen."""
        p = subprocess.Popen([COMEM, "demo-worker", self.socket, self.card, name, str(nbytes)], env=self.env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline().strip()
        if line != "loaded":
            raise AssertionError(f"worker {name} said {line!r}")
        self.workers.append(p)
        return p

    def busy(self, worker, on=True):
        worker.stdin.write("busy\n" if on else "idle\n")
        worker.stdin.flush()
        assert worker.stdout.readline().strip() == "ok"

    def comem(self, *args, timeout=60):
        return run(*args, env=self.env, timeout=timeout)

    def status(self):
        p = self.comem("status", "--json")
        if p.returncode != 0:
            raise AssertionError(p.stderr)
        return json.loads(p.stdout)

    def close(self):
        for p in self.workers:
            try:
                p.stdin.close()  # its stdin closes: it exits
            except BrokenPipeError:
                pass
            if p.poll() is None:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            p.stdout.close()
        if self.daemon.poll() is None:
            self.daemon.terminate()
            try:
                self.daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        self.daemon.stderr.close()
        self.dir.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
