#!/usr/bin/env python3
"""Derives conformance vectors from an independent Python model of the upstream rules.

The model below restates ComfyUI's and comfy-env's formulas (comfyui-manager-code.md
sections 1-11, comfy-env-code.md section 1) in plain Python. Python's own float and int
semantics are the reference the C core must match bit for bit, so running these formulas
here gives the expected values. Inputs come from a fixed grid plus a seeded generator, so
the output is reproducible:

    python3 derive.py > derived.json
"""
import json
import math
import random

KiB, MiB, GiB = 1024, 1024**2, 1024**3
FLOOR = 300 * MiB


# ---- ComfyUI (model_management.py) -------------------------------------------------

def extra_reserved(windows=False, total_vram_mib=0.0, reserve_vram=None):
    if reserve_vram is not None:
        return reserve_vram * 1024 * 1024 * 1024
    r = 400 * 1024 * 1024
    if windows:
        r = 600 * 1024 * 1024
        if total_vram_mib > 15 * 1024:
            r += 100 * 1024 * 1024
    return r


def min_inference(reserve):
    return (1024 * 1024 * 1024) * 0.8 + reserve


def admission(weights, memory_required, minimum_memory_required, reserve):
    inference = min_inference(reserve)
    extra_mem = max(inference, memory_required + reserve)
    mmr = extra_mem if minimum_memory_required is None else max(inference, minimum_memory_required + reserve)
    return extra_mem, weights * 1.1 + extra_mem, mmr, inference


STATES = {"disabled": 0, "no": 1, "low": 2, "normal": 3, "high": 4, "shared": 5}


def lowvram(free, loaded, mmr, reserve, ratio, state, force_full, cpu=False):
    st = "disabled" if cpu else state
    budget = 0
    if st in ("low", "normal") and not force_full:
        cur = free + loaded
        budget = max(0, cur - mmr, min(cur * ratio, cur - min_inference(reserve)))
        budget = budget - loaded
        if budget == 0:
            budget = 0.1
    if st == "no":
        budget = 0.1
    kind = "full" if budget == 0 else ("nothing" if budget == 0.1 else "bytes")
    return kind, budget


def evict(required, free, entries, for_dynamic=False, smart=True, device_none=False):
    cands = [(-(e["size"] - e["loaded"]), e["refs"], e["size"], i)
             for i, e in enumerate(entries) if not e.get("keep") and not e.get("dead")]
    order = [k[-1] for k in sorted(cands)]
    freed = 0
    actions, detached = [], []
    for i in order:
        e = entries[i]
        to_free = 1e32
        if smart or device_none:
            to_free = 0 if device_none else required - (free + freed)
            if e.get("dynamic") and for_dynamic:
                required -= e["loaded"]
                to_free = 0
        if to_free > 0:
            if to_free < e["loaded"]:
                got = math.ceil(to_free)  # calc's model of a partial unload
                freed += got
                if got >= to_free:
                    actions.append({"entry": i, "action": "partial", "asked": to_free})
                    continue
            freed += e["loaded"]
            actions.append({"entry": i, "action": "detach", "asked": to_free})
            detached.append(i)
    return {"order": order, "actions": actions, "freed": freed, "free_after": free + freed,
            "unloaded": sorted(detached, reverse=True), "required_after": required}


def max_pinned(ram, swap, windows, cgroup, disabled=False):
    if disabled:
        return -1
    if windows:
        return ram * 0.40
    # ComfyUI 783545f6 counts disk swap under a cgroup limit too (`cgroup` has no effect).
    return max(ram * 0.40, min(ram * 0.90, ram - 4 * 1024**3, ram + swap - 16 * 1024**3))


def hostbuf(size, maximum, high_ram=False):
    if high_ram:
        return max(0, int(size * 2))
    return max(0, int(min(size, maximum) * 2))


def pin_budget(size, headroom, available):
    shortfall = size + max(headroom / 2, 2048 * 1024**2) - available
    return shortfall, shortfall + 256 * 1024 * 1024, shortfall <= 0


def pin_registerable(total, size, maximum):
    shortfall = total + size - maximum
    return shortfall, shortfall + 2048 * 1024 * 1024, maximum > 0 and shortfall <= 0, maximum <= 0


