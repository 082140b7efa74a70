"""LLM servers beside ComfyUI (issue 42): comem.apps speaks for a server on the ledger's host RAM.

comemd runs with ``--ram 2GiB``. The server is procs/fake_llm.py: Ollama's and vLLM's documented HTTP
calls (neither can be installed here), its model a real bytearray in a child process, as the real
servers hold theirs (Ollama's runner, vLLM's engine). A requester (procs/ram_holder.py) admits more
host RAM than is free. What is asserted is what the coordinator and the kernel report (bytes, asks,
processes), and in what order things happen; never how fast.
"""

import http.client
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

import comem
from comem import apps
from support import MiB, Machine, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
MODEL_MIB = 600
LLAMA_SERVER = os.environ.get("COMEM_LLAMA_SERVER") or os.path.join(SOURCE, ".cache", "llama", "build", "bin",
                                                                       "llama-server")


def ram_device(status):
    return status["devices"][-1]


def app_holders(status):
    """The app holders on host RAM: app pid -> holder."""
    out = {}
    for p in ram_device(status)["processes"]:
        for h in p["holders"]:
            if h.get("app_pid"):
                out[h["app_pid"]] = h
    return out


class FakeServer:
    """procs/fake_llm.py as its own process; stopped with the test."""

    def __init__(self, kind, unload="ok", mib=MODEL_MIB):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "procs", "fake_llm.py"), "--kind", kind,
                                      "--mib", str(mib), "--unload", unload], stdout=subprocess.PIPE, text=True)
        hello = json.loads(self.proc.stdout.readline())
        self.port, self.pid = hello["port"], hello["pid"]
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(10)
        self.proc.stdout.close()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def s_log(server):
    """What loaded the fake server's model, and its requests, in order (procs/fake_llm.py's /test/log)."""
    return apps.Endpoint("fake", server.url).call("GET", "/test/log")


