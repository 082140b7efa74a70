"""The loop every child process runs: one JSON command per line in, one JSON answer per line out."""

import json
import sys
import traceback


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def serve(handlers, ready):
    """Says ``ready`` (a dict), then answers commands until "exit" or EOF."""
    say(ready)
    for line in sys.stdin:
        cmd = json.loads(line)
        name = cmd.pop("cmd")
        if name == "exit":
            say({"ok": True})
            return
        try:
            say(handlers[name](**cmd) or {"ok": True})
        except Exception as e:  # the test reads the error and this process's stderr
            traceback.print_exc()
            say({"error": f"{type(e).__name__}: {e}"})
