"""Your own BERT: importing its class, building it from config.json, calling it by parameter name,
and reading each layer's hidden states through forward hooks, with no change to its code.

    --model PKG.MODULE:NAME      or      --model path/to/bert.py:NAME

NAME is a class called with the config, or a function that returns an `nn.Module`. The config
is an object with attribute access to every config.json field, and BertConfig's defaults for the
fields config.json leaves out. The hidden states are read at the modules a mapping table says
hold them: the embeddings' LayerNorm and each layer's output LayerNorm (the module that holds
that row's tensor), or those its [outputs] section names.
"""

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

from .config import BertConfig
from .errors import CheckpointError, UsageError
from .mapping import Table

# How from-scratch models spell each input, in the order they are looked for.
SPELLINGS = {
    "input_ids": ("input_ids", "ids", "input", "inputs", "x", "tokens", "token_ids", "src"),
    "attention_mask": ("attention_mask", "mask", "attn_mask", "input_mask", "attention_masks"),
    "token_type_ids": (
        "token_type_ids", "segment_ids", "token_type", "token_types", "segment_label",
        "segment_info", "segments", "segment", "seg_ids", "type_ids", "tk_type_ids",
    ),
}  # fmt: skip
# A mask that marks the padding rather than the tokens (nn.MultiheadAttention's convention).
INVERTED_MASKS = ("key_padding_mask", "padding_mask", "pad_mask")
# Where a table's rows say the hidden states are: the output LayerNorm of each.
ANCHORS = {
    "embeddings": "embeddings.LayerNorm.weight",
    "layer": "encoder.layer.{layer}.output.LayerNorm.weight",
    "pooler": "pooler.dense.weight",
}


class Config(dict):
    """config.json as an object: `config.hidden_size` as well as `config["hidden_size"]`."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"config.json has no field {name!r}") from None

    def to_dict(self) -> dict:
        return dict(self)


def import_factory(spec: str) -> Callable:
    """The class or function `spec` names: `package.module:Name` or `path/to/file.py:Name`."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise UsageError(f"--model {spec!r}: expected PKG.MODULE:NAME or path/to/file.py:NAME")
    try:
        module = _import(where)
    except Exception as e:  # the user's code: any error it raises while being imported
        reason = f"{type(e).__name__}: {e}"
        raise UsageError(f"--model {spec!r}: cannot import {where} ({reason})") from None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise UsageError(f"--model {spec!r}: {where} has no class or function {name!r}")
    return factory