def cache_headroom(total_ram_mib):
    active = min(10.0, max(2.0, total_ram_mib * 0.10 / 1024.0))
    inactive = min(128.0, total_ram_mib / 1024.0)
    return max(0, int(active * (1024**3))), max(0, int(inactive * (1024**3))), active, inactive


def cgroup_clamp(total, available, limit, usage):
    if limit is None or limit >= total:
        return False, total, available
    if usage is None:
        return True, min(total, limit), min(available, limit)
    return True, min(total, limit), max(0, min(available, limit - usage))


# ---- comfy-env (reserve.py, state_sync.py) ------------------------------------------

def charge(residency, process_local, floor=FLOOR):
    if not process_local:
        return 0
    return int(floor) + max(0, int(residency or 0))


def total_reserve(base, charges, device_total=None):
    total = max(0, int(base or 0)) + sum(max(0, int(c)) for c in charges)
    if device_total:
        total = min(total, int(int(device_total) * 0.75))
    return total


def next_reserve(current, proposed, shrink_allowed):
    current, proposed = max(0, int(current or 0)), max(0, int(proposed or 0))
    if proposed >= current:
        return proposed
    return proposed if shrink_allowed else current


def ask_target(weights, slack, min_inf, extra_reserved, want=0):
    w = max(0, int(weights or 0))
    return int(w * float(slack)) + max(int(min_inf or 0), int(want or 0) + int(extra_reserved or 0))


def pager_headroom(seed, published, base):
    if seed is None:
        seed = 256 * MiB
    added = max(0, int(published or 0) - max(0, int(base or 0)))
    return max(0, int(seed)) + added


def requester_reserve(published, own):
    return max(0, int(published or 0) - max(0, int(own or 0)))


def cast_forward(largest, streams):
    if not largest or not streams:
        return 0
    return max(0, streams) * max(0, largest)


def held(workers, floor, cap=None):
    total = 0
    for w in workers:
        for m in w.get("models", []):
            if w.get("in_flight"):
                total += max(m["size"], m["ledger"], m["peak"])
            else:
                total += max(m["ledger"], m["peak"])
        ex = w.get("excess")
        ex = 0 if ex is None else max(0, int(ex))
        if cap is not None:
            ex = min(ex, max(0, cap - floor))
        total += floor + ex
    return total


def plan_pressure(holders, shortfall, requester=None):
    remaining = max(0, int(shortfall or 0))
    if remaining == 0:
        return []
    cands = []
    for h in holders:
        hv = max(0, int(h.get("held", 0)))
        if (h["key"] != requester and h.get("alive", True) and h.get("advertises", True)
                and not h.get("in_flight", False) and hv > 0):
            cands.append((hv, h["key"]))
    cands.sort(key=lambda t: (-t[0], t[1]))
    out = []
    for hv, key in cands:
        if remaining <= 0:
            break
        ask = min(hv, remaining)
        out.append([key, ask])
        remaining -= ask
    return out


