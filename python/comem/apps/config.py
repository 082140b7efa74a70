"""The apps a user puts under the ledger: one small TOML file.

Where it is: ``COMEM_APPS`` if set, else ``$XDG_CONFIG_HOME/comem/apps.toml`` (``~/.config/comem/apps.toml``).
Each ``[[app]]`` table is one server::

    [[app]]
    name = "llama"                  # the holder's name in comem status
    recipe = "llama-server"         # llama-server | ollama | vllm
    url = "http://127.0.0.1:8080"   # default: the recipe's usual port on loopback
    device = "ram"                  # "ram" (its RSS on host RAM) or a card's ordinal, 0, 1, ...
    # pid = 1234                    # default: the process of this user listening on url's port
    # priority = "first"            # first: asked before ComfyUI's idle models; last: after them
    # reload = "when-free"          # when-free: loaded again once the ledger has room; never
    # level = 1                     # vllm: the sleep level an unload asks for (1 or 2)
    # proxy = 8081                  # serve 127.0.0.1:8081 in front of it: a request for a model
    #                               # comem unloaded is admitted before it loads (comem.apps.proxy)

Every mistake is an error naming the file, the app and the key; nothing is guessed. The address
must be this machine's own: comem manages this machine's memory, and a server elsewhere holds none
of it, so no request ever leaves the machine.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, NamedTuple, Optional, Union

from .. import errors
from .http import Endpoint
from .recipes import RECIPES

KEYS = {"name", "recipe", "url", "device", "pid", "priority", "reload", "level", "proxy"}


class ConfigError(ValueError):
    """The apps file cannot be used as written; the message names the file, the app and the key."""


class AppConfig(NamedTuple):
    """One server as the file describes it."""

    name: str
    recipe: str
    url: str
    device: Union[str, int]  #: "ram" or a card's ordinal
    pid: Optional[int]
    priority: str            #: "first" or "last"
    reload: str              #: "when-free" or "never"
    level: int
    proxy: Optional[int] = None  #: the loopback port of comem's pass-through in front of the server


def default_path() -> str:
    """``COMEM_APPS``, else ``$XDG_CONFIG_HOME/comem/apps.toml``."""
    if os.environ.get("COMEM_APPS"):
        return os.environ["COMEM_APPS"]
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "comem", "apps.toml")


def _toml_loads(text: str) -> Dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.9/3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError as e:
            raise ConfigError("reading the apps file needs Python 3.11+ or the 'tomli' package") from e
    return tomllib.loads(text)


def parse(text: str, where: str = "<apps>") -> List[AppConfig]:
    """The apps of a file's text; ConfigError for anything that is not as documented."""
    try:
        doc = _toml_loads(text)
    except ConfigError:
        raise
    except Exception as e:  # tomllib.TOMLDecodeError, and tomli's
        raise ConfigError(f"{where}: not TOML: {e}") from e
    unknown = set(doc) - {"app"}
    if unknown:
        raise ConfigError(f"{where}: unknown table(s) {sorted(unknown)}; each server is an [[app]] table")
    tables = doc.get("app", [])
    if not isinstance(tables, list):
        raise ConfigError(f"{where}: 'app' must be an array of tables ([[app]])")
    out: List[AppConfig] = []
    for i, t in enumerate(tables):
        out.append(_app(t, f"{where}: app #{i + 1}"))
    names = [a.name for a in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"{where}: two apps named {twice[0]!r}")
    ports = [a.proxy for a in out if a.proxy is not None]
    if len(ports) != len(set(ports)):
        raise ConfigError(f"{where}: two apps' proxies on one port ({sorted(p for p in ports if ports.count(p) > 1)[0]})")
    pids = [a.pid for a in out if a.pid is not None]
    if len(pids) != len(set(pids)):
        raise ConfigError(f"{where}: two apps name one pid ({sorted(p for p in pids if pids.count(p) > 1)[0]})")
    return out


def _app(t: Any, where: str) -> AppConfig:
    if not isinstance(t, dict):
        raise ConfigError(f"{where}: must be a table")
    extra = set(t) - KEYS
    if extra:
        raise ConfigError(f"{where}: unknown key(s) {sorted(extra)} (known: {sorted(KEYS)})")
    recipe = t.get("recipe")
    if recipe not in RECIPES:
        raise ConfigError(f"{where}: recipe must be one of {sorted(RECIPES)} (got {recipe!r})")
    name = t.get("name", recipe)
    try:
        errors.name(name, "app name")
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: name: {e}") from e
    where = f"{where.split(': ')[0]}: app '{name}'"
    url = t.get("url", RECIPES[recipe].default_url)
    try:
        ep = Endpoint(name, url) if isinstance(url, str) else None
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from e
    if ep is None:
        raise ConfigError(f"{where}: url must be a string")
    if not ep.loopback:
        raise ConfigError(f"{where}: url {url!r} is not this machine's: comem manages this machine's memory, and "
                          "sends nothing to another (use 127.0.0.1 or localhost)")
    device = t.get("device", "ram")
    if not (device == "ram" or (isinstance(device, int) and not isinstance(device, bool) and 0 <= device < 64)):
        raise ConfigError(f"{where}: device must be \"ram\" or a card's ordinal 0..63 (got {device!r})")
    pid = t.get("pid")
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0):
        raise ConfigError(f"{where}: pid must be a positive integer (got {pid!r})")
    priority = t.get("priority", "first")
    if priority not in ("first", "last"):
        raise ConfigError(f"{where}: priority must be \"first\" or \"last\" (got {priority!r})")
    reload = t.get("reload", "when-free")
    if reload not in ("when-free", "never"):
        raise ConfigError(f"{where}: reload must be \"when-free\" or \"never\" (got {reload!r})")
    level = t.get("level", 1)
    if level not in (1, 2) or isinstance(level, bool):
        raise ConfigError(f"{where}: level must be 1 or 2 (got {level!r})")
    proxy = t.get("proxy")
    if proxy is not None and (isinstance(proxy, bool) or not isinstance(proxy, int) or not 1 <= proxy <= 65535):
        raise ConfigError(f"{where}: proxy must be a TCP port 1..65535 (got {proxy!r})")
    if proxy is not None and proxy == ep.port:
        raise ConfigError(f"{where}: proxy {proxy} is the server's own port; the proxy needs a port of its own")
    return AppConfig(name, recipe, ep.url, device, pid, priority, reload, level, proxy)


def load(path: Optional[str] = None) -> List[AppConfig]:
    """The apps of the file at path (default: :func:`default_path`); [] when it does not exist."""
    p = path or default_path()
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        if path:
            raise ConfigError(f"{p}: no such file") from None
        return []
    except OSError as e:
        raise ConfigError(f"{p}: {e.strerror}") from e
    return parse(text, p)
