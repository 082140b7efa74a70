"""A machine without a GPU: comem manages host RAM only, and ComfyUI's log says so once (issue 41 item 5).

comemd runs with ``--device auto`` and NVML made unavailable whatever the machine
(``COMEM_NVML_LIBRARY`` names a file that does not exist) and ``--ram 4GiB``, and
``COMEM_DEVICE`` is unset in this process, as on a CPU-only ComfyUI's machine. The
coordinator then serves host RAM as its only device: a card ordinal is refused with
ENODEV (:class:`comem.NoDevice`), host RAM admits. A CPU-only ComfyUI host against it
(ComfyUI's real model manager on Debian's CPU torch) logs one line on ``comem.comfy``
saying no GPU was found and comem manages host RAM only, and never tries to manage a
card: its models are ComfyUI's own, and the coordinator never hears of card 0. Before,
auto fell back to a simulated 24 GiB card, and the adapter put ComfyUI's models on it.
"""

from __future__ import annotations

import gc
import logging
import os
import unittest

import support
from support import MiB, Machine

LINE = "comem: no GPU found: comem manages host RAM only"


def make_patcher(mm, layers_mib):
    """A ComfyUI ModelPatcher around a module whose leaf layers have these sizes (MiB)."""
    import comfy.model_patcher
    import torch
    layers = []
    for mib in layers_mib:
        layer = torch.nn.Linear(1, 1, bias=False)
        layer.weight = torch.nn.Parameter(torch.empty(mib * MiB // 4), requires_grad=False)
        layers.append(layer)
    return comfy.model_patcher.ModelPatcher(torch.nn.Sequential(*layers), load_device=mm.get_torch_device(),
                                            offload_device=torch.device("cpu"))


class NoGpuCase(unittest.TestCase):
    """A real comemd on a machine made to have no GPU, serving a 4 GiB host RAM budget."""

    def setUp(self) -> None:
        self.machine = Machine("sim:1GiB", extra=["--device", "auto", "--ram", "4GiB"])  # the card is never served
        self.machine.env["COMEM_NVML_LIBRARY"] = os.path.join(self.machine.dir, "no-libnvidia-ml.so.1")
        self.machine.__enter__()
        self.addCleanup(self.machine.__exit__, None, None, None)
        saved = os.environ.pop("COMEM_DEVICE", None)  # as on the machine: nobody asked for a simulated card
        if saved is not None:
            self.addCleanup(os.environ.__setitem__, "COMEM_DEVICE", saved)


class TestBinding(NoGpuCase):

    def test_status_lists_host_ram_alone(self):
        st = self.machine.status()
        self.assertEqual([d["uuid"] for d in st["devices"]], ["RAM-host"])
        self.assertIsNotNone(st["devices"][0]["host_ram"])
        self.assertEqual(st["coordinator"]["source"], "none")
        self.assertIsNone(st["coordinator"]["card_spec"])
        self.assertIn("no GPU: managing host RAM only", self.machine.cli("status").stdout)

    def test_a_card_is_no_device_and_host_ram_admits(self):
        import comem
        with comem.Client("cpu-only", role="worker", socket=self.machine.socket) as c:
            with self.assertRaises(comem.NoDevice) as e:
                c.add_holder("card", device=0)
            self.assertIn("no such device", str(e.exception))
            with self.assertRaises(comem.NoDevice):
                c.admit(64 * MiB, device=0)
            h = c.add_holder("ram", device=comem.HOST_RAM)
            with c.admit(64 * MiB, device=comem.HOST_RAM, holder=h) as g:
                self.assertEqual(self.machine.status()["devices"][0]["granted"], 64 * MiB)
                g.done(h.add_entry("cache", 64 * MiB, 0), 0)


class TestCpuComfyUI(NoGpuCase):
    """ComfyUI's own model manager on the CPU, as the host and as a worker."""

    def setUp(self) -> None:
        support.need_torch(self)
        support.need_comfyui(self)
        import torch
        if torch.cuda.is_available():
            self.skipTest("torch sees a GPU here: this is the CPU-only ComfyUI's case")
        self.mm = support.import_comfy()
        super().setUp()

    def no_gpu_lines(self, records):
        return [r.getMessage() for r in records if "no GPU" in r.getMessage()]

    def test_host_logs_one_line_and_manages_no_card(self):
        from comem.comfy import Host
        dev_before = self.mm.get_torch_device()
        with self.assertLogs("comem.comfy", level="INFO") as logs:
            host = Host(self.mm, socket=self.machine.socket, embed=False, name="comfyui").install()
            try:
                self.assertEqual(self.mm.get_torch_device(), dev_before, "no device plays a card")
                self.assertFalse(host.devices.simulated)
                self.assertFalse(host.devices.cards)
                patcher = make_patcher(self.mm, [64, 64])
                self.mm.load_models_gpu([patcher])
                self.assertTrue(any(lm.model is patcher for lm in self.mm.current_loaded_models))
                host.sync()
                st = self.machine.status()
                holders = [h["name"] for d in st["devices"] for p in d["processes"] if p["name"] == "comfyui"
                           for h in p["holders"]]
                self.assertNotIn("comfyui", holders, "ComfyUI's models are on no card comem manages")
                self.assertEqual(st["counters"]["admissions"], 0)
            finally:
                for lm in list(self.mm.current_loaded_models):
                    lm.model_unload()
                self.mm.current_loaded_models.clear()
                host.close()
                gc.collect()
        self.assertEqual(self.no_gpu_lines(logs.records), [LINE], "one line, once")
        log = self.machine.comemd_log()
        self.assertNotIn("refused holder", log)
        self.assertNotIn("no such device", log)
        self.machine.check_ledger(self)

    def test_worker_logs_one_line_and_loads_nothing_on_a_card(self):
        import torch
        from comem.comfy import Worker
        with self.assertLogs("comem.comfy", level="INFO") as logs:
            w = Worker("w", socket=self.machine.socket, mm=self.mm)
            try:
                self.assertIsNone(w.torch_models)
                module = torch.nn.Linear(64, 64)
                self.assertIsNone(w.load(module))
                with w.node("p1"):
                    pass
                w.census()
                self.assertEqual(w.unload(module), 0)
            finally:
                w.close()
        self.assertEqual(self.no_gpu_lines(logs.records), [LINE])
        self.assertNotIn("no such device", self.machine.comemd_log())


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    unittest.main()