class ConfigTest(unittest.TestCase):
    """The apps file: what it accepts, and an error naming the key for everything else."""

    def test_defaults_and_a_full_entry(self):
        got = apps.parse('[[app]]\nrecipe = "ollama"\n\n[[app]]\nname = "big"\nrecipe = "vllm"\n'
                         'url = "http://localhost:8001"\ndevice = 1\npriority = "last"\nreload = "never"\nlevel = 2\n')
        self.assertEqual(got[0], apps.AppConfig("ollama", "ollama", "http://127.0.0.1:11434", "ram", None, "first",
                                                "when-free", 1, None))
        self.assertEqual(got[1], apps.AppConfig("big", "vllm", "http://localhost:8001", 1, None, "last", "never", 2))
        self.assertEqual(apps.parse('[[app]]\nrecipe = "ollama"\nproxy = 11435\n')[0].proxy, 11435)

    def test_mistakes_name_what_is_wrong(self):
        cases = {
            '[[app]]\nrecipe = "lmstudio"\n': "recipe must be one of",
            '[[app]]\nrecipe = "ollama"\nurl = "http://10.0.0.5:11434"\n': "is not this machine's",
            '[[app]]\nrecipe = "ollama"\nurl = "ftp://127.0.0.1"\n': "url must be http",
            '[[app]]\nrecipe = "ollama"\nport = 1\n': "unknown key(s) ['port']",
            '[[app]]\nrecipe = "ollama"\ndevice = "gpu"\n': "device must be",
            '[[app]]\nrecipe = "ollama"\npid = -3\n': "pid must be a positive integer",
            '[[app]]\nrecipe = "vllm"\nlevel = 3\n': "level must be 1 or 2",
            '[[app]]\nrecipe = "ollama"\n[[app]]\nrecipe = "ollama"\n': "two apps named 'ollama'",
            '[[app]]\nname="a"\nrecipe = "ollama"\npid = 7\n[[app]]\nname="b"\nrecipe = "vllm"\npid = 7\n':
                "two apps name one pid (7)",
            '[[app]]\nname = "bad name!\\n"\nrecipe = "ollama"\n': "name:",
            '[server]\nx = 1\n': "unknown table(s) ['server']",
            '[[app]]\nrecipe = "ollama"\nproxy = 11434\n': "the server's own port",
            '[[app]]\nrecipe = "ollama"\nproxy = 70000\n': "proxy must be a TCP port",
            'not toml at all [': "not TOML",
        }
        for text, want in cases.items():
            with self.subTest(text=text):
                with self.assertRaises(apps.ConfigError) as e:
                    apps.parse(text, "apps.toml")
                self.assertIn(want, str(e.exception))
                self.assertTrue(str(e.exception).startswith("apps.toml"))

    def test_the_file_is_optional_unless_named(self):
        with tempfile.TemporaryDirectory() as d:
            os.environ["COMEM_APPS"] = os.path.join(d, "none.toml")
            try:
                self.assertEqual(apps.load(), [])
                with self.assertRaises(apps.ConfigError):
                    apps.load(os.path.join(d, "none.toml"))
            finally:
                del os.environ["COMEM_APPS"]

    def test_the_cli_checks_a_file(self):
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write('[[app]]\nrecipe = "ollama"\n')
        try:
            env = dict(os.environ)
            r = subprocess.run([sys.executable, "-m", "comem.apps", "--config", f.name, "--check"], env=env,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("ollama: ollama at http://127.0.0.1:11434, device ram", r.stdout)
            with open(f.name, "w") as g:
                g.write('[[app]]\nrecipe = "ollama"\nurl = "http://192.168.1.2:11434"\n')
            r = subprocess.run([sys.executable, "-m", "comem.apps", "--config", f.name, "--check"], env=env,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2)
            self.assertIn("is not this machine's", r.stderr)
        finally:
            os.unlink(f.name)


class AppsOnHostRamTest(unittest.TestCase):
    """A server's model, asked for by an admission on host RAM, unloaded, and loaded again when there is room."""

    def setUp(self):
        self.m = Machine(extra=["--ram", "2GiB"])
        self.m.env["COMEM_LOG"] = "info"  # the coordinator says when an admission waits for a node's end
        self.m.__enter__()
        self.servers = []
        self.runner = None

    def tearDown(self):
        if self.runner is not None:
            self.runner.stop()
            self.thread.join(30)
        for s in self.servers:
            s.stop()
        self.m.__exit__(None, None, None)

    def serve(self, kind, **kw):
        s = FakeServer(kind, **kw)
        self.servers.append(s)
        return s

    def speak_for(self, server, recipe, **kw):
        cfg = apps.AppConfig(kw.get("name", recipe), recipe, server.url, "ram", None, kw.get("priority", "first"),
                             kw.get("reload", "when-free"), 1, kw.get("proxy"))
        self.runner = apps.Runner([cfg], socket=self.m.socket, interval=0.1)
        self.thread = threading.Thread(target=self.runner.run, daemon=True)
        self.thread.start()
        return self.runner.holders[0]

    def test_an_admission_unloads_the_idle_server_and_it_loads_again_when_there_is_room(self):
        s = self.serve("ollama")
        holder = self.speak_for(s, "ollama")
        runner_pid = wait_for(lambda: next(iter(app_holders(self.m.status())), None), timeout=30)
        self.assertIn(runner_pid, [int(x) for x in subprocess.check_output(["pgrep", "-P", str(s.pid)]).split()],
                      "the model's process is the server's runner child")
        h = wait_for(lambda: app_holders(self.m.status()).get(runner_pid) if
                     (app_holders(self.m.status()).get(runner_pid) or {}).get("resident", 0) >= MODEL_MIB * MiB
                     else None, timeout=30)
        self.assertEqual(h["name"], "ollama")
        self.assertEqual([e["name"] for e in h["entries"]], ["tiny:latest"])
        # ComfyUI's turn: more host RAM than is free, so the server's model must go.
        c = self.m.child("ram_holder.py", "comfyui")
        free = ram_device(self.m.status())["free"]
        want = free // MiB + 300
        self.assertLess(want, free // MiB + MODEL_MIB - 100)
        g = c.ask("admit", mib=want, timeout=30)
        self.assertTrue(g.get("granted"), g)
        self.assertEqual(g["n_asked"], 1)
        unloads = [e for e in holder.events if e.what == "unload"]
        self.assertEqual(len(unloads), 1)
        self.assertEqual(unloads[0].model, "tiny:latest")
        self.assertGreaterEqual(unloads[0].nbytes, MODEL_MIB * MiB, "the runner's RSS left with it")
        self.assertLessEqual(g["freed"], unloads[0].nbytes, "the receipt is the RSS measured...")
        self.assertGreaterEqual(g["freed"], unloads[0].nbytes - MiB, "...less what moved since the last census")
        self.assertFalse(os.path.exists(f"/proc/{runner_pid}/status") and
                         "Z" not in open(f"/proc/{runner_pid}/stat").read().rsplit(")", 1)[1].split()[0],
                         "the runner exited")
        self.assertEqual(holder.unloaded, {"tiny:latest": h["resident"]})
        self.assertEqual([x for x in holder.events if x.what == "load"], [], "no room: not loaded again yet")
        # ComfyUI goes: the room is back, and the model is loaded again through an admission.
        c.kill()
        wait_for(lambda: [x for x in holder.events if x.what == "load"], timeout=30)
        loads = [x for x in holder.events if x.what == "load"]
        self.assertEqual((len(loads), loads[0].model), (1, "tiny:latest"))
        self.assertGreaterEqual(loads[0].nbytes, MODEL_MIB * MiB)
        self.assertLess(holder.events.index(unloads[0]), holder.events.index(loads[0]))
        self.assertEqual(holder.unloaded, {})
        h2 = wait_for(lambda: next(iter(app_holders(self.m.status()).values()), None), timeout=30)
        self.assertNotEqual(h2["app_pid"], runner_pid, "a new runner holds it")
        self.m.check_ledger(self)

    def test_through_the_proxy_a_request_is_admitted_before_its_model_loads(self):
        s = self.serve("ollama")
        port = free_port()
        holder = self.speak_for(s, "ollama", reload="never", proxy=port)
        self.runner.proxies[0].admit_wait = 3
        proxy = apps.Endpoint("via-proxy", f"http://127.0.0.1:{port}", timeout=60)
        wait_for(lambda: any(h["resident"] >= MODEL_MIB * MiB for h in app_holders(self.m.status()).values()),
                 timeout=30)
        self.assertEqual(proxy.call("POST", "/api/generate", {"model": "tiny:latest", "prompt": "hi"})["response"], "hi")
        for length, code in (("lots", 400), (str(1 << 40), 413)):  # any local process reaches the port
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.putrequest("POST", "/api/generate")
            conn.putheader("Content-Length", length)
            conn.endheaders()
            self.assertEqual(conn.getresponse().status, code)
            conn.close()
        self.assertEqual(s_log(s), ["generate"], "nothing of those reached the server")
        c = self.m.child("ram_holder.py", "comfyui")
        want = ram_device(self.m.status())["free"] // MiB + 300
        self.assertTrue(c.ask("admit", mib=want, timeout=30).get("granted"))
        self.assertEqual([e.what for e in holder.events], ["unload"])
        c.ask("busy", on=True)  # ComfyUI computes: its bytes cannot be asked for
        # No room while ComfyUI holds it: the request is answered 503 and never reaches the server.
        with self.assertRaises(apps.AppError) as e:
            proxy.call("POST", "/api/generate", {"model": "tiny:latest", "prompt": "hi"})
        self.assertIn("HTTP 503", str(e.exception))
        self.assertIn("no room to load 'tiny:latest'", str(e.exception))
        self.assertEqual(s_log(s), ["generate"])
        # ComfyUI goes: the next request is admitted, its model loaded by the proxy, then the request passed on.
        c.kill()
        self.assertEqual(proxy.call("POST", "/api/generate", {"model": "tiny:latest", "prompt": "hi"})["response"], "hi")
        self.assertEqual(s_log(s), ["generate", "load", "generate"], "loaded by comem's admission, not by the request")
        self.assertEqual([e.what for e in holder.events], ["unload", "load"])
        self.assertGreaterEqual(holder.events[1].nbytes, MODEL_MIB * MiB)
        self.assertEqual(holder.unloaded, {})
        self.m.check_ledger(self)

    def test_what_an_idle_release_took_waits_for_a_request(self):
        self.m.__exit__(None, None, None)  # this one's coordinator releases idle holders after 1 s
        self.m = Machine(extra=["--ram", "2GiB"], idle_release=1)
        self.m.__enter__()
        s = self.serve("ollama", mib=64)
        port = free_port()
        holder = self.speak_for(s, "ollama", proxy=port)  # reload = "when-free"
        self.assertTrue(wait_for(lambda: [e for e in holder.events if e.what == "unload"], timeout=60),
                        "the idle server was never released")
        unload = [e for e in holder.events if e.what == "unload"][0]
        self.assertEqual(unload.model, "tiny:latest")
        # The room is there, and stays: no reload when free, so no unload again either. Many looks later:
        start = holder.looks
        self.assertTrue(wait_for(lambda: holder.looks >= start + 30, timeout=60))
        self.assertEqual([e.what for e in holder.events], ["unload"], "not loaded again for nobody")
        self.assertEqual(s_log(s), [])
        # A request loads it, through the proxy's admission.
        via = apps.Endpoint("via-proxy", f"http://127.0.0.1:{port}", timeout=60)
        self.assertEqual(via.call("POST", "/api/generate", {"model": "tiny:latest", "prompt": "hi"})["response"], "hi")
        self.assertEqual(s_log(s), ["load", "generate"])
        self.assertEqual([e.what for e in holder.events][:2], ["unload", "load"])
        self.m.check_ledger(self)

    def test_a_busy_server_is_asked_at_its_boundary(self):
        s = self.serve("vllm")
        holder = self.speak_for(s, "vllm", reload="never")
        wait_for(lambda: any(h["resident"] >= MODEL_MIB * MiB for h in app_holders(self.m.status()).values()),
                 timeout=30)
        holder.recipe.ep.call("POST", "/test/running", {"n": 1})
        self.assertTrue(holder.recipe.busy())
        c = self.m.child("ram_holder.py", "comfyui")
        want = ram_device(self.m.status())["free"] // MiB + 300
        result = {}
        t = threading.Thread(target=lambda: result.update(c.ask("admit", mib=want, timeout=60)))
        t.start()
        # The holder says it computes (a request in flight): the admission waits for its boundary, asking nothing.
        self.assertTrue(wait_for(lambda: "waits for 'vllm' of 'comem-apps' to end its node" in self.m.comemd_log(),
                                 timeout=30), self.m.comemd_log()[-2000:])
        self.assertEqual(self.m.status()["counters"]["asks"], 0)
        self.assertEqual([e for e in holder.events if e.what == "unload"], [], "not unloaded mid-request")
        holder.recipe.ep.call("POST", "/test/running", {"n": 0})  # the request ends: the next ask is answered
        t.join(90)
        self.assertTrue(result.get("granted"), result)
        unloads = [e for e in holder.events if e.what == "unload"]
        self.assertEqual(len(unloads), 1)
        self.assertGreaterEqual(unloads[0].nbytes, (MODEL_MIB - 50) * MiB, "sleep level 1 dropped the engine's bytes")
        self.assertTrue(holder.recipe.ep.call("GET", "/is_sleeping")["is_sleeping"])
        self.m.check_ledger(self)

    def test_servers_that_fail_or_lie_get_nothing_counted(self):
        for mode in ("fail", "noop"):
            with self.subTest(mode=mode):
                s = self.serve("ollama", unload=mode)
                holder = self.speak_for(s, "ollama", name=f"ollama-{mode}", reload="never")
                wait_for(lambda: any(h["resident"] >= MODEL_MIB * MiB
                                     for h in app_holders(self.m.status()).values()), timeout=30)
                c = self.m.child("ram_holder.py", f"comfyui-{mode}")
                want = ram_device(self.m.status())["free"] // MiB + 300
                g = c.ask("admit", mib=want, timeout=8)
                self.assertFalse(g.get("granted"), g)
                self.assertEqual(g["freed"], 0, "nothing left the runner")
                kinds = {e.what for e in holder.events}
                self.assertIn("error" if mode == "fail" else "unload", kinds)
                self.assertTrue(all(e.nbytes == 0 for e in holder.events), holder.events)
                c.kill()
                self.runner.stop()
                self.thread.join(30)
                self.runner = None
                s.stop()
        self.m.check_ledger(self)

    def test_started_beside_comfyui_once_and_gone_with_it(self):
        from comem.apps import launch
        s = self.serve("ollama", mib=64)
        with tempfile.TemporaryDirectory() as d:
            cfg = os.path.join(d, "apps.toml")
            with open(cfg, "w") as f:
                f.write(f'[[app]]\nname = "llm"\nrecipe = "ollama"\nurl = "{s.url}"\nreload = "never"\n')
            owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])  # plays ComfyUI
            self.addCleanup(owner.kill)
            saved = os.environ.get("COMEM_APPS")
            os.environ["COMEM_APPS"] = cfg
            try:
                first = launch.start_beside(self.m.socket, owner.pid)
                self.assertIsNotNone(first)
                h = wait_for(lambda: next(iter(app_holders(self.m.status()).values()), None), timeout=60)
                self.assertEqual(h["name"], "llm", "comem-apps speaks for the server of the apps file")
                second = launch.start_beside(self.m.socket, owner.pid)  # another ComfyUI of this user
                self.assertTrue(wait_for(lambda: not procs_alive(second), timeout=60), "the second exits at once")
                self.assertTrue(procs_alive(first))
                self.assertEqual([p["name"] for p in ram_device(self.m.status())["processes"]].count("comem-apps"), 1)
            finally:
                if saved is None:
                    os.environ.pop("COMEM_APPS", None)
                else:
                    os.environ["COMEM_APPS"] = saved
            owner.kill()
            owner.wait()
            self.assertTrue(wait_for(lambda: not procs_alive(first), timeout=60), "it ends with the process it serves")
            self.assertEqual(wait_for(lambda: app_holders(self.m.status()) or None, timeout=2), None,
                             "and the server leaves the ledger")

    def test_a_server_that_is_not_running_is_said_once_and_nothing_breaks(self):
        cfg = apps.AppConfig("ghost", "llama-server", "http://127.0.0.1:9", "ram", None, "first", "when-free", 1, None)
        r = apps.Runner([cfg], socket=self.m.socket, interval=0.1)
        with self.assertLogs("comem.apps", "WARNING") as logs:
            for _ in range(3):
                r.step()
        r.close()
        self.assertEqual(len(logs.output), 1, logs.output)
        self.assertIn("app 'ghost' is not running", logs.output[0])

    def test_two_apps_naming_one_process_are_refused_by_the_coordinator(self):
        s = self.serve("ollama", mib=64)
        with comem.Client("other-speaker", socket=self.m.socket, require_coordinator=True) as c:
            runner = int(subprocess.check_output(["pgrep", "-P", str(s.pid)]).split()[0])
            c.add_holder("first", device=comem.HOST_RAM, app_pid=runner)
            with self.assertRaises(comem.Error) as e:
                c.add_holder("second", device=comem.HOST_RAM, app_pid=runner)
            self.assertEqual(e.exception.status, comem.errors.EEXIST)
            self.assertIn("already speaks for", str(e.exception))
            with self.assertRaises(ValueError):
                c.add_holder("bad", device=comem.HOST_RAM, app_pid=0)


