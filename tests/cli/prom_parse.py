"""A strict reader of the Prometheus text exposition format (0.0.4), for the metrics tests.

Debian ships promtool only inside the prometheus server package (a daemon and ~100 MB of web
assets), so the tests check the text themselves, as strictly as promtool's parser and its lint:
names and label names by the grammar, label values with only the three escapes, a value every
sample, HELP and TYPE at most once per family and before its samples, each family's samples in
one group, no series twice, counters named *_total and never negative, histograms with sorted
cumulative buckets ending in +Inf equal to _count, and a _sum. `parse` raises ValueError, saying
which line and why.
"""
import math
import re

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def _value(text, where):
    if text in ("+Inf", "Inf"):
        return math.inf
    if text == "-Inf":
        return -math.inf
    if text == "NaN":
        return math.nan
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
        raise ValueError(f"{where}: '{text}' is not a sample value")
    return float(text)


def _labels(text, where):
    """Parses 'a="x",b="y"' (the inside of the braces) into a dict."""
    out = {}
    i = 0
    while i < len(text):
        m = re.match(r"([^=]*)=\"", text[i:])
        if not m:
            raise ValueError(f"{where}: malformed labels '{text}'")
        name = m.group(1)
        if not LABEL.match(name) or name.startswith("__"):
            raise ValueError(f"{where}: bad label name '{name}'")
        if name in out:
            raise ValueError(f"{where}: label '{name}' twice")
        i += m.end()
        val = []
        while True:
            if i >= len(text):
                raise ValueError(f"{where}: unterminated label value")
            c = text[i]
            if c == "\\":
                nxt = text[i + 1:i + 2]
                if nxt not in ("\\", '"', "n"):
                    raise ValueError(f"{where}: bad escape '\\{nxt}' in a label value")
                val.append("\n" if nxt == "n" else nxt)
                i += 2
            elif c == '"':
                i += 1
                break
            elif c == "\n":
                raise ValueError(f"{where}: newline in a label value")
            else:
                val.append(c)
                i += 1
        out[name] = "".join(val)
        if i < len(text):
            if text[i] != ",":
                raise ValueError(f"{where}: expected ',' between labels")
            i += 1
    return out


def _family_of(name, types):
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and types.get(name[: -len(suffix)]) in ("histogram", "summary"):
            return name[: -len(suffix)]
    return name


def parse(text):
    """Returns {family: {"type", "help", "samples": [(name, labels, value)]}}; raises ValueError."""
    if text and not text.endswith("\n"):
        raise ValueError("the text does not end with a newline")
    families, types, helps = {}, {}, {}
    seen_series, closed = set(), set()
    current = None
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = f"line {n}"
        if line == "":
            raise ValueError(f"{where}: empty line")
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not NAME.match(name):
                    raise ValueError(f"{where}: bad metric name '{name}'")
                fam = families.setdefault(name, {"type": "untyped", "help": None, "samples": []})
                if fam["samples"]:
                    raise ValueError(f"{where}: {parts[1]} for '{name}' after its samples")
                if name in closed:
                    raise ValueError(f"{where}: '{name}' appears in two groups")
                if parts[1] == "TYPE":
                    if name in types:
                        raise ValueError(f"{where}: TYPE for '{name}' twice")
                    if len(parts) != 4 or parts[3] not in TYPES:
                        raise ValueError(f"{where}: bad TYPE line")
                    types[name] = fam["type"] = parts[3]
                else:
                    if name in helps:
                        raise ValueError(f"{where}: HELP for '{name}' twice")
                    helps[name] = fam["help"] = parts[3] if len(parts) == 4 else ""
                if current is not None and current != name:
                    closed.add(current)
                current = name
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)( (-?\d+))?\Z", line)
        if not m:
            raise ValueError(f"{where}: not a sample line: {line!r}")
        name, labels, value = m.group(1), _labels(m.group(3) or "", where), _value(m.group(4), where)
        fam_name = _family_of(name, types)
        if fam_name in closed:
            raise ValueError(f"{where}: samples of '{fam_name}' in two groups")
        if current is not None and current != fam_name:
            closed.add(current)
        current = fam_name
        key = (name, tuple(sorted(labels.items())))
        if key in seen_series:
            raise ValueError(f"{where}: series {key} twice")
        seen_series.add(key)
        families.setdefault(fam_name, {"type": "untyped", "help": None, "samples": []})["samples"].append(
            (name, labels, value))
    for name, fam in families.items():
        _check_family(name, fam)
    return families


def _check_family(name, fam):
    t = fam["type"]
    if t == "counter":
        if not name.endswith("_total"):
            raise ValueError(f"counter '{name}' is not named *_total")
        for s in fam["samples"]:
            if s[0] != name or not s[2] >= 0:
                raise ValueError(f"counter '{name}': bad sample {s}")
    if t == "histogram":
        groups = {}
        for s_name, labels, value in fam["samples"]:
            rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
            g = groups.setdefault(rest, {"buckets": [], "sum": None, "count": None})
            if s_name == name + "_bucket":
                if "le" not in labels:
                    raise ValueError(f"histogram '{name}': a bucket without le")
                g["buckets"].append((_value(labels["le"], name), value))
            elif s_name == name + "_sum":
                g["sum"] = value
            elif s_name == name + "_count":
                g["count"] = value
            else:
                raise ValueError(f"histogram '{name}': unexpected sample '{s_name}'")
        for g in groups.values():
            les = [b[0] for b in g["buckets"]]
            counts = [b[1] for b in g["buckets"]]
            if not les or les[-1] != math.inf:
                raise ValueError(f"histogram '{name}': no +Inf bucket")
            if les != sorted(les) or len(set(les)) != len(les):
                raise ValueError(f"histogram '{name}': buckets not in increasing order")
            if counts != sorted(counts):
                raise ValueError(f"histogram '{name}': buckets not cumulative")
            if g["count"] is None or g["sum"] is None or g["count"] != counts[-1]:
                raise ValueError(f"histogram '{name}': _count/_sum missing or _count != the +Inf bucket")
