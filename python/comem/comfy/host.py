"""The host: ComfyUI itself, with the machine's other processes in its model list.

:class:`Host` registers ComfyUI's ``current_loaded_models`` as a holder (the
adapter's hooks), keeps one stand-in per model other processes hold, so
ComfyUI's own loop, the Free button and the OOM handler reach them, admits
every load, and before each eviction loop publishes the reserve the
coordinator computes (``EXTRA_RESERVED_VRAM``: it moves only where free
readings are process-local, as under Windows WDDM) and forwards the pager
headroom to comfy-aimdo or comem.aimdo when either is loaded.

Where the host's own free reading is process-local (WDDM: the coordinator's
``process_scope``), the published reserve carries what the workers hold, and
ComfyUI's target (``memory_required``) is computed with it. As ComfyUI's loop
asks workers through their stand-ins, that reading would not rise and the
target would not fall, so every later model in the loop would be asked the
same shortfall again. The host's ``get_free_memory`` therefore adds what the
stand-ins' holders reported freed since the reserve now in
``EXTRA_RESERVED_VRAM`` was published: the pair (reading, reserve) then moves
as the true figures move, and the loop stops once the true shortfall is met.
The reserve is published again only at the outermost ``free_memory`` or
``load_models_gpu`` (never between the figures one call computed and the loop
that uses them), and the correction starts again from 0 with it. Where the
reading is device-wide (Linux), it already rises with every worker's free and
nothing is added.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import threading
from typing import Any, Callable, Dict, Iterator, Optional

from .. import errors
from ..client import Client
from .adapter import Adapter
from .standin import StandIns

log = logging.getLogger("comem.comfy")


class Host(Adapter):
    """comem under the host's ComfyUI (``mm``: comfy.model_management; imported when None).

    socket: the coordinator's socket (None: the default). Unless ``COMEM_AUTOSTART=0``, the user's
    ``comemd`` is started (detached) when none answers (:func:`comem.comfy.adapter.start_coordinator`);
    a coordinator of another comem version raises :class:`comem.coordinator.OtherVersion`. embed: run a
    coordinator inside this process when none answers even so. name: this process in status and logs.
    """

    role = "host"

    def __init__(self, mm: Any = None, socket: Optional[str] = None, name: str = "comfyui", embed: bool = True,
                 card: Any = None, simulated: Optional[bool] = None, client: Optional[Client] = None,
                 aimdo: Any = None) -> None:
        if mm is None:
            from .adapter import mm_module
            mm = mm_module()
        base = int(mm.EXTRA_RESERVED_VRAM)
        self._base = base
        if client is None:
            from .adapter import start_coordinator
            start_coordinator(name, "host", socket)  # the user's comemd, started if none runs (COMEM_AUTOSTART)
            client = Client(name, role="host", socket=socket, reserve_base=base, embed=embed)
        super().__init__(client, mm, card=card, simulated=simulated, aimdo=aimdo)
        self.standins = StandIns(client, self.mm, self.devices)
        self.published: Optional[int] = None
        self.headroom: Optional[int] = None
        self._baseline: Dict[int, int] = {}  # comem device -> standins.freed() when the reserve was published
        self._depth = threading.local()  # this thread's nesting of the wrapped free_memory / load_models_gpu
        self._reading: Optional[Callable[..., Any]] = None  # our get_free_memory wrapper, while installed
        self._reading_orig: Optional[Callable[..., Any]] = None
        self.comfy_env: Optional[Any] = None  #: the bridge over comfy-env's workers, where it runs here

    # ---- install: the adapter's hooks, and a reading that sees what workers freed ----

    def install(self) -> "Host":
        """The adapter's hooks (see :class:`Adapter`), then ``get_free_memory`` wrapped (see the module)."""
        if self.installed:
            return self
        super().install()
        self._reading_orig = self.mm.get_free_memory
        self._reading = self._wrap_free_reading(self._reading_orig)
        self.mm.get_free_memory = self._reading
        from .comfyenv_host import Bridge
        self.comfy_env = Bridge.attach(self)
        return self

    def uninstall(self) -> None:
        """Restores ComfyUI's own functions (ours first) and forgets this process's stand-ins."""
        if self.comfy_env is not None:
            self.comfy_env.uninstall()
            self.comfy_env = None
        if self.installed and self._reading is not None:
            if self.mm.get_free_memory is self._reading:
                self.mm.get_free_memory = self._reading_orig
            self._reading = self._reading_orig = None
        super().uninstall()

    def correction(self, index: int) -> int:
        """Bytes the host's free reading on comem device ``index`` adds now (0 where it is device-wide)."""
        if not self.standins.process_local(index) or index not in self._baseline:
            return 0
        return max(0, self.standins.freed(index) - self._baseline[index])

    def _wrap_free_reading(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def get_free_memory(dev: Any = None, *args: Any, **kwargs: Any) -> Any:
            v = orig(dev, *args, **kwargs)
            idx = self.devices.index(dev if dev is not None else self.mm.get_torch_device())
            extra = 0 if idx is None else self.correction(idx)
            if extra <= 0:
                return v
            if isinstance(v, tuple):  # torch_free_too: (total, torch's idle cache); torch's share is unchanged
                return (v[0] + extra,) + tuple(v[1:])
            return v + extra
        return get_free_memory

    @contextlib.contextmanager
    def _entered(self) -> Iterator[None]:
        self._depth.n = getattr(self._depth, "n", 0) + 1
        try:
            yield
        finally:
            self._depth.n -= 1

    def _counted(self, orig: Callable[..., Any], inner: Callable[..., Any]) -> Callable[..., Any]:
        """``inner`` (the adapter's wrapper of ``orig``) with this thread's nesting counted around it."""
        @functools.wraps(orig)
        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._entered():
                return inner(*args, **kwargs)
        return counted

    def _wrap_free_memory(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        return self._counted(orig, super()._wrap_free_memory(orig))

    def _wrap_load_models_gpu(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        return self._counted(orig, super()._wrap_load_models_gpu(orig))

    def before_loop(self) -> None:
        """Stand-ins up to date with the ledger; the coordinator's reserve published (outermost call only)."""
        if not self.client.connected:
            if self.standins.loaded:
                self.standins.clear()
            return
        try:
            self._sync_rows()
            if getattr(self._depth, "n", 0) <= 1:
                self.publish()
        except errors.Error as e:
            log.warning("comem: could not bring other processes' models up to date: %s", e)

    def publish(self) -> None:
        """Writes the reserve this host should keep into EXTRA_RESERVED_VRAM; forwards the pager headroom."""
        idx = self.devices.index(self.mm.get_torch_device())
        if idx is None:
            return
        r = self.client.reserve(idx)
        self._baseline[idx] = self.standins.freed(idx)  # the reserve now counts what was freed before
        if r.reserve != self.mm.EXTRA_RESERVED_VRAM:
            log.info("comem: reserve %.0f MiB -> %.0f MiB (other processes' charge)",
                     self.mm.EXTRA_RESERVED_VRAM / (1 << 20), r.reserve / (1 << 20))
            self.mm.EXTRA_RESERVED_VRAM = r.reserve
        self.published = r.reserve
        if r.pager_headroom != self.headroom:
            self.headroom = r.pager_headroom
            _forward_headroom(r.pager_headroom)

    def sync_standins(self) -> None:
        """Other processes' models brought into ComfyUI's list now (as before an eviction loop, without the
        reserve): after a worker's node, whose loads the list should show at once."""
        if not self.installed or not self.client.connected:
            return
        with self.lock:
            try:
                self._sync_rows()
            except errors.Error as e:
                log.warning("comem: could not bring other processes' models up to date: %s", e)

    def _sync_rows(self) -> None:
        """Other processes' rows in ComfyUI's list as the ledger has them: comem's stand-ins, and no comfy-env
        proxy for a worker that joined (the caller holds the model lock)."""
        if self.comfy_env is not None:
            self.comfy_env.drop_proxies()
        self.standins.sync()

    def sync(self) -> None:
        """Stand-ins, this process's entries and the reserve, all brought up to date now."""
        with self.lock:
            self.before_loop()
            self.models.sync()

    def node_boundary(self) -> None:
        """Other processes' rows follow the ledger at every node boundary too: a process gone since is no row."""
        self.sync_standins()

    def after_uninstall(self) -> None:
        self.standins.clear()
        self.mm.EXTRA_RESERVED_VRAM = self._base


def _forward_headroom(nbytes: int) -> None:
    """The pager headroom the coordinator computed, to whichever pager this process loaded."""
    for mod in ("comem.aimdo.control", "comfy_aimdo.control"):
        ctl = sys.modules.get(mod)
        lib = getattr(ctl, "lib", None) if ctl is not None else None
        if lib is not None and hasattr(lib, "set_simple_vram_headroom"):
            try:
                lib.set_simple_vram_headroom(int(nbytes))
                log.info("comem: pager headroom %.0f MiB forwarded to %s", nbytes / (1 << 20), mod)
            except Exception as e:  # the reserve is still published
                log.warning("comem: forwarding the pager headroom to %s failed: %s", mod, e)