class RealLlamaServerTest(unittest.TestCase):
    """llama.cpp's own server in router mode (scripts/llama-server.sh builds it from PyPI's llama-cpp-python),
    a 200 MiB model made here with PyPI's gguf writer, on the host-RAM ledger beside a requester."""

    MIB = 200

    def setUp(self):
        if not os.access(LLAMA_SERVER, os.X_OK):
            self.skipTest(f"no llama-server at {LLAMA_SERVER}: scripts/llama-server.sh builds it from PyPI's "
                          "llama-cpp-python (about 12 minutes on 2 cores), or set COMEM_LLAMA_SERVER")
        if importlib.util.find_spec("gguf") is None:
            self.skipTest("PyPI's gguf is not installed (scripts/requirements-dev.txt has it): no model can be made")
        self.dir = tempfile.mkdtemp(prefix="comem-llama-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        models = os.path.join(self.dir, "models")
        os.makedirs(os.path.join(self.dir, "cache"))
        os.makedirs(models)
        subprocess.run([sys.executable, os.path.join(HERE, "procs", "make_tiny_gguf.py"),
                        os.path.join(models, "tiny.gguf"), "--size-mib", str(self.MIB)], check=True,
                       capture_output=True, timeout=300)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(os.path.join(self.dir, "llama.log"), "w")
        self.addCleanup(self.log.close)
        # -t 1: two threads on a 2-core machine beside the tests generate ten times slower (measured)
        self.server = subprocess.Popen([LLAMA_SERVER, "--models-dir", models, "--host", "127.0.0.1", "--port",
                                        str(port), "-t", "1", "--models-max", "1"], stdout=self.log,
                                       stderr=subprocess.STDOUT, env=dict(os.environ, LLAMA_CACHE=os.path.join(
                                           self.dir, "cache")))
        self.addCleanup(self.stop_server)
        self.llama = apps.Endpoint("llama", self.url, timeout=60)
        up = wait_for(lambda: self._up(), timeout=120)
        self.assertTrue(up, "llama-server did not answer:\n" + open(self.log.name).read()[-2000:])
        self.llama.call("POST", "/models/load", {"model": "tiny"})
        self.assertEqual(wait_for(lambda: self.state() == "loaded" and "loaded", timeout=120), "loaded")
        self.m = Machine(extra=["--ram", "2GiB"])
        self.m.__enter__()
        self.addCleanup(self.m.__exit__, None, None, None)

    def _up(self):
        try:
            return self.llama.call("GET", "/health", timeout=2) is not None
        except apps.AppError:
            return False

    def state(self):
        return next(m["status"]["value"] for m in self.llama.call("GET", "/models")["data"] if m["id"] == "tiny")

    def stop_server(self):
        if self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(20)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()

    def test_comfyui_s_admission_unloads_it_and_its_next_request_is_admitted_before_it_reloads(self):
        proxy_port = free_port()
        cfg = apps.AppConfig("llama", "llama-server", self.url, "ram", None, "first", "never", 1, proxy_port)
        runner = apps.Runner([cfg], socket=self.m.socket, interval=0.1)
        runner.proxies[0].admit_wait = 3
        t = threading.Thread(target=runner.run, daemon=True)
        t.start()
        self.addCleanup(t.join, 30)
        self.addCleanup(runner.stop)
        holder = runner.holders[0]
        h = wait_for(lambda: next((x for x in app_holders(self.m.status()).values()
                                   if x["resident"] >= self.MIB * MiB), None), timeout=30)
        self.assertIsNotNone(h, "the model's child never showed its bytes")
        child = h["app_pid"]
        with open(f"/proc/{child}/stat") as f:
            self.assertEqual(int(f.read().rsplit(")", 1)[1].split()[1]), self.server.pid, "the router's child holds it")
        via = apps.Endpoint("via-proxy", f"http://127.0.0.1:{proxy_port}", timeout=120)
        ask = {"model": "tiny", "prompt": "hi", "n_predict": 4, "temperature": 0}
        self.assertIn("content", via.call("POST", "/completion", ask))
        # ComfyUI's admission: more host RAM than is free, so the idle server must unload.
        c = self.m.child("ram_holder.py", "comfyui")
        want = ram_device(self.m.status())["free"] // MiB + 120
        g = c.ask("admit", mib=want, timeout=30)
        self.assertTrue(g.get("granted"), g)
        self.assertEqual(g["n_asked"], 1)
        unloads = [e for e in holder.events if e.what == "unload"]
        self.assertEqual(len(unloads), 1)
        self.assertGreaterEqual(unloads[0].nbytes, self.MIB * MiB, "the child's RSS left with it")
        # The receipt is the RSS measured to leave; the coordinator counts at most what its entry held at
        # the ask (the last census, one look before): the two differ by what the RSS moved in between.
        self.assertLessEqual(g["freed"], unloads[0].nbytes)
        self.assertGreaterEqual(g["freed"], unloads[0].nbytes - MiB)
        self.assertEqual(self.state(), "unloaded")
        self.assertFalse(procs_alive(child), "the child exited")
        # No room while ComfyUI computes: the next request is answered 503, and the server loads nothing.
        c.ask("busy", on=True)
        with self.assertRaises(apps.AppError) as e:
            via.call("POST", "/completion", ask)
        self.assertIn("HTTP 503", str(e.exception))
        self.assertEqual(self.state(), "unloaded")
        # ComfyUI goes: the request is admitted, the model loaded by comem, then the request answered.
        c.kill()
        self.assertIn("content", via.call("POST", "/completion", ask))
        loads = [e for e in holder.events if e.what == "load"]
        self.assertEqual([e.what for e in holder.events], ["unload", "load"])
        self.assertGreaterEqual(loads[0].nbytes, self.MIB * MiB)
        self.assertEqual(self.server.poll(), None, "the server lives")
        print(f"\nllama-server: unload {unloads[0].nbytes / MiB:.1f} MiB in {unloads[0].seconds:.3f} s, "
              f"load {loads[0].nbytes / MiB:.1f} MiB in {loads[0].seconds:.3f} s (admission included)",
              file=sys.stderr)
        self.m.check_ledger(self)


def procs_alive(pid):
    from comem.apps import procs
    return procs.alive(pid)


if __name__ == "__main__":
    unittest.main()
