"""Steering a process's real comfy-aimdo so that it never takes bytes the ledger gave another process.

comfy-aimdo (what ComfyUI 783545f6 runs by default) decides by itself when its
VBARs may fault pages in: a page comes in while its *simple* budget term,
``aimdo usage + page + simple_vram_headroom - capacity``, stays at or below 0
and its polled term (the card's free reading, every 2 s) keeps 256 MiB free.
Both terms see a grant the coordinator gave process B as free bytes, since B
has not allocated them yet. The steer keeps aimdo's one run-time knob, the
process-wide ``simple_vram_headroom``, at::

    capacity - usage - room,   room = max(0, free - granted - reserve)

(the room from one snapshot of the coordinator's view, ``View.room``; usage
is aimdo's own count), so aimdo in this process grows at most into what nobody is promised,
and evicts its own pages first when others' grants or loads take the room.
It never sets less than the headroom the process started with (ComfyUI's
``--reserve-vram`` or aimdo's default): comem only tightens.

A process that computes cannot call into its own VBARs from another thread
(aimdo takes no lock), so an ask that reaches it while a node computes is
answered by :meth:`AimdoSteer.give`: the headroom is raised until aimdo's own
usage target is ``usage - n``; aimdo's next fault or hooked allocation, on the
computing thread, evicts unpinned pages down to it (lowest priority first;
pages in use are pinned and stay), and nothing refaults above it until the
give ends.

Which aimdo releases can be steered, and how, is data (``KNOWN``; see
docs/aimdo-versions.md): 0.4.13 has the setter only in its C library; 0.5.6
(what ComfyUI v0.39 pins) and 0.6.0 also in Python with a getter. Any other version gets one warning naming it and
no steering; ComfyUI runs on with aimdo's own budget.
"""

from __future__ import annotations

import ctypes
import logging
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from .. import errors

log = logging.getLogger("comem.comfy")

POLL_S = 0.01  # how often the view is read: the window in which a new grant is not yet aimdo's headroom
GIVE_HOLD_S = 0.5  # a give keeps aimdo from refaulting what it gave this long after, until the grant is in the view

#: comfy-aimdo releases whose headroom comem can set at run time, and where the knob is.
KNOWN: Dict[str, str] = {"0.4.13": "library", "0.5.6": "python", "0.6.0": "python"}


def aimdo_version(control: Any) -> Optional[str]:
    """The installed comfy-aimdo's version (from its package), or None when it says none."""
    try:
        from importlib.metadata import version
        return version("comfy-aimdo")
    except Exception:
        pass
    try:
        import comfy_aimdo._version as v  # type: ignore[import-not-found]
        return str(v.__version__)
    except Exception:
        return None


def steerable(control: Any) -> bool:
    """True when ``control`` is a loaded comfy-aimdo of a release comem knows how to steer."""
    return control is not None and getattr(control, "lib", None) is not None \
        and KNOWN.get(aimdo_version(control) or "") is not None


class Knob:
    """comfy-aimdo's ``simple_vram_headroom``: read and set, the way the installed release allows."""

    def __init__(self, control: Any, how: str) -> None:
        self.control = control
        self.how = how
        lib = getattr(control, "lib", None)
        if lib is None:
            raise RuntimeError("comfy-aimdo's library is not loaded (control.init was not called)")
        self._lib = lib

    def get(self) -> int:
        if self.how == "python":
            return int(self.control.get_simple_vram_headroom())
        # 0.4.13 exports the variable itself, not a getter.
        return int(ctypes.c_int64.in_dll(self._lib, "simple_vram_headroom").value)

    def set(self, nbytes: int) -> None:
        if self.how == "python":
            self.control.set_simple_vram_headroom(int(nbytes))
        else:
            self._lib.set_simple_vram_headroom(ctypes.c_int64(int(nbytes)))


def headroom_for(capacity: int, usage: int, room: int, floor: int) -> int:
    """The simple headroom that lets aimdo grow by ``room`` (what nobody is promised), never below ``floor``.

    At most ``capacity`` (no room at all): the view is a file another process could have written, and
    no figure in it may ask aimdo for more than the card (0.6.0 refuses a headroom over 2**60)."""
    return max(floor, min(capacity, capacity - usage - room))