def _import(where: str):
    if where.endswith(".py") or "/" in where:
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(f"no such file {path}")
        spec = importlib.util.spec_from_file_location(f"bertconv_user.{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        with _on_path(path.parent):  # so that the file's own imports of its neighbours work
            spec.loader.exec_module(module)
        return module
    with _on_path(Path.cwd()):
        return importlib.import_module(where)


@contextmanager
def _on_path(directory: Path):
    sys.path.insert(0, str(directory))
    try:
        yield
    finally:
        sys.path.remove(str(directory))


def config_object(config_dict: dict, config: BertConfig) -> Config:
    return Config({**asdict(config), **config_dict})


def build(factory: Callable, spec: str, config: Config) -> nn.Module:
    """The user's model, built from the config (and in eval mode)."""
    try:
        model = factory(config)
    except Exception as e:
        raise UsageError(
            f"--model {spec!r}: building it with the checkpoint's config failed "
            f"({type(e).__name__}: {e}). If it takes a config class of its own, give a "
            "function that builds it: def make(config): return MyBert(MyConfig(**config))"
        ) from None
    if not isinstance(model, nn.Module):
        raise UsageError(f"--model {spec!r}: gives a {type(model).__name__}, not an nn.Module")
    return model.eval()


def load(model: nn.Module, spec: str, tensors: dict[str, torch.Tensor]) -> None:
    """Strictly: every tensor the model holds comes from the checkpoint, none is left over."""
    result = model.load_state_dict(tensors, strict=False)
    wrong = [
        f"{name}: {tuple(t.shape)} in the model, {tuple(tensors[name].shape)} converted"
        for name, t in model.state_dict().items()
        if name in tensors and t.shape != tensors[name].shape
    ]
    if result.missing_keys or result.unexpected_keys or wrong:
        raise CheckpointError(
            f"--model {spec!r}: the table's names do not fit the model: missing "
            f"{result.missing_keys[:8]}, unexpected {result.unexpected_keys[:8]}, shapes "
            f"{wrong[:4]}. Check the table (`bertconv infer` writes one for your model)."
        )


def signature_of(model: nn.Module) -> inspect.Signature:
    return inspect.signature(model.forward)


# What each input is, for messages: a model must take the mask, for the batches are padded.
NAMED = {
    "input_ids": "the token ids",
    "attention_mask": "the attention mask, which padded batches need",
}


def arguments(model: nn.Module, spec: str) -> dict[str, str]:
    """Which parameter of the user's forward takes each input: {our name: theirs}. Raises,
    showing the signature, where the token ids or the mask have no parameter, or a parameter
    without a default matches nothing."""
    params = signature_of(model).parameters
    found = {}
    for ours, spellings in SPELLINGS.items():
        match = next((p for p in spellings if p in params), None)
        if ours == "attention_mask":
            match = match or next((p for p in INVERTED_MASKS if p in params), None)
        if match:
            found[ours] = match
    required = [
        p.name
        for p in params.values()
        if p.default is inspect.Parameter.empty
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and p.name not in found.values()
    ]
    lacking = [what for what in ("input_ids", "attention_mask") if what not in found]
    if lacking or required:
        why = (
            f"no parameter takes {' or '.join(NAMED[w] for w in lacking)}"
            if lacking
            else f"nothing is passed to {', '.join(required)}"
        )
        raise UsageError(
            f"--model {spec!r}: cannot call forward{signature_of(model)} by parameter name "
            f"({why}): bertconv passes the token ids ({', '.join(SPELLINGS['input_ids'])}), "
            f"the mask ({', '.join(SPELLINGS['attention_mask'])}; or {', '.join(INVERTED_MASKS)}, "
            f"True at padding) and the token types ({', '.join(SPELLINGS['token_type_ids'])})"
        )
    return found


def call(model: nn.Module, names: dict[str, str], batch: dict[str, torch.Tensor]):
    kwargs = {}
    for ours, theirs in names.items():
        value = batch[ours]
        kwargs[theirs] = ~value.bool() if theirs in INVERTED_MASKS else value
    return model(**kwargs)


def anchors(table: Table, model: nn.Module, layers: int) -> dict[str, nn.Module]:
    """The user's modules whose outputs are the hidden states verify compares: `embeddings`,
    `layer 1` .. `layer N`, and `pooler` (pre-tanh: the dense layer) where the table has one."""
    official = {o: row.name for row in table.rows.values() for o in row.official}
    paths = {}
    for key, anchor in ANCHORS.items():
        given = table.outputs.get(key)
        names = (
            [anchor.replace("{layer}", str(i)) for i in range(layers)]
            if key == "layer"
            else [anchor]
        )
        for i, name in enumerate(names):
            label = f"layer {i + 1}" if key == "layer" else key
            if given is not None:
                paths[label] = given.replace("{layer}", str(i))
            elif name in official:
                paths[label] = official[name].rpartition(".")[0]
    modules = {}
    for label, path in paths.items():
        try:
            modules[label] = model.get_submodule(path) if path else model
        except AttributeError:
            raise UsageError(
                f"the table says the {label} output is module {path!r}, which the model lacks"
            ) from None
    return modules


def hidden(output, mask: torch.Tensor, label: str) -> torch.Tensor:
    """A hooked module's output at the real tokens: (B, T, H) or (T, B, H) or already packed."""
    if isinstance(output, tuple | list):
        output = output[0]
    if not isinstance(output, torch.Tensor):
        raise UsageError(f"the module read for {label} returns a {type(output).__name__}")
    real = mask.bool()
    if output.dim() == 3 and tuple(output.shape[:2]) == tuple(real.shape):
        return output[real]
    if output.dim() == 3 and tuple(output.shape[:2]) == tuple(real.T.shape):
        return output.transpose(0, 1)[real]
    if output.dim() == 2 and output.shape[0] == int(real.sum()):
        return output
    raise UsageError(
        f"the module read for {label} returns shape {tuple(output.shape)}, which is not "
        f"(batch, tokens, hidden) for a batch of {tuple(real.shape)}"
    )
