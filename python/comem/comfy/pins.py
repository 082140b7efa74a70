"""ComfyUI's pinned host RAM booked with the ledger, and given back through ComfyUI's own pin ladder.

ComfyUI 783545f6 pins the weights its dynamic models stream from host RAM,
module by module on the computing thread (``comfy.pinned_memory.pin_memory``),
after its own per-process check ``ensure_pin_budget`` says the pin fits; it
counts them in ``TOTAL_PINNED_MEMORY``. Every process does this against the
same RAM, each believing the machine's available RAM is its own.

Here ``ensure_pin_budget`` is wrapped where ``pin_memory`` calls it (ComfyUI
also calls it from ``free_memory`` to make room for a load's pins, which pins
nothing: that call is passed through): once ComfyUI's own check passes, the
pin is booked with the coordinator (``Client.pin``, against the machine's pin
ceiling and, when the coordinator serves it, host RAM's free beyond its
reserve) before ComfyUI allocates and registers it. A refusal makes
``ensure_pin_budget`` say no, and ComfyUI then does what it does when its
own budget says no (it takes a pin from a lower-priority module, or copies
without one). Bookings are made a chunk ahead (``CHUNK``) so the computing
thread crosses to the coordinator once per chunk, not once per module; at
every node boundary the booking is brought back to what ComfyUI has pinned
plus at most one chunk.

Another process's pin ask (``"pins"``) is answered by ComfyUI's own
``free_pins`` (its tiers: pins not used by the prompt first), under the
model lock: never while a node computes (the computing thread uses its pins
then), when the ask is answered busy.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from typing import Any, Callable, Iterator, Optional

from .. import errors
from ..client import Client, Holder, ReleaseAsk

log = logging.getLogger("comem.comfy")

CHUNK = 256 << 20  #: bytes booked ahead of ComfyUI's pins, so its computing thread rarely waits on the coordinator
LOCK_WAIT_S = 0.05  #: how long a pin ask waits for the model lock before it says busy
HOLDER = "comfyui-pins"

_tls = threading.local()  # .pinning: this thread is inside ComfyUI's pin_memory


class ComfyPins:
    """ComfyUI's ``TOTAL_PINNED_MEMORY`` booked with ``client`` (``mm``: comfy.model_management)."""

    def __init__(self, client: Client, mm: Any, lock: Any) -> None:
        self.client = client
        self.mm = mm
        self.lock = lock
        self.holder: Optional[Holder] = None
        self.booked = 0  #: bytes booked with the coordinator (ComfyUI's pins, plus at most a chunk ahead)
        self.refused = 0  #: pins the ledger refused (ComfyUI then went without them)
        self.released = 0  #: bytes ComfyUI's free_pins gave back to other processes' asks
        self._mu = threading.Lock()  # booked, and the calls that change it

    @staticmethod
    def applies(mm: Any) -> bool:
        """True where ComfyUI has the pin ladder this wraps (783545f6; a125cd84 has none)."""
        return all(hasattr(mm, n) for n in ("ensure_pin_budget", "free_pins", "TOTAL_PINNED_MEMORY"))

    def pinned(self) -> int:
        """What ComfyUI counts as pinned now."""
        return max(0, int(getattr(self.mm, "TOTAL_PINNED_MEMORY", 0)))

    def _holder(self) -> Optional[Holder]:
        if self.holder is None and self.client.connected:
            try:
                self.holder = self.client.add_holder(HOLDER, kind="pins", on_release=self._on_ask, answers=("pins",))
            except errors.Error as e:
                log.warning("comem: ComfyUI's pins are not booked with the coordinator: %s", e)
        return self.holder

    # ---- before ComfyUI pins ----

    @staticmethod
    @contextlib.contextmanager
    def pinning() -> Iterator[None]:
        """The block is ComfyUI's ``pin_memory``: the ``ensure_pin_budget`` it calls books the pin."""
        was = getattr(_tls, "pinning", False)
        _tls.pinning = True
        try:
            yield
        finally:
            _tls.pinning = was

    def book(self, size: int) -> bool:
        """Books what ComfyUI's pins will need once ``size`` more are pinned; False when the ledger refuses."""
        holder = self._holder()
        if holder is None:
            return True  # no coordinator: ComfyUI's own check decides, as without comem
        with self._mu:
            need = self.pinned() + max(0, int(size)) - self.booked
        if need <= 0:
            return True
        # The lock is not held across the round trip: the coordinator may ask this very process meanwhile.
        for amount in (max(need, CHUNK), need):
            try:
                holder.pin(amount)
            except errors.Refused:
                continue
            except errors.Error as e:
                log.warning("comem: a pin of %d bytes was not booked: %s", amount, e)
                return True  # the coordinator went away: decide locally, as the client does
            with self._mu:
                self.booked += amount
            return True
        with self._mu:
            self.refused += 1
        return False

    def settle(self) -> None:
        """Gives back what is booked beyond ComfyUI's pins and one chunk (at node boundaries, after asks)."""
        holder = self.holder
        if holder is None:
            return
        with self._mu:
            excess = self.booked - self.pinned() - CHUNK
            if excess <= 0:
                return
            try:
                holder.unpin(excess)
                self.booked -= excess
            except errors.Error as e:
                log.warning("comem: %d bytes of pins not given back: %s", excess, e)

    # ---- another process's pin ask ----

    def _on_ask(self, ask: ReleaseAsk) -> int:
        if ask.kind != "pins":
            return 0
        if not self.lock.acquire(timeout=LOCK_WAIT_S):
            raise errors.Busy(errors.EBUSY, HOLDER, "a node is computing with these pins")
        try:
            before = self.pinned()
            if ask.bytes > 0:
                self.mm.free_pins(ask.bytes)
            freed = max(0, before - self.pinned())
            self.released += freed
        finally:
            self.lock.release()
        with self._mu:  # what went back: booked down to the pins left (the ask is for pinned bytes, no chunk kept)
            excess = self.booked - self.pinned()
            if excess > 0 and self.holder is not None:
                try:
                    self.holder.unpin(excess)
                    self.booked -= excess
                except errors.Error as e:
                    log.warning("comem: %d bytes of pins not given back: %s", excess, e)
        if freed:
            log.info("comem: ComfyUI's free_pins gave %d MiB of pinned RAM back to another process", freed >> 20)
        return freed


def wrap_ensure_pin_budget(orig: Callable[..., Any], pins: ComfyPins) -> Callable[..., Any]:
    """``comfy.model_management.ensure_pin_budget``: ComfyUI's own check, then, inside ``pin_memory``, the
    ledger's booking."""
    @functools.wraps(orig)
    def ensure_pin_budget(size: Any, *args: Any, **kwargs: Any) -> Any:
        ok = orig(size, *args, **kwargs)
        if not ok or not getattr(_tls, "pinning", False):
            return ok
        return pins.book(int(size))
    return ensure_pin_budget


def wrap_pin_memory(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``comfy.pinned_memory.pin_memory``: ComfyUI's own, its ``ensure_pin_budget`` call booking the pin."""
    @functools.wraps(orig)
    def pin_memory(*args: Any, **kwargs: Any) -> Any:
        with ComfyPins.pinning():
            return orig(*args, **kwargs)
    return pin_memory
