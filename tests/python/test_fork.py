"""A process that forks after opening a client: the child never acts in the parent's session.

A real comemd on a simulated card (support.Machine). The test process opens a client, registers a
2 GiB model with 1 GiB resident and is granted 512 MiB, then forks (os.fork, as a worker pool or a
ComfyUI node would). In the child, every call on the inherited client raises comem.Forked naming
both pids, closing it is quiet, and a client of its own gets a session of its own. The parent then
finds its session, its entry and its grant as it left them.
"""

import json
import os
import unittest
import warnings

import support
from support import GiB, MiB, Machine

import comem

CARD = "sim:8GiB:reserved=256MiB:ctx=300MiB"


def _outcome(call) -> str:
    """What a call on the inherited client did, as text for the parent to check."""
    try:
        call()
        return "returned"
    except comem.Forked as e:
        return f"Forked {e.status}: {e}"
    except BaseException as e:  # noqa: BLE001 - the parent reports whatever it was
        return f"{type(e).__name__}: {e}"


class TestForkedChild(unittest.TestCase):
    def setUp(self):
        self.m = Machine(CARD)
        self.m.__enter__()
        self.addCleanup(self.m.__exit__, None, None, None)

    def entry(self, process, name):
        for p in self.m.status()["devices"][0]["processes"]:
            if p["name"] == process:
                for h in p["holders"]:
                    for e in h["entries"]:
                        if e["name"] == name:
                            return e
        raise AssertionError(f"no entry {name!r} in {process!r}")

    def test_child_is_refused_and_parent_untouched(self):
        c = comem.Client("parent", socket=self.m.socket, require_coordinator=True)
        self.addCleanup(c.close)
        models = c.add_holder("models")
        model = models.add_entry("model", 2 * GiB, resident=1 * GiB)
        grant = c.admit(512 * MiB, holder=models)
        session = c.session
        parent_pid = os.getpid()

        rd, wr = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded, use of fork()": the point
            pid = os.fork()
        if pid == 0:  # the child: report, never return into unittest
            code = 1
            try:
                os.close(rd)
                out = {
                    "resident": _outcome(lambda: setattr(model, "resident", 0)),
                    "admit": _outcome(lambda: c.admit(256 * MiB, holder=models)),
                    "done": _outcome(lambda: grant.done(model, 512 * MiB)),
                    "remove": _outcome(models.remove),
                    "session": _outcome(lambda: c.session),
                    "status": _outcome(c.status),
                    "close": _outcome(c.close),
                }
                with comem.Client("child", socket=self.m.socket, require_coordinator=True) as own:
                    out["own_session"] = own.session
                    own.add_holder("models").add_entry("small", 256 * MiB, resident=256 * MiB)
                os.write(wr, json.dumps(out).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(wr)
        with os.fdopen(rd, "rb") as f:
            out = json.loads(f.read() or b"{}")
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)

        rule = f"client 'parent' was opened by pid {parent_pid}; a forked child (pid {pid}) must open its own"
        for call in ("resident", "admit", "done", "remove", "session", "status"):
            self.assertTrue(out[call].startswith(f"Forked {comem.errors.EFORKED}: "), (call, out[call]))
            self.assertIn(rule, out[call])
        self.assertEqual(out["close"], "returned")
        self.assertNotIn(out["own_session"], (None, session))

        # The parent: the same session, its entry as it left it, its grant open and still its own.
        self.assertTrue(c.connected)
        self.assertEqual(c.session, session)
        self.assertEqual(self.entry("parent", "model")["resident"], 1 * GiB)
        grants = self.m.status()["devices"][0]["grants"]
        self.assertEqual([(g["session"], g["bytes"]) for g in grants], [(session, 512 * MiB)])
        self.assertNotIn("child", [p["name"] for p in self.m.status()["devices"][0]["processes"]])
        grant.done(model, 1 * GiB + 512 * MiB)
        self.assertEqual(self.entry("parent", "model")["resident"], 1 * GiB + 512 * MiB)


if __name__ == "__main__":
    unittest.main()
