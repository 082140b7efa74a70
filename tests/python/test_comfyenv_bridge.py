"""comem's bridge over the real comfy-env 0.4.46's host side, in this process (ComfyUI's own model manager).

This process is ComfyUI's host (the real ``comfy.model_management``, comem's host
adapter on a real comemd's simulated card) with the real comfy-env's host modules
imported. comfy-env's proxies are its own ``SubprocessModelPatcher`` in a real
``LoadedModel``; its workers are its own ``SubprocessWorker`` objects, never started:
where a check needs a worker that joined comem, its liveness and pid are set on
that object (the server test, test_comfy_env.py, joins real ones). Checked here:
a proxy is never a host model; a joined worker's proxy is never a row; comfy-env's
budget call, reserve publication, aimdo forward and idle/pressure plans leave
joined workers to comem and write nothing; switches and versions.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import unittest
from unittest import mock

import support
from support import GiB, MiB, Machine

LINUX = "sim:8GiB:reserved=256MiB:ctx=300MiB"


def _comfy_env_missing():
    try:
        from importlib import metadata
        v = metadata.version("comfy-env")
    except Exception:  # noqa: BLE001
        return "comfy-env is not installed in the tests' Python (scripts/requirements-dev.txt pins comfy-env==0.4.46)"
    return None if v == "0.4.46" else f"these checks are for comfy-env 0.4.46; the tests' Python has {v}"


class BridgeCase(unittest.TestCase):
    def setUp(self) -> None:
        support.need_torch(self)
        support.need_comfyui(self)
        why = _comfy_env_missing()
        if why:
            self.skipTest(why)
        self.mm = support.import_comfy()
        import comem
        from comem.comfy import Host
        from comfy_env import state_sync
        from comfy_env.isolation import metadata, pool
        self.pool, self.metadata, self.state_sync = pool, metadata, state_sync
        self.originals = {n: getattr(pool, n) for n in ("_create_worker", "_handle_vram_budget", "_publish_reserve",
                                                         "_forward_reserve_to_aimdo", "_insert_loaded_model")}
        self.machine = Machine(LINUX).__enter__()
        self.addCleanup(self.machine.__exit__, None, None, None)
        self.card = comem.SimCard(self.machine.spec)
        self.addCleanup(self.card.close)
        self.Host = Host
        self.host = None

    def start_host(self):
        self.host = self.Host(self.mm, socket=self.machine.socket, embed=False, card=self.card, name="comfyui")
        self.host.install()
        self.addCleanup(self._teardown_host)
        return self.host

    def _teardown_host(self) -> None:
        self.mm.current_loaded_models.clear()
        self.host.close()

    def worker(self, name: str, pid: int = 0):
        """A real comfy-env worker object, never started; ``pid``: play a live process of that pid."""
        from comfy_env.isolation.workers.subprocess import SubprocessWorker
        folder = tempfile.mkdtemp(prefix="ce-worker-")
        self.addCleanup(os.rmdir, folder)
        w = SubprocessWorker(python=sys.executable, working_dir=folder, sys_path=[], name=name)
        if pid:
            w.pin_state = {"pid": pid}
            patcher = mock.patch.object(w, "is_alive", return_value=True)
            patcher.start()
            self.addCleanup(patcher.stop)
        return w

    def proxy(self, worker, size: int, model_id: str = "m"):
        from comfy_env.isolation.model_patcher import SubprocessModelPatcher
        p = SubprocessModelPatcher(worker, 1, model_id, size, self.mm.get_torch_device(), self.mm.unet_offload_device())
        self.addCleanup(lambda: setattr(p, "_worker", None))
        return p

    def host_entries(self):
        proc = self.machine.process("comfyui")
        return [e for h in (proc or {}).get("holders", []) for e in h.get("entries", [])]


class TestAttach(BridgeCase):
    def test_attached_and_detached(self):
        host = self.start_host()
        self.assertIsNotNone(host.comfy_env)
        for name, orig in self.originals.items():
            self.assertIsNot(getattr(self.pool, name), orig, name)
        host.uninstall()
        for name, orig in self.originals.items():
            self.assertIs(getattr(self.pool, name), orig, name)
        self.assertIsNone(host.comfy_env)

    def test_switched_off(self):
        with mock.patch.dict(os.environ, {"COMEM_COMFY_ENV": "off"}):
            host = self.start_host()
        self.assertIsNone(host.comfy_env)
        for name, orig in self.originals.items():
            self.assertIs(getattr(self.pool, name), orig, name)

    def test_another_version_is_named_once_and_left_alone(self):
        from comem.comfy import comfyenv_host
        with mock.patch.object(comfyenv_host, "installed_version", return_value="0.4.47"), \
                self.assertLogs("comem.comfy", logging.WARNING) as logs:
            host = self.start_host()
        said = [r for r in logs.output if "comfy-env" in r]
        self.assertEqual(len(said), 1, logs.output)
        self.assertIn("0.4.47", said[0])
        self.assertIn("0.4.46", said[0])
        self.assertIsNone(host.comfy_env)
        for name, orig in self.originals.items():
            self.assertIs(getattr(self.pool, name), orig, name)


class TestOneRowOneWriter(BridgeCase):
    def test_a_proxy_is_never_a_host_model(self):
        from comem.comfy.models import is_comfy_env_proxy, is_foreign
        host = self.start_host()
        w = self.worker("unjoined")
        p = self.proxy(w, 512 * MiB)
        self.pool._insert_loaded_model(p)  # comfy-env's own insertion: the worker runs without comem
        lm = self.mm.current_loaded_models[0]
        self.assertIs(lm.model, p)
        self.assertTrue(is_comfy_env_proxy(lm))
        self.assertTrue(is_foreign(lm))
        host.sync()
        self.assertIn(lm, self.mm.current_loaded_models, "an unjoined worker's proxy is its model's only row")
        self.assertEqual(self.host_entries(), [])
        self.assertEqual(host.offload_bytes(lm), 0)

    def test_a_joined_workers_proxy_is_no_row(self):
        host = self.start_host()
        bridge = host.comfy_env
        joined, other = self.worker("joined", pid=4242), self.worker("other")
        p_joined, p_other = self.proxy(joined, 256 * MiB, "a"), self.proxy(other, 128 * MiB, "b")
        self.pool._insert_loaded_model(p_joined)  # before the join: comfy-env's row
        from comem.comfy.comfyenv_host import _Joined
        bridge._joined["/envs/joined_py311/.pixi/envs/default"] = _Joined(joined, 4242, "9", "joined")
        self.assertTrue(bridge.runs_comem(joined))
        self.assertFalse(bridge.runs_comem(other))
        host.sync()  # the joined worker's proxy leaves the list
        self.assertEqual([lm.model for lm in self.mm.current_loaded_models], [])
        self.pool._insert_loaded_model(p_joined)
        self.pool._insert_loaded_model(p_other)
        self.assertEqual([lm.model for lm in self.mm.current_loaded_models], [p_other])
        # The process behind the worker object changed (comfy-env replaced it): no longer joined.
        joined.pin_state = {"pid": 4343}
        self.assertFalse(bridge.runs_comem(joined))

    def test_comfy_env_decides_nothing_for_a_joined_worker_and_writes_nothing(self):
        host = self.start_host()
        bridge = host.comfy_env
        key = "/envs/joined_py311/.pixi/envs/default"
        w = self.worker("joined", pid=4242)
        from comem.comfy.comfyenv_host import _Joined
        bridge._joined[key] = _Joined(w, 4242, "9", "joined")
        self.mm.EXTRA_RESERVED_VRAM = reserve = 400 * MiB + 1
        before = list(self.mm.current_loaded_models)
        reply = self.pool._handle_vram_budget({"models": [], "total_size": 6 * GiB}, worker_key=key)
        self.assertEqual(reply, {"device": str(self.mm.get_torch_device())})
        self.assertEqual(self.mm.EXTRA_RESERVED_VRAM, reserve)
        self.assertEqual(list(self.mm.current_loaded_models), before)
        self.assertEqual(self.pool._publish_reserve(shrink_allowed=True), reserve)
        self.assertEqual(self.mm.EXTRA_RESERVED_VRAM, reserve)
        self.assertEqual(self.pool._RESERVE_PUBLISHED, 0)
        from comem.comfy.comfyenv_host import _no_forward
        self.assertIs(self.pool._forward_reserve_to_aimdo, _no_forward)  # comfy-env's own returns False too here
        self.assertFalse(self.pool._forward_reserve_to_aimdo(8 * GiB))
        states = {key: {"alive": True, "advertises": True, "in_flight": False, "held": GiB},
                  "/envs/other": {"alive": True, "advertises": True, "in_flight": False, "held": GiB}}
        plan = self.state_sync.plan_pressure_release(states, 512 * MiB)
        self.assertEqual([k for k, _ in plan], ["/envs/other"])
        self.assertEqual(states[key]["advertises"], True, "the caller's states are not changed")


class TestJoinRecords(BridgeCase):
    def test_a_join_record_is_believed_only_as_the_ledger_confirms_it(self):
        host = self.start_host()
        bridge = host.comfy_env
        me, session = os.getpid(), host.client.session
        self.assertTrue(bridge._checked({"joined": True, "pid": me, "session": session}, me)["joined"])
        for record, pid, why in (({"joined": True, "pid": me + 1, "session": session}, me, "not the worker's"),
                                 ({"joined": True, "pid": True, "session": session}, 1, "not the worker's"),
                                 ({"joined": True, "pid": me, "session": "900999999"}, me, "lists no session"),
                                 (["joined"], me, "not the join record"),
                                 (None, me, "not the join record")):
            answer = bridge._checked(record, pid)
            self.assertFalse(answer["joined"], record)
            self.assertIn(why, answer["why"])

    def test_a_worker_that_said_no_is_asked_again_only_once_replaced(self):
        host = self.start_host()
        bridge = host.comfy_env
        w = self.worker("refuses", pid=5151)
        key = "/envs/refuses_py311/.pixi/envs/default"
        calls = []

        def call_module(**kw):
            calls.append(kw)
            return {"joined": False, "why": "no comem here"}
        with mock.patch.object(w, "call_module", side_effect=call_module), \
                self.assertLogs("comem.comfy", logging.WARNING) as logs:
            self.assertFalse(bridge.ensure_joined(w, key))
            self.assertFalse(bridge.ensure_joined(w, key))
            self.assertEqual(len(calls), 1)
            self.assertEqual((calls[0]["module"], calls[0]["func"], calls[0]["name"]),
                             ("comem.comfy.comfyenv_worker", "join", "refuses"))
            w.pin_state = {"pid": 5252}  # comfy-env replaced the process
            self.assertFalse(bridge.ensure_joined(w, key))
            self.assertEqual(len(calls), 2)
        said = [r for r in logs.output if "runs without comem" in r]
        self.assertEqual(len(said), 1, logs.output)
        self.assertIn("no comem here", said[0])


    def test_a_worker_that_never_answers_is_not_asked_again_nor_its_successors(self):
        # comfy-env ends a worker whose call timed out (its TimeoutError); the next worker of that environment
        # would time out the same way, so none is asked again in this host's life.
        host = self.start_host()
        bridge = host.comfy_env
        w = self.worker("mute", pid=6161)
        key = "/envs/mute_py311/.pixi/envs/default"
        calls = []

        def call_module(**kw):
            calls.append(kw)
            raise TimeoutError(f"mute: call_id=1 timed out after {kw['timeout']}s")
        with mock.patch.object(w, "call_module", side_effect=call_module), \
                self.assertLogs("comem.comfy", logging.WARNING) as logs:
            self.assertFalse(bridge.ensure_joined(w, key))
            w.pin_state = {"pid": 6262}  # comfy-env's next worker
            self.assertFalse(bridge.ensure_joined(w, key))
        self.assertEqual(len(calls), 1)
        from comem.comfy.comfyenv_host import JOIN_S
        self.assertEqual(calls[0]["timeout"], JOIN_S)
        said = [r for r in logs.output if "runs without comem" in r]
        self.assertEqual(len(said), 1, logs.output)
        self.assertIn("did not answer its join", said[0])
        self.assertFalse(bridge.workers().get(key, {}).get("joined", False))

    def test_a_workers_words_reach_the_log_as_one_bounded_line(self):
        host = self.start_host()
        w = self.worker("loud", pid=7171)
        hostile = "\x1b[2J\x1b[31mforged\nWARNING comem: all is well\r" + "x" * 100_000
        with mock.patch.object(w, "call_module", return_value={"joined": False, "why": hostile}), \
                self.assertLogs("comem.comfy", logging.WARNING) as logs:
            self.assertFalse(host.comfy_env.ensure_joined(w, "/envs/loud_py311/.pixi/envs/default"))
        (line,) = [r for r in logs.output if "runs without comem" in r]
        self.assertNotIn("\x1b", line)
        self.assertNotIn("\n", line)
        self.assertNotIn("\r", line)
        self.assertIn("forged", line)
        self.assertLess(len(line), 1000)


class TestNames(unittest.TestCase):
    def test_env_name(self):
        from comem.comfy.comfyenv_host import env_name
        self.assertEqual(env_name("/r/envs/isodemo-nodes_py311-torch2.14-cpu/.pixi/envs/default"), "isodemo-nodes")
        self.assertEqual(env_name("/r/envs/a_b-nodes_py312-torch2.9-cu128/.pixi/envs/default"), "a_b-nodes")
        self.assertEqual(env_name("/r/envs/legacy-nodes-py311/.pixi/envs/default"), "legacy-nodes-py311")
        self.assertEqual(env_name("/opt/venv"), "venv")
        self.assertEqual(len(env_name("/r/envs/" + "x" * 80 + "_py311/.pixi/envs/default").encode()), 63)
        self.assertEqual(env_name("/r/envs/bad\nname_py3/.pixi/envs/default"), "bad?name")


class TestPathFolder(unittest.TestCase):
    def test_a_private_folder_holding_only_comem(self):
        import comem
        from comem.comfy.comfyenv_host import comem_path_folder
        runtime = tempfile.mkdtemp(prefix="comem-rt-")
        self.addCleanup(__import__("shutil").rmtree, runtime, True)
        os.chmod(runtime, 0o700)
        with mock.patch.dict(os.environ, {"COMEM_RUNTIME_DIR": runtime}):
            folder = comem_path_folder()
            self.assertEqual(os.path.dirname(folder), os.path.realpath(runtime))
            self.assertEqual(os.listdir(folder), ["comem"])
            package = os.path.dirname(os.path.abspath(comem.__file__))
            self.assertEqual(os.readlink(os.path.join(folder, "comem")), package)
            self.assertEqual(comem_path_folder(), folder)
            os.unlink(os.path.join(folder, "comem"))
            os.symlink("/nonexistent", os.path.join(folder, "comem"))  # planted: replaced, not followed
            self.assertEqual(comem_path_folder(), folder)
            self.assertEqual(os.readlink(os.path.join(folder, "comem")), package)
            self.assertEqual(os.listdir(folder), ["comem"])


class TestWorkerSide(unittest.TestCase):
    def test_switched_off_in_the_worker(self):
        from comem.comfy import comfyenv_worker
        with mock.patch.dict(os.environ, {"COMEM_COMFY": "off"}):
            answer = comfyenv_worker.join("w")
        self.assertFalse(answer["joined"])
        self.assertIn("COMEM_COMFY=off", answer["why"])
        self.assertIsNone(comfyenv_worker.joined())


if __name__ == "__main__":
    unittest.main()