class AimdoSteer:
    """Keeps this process's comfy-aimdo inside what the ledger leaves it, on a thread of its own.

    ``view`` is a :class:`comem.View` on the process's coordinator; ``devices``
    the comem device indices aimdo manages here (aimdo's headroom is one value
    for the process: with several devices the tightest wins, as aimdo compares
    it with each device's capacity).
    """

    def __init__(self, view: Any, control: Any, devices: List[int], usage: Optional[Callable[[], int]] = None,
                 poll: float = POLL_S, tick: Optional[Callable[[], Any]] = None) -> None:
        self.view = view
        self.control = control
        self.devices = list(devices)
        self.version = aimdo_version(control)
        how = KNOWN.get(self.version or "")
        if how is None:
            raise errors.Error(errors.ENOTSUP, "AimdoSteer",
                               f"comfy-aimdo {self.version or '(version unknown)'} is not one comem knows "
                               f"({', '.join(sorted(KNOWN))}); its headroom is not steered")
        self.knob = Knob(control, how)
        self.floor = self.knob.get()  #: what the process started with: comem never sets less
        self._usage = usage or self._aimdo_usage
        self._poll = poll
        self._tick = tick  # run after every step (the dynamic models' census)
        self._capacity = {d: view.read(d).capacity for d in self.devices}  # fixed for a card's life
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.last: Optional[int] = None  #: the headroom set last
        self.steps = 0                   #: how many readings changed it
        self.given = 0                   #: bytes aimdo evicted here for :meth:`give` so far
        self._set_lock = threading.Lock()  # the steer thread and a give both set the knob
        self._target: Optional[int] = None  # aimdo usage a give holds this process to, while it lasts
        self._target_until = 0.0            # monotonic time the held target ends after a give returned

    def _aimdo_usage(self) -> int:
        try:
            return int(self.control.get_total_vram_usage())
        except Exception:
            return 0

    def step(self) -> Optional[int]:
        """Reads the view once and sets the headroom it calls for; returns it (None: no reading yet)."""
        with self._set_lock:
            usage = self._usage()
            want: Optional[int] = None
            for d in self.devices:
                room = self.view.room(d)
                if room < 0 or self._capacity[d] <= 0:
                    continue  # the coordinator has no reading of this card yet
                h = headroom_for(self._capacity[d], usage, room, self.floor)
                want = h if want is None else max(want, h)
            target = self._held_target()
            if target is not None:
                g = self._give_headroom(target)
                want = g if want is None else max(want, g)
            if want is not None and want != self.last:
                self.knob.set(want)
                self.last = want
                self.steps += 1
            return want

    def _held_target(self) -> Optional[int]:
        if self._target is not None and self._target_until and time.monotonic() >= self._target_until:
            self._target = None
        return self._target

    def _give_headroom(self, target: int) -> int:
        """The headroom at which aimdo's deficit is ``usage - target`` on every device it manages here."""
        return max(self.floor, max(self._capacity[d] - max(0, target) for d in self.devices))

    def give(self, nbytes: int, wait_s: float, stop: Optional[Callable[[], bool]] = None) -> int:
        """Has aimdo evict ``nbytes`` of its own unpinned pages at its next faults, on the thread that
        computes; waits until its usage fell that far, ``stop()`` is true or ``wait_s`` passed, and
        returns the bytes its usage fell. The target is held ``GIVE_HOLD_S`` longer so that aimdo does not
        fault the bytes back before the coordinator's view counts them as granted to the asker."""
        start = self._usage()
        with self._set_lock:
            self._target, self._target_until = start - max(0, int(nbytes)), 0.0
            h = self._give_headroom(self._target)
            if self.last is None or h > self.last:
                self.knob.set(h)
                self.last = h
        deadline = time.monotonic() + max(0.0, wait_s)
        try:
            while self._usage() > self._target:
                if (stop is not None and stop()) or time.monotonic() >= deadline:
                    break
                time.sleep(POLL_S)
        finally:
            now = self._usage()
            with self._set_lock:
                self._target = min(self._target, now)
                self._target_until = time.monotonic() + GIVE_HOLD_S
        freed = max(0, start - now)
        self.given += freed
        return freed

    def start(self) -> "AimdoSteer":
        """Steps now, then every ``poll`` seconds until :meth:`stop`."""
        self.step()
        self._thread = threading.Thread(target=self._run, name="comem-aimdo-steer", daemon=True)
        self._thread.start()
        log.info("comem: steering comfy-aimdo %s's headroom (knob in its %s; started at %d MiB)",
                 self.version, self.knob.how, self.floor >> 20)
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._poll):
            try:
                self.step()
                if self._tick is not None:
                    self._tick()
            except errors.Error as e:  # the coordinator went away: aimdo keeps what it was told last
                log.debug("comem: aimdo steering paused: %s", e)
            except Exception:
                log.exception("comem: aimdo steering stopped")
                return

    def stop(self, restore: bool = True) -> None:
        """Stops the thread; gives aimdo back the headroom it started with."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if restore:
            try:
                self.knob.set(self.floor)
            except Exception as e:
                log.debug("comem: aimdo headroom not restored: %s", e)


def find_aimdo() -> Optional[Any]:
    """comfy_aimdo.control when this process's ComfyUI runs on the real aimdo (dynamic VRAM), else None."""
    control = sys.modules.get("comfy_aimdo.control")
    mem = sys.modules.get("comfy.memory_management")
    if control is None or getattr(control, "lib", None) is None:
        return None
    if mem is not None and not getattr(mem, "aimdo_enabled", False):
        return None  # imported (model_management always does) but ComfyUI runs without dynamic VRAM
    return control


_warned: Dict[str, bool] = {}


def start_for(view: Any, devices: List[int], control: Any = None,
              tick: Optional[Callable[[], Any]] = None) -> Optional[AimdoSteer]:
    """An :class:`AimdoSteer` started for this process's aimdo, or None (no aimdo, or a release comem does
    not know: one warning naming it, and ComfyUI runs on with aimdo's own budget)."""
    control = control if control is not None else find_aimdo()
    if control is None:
        return None
    try:
        return AimdoSteer(view, control, devices, tick=tick).start()
    except (errors.Error, RuntimeError) as e:
        key = str(e)
        if not _warned.get(key):
            _warned[key] = True
            log.warning("comem: %s; ComfyUI runs on, and another process's grants are not kept from aimdo here", e)
        return None