def plan_pin_pressure(reports, target, now, last, min_slice=256 * MiB, interval=10.0):
    if now - last < interval or target <= 0:
        return []
    cand = [(r["key"], r["pinned"]) for r in reports if r["key"] != "host" and r["pinned"] >= min_slice]
    total = sum(p for _, p in cand)
    if total <= 0:
        return []
    ask_total = min(target, total)
    return [[k, max(min_slice, ask_total * p // total)] for k, p in cand]


# ---- the grid -------------------------------------------------------------------------

def main():
    rnd = random.Random(20261130)
    out = []

    def negative(v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v < 0
        if isinstance(v, list):
            return any(negative(x) for x in v)
        return False

    def add(rule, inp, expect, source):
        case = {"id": f"d-{rule}-{sum(1 for c in out if c['rule'] == rule)}", "rule": rule,
                "source": "derive.py: " + source, "input": inp, "expect": expect}
        if any(negative(v) for v in inp.values()):
            case["cli"] = False  # the CLI refuses negative sizes on purpose
        out.append(case)

    for windows in (False, True):
        for vram in (4 * GiB, 8 * GiB, 15 * GiB, 15 * GiB + MiB, 24 * GiB, 80 * GiB, 143771 * MiB):
            r = extra_reserved(windows, vram / (1024 * 1024))
            add("reserve", {"windows": windows, "total-vram": vram} if windows else {"total-vram": vram},
                {"reserve": r, "minimum_inference": min_inference(r)}, "default reserve by card size")
    for g in (0.25, 0.3, 0.5, 1.5, 3.25, 10):
        r = extra_reserved(False, 0, g)
        add("reserve", {"reserve-vram": g}, {"reserve": r, "minimum_inference": min_inference(r)},
            "--reserve-vram replaces the reserve")

    reserves = [400 * MiB, 734003200, 2 * GiB, 0.3 * GiB, 0]
    for _ in range(40):
        weights = rnd.choice([0, 512 * MiB, GiB, 2 * GiB + 12345, 6 * GiB, 12 * GiB + 7, 23 * GiB])
        mr = rnd.choice([0, 256 * MiB, GiB, 3 * GiB + 99, 0.75 * GiB])
        mmr_in = rnd.choice([None, None, GiB, 4 * GiB, 0])
        reserve = rnd.choice(reserves)
        free = rnd.choice([0, GiB, 6 * GiB, 10.5 * GiB, 20 * GiB])
        extra_mem, target, mmr, inference = admission(weights, mr, mmr_in, reserve)
        inp = {"weights": weights, "memory-required": mr, "reserve": reserve, "free": free}
        if mmr_in is not None:
            inp["minimum-memory-required"] = mmr_in
        add("admission", inp, {"extra_mem": extra_mem, "free_target": target, "minimum_memory_required": mmr,
                               "minimum_inference": inference, "to_free": target - free,
                               "second_pass": free < mmr}, "admission targets")

    for _ in range(60):
        free = rnd.choice([0, 0.5 * GiB, GiB, 2 * GiB, 6 * GiB + 1, 10 * GiB, 40 * GiB])
        loaded = rnd.choice([0, 0, GiB, 3 * GiB, 6 * GiB])
        reserve = rnd.choice(reserves)
        mr = rnd.choice([0, GiB, 3 * GiB])
        _, _, mmr, _ = admission(0, mr, None, reserve)
        ratio = rnd.choice([0.0, 0.4])
        state = rnd.choice(["normal", "normal", "low", "no", "high", "disabled", "shared"])
        force = rnd.random() < 0.1
        kind, budget = lowvram(free, loaded, mmr, reserve, ratio, state, force)
        inp = {"free": free, "loaded": loaded, "mmr": mmr, "reserve": reserve, "ratio": ratio, "vram-state": state}
        if force:
            inp["force-full-load"] = True
        add("lowvram", inp, {"kind": kind, "budget": budget}, f"lowvram budget, {state}")

    for _ in range(40):
        n = rnd.randint(0, 6)
        entries = []
        for _ in range(n):
            size = rnd.choice([300 * MiB, GiB, 2 * GiB, 6 * GiB, 12 * GiB + 4096, 1234567])
            loaded = rnd.choice([size, size, size // 2, 0, size - 64 * MiB if size > 64 * MiB else size])
            e = {"size": size, "loaded": loaded, "refs": rnd.choice([2, 2, 3, 5])}
            if rnd.random() < 0.25:
                e["dynamic"] = True
            if rnd.random() < 0.1:
                e["keep"] = True
            if rnd.random() < 0.05:
                e["dead"] = True
            entries.append(e)
        free = rnd.choice([0, GiB, 4 * GiB, 6.5 * GiB])
        required = rnd.choice([2 * GiB, 8579868262.400001, 12 * GiB * 1.1 + 1493172224, 1e30, 0.5 * GiB])
        for_dynamic = rnd.random() < 0.3
        smart = rnd.random() < 0.85
        device_none = rnd.random() < 0.05
        inp = {"required": required, "free": free, "entry": entries}
        if for_dynamic:
            inp["for-dynamic"] = True
        if not smart:
            inp["no-smart-memory"] = True
        if device_none:
            inp["any-device"] = True
        add("evict", inp, evict(required, free, entries, for_dynamic, smart, device_none), "eviction ladder")

    for ram in (8 * GiB, 16 * GiB, 20 * GiB, 24 * GiB, 31.3 * GiB, 64 * GiB, 96 * GiB, 512 * GiB):
        for swap in (0, 8 * GiB, 32 * GiB):
            for windows, cgroup in ((False, False), (False, True), (True, False)):
                if windows and swap:
                    continue
                m = max_pinned(ram, swap, windows, cgroup)
                size = rnd.choice([GiB, 6 * GiB, 100 * GiB])
                inp = {"ram": ram, "swap": swap, "size": size}
                if windows:
                    inp["windows"] = True
                if cgroup:
                    inp["cgroup"] = True
                add("pinned-max", inp, {"max_pinned": m, "host_buffer": hostbuf(size, m)}, "pinned ceiling")
    add("pinned-max", {"ram": 32 * GiB, "size": 100 * GiB, "high-ram": True},
        {"host_buffer": hostbuf(100 * GiB, 0, True)}, "--high-ram host buffer")

    for _ in range(16):
        size = rnd.choice([MiB, 64 * MiB, 0.5 * GiB, 3 * GiB + 1])
        headroom = rnd.choice([0, 3435973836, 10 * GiB, 5 * GiB + 1])
        available = rnd.choice([GiB, 2.5 * GiB, 16 * GiB])
        s, a, p = pin_budget(size, headroom, available)
        add("pin-budget", {"size": size, "headroom": headroom, "available": available},
            {"shortfall": s, "ask": a, "passes_without_eviction": p}, "RAM gate")
    for _ in range(12):
        total = rnd.choice([0, 10 * GiB, 47.5 * GiB, 51 * GiB])
        size = rnd.choice([MiB, 256 * MiB, 2 * GiB])
        maximum = rnd.choice([48 * GiB, 6871947673.6, -1])
        s, t, p, r = pin_registerable(total, size, maximum)
        add("pin-registerable", {"total-pinned": total, "size": size, "max-pinned": maximum},
            {"shortfall": s, "target": t, "passes_without_eviction": p, "refused": r}, "page-lock gate")
    for mib in (1024, 4096, 15923.5, 20480, 31998.9, 102400, 150000, 131072.5):
        a, i, ag, ig = cache_headroom(mib)
        add("cache-headroom", {"total-ram-mib": mib}, {"active": a, "inactive": i, "active_gb": ag, "inactive_gb": ig},
            "RAM-cache headroom")

    for res in (0, 1, 300 * MiB, 7 * GiB + 3, 24 * GiB):
        for pl in (False, True):
            for floor in (FLOOR, 0, 520 * MiB):
                inp = {"residency": res, "floor": floor}
                if pl:
                    inp["process-local"] = True
                add("charge", inp, {"charge": charge(res, pl, floor)}, "worker charge")
    for _ in range(10):
        base = rnd.choice([0, 400 * MiB, 734003200, 2 * GiB])
        charges = [rnd.choice([0, FLOOR, FLOOR + 6 * GiB, 40 * GiB]) for _ in range(rnd.randint(0, 3))]
        total = rnd.choice([0, 16 * GiB, 24 * GiB, 143771 * MiB])
        inp = {"base": base, "charge": charges}
        if total:
            inp["device-total"] = total
        add("total-reserve", inp, {"total": total_reserve(base, charges, total)}, "total reserve")
    for _ in range(12):
        w = rnd.choice([0, 1, GiB, 4 * GiB + 7, 12 * GiB, 80 * GiB])
        slack = rnd.choice([1.1, 1.1, 1.02, 1.3])
        mi = rnd.choice([0, 1278423859, 1592996659])
        er = rnd.choice([0, 419430400, 4 * GiB])
        want = rnd.choice([0, 0, 2 * 512 * MiB])
        add("ask-target", {"weights": w, "slack": slack, "min-inference": mi, "extra-reserved": er, "want-inference": want},
            {"need": ask_target(w, slack, mi, er, want)}, "ask target")
    for cur, prop, sh in ((0, 0, False), (GiB, 0, True), (GiB, 0, False), (3, 5, False)):
        inp = {"current": cur, "proposed": prop}
        if sh:
            inp["shrink-allowed"] = True
        add("next-reserve", inp, {"reserve": next_reserve(cur, prop, sh)}, "grow now, shrink on receipt")
    for seed, pub, base in ((None, 5 * GiB, 400 * MiB), (GiB, 400 * MiB, 400 * MiB), (0, GiB, 2 * GiB), (512 * MiB, 9 * GiB, 0)):
        inp = {"published": pub, "base": base}
        if seed is not None:
            inp["seed"] = seed
        add("pager-headroom", inp, {"headroom": pager_headroom(seed, pub, base)}, "pager headroom forward")
    for pub, own in ((0, 0), (7176454144, 6757023744), (419430400, 0)):
        add("requester-reserve", {"published": pub, "own-charge": own}, {"reserve": requester_reserve(pub, own)},
            "requester discount")
    for largest, streams in ((0, 2), (256 * MiB, 0), (256 * MiB, 2), (1.5 * GiB, 3)):
        add("cast-forward", {"largest-tensor": largest, "streams": streams},
            {"want_inference": cast_forward(int(largest), streams)}, "cast-buffer forward")

    for _ in range(8):
        workers = []
        for _ in range(rnd.randint(0, 3)):
            models = [{"ledger": rnd.choice([0, GiB, 3 * GiB]), "peak": rnd.choice([0, 2 * GiB, 5 * GiB]),
                       "size": rnd.choice([4 * GiB, 8 * GiB])} for _ in range(rnd.randint(0, 3))]
            w = {"models": models}
            if rnd.random() < 0.3:
                w["in_flight"] = True
            if rnd.random() < 0.5:
                w["excess"] = rnd.choice([0, 700 * MiB, 30 * GiB])
            workers.append(w)
        cap = rnd.choice([None, 24 * GiB])
        inp = {"floor": FLOOR, "workers": workers}
        if cap is not None:
            inp["cap"] = cap
        add("held-from-snapshot", inp, {"held": held(workers, FLOOR, cap)}, "held from snapshot")
    for _ in range(8):
        holders = [{"key": k, "held": rnd.choice([0, GiB, 3 * GiB, 3 * GiB, 9 * GiB]),
                    "in_flight": rnd.random() < 0.2, "advertises": rnd.random() < 0.9}
                   for k in rnd.sample(["w1", "w2", "w3", "host", "sam"], rnd.randint(1, 5))]
        shortfall = rnd.choice([GiB, 5 * GiB, 20 * GiB])
        req = rnd.choice([None, "w1"])
        inp = {"shortfall": shortfall, "holders": holders}
        if req:
            inp["requester"] = req
        add("plan-pressure-release", inp, {"asks": plan_pressure(holders, shortfall, req)}, "pressure release plan")
    for _ in range(4):
        reports = [{"key": k, "pinned": rnd.choice([0, 100 * MiB, GiB, 7 * GiB, 300 * GiB])}
                   for k in ("host", "a", "b", "c")]
        target = rnd.choice([GiB, 50 * GiB, 400 * GiB])
        add("plan-pin-pressure", {"target": target, "now": 50, "last_sweep": 0, "reports": reports},
            {"asks": plan_pin_pressure(reports, target, 50, 0)}, "pin pressure plan (wide products)")

    for ft, tt, state in ((5 * GiB, 1.25 * GiB, "normal"), (5 * GiB, 1.25 * GiB + 1, "normal"), (5 * GiB, 3 * GiB, "high")):
        add("empty-cache", {"free-total": ft, "free-torch": tt, "vram-state": state},
            {"empty_cache": state != "high" and tt > ft * 0.25}, "soft_empty_cache predicate")
    for total, avail, limit, usage in ((64 * GiB, 60 * GiB, 8 * GiB, 9 * GiB), (64 * GiB, 3 * GiB, 8 * GiB, 2 * GiB),
                                       (64 * GiB, 60 * GiB, 64 * GiB, None), (64 * GiB, 60 * GiB, 0, 0)):
        lim, t, a = cgroup_clamp(total, avail, limit, usage)
        inp = {"host-total": total, "host-available": avail, "limit": limit}
        if usage is not None:
            inp["usage"] = usage
        add("cgroup-clamp", inp, {"limited": lim, "total": t, "available": a}, "cgroup clamp")

    # One case per line keeps diffs of regenerated vectors readable.
    print("[\n" + ",\n".join(json.dumps(c, separators=(",", ":")) for c in out) + "\n]")


if __name__ == "__main__":
    main()
