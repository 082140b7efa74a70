"""Test stub (see ../README): Debian does not package safetensors; ComfyUI imports it only to load files."""


def safe_open(*args, **kwargs):
    raise NotImplementedError("safetensors is a test stub: model files are not loaded in these tests")
