"""LLM servers beside ComfyUI, on the ledger: ``python -m comem.apps`` (``comem-apps``).

An LLM server (llama.cpp's ``llama-server``, Ollama, vLLM) shares the card and the RAM with
ComfyUI but never joins comem's ledger. This package speaks for it, without changing it: the
server's processes are app holders (their use of the card, or their RSS, is what they hold), an
admission that needs room asks the idle server to unload a model with its own documented call, and
the model is loaded again once the ledger has room. ``docs/apps.md`` is the user's guide; the
servers are listed in one TOML file (:mod:`comem.apps.config`).

    from comem.apps import Runner, config
    Runner(config.load()).run()      # until SIGTERM / Ctrl-C
"""

from .config import AppConfig, ConfigError, default_path, load, parse
from .holder import AppHolder, Event
from .http import AppError, Endpoint
from .recipes import RECIPES, Model, Recipe
from .runner import Runner

__all__ = ["AppConfig", "AppError", "AppHolder", "ConfigError", "Endpoint", "Event", "Model", "RECIPES", "Recipe",
           "Runner", "default_path", "load", "parse"]
