"""bertconv: official pretrained BERT weights in from-scratch BERT code, with proof of parity.

Importing the package is cheap: torch is imported on first use of the model or of `load`."""

__version__ = "0.1.0"

_LAZY = {
    "BertConfig": "bertconv.config",
    "load": "bertconv.api",
    "inspect": "bertconv.api",
    "BertconvError": "bertconv.errors",
}


def _classes() -> list[str]:
    """The model's classes: one per class of BERT's catalog, under its name."""
    from .catalog import classes

    return list(classes("bert"))


def __getattr__(name: str):
    import importlib

    if name == "__all__":
        return sorted([*_LAZY, *_classes()])
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name[:1].isupper() and name in _classes():  # (submodules, lowercase, are imported)
        return getattr(importlib.import_module("bertconv.model"), name)
    raise AttributeError(f"module 'bertconv' has no attribute {name!r}")
