"""libcomem_preload.so: an unmodified CUDA program in the ledger (issue 14, item 2).

The program is tests/fakes/cuda_app (it reaches the driver as the CUDA runtime does: dlopen, dlsym of
cuGetProcAddress_v2, every entry point through it), the driver is the fake CUDA library, the
coordinator a real comemd on a simulated 8 GiB card. The fake's device UUID is not the simulated
card's, so the preload charges CUDA device 0 to the coordinator's device 0 and says so once.
"""

import os
import signal
import subprocess
import time
import unittest

import support
from support import GiB, MiB, Machine, wait_for

LIB_DIR = os.path.join(os.path.dirname(support.BIN_DIR), "lib")
PRELOAD = os.path.join(LIB_DIR, "libcomem_preload.so")
APP = os.path.join(support.BIN_DIR, "cuda_app")
FAKE = os.path.join(support.BIN_DIR, "libfake_cuda.so")


class App:
    """cuda_app under the preload: one command a line, one answer a line."""

    def __init__(self, env, argv=None):
        self.stderr_path = os.path.join(env["COMEM_RUNTIME_DIR"] if "COMEM_RUNTIME_DIR" in env else "/tmp",
                                        f"app-{os.getpid()}-{id(self)}.err")
        self.err = open(self.stderr_path, "w+")
        self.proc = subprocess.Popen(argv or [APP], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True, bufsize=1)
        assert self.read() == "ready", self.stderr()

    def read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"cuda_app ended (rc {self.proc.poll()}): {self.stderr()}")
        return line.strip()

    def do(self, *words):
        self.proc.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.proc.stdin.flush()
        return [int(x) for x in self.read().split()]

    def stderr(self):
        self.err.flush()
        self.err.seek(0)
        return self.err.read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(30)
        for f in (self.proc.stdin, self.proc.stdout, self.err):
            f.close()


CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NOT_FOUND = 0, 2, 500


@unittest.skipUnless(os.path.exists(PRELOAD) and os.path.exists(APP) and os.path.exists(FAKE),
                     "libcomem_preload.so, cuda_app or the fake CUDA library is not built")
