"""comem.torch on Debian's CPU torch: tensors over simulated pager pages, the census figure, and the
release ladder of plain torch models answering another process's admission (a real comemd, a real child)."""

from __future__ import annotations

import threading
import unittest

import support
from support import GiB, MiB, Machine, wait_for

CARD = "sim:4GiB:reserved=256MiB:ctx=300MiB"


class TorchCase(unittest.TestCase):
    def setUp(self) -> None:
        support.need_torch(self)
        import torch
        import comem
        import comem.torch as ct
        self.torch, self.comem, self.ct = torch, comem, ct
        self.machine = Machine(CARD).__enter__()
        self.addCleanup(self.machine.__exit__, None, None, None)
        self.card = comem.SimCard(self.machine.spec)
        self.addCleanup(self.card.close)

    def layers(self, *mib: int):
        """A module with one part per layer (pages never touched, so no RAM is spent)."""
        torch = self.torch
        mods = torch.nn.ModuleList()
        for m in mib:
            layer = torch.nn.Module()
            layer.register_parameter("weight", torch.nn.Parameter(torch.empty(m * MiB // 4), requires_grad=False))
            mods.append(layer)
        return mods


class TestTensors(TorchCase):
    def test_a_tensor_over_faulted_pages_is_the_pages(self):
        torch, comem, ct = self.torch, self.comem, self.ct
        with comem.Pager("sim", 0, sim_spec=self.machine.spec) as p:
            v = p.vbar(64 * MiB, 2 * MiB)
            self.assertIsNotNone(v.fault(4 * MiB, 8 * MiB))
            t = ct.tensor(v, 4 * MiB, 8 * MiB, dtype=torch.float32, shape=(2, MiB))
            self.assertEqual(t.shape, (2, MiB))
            self.assertEqual(t.dtype, torch.float32)
            t.fill_(3.5)  # written through the tensor...
            back = torch.frombuffer(bytearray(v.read(4 * MiB, 8 * MiB)), dtype=torch.float32)
            self.assertTrue(bool((back == 3.5).all()))  # ...read back through the pager
            v.write(4 * MiB, torch.full((4,), 7.0).numpy().tobytes())
            self.assertEqual(t[0, :4].tolist(), [7.0] * 4)
            self.assertEqual(ct.held(p), p.usage)  # no CUDA: the census figure is the pager's usage
            self.assertEqual(p.usage, 8 * MiB)
            v.unpin(4 * MiB, 8 * MiB)
            with self.assertRaises(ValueError):
                ct.tensor(v, 60 * MiB, 8 * MiB)
            with self.assertRaises(TypeError):
                ct.tensor("not a vbar", 0, 1)

    def test_module_bytes_count_parameters_and_buffers(self):
        torch, ct = self.torch, self.ct
        m = torch.nn.BatchNorm1d(1024)
        self.assertEqual(ct.module_bytes(m), (1024 * 2 + 1024 * 2) * 4 + 8)  # weight, bias, mean, var, count


class TestPlacement(TorchCase):
    def test_no_gpu_and_no_simulated_card_asked_for_is_no_device(self):
        comem, ct = self.comem, self.ct
        if self.torch.cuda.is_available():
            self.skipTest("torch sees a GPU here: placement() is CUDA's")
        import os
        import tempfile
        saved = os.environ.pop("COMEM_DEVICE", None)
        try:
            with tempfile.TemporaryDirectory() as d:  # nobody listens there
                with self.assertRaises(comem.NoDevice) as e:
                    ct.placement(0, socket=os.path.join(d, "nobody.sock"))
                self.assertIn("no simulated card was asked for", str(e.exception))
            # The coordinator serves a simulated card: that one, the one its clients see.
            p = ct.placement(0, socket=self.machine.socket)
            self.assertIsInstance(p, ct.SimPlacement)
            self.assertEqual(p.card.path, self.card.path)
        finally:
            if saved is not None:
                os.environ["COMEM_DEVICE"] = saved


class TestModels(TorchCase):
    def models(self):
        c = self.comem.Client("holder", socket=self.machine.socket, require_coordinator=True)
        self.addCleanup(c.close)
        return c, self.ct.Models(c, placement_=self.ct.SimPlacement(self.card))

    def test_load_is_admitted_and_charged(self):
        c, ms = self.models()
        m = self.layers(256, 256, 512)
        e = ms.load(m, "m")
        self.assertEqual((e.size, e.resident), (1 * GiB, 1 * GiB))
        self.assertEqual(self.card.usage(), (300 * MiB, 1 * GiB))  # context + the model, as cudaMalloc would
        self.assertEqual(self.machine.process("holder")["resident"], 1 * GiB)
        self.assertIs(ms.load(m, "m"), e)  # already resident: nothing asked again
        self.assertEqual(repr(ms.placement), f"SimPlacement(simulated card 0: 3 parts on it, {GiB} bytes charged)")
        self.assertEqual(repr(self.ct.CudaPlacement(1)), "CudaPlacement(cuda:1)")  # (no GPU needed to name one)
        self.assertEqual(repr(ms), f"Models(holder 'models' on device 0: 1 model(s), {ms.placement!r})")
        self.assertEqual(ms.unload(m), 1 * GiB)
        self.assertEqual(self.card.usage()[1], 0)
        self.assertEqual(self.machine.process("holder")["resident"], 0)
        self.machine.check_ledger(self)

    def test_overhead_leaves_out_what_other_holders_keep_in_the_allocator(self):
        # A worker that runs ComfyUI's adapter beside plain torch models: ComfyUI's weights sit in the same
        # allocator, and reporting them as this holder's overhead had the coordinator ask it for a flush that
        # could free none of them (found on an H100, tests/gpu/comfy_env_gpu.py).
        ct = self.ct
        card = self.card

        class Reserved(ct.SimPlacement):
            def cached(self) -> int:  # what torch.cuda.memory_reserved says on a GPU
                return 3 * GiB

        c = self.comem.Client("holder", socket=self.machine.socket, require_coordinator=True)
        self.addCleanup(c.close)
        ms = ct.Models(c, placement_=Reserved(card))
        ms.load(self.layers(256), "m")

        def overhead() -> int:
            return [h for h in self.machine.process("holder")["holders"] if h["name"] == "models"][0]["overhead"]
        ms.census()
        self.assertEqual(overhead(), 3 * GiB - 256 * MiB)
        ms.others = lambda: 2 * GiB  # another holder's 2 GiB in the same allocator
        ms.census()
        self.assertEqual(overhead(), 1 * GiB - 256 * MiB)
        ms.others = lambda: 8 * GiB  # never below nothing
        ms.census()
        self.assertEqual(overhead(), 0)

    def test_another_process_admission_runs_the_ladder(self):
        c, ms = self.models()
        m = self.layers(128, 256, 512, 1024)  # 1.875 GiB
        ms.load(m, "m")
        threads = []
        orig = ms._on_release

        def spy(ask):
            threads.append(threading.get_ident())
            return orig(ask)
        ms.holder.callback = spy
        w = self.machine.child("torch_worker.py", "requester")
        out = w.ask("load", name="r", mib=1024, parts=1)
        self.assertNotIn("refused", out, out)
        # The requester needed int(1 GiB x 1.1) + (0.8 GiB + 400 MiB) + its 300 MiB context floor; free was
        # 4 GiB - 256 MiB reserved - this process's 300 MiB context - 1920 MiB: short by 1006 MiB. The
        # ladder moves parts smallest first until that is covered: 128 + 256 + 512 = 896 is not, so the
        # 1024 MiB part goes too.
        need = int(GiB * 1.1) + int(0.8 * GiB) + 400 * MiB + 300 * MiB
        short = need - (4 * GiB - 256 * MiB - 300 * MiB - 1920 * MiB)
        self.assertGreater(short, 896 * MiB)
        self.assertEqual(len(threads), 1)
        self.assertNotEqual(threads[0], threading.get_ident())  # the library's callback thread
        left = ms.resident(m)
        self.assertEqual(left, 0)
        self.assertEqual(self.card.usage()[1], left)
        self.assertEqual(ms.released, 1920 * MiB - left)
        self.assertEqual(self.machine.process("holder")["resident"], left)
        self.assertEqual(w.ask("card")["allocated"], 1 * GiB)
        self.machine.check_ledger(self)

    def test_computing_models_answer_busy(self):
        c, ms = self.models()
        m = self.layers(1024, 1024)
        ms.load(m, "m")
        w = self.machine.child("torch_worker.py", "requester")
        with ms.computing("p1"):
            out = w.ask("load", name="r", mib=1536, parts=1)
            self.assertTrue(out.get("refused"), out)  # the only holder is computing: nothing taken
            self.assertEqual(ms.resident(m), 2 * GiB)
        out = w.ask("load", name="r", mib=1536, parts=1)  # the node ended: now it can give
        self.assertNotIn("refused", out, out)
        self.assertLess(ms.resident(m), 2 * GiB)
        self.machine.check_ledger(self)

    def test_retry_on_oom_asks_siblings_first(self):
        torch = self.torch
        c, ms = self.models()
        w = self.machine.child("torch_worker.py", "sibling")
        w.ask("load", name="s", mib=1024, parts=2)
        calls = []

        def step():
            calls.append(1)
            if len(calls) == 1:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
            return "done"
        self.assertEqual(ms.retry_on_oom(step, need=600 * MiB), "done")
        self.assertEqual(len(calls), 2)
        self.assertTrue(wait_for(lambda: w.ask("card")["allocated"] < 1 * GiB))  # the idle sibling gave back
        with self.assertRaises(torch.cuda.OutOfMemoryError):  # a second OOM is the caller's to handle
            ms.retry_on_oom(lambda: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("again")))


if __name__ == "__main__":
    unittest.main()