class TestPreload(unittest.TestCase):
    def setUp(self):
        self.m = Machine()
        self.m.__enter__()
        self.addCleanup(self.m.__exit__, None, None, None)

    def env(self, **extra):
        e = dict(self.m.env)
        old = e.get("LD_PRELOAD")  # a sanitizer runtime (the ASan build) stays first
        e["LD_PRELOAD"] = f"{old}:{PRELOAD}" if old else PRELOAD
        e["COMEM_CUDA_LIBRARY"] = FAKE
        e["COMEM_LOG"] = "warn"
        e.update(extra)
        return e

    def app(self, argv=None, **extra):
        a = App(self.env(**extra), argv)
        self.addCleanup(a.close)
        return a

    def preload_holder(self):
        p = self.m.process("cuda_app")
        if p is None:
            return None
        hs = [h for h in p["holders"] if h["name"] == "preload"]
        return hs[0] if hs else None

    def held(self):
        h = self.preload_holder()
        return h.get("overhead") if h else None

    def test_allocations_are_attributed_to_the_process(self):
        a = self.app()
        self.assertEqual(a.do("alloc", 100), [0, CUDA_SUCCESS])  # asked for (at least 64 MiB), granted
        self.assertEqual(a.do("alloc", 2), [1, CUDA_SUCCESS])    # small: attributed, not asked
        self.assertEqual(a.do("create", 64), [2, CUDA_SUCCESS])  # cuMemCreate: by its location's device
        self.assertTrue(wait_for(lambda: self.held() == 166 * MiB), self.m.status())
        h = self.preload_holder()
        self.assertEqual((h["kind"], h["answers"], h["entries"]), ("raw", [], []))
        self.assertEqual(a.do("free", 0), [CUDA_SUCCESS])
        self.assertEqual(a.do("free", 2), [CUDA_SUCCESS])        # cuMemRelease
        self.assertTrue(wait_for(lambda: self.held() == 2 * MiB))
        # A cuGetProcAddress handed out by cuGetProcAddress is the preload's too.
        self.assertEqual(a.do("gpa"), [CUDA_SUCCESS])
        self.assertEqual(a.do("alloc", 10), [3, CUDA_SUCCESS])
        self.assertTrue(wait_for(lambda: self.held() == 12 * MiB))
        self.assertEqual(self.m.status()["devices"][0]["grants"], [])  # each admission's grant was closed
        self.assertIn("charging its device 0", a.stderr())
        self.assertEqual(a.stderr().count("charging its device 0"), 1)
        self.m.check_ledger(self)

    def test_enforce_answers_out_of_memory_when_refused(self):
        a = self.app(COMEM_PRELOAD_POLICY="enforce")
        self.assertEqual(a.do("alloc", 9000), [-1, CUDA_ERROR_OUT_OF_MEMORY])  # more than the 8 GiB card
        self.assertEqual(a.do("alloc", 9000), [-1, CUDA_ERROR_OUT_OF_MEMORY])
        self.assertEqual(a.stderr().count("answered CUDA_ERROR_OUT_OF_MEMORY"), 1)  # said once
        self.assertEqual(a.do("alloc", 1024), [0, CUDA_SUCCESS])  # what fits is granted
        self.assertTrue(wait_for(lambda: self.held() == GiB))
        self.assertEqual(a.do("create", 9000), [-1, CUDA_ERROR_OUT_OF_MEMORY])
        self.assertEqual(self.held(), GiB)

    def test_observe_logs_and_allows(self):
        a = self.app()  # observe is the default
        self.assertEqual(a.do("alloc", 9000), [0, CUDA_SUCCESS])
        self.assertIn("allowed, as COMEM_PRELOAD_POLICY=observe says", a.stderr())
        self.assertTrue(wait_for(lambda: self.held() == 9000 * MiB))

    def test_no_coordinator_steps_aside_and_says_so_once(self):
        a = self.app(COMEM_SOCKET=os.path.join(self.m.dir, "nobody.sock"), COMEM_PRELOAD_POLICY="enforce")
        self.assertEqual(a.do("alloc", 9000), [0, CUDA_SUCCESS])  # nobody to ask: the program runs as without comem
        self.assertEqual(a.do("alloc", 100), [1, CUDA_SUCCESS])
        self.assertEqual(a.do("free", 0), [CUDA_SUCCESS])
        self.assertEqual(a.stderr().count("no coordinator answers"), 1, a.stderr())
        self.assertIsNone(self.m.process("cuda_app"))

    def test_a_stopped_coordinator_is_not_waited_for(self):
        # Issue 20 item 19: with comemd stopped, each allocation of 64 MiB or more waited the client's
        # whole timeout (10 s). Now it is decided here, while comemd is still stopped, and said once.
        a = self.app(COMEM_NO_FAST="1")  # every admission goes to the coordinator, none to the booking area
        self.assertEqual(a.do("alloc", 2), [0, CUDA_SUCCESS])  # connected; small, so not asked
        os.kill(self.m.comemd.pid, signal.SIGSTOP)
        try:
            self.assertEqual(a.do("alloc", 100), [1, CUDA_SUCCESS])
            self.assertEqual(a.do("alloc", 100), [2, CUDA_SUCCESS])
            said = a.stderr()
        finally:
            os.kill(self.m.comemd.pid, signal.SIGCONT)
        self.assertEqual(said.count("did not answer or acknowledge an admission within 200 ms"), 1, said)
        self.assertEqual(a.do("alloc", 100), [3, CUDA_SUCCESS])  # it answers again: asked as before
        self.assertTrue(wait_for(lambda: self.held() == 302 * MiB), self.m.status())
        self.assertTrue(wait_for(lambda: self.m.status()["devices"][0]["grants"] == []))  # late grants given back
        self.assertEqual(a.stderr().count("did not answer"), 1, a.stderr())
        self.m.check_ledger(self)

    def test_a_coordinator_asking_another_process_is_waited_for(self):
        # Its admission needs a release from another process: the coordinator acknowledges it at once
        # and the preload waits for the answer, far past the acknowledgement's bound.
        holder = self.m.child("binding_holder.py", "holder")
        holder.ask("hold", holder="models", entry="big", mib=6144, mode="slow")  # 6 of the 8 GiB card
        a = self.app(COMEM_NO_FAST="1", COMEM_PRELOAD_ACK_MS="50")
        a.proc.stdin.write("alloc 3000\n")
        a.proc.stdin.flush()
        self.assertTrue(wait_for(lambda: len(holder.ask("asks")["asks"]) == 1))  # the coordinator asks it
        time.sleep(0.5)  # ten times the bound: the allocation still waits on the ask
        holder.ask("go")
        self.assertEqual([int(x) for x in a.read().split()], [0, CUDA_SUCCESS])
        self.assertNotIn("did not answer", a.stderr())
        self.assertLess(holder.ask("entries")["entries"]["big"], 6 * GiB)  # it freed its share for the admission
        self.assertTrue(wait_for(lambda: self.held() == 3000 * MiB))
        self.assertEqual(self.m.status()["devices"][0]["grants"], [])
        self.m.check_ledger(self)

    def test_no_driver_steps_aside(self):
        out = subprocess.run([APP], env=self.env(COMEM_CUDA_LIBRARY=os.path.join(self.m.dir, "no-libcuda.so")),
                             input="quit\n", capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 3)  # the program's own "no driver", not a crash in comem
        self.assertIn("no driver", out.stdout)
        self.assertIsNone(self.m.process("cuda_app"))

    def test_off_attributes_nothing(self):
        a = self.app(COMEM_PRELOAD_POLICY="off")
        self.assertEqual(a.do("alloc", 9000), [0, CUDA_SUCCESS])
        self.assertIsNone(self.m.process("cuda_app"))

    def test_an_entry_point_it_does_not_count_passes_through(self):
        a = self.app(COMEM_LOG="debug")
        self.assertEqual(a.do("lookup", "cuMemHostAlloc"), [CUDA_SUCCESS])
        self.assertEqual(a.do("lookup", "cuNoSuchFunction"), [CUDA_ERROR_NOT_FOUND])  # the driver's own answer
        self.assertIn("cuMemHostAlloc is handed out unwrapped", a.stderr())
        self.assertEqual(a.do("alloc", 2), [0, CUDA_SUCCESS])  # and what it does count still is
        self.assertTrue(wait_for(lambda: self.held() == 2 * MiB))
        quiet = self.app()  # at the default level the runtime's start-up lookups say nothing
        self.assertEqual(quiet.do("lookup", "cuMemHostAlloc"), [CUDA_SUCCESS])
        self.assertNotIn("cuMemHostAlloc", quiet.stderr())

    def test_rtld_next_still_means_after_the_caller(self):
        # dlsym is interposed; RTLD_NEXT from the program must still find libc's, not stop at the preload.
        a = self.app()
        self.assertEqual(a.do("next", "getpid"), [1])
        self.assertEqual(a.do("next", "fopen"), [1])

    def test_comem_run(self):
        out = subprocess.run([os.path.join(support.BIN_DIR, "comem"), "run", "--policy", "bogus", "--", APP],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 2)
        self.assertIn("--policy must be", out.stderr)
        env = self.env(COMEM_PRELOAD_LIB=PRELOAD)
        env["LD_PRELOAD"] = self.m.env.get("LD_PRELOAD", "")  # comem run adds the library itself
        a = App(env, [os.path.join(support.BIN_DIR, "comem"), "run", "--policy", "enforce", "--min", "1MiB",
                      "--socket", self.m.socket, "--", APP])
        self.addCleanup(a.close)
        self.assertEqual(a.do("alloc", 9000), [-1, CUDA_ERROR_OUT_OF_MEMORY])
        self.assertEqual(a.do("alloc", 2), [0, CUDA_SUCCESS])
        self.assertTrue(wait_for(lambda: self.held() == 2 * MiB))


if __name__ == "__main__":
    unittest.main()
