"""sentence-transformers' pipeline around an encoder, read as `SentenceTransformer` reads it:
`modules.json` names the modules in order (the encoder, then Pooling, an optional Dense, and
Normalize), each recognised by its type's last component (`sentence_transformers.models.Dense`
and `sentence_transformers.base.modules.dense.Dense` alike) and configured by its folder's
`config.json`; `sentence_bert_config.json` sets the truncation length and lower-casing,
`config_sentence_transformers.json` the prompts. Reading is torch-free; `embed` computes the
steps on the encoder's token states, with sentence-transformers' arithmetic. A module bertconv
does not know (a custom one, remote code) is named, and the sentence embedding refused; it is
never run, and the encoder still converts and verifies.
"""

import os
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from . import files
from .errors import CheckpointError

MODULES = "modules.json"
SETTINGS = "sentence_bert_config.json"
PROMPTS = "config_sentence_transformers.json"
FILES = (MODULES, SETTINGS, PROMPTS)  # beside the encoder's, at the top of the directory
MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# Older files' flags, each a mode, in the order sentence-transformers concatenates them.
LEGACY_MODES = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
# Dense's activation, by its class name's last component, as torch.nn.functional computes it.
ACTIVATIONS = {"Tanh": "tanh", "Identity": None, "ReLU": "relu", "GELU": "gelu",
               "Sigmoid": "sigmoid", "SiLU": "silu"}  # fmt: skip
ENCODERS = ("Transformer",)
# What a pipeline's steps read and write, by sentence-transformers' names: the encoder's token
# states, and the sentence vector Pooling makes of them (and encode returns).
TOKENS, SENTENCE = "token_embeddings", "sentence_embedding"
FOLDER_FILES = 256  # files carried of one module's folder at most (Dense has two or three)


@dataclass(frozen=True)
class Pooling:
    """Token states to one vector: each mode's, concatenated in order."""

    modes: tuple[str, ...]
    include_prompt: bool = True  # False: the prompt's tokens are left out of the pooling


@dataclass(frozen=True)
class Dense:
    """A projection, its weights in its folder, then its activation: of what the pipeline
    holds under `reads` (the sentence vector, or each token's), held under `writes`."""

    folder: Path
    in_features: int
    out_features: int
    bias: bool
    activation: str | None  # a torch.nn.functional name; None: none (Identity)
    # its weights, read with the pipeline into memory ({"linear.weight": storage.InMemory}):
    # nothing computing it reads a file
    tensors: dict = field(default_factory=dict, compare=False, repr=False)
    reads: str = SENTENCE  # module_input_name
    writes: str = SENTENCE  # module_output_name


@dataclass(frozen=True)
class Normalize:
    """What the pipeline holds under `reads` divided by its L2 norm (each token's, where it
    reads the tokens), held under `writes`."""

    reads: str = SENTENCE
    writes: str = SENTENCE


@dataclass(frozen=True)
class Pipeline:
    """What a sentence-transformers directory computes after its encoder."""

    directory: Path
    steps: tuple[Pooling | Dense | Normalize, ...]
    max_seq_length: int | None  # tokens a text is truncated to, special tokens included
    do_lower_case: bool = False
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    refused: str | None = None  # why bertconv cannot compute its sentence embedding
    padding_side: str = "right"  # tokenizer_config.json's, which sentence-transformers pads on
    truncation_side: str = "right"  # and truncates on

    @property
    def dense(self) -> "Dense | None":
        """Its Dense layer, if it has one (the first)."""
        return next((s for s in self.steps if isinstance(s, Dense)), None)

    def prompt(self, prompt: str | None = None, prompt_name: str | None = None) -> str:
        """The text put before each sentence, as `encode` resolves it: an explicit prompt, then
        `prompt_name`'s, then the default one's; an empty prompt is none."""
        if prompt is None and prompt_name is not None:
            if prompt_name not in self.prompts:
                known = ", ".join(map(repr, self.prompts)) or "none"
                raise CheckpointError(
                    f"{self.directory}: no prompt named {prompt_name!r} (its prompts: {known})"
                )
            prompt = self.prompts[prompt_name]
        if prompt is None and self.default_prompt_name is not None:
            prompt = self.prompts.get(self.default_prompt_name)
        return prompt or ""


def width(pipeline: Pipeline, hidden: int) -> int:
    """The sentence embedding's width, of an encoder of `hidden` features."""
    widths = {TOKENS: hidden}
    for step in pipeline.steps:
        if isinstance(step, Pooling):
            widths[SENTENCE] = widths[TOKENS] * len(step.modes)
        elif isinstance(step, Dense):
            widths[step.writes] = step.out_features
        elif step.reads in widths:
            widths[step.writes] = widths[step.reads]
    return widths.get(SENTENCE, hidden)


def read_pipeline(directory: Path, positions: int | None = None) -> Pipeline | None:
    """The pipeline of a sentence-transformers directory (None where it has no modules.json);
    `positions`: the encoder's, which cap the truncation length (None: uncapped)."""
    directory = Path(directory)
    if not files.is_present(directory / MODULES):
        return None
    modules = _modules(directory)
    steps, refused = [], []
    for i, module in enumerate(modules):
        kind, path = _module(module, directory, i)
        where = f"{directory / MODULES}, module {i}"
        if kind in ENCODERS and path:  # sentence-transformers reads the encoder there
            refused.append(f"its encoder is the folder {path!r} ({where}), not this checkpoint")
        if kind in ENCODERS:
            continue
        step = READERS[kind](directory / path) if kind in READERS else None
        if step is None:
            refused.append(f"{module.get('type')!r} ({where})")
        else:
            steps.append(step)
    refused += _unread(steps, directory / MODULES)
    settings = _json(directory / SETTINGS)
    prompts = _json(directory / PROMPTS)
    tokenizer_config = _json(directory / "tokenizer_config.json")
    sides = [_side(tokenizer_config, f, directory) for f in ("padding_side", "truncation_side")]
    named = _prompts(prompts, directory / PROMPTS)
    return Pipeline(
        directory,
        tuple(steps),
        _truncation(settings, tokenizer_config, positions, directory / SETTINGS),
        bool(settings.get("do_lower_case", False)),
        named,
        _default_prompt(prompts, named, directory / PROMPTS),
        f"modules bertconv does not run: {', '.join(refused)}" if refused else None,
        *sides,
    )


def _unread(steps: list, where: Path) -> list[str]:
    """Why the steps, in order, make no sentence vector as bertconv computes them: one reading
    what nothing before it wrote (sentence-transformers would fail on it), or no Pooling."""
    if not any(isinstance(s, Pooling) for s in steps):  # token states out, no sentence vector
        return [f"none that pools the tokens ({where})"]
    held = {TOKENS}
    for step in steps:
        if isinstance(step, Pooling):
            held.add(SENTENCE)
        elif step.reads in held:
            held.add(step.writes)
        elif isinstance(step, Dense):  # a Normalize of nothing does nothing
            return [f"a Dense reading {step.reads!r}, which no module before it writes ({where})"]
    return []


def _side(config: dict, field_name: str, directory: Path) -> str:
    side = config.get(field_name, "right")
    if side not in ("left", "right"):
        raise CheckpointError(f"{directory / 'tokenizer_config.json'}: {field_name} {side!r}")
    return side


def _module(module, directory: Path, index: int) -> tuple[str, str]:
    """A modules.json entry's kind (its type's last component) and folder: one inside
    `directory` (the encoder's may be the directory itself)."""
    if not isinstance(module, dict) or not isinstance(module.get("type"), str):
        raise CheckpointError(f"{directory / MODULES}: module {index} names no type")
    kind, path = module["type"].rpartition(".")[2], module.get("path", "")
    parts = Path(path).parts if isinstance(path, str) else None
    inside = parts is not None and not Path(path).is_absolute() and ".." not in parts
    if not inside or not (parts or kind in ENCODERS):
        raise CheckpointError(
            f"{directory / MODULES}: module {index}'s path {path!r} is not a folder inside "
            f"{directory}"
        )
    return kind, path


def carried(directory: Path, links: bool = True) -> list[str]:
    """The files of a sentence-transformers directory beside its encoder's, each named relative
    to it: modules.json, the two settings files, and every file in each module's folder (the
    encoder's, which is the checkpoint itself, aside). [] where there is no modules.json.
    `links`: follow a folder that is a link (a source's); False for an output directory, whose
    files may be removed and must lie in it."""
    directory = Path(directory)
    if not files.is_present(directory / MODULES):
        return []
    names = [n for n in FILES if files.is_present(directory / n)]
    for folder in module_folders(directory, checked=links):
        names += _folder_files(directory, Path(folder), links)
    return list(dict.fromkeys(names))


def module_folders(directory: Path, checked: bool = False) -> list[str]:
    """The folders of a directory's modules besides the encoder (and its, where it is a folder
    of its own), as modules.json names them. `checked`: each one that sentence-transformers
    loads a module from there, a folder (Normalize's, which holds nothing, may be missing)."""
    found = []
    for i, module in enumerate(_modules(directory)):
        kind, path = _module(module, directory, i)
        if not path:
            continue
        folder = directory / path
        if checked and not folder.is_dir() and (files.is_present(folder) or kind != "Normalize"):
            what = "is not a folder" if files.is_present(folder) else "is not there"
            raise CheckpointError(
                f"{folder}: {what}; {directory / MODULES} names it as module {i}'s ({kind}), "
                "which sentence-transformers loads from there"
            )
        found.append(Path(path).as_posix())
    return found


def _modules(directory: Path) -> tuple:
    """modules.json's entries, read once while the file stays as it was."""
    path = directory / MODULES
    return _read_modules(str(path), files.identity(path))


@lru_cache(maxsize=16)
def _read_modules(path: str, identity) -> tuple:
    return tuple(files.read_json(Path(path), list))


def _folder_files(directory: Path, folder: Path, links: bool) -> list[str]:
    """Every regular file under `folder`, relative to `directory`, in a stable order."""
    root = directory / folder
    linked = any(p.is_symlink() for p in [root, *root.parents] if directory in p.parents)
    if not root.is_dir() or (linked and not links):
        return []
    found = sorted(
        str(Path(top, name).relative_to(directory))
        for top, _, names in os.walk(root, followlinks=False)
        for name in names
        if files.is_present(Path(top, name)) and not files.PARTIAL.match(name)
    )  # a killed conversion's staged files are never carried
    if len(found) > FOLDER_FILES:
        raise CheckpointError(
            f"{root}: {len(found)} files, more than any module's folder holds ({FOLDER_FILES})"
        )
    return found


def _pooling(folder: Path) -> Pooling:
    config = _config(folder, "Pooling")
    modes = config.get("pooling_mode")
    if modes is None:  # older files: a flag per mode, mean where none is set
        modes = [mode for flag, mode in LEGACY_MODES.items() if config.get(flag)] or ["mean"]
    modes = [modes] if isinstance(modes, str) else modes
    if not isinstance(modes, list) or not modes or any(m not in MODES for m in modes):
        raise CheckpointError(
            f"{folder / 'config.json'}: pooling_mode {modes!r} is not one or more of {MODES}"
        )
    return Pooling(tuple(modes), bool(config.get("include_prompt", True)))


def _dense(folder: Path) -> Dense | None:
    """Dense, where bertconv computes its activation (None: not)."""
    config = _config(folder, "Dense")
    name = str(config.get("activation_function", "torch.nn.modules.activation.Tanh"))
    if name.rpartition(".")[2] not in ACTIVATIONS or config.get("residual"):
        return None
    if config.get("use_residual"):  # the input added back (projected where sizes differ)
        return None
    sizes = [config.get("in_features"), config.get("out_features")]
    if not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        raise CheckpointError(f"{folder / 'config.json'}: in_features and out_features: {sizes}")
    reads, writes = _names(config, folder)
    activation = ACTIVATIONS[name.rpartition(".")[2]]
    dense = Dense(folder, *sizes, bool(config.get("bias", True)), activation, {}, reads, writes)
    return replace(dense, tensors=_in_memory(dense_tensors(dense)))


def _names(config: dict, folder: Path) -> tuple[str, str]:
    """What a step reads and writes (module_input_name, module_output_name, which defaults to
    what it reads): names of the features sentence-transformers passes along."""
    reads = config.get("module_input_name", SENTENCE)
    writes = config.get("module_output_name", reads)
    if not isinstance(reads, str) or not isinstance(writes, str):
        raise CheckpointError(
            f"{folder / 'config.json'}: module_input_name and module_output_name name a feature "
            f"({reads!r}, {writes!r})"
        )
    return reads, writes


def _normalize(folder: Path) -> Normalize:
    """Normalize: its folder (and config) only where it reads or writes another feature."""
    if not files.is_present(folder / "config.json"):
        return Normalize()
    return Normalize(*_names(files.read_json(folder / "config.json", dict), folder))


def _in_memory(tensors: dict) -> dict:
    from . import storage

    return {
        n: storage.InMemory(t.dtype, t.shape, storage.read_bytes(t)) for n, t in tensors.items()
    }


READERS = {"Pooling": _pooling, "Dense": _dense, "Normalize": _normalize}


def _truncation(settings: dict, tokenizer_config: dict, positions, path: Path) -> int | None:
    """sentence_bert_config.json's max_seq_length where given (a count of tokens, else refused
    by name), else the tokenizer's model_max_length (transformers' 1e30 for none: the
    positions); either capped at the encoder's positions."""
    length = settings.get("max_seq_length")
    if length is not None and (not _count(length) or length < 1):
        raise CheckpointError(
            f"{path}: max_seq_length {length!r} is not a number of tokens (an integer of at "
            "least 1)"
        )
    if length is None:
        length = tokenizer_config.get("model_max_length")
    if not isinstance(length, (int, float)) or isinstance(length, bool) or length < 1:
        return positions
    return int(length if positions is None else min(length, positions))


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _prompts(config: dict, path: Path) -> dict[str, str]:
    prompts = config.get("prompts", {})
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise CheckpointError(f"{path}: prompts is not an object of texts")
    return dict(prompts)


def _default_prompt(config: dict, prompts: dict, path: Path) -> str | None:
    """default_prompt_name: one of the prompts' names, or none; else refused as
    sentence-transformers refuses it."""
    name = config.get("default_prompt_name")
    if name is not None and (not isinstance(name, str) or name not in prompts):
        known = ", ".join(map(repr, prompts)) or "none"
        raise CheckpointError(
            f"{path}: default_prompt_name {name!r} is not the name of one of its prompts ({known})"
        )
    return name


def _config(folder: Path, kind: str) -> dict:
    """A module's config.json, which sentence-transformers cannot load the module without."""
    if not files.is_present(folder / "config.json"):
        raise CheckpointError(f"{folder}: {kind} has no config.json (its settings)")
    return files.read_json(folder / "config.json", dict)


def _json(path: Path) -> dict:
    """A JSON object, or {} where the file is not there (sentence-transformers' defaults)."""
    return files.read_json(path, dict) if files.is_present(path) else {}


# What verify embeds: sentences of several lengths (the padding differs row to row), upper case
# (lower-casing shows), and one past any truncation length (built by `texts`).
TEXTS = (
    "A man is eating food.",
    "Paris IS the Capital of France, and its museums are OPEN on Sundays.",
    "Ok.",
    "The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat.",
)
LONG = "Sentence embeddings are pooled from every token the encoder reads, and no further."


def texts(pipeline: Pipeline, positions: int) -> list[str]:
    """TEXTS, and a text longer than the truncation length (and the positions): one whose
    tokens past it would change its embedding, were they read."""
    words = max(pipeline.max_seq_length or 0, positions) + 16
    repeated = " ".join((LONG.split() * (words // len(LONG.split()) + 1))[:words])
    return [*TEXTS, repeated]


MANY = 33  # texts embedded together: more than encode's 32 a call


def many(texts: list[str]) -> list[str]:
    """MANY texts of several lengths, `texts` taken in turn."""
    return [texts[i % len(texts)] for i in range(MANY)]


def token_counts(tokenizer, texts: list[str], prompt: str = "") -> list[int]:
    """Each text's tokens (special ones included) before any truncation."""
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return [len(e.ids) for e in tokenizer.encode_batch([prompt + t for t in texts])]


def padded_together(batches: list, side: str = "right") -> tuple | None:
    """Token states and masks [((B, T, H), (B, T))] of batches of other lengths, as one batch:
    each padded to the longest (zeros) on `side`; None where there are none."""
    import torch
    import torch.nn.functional as F

    if not batches:
        return None
    longest = max(mask.shape[1] for _, mask in batches)
    widths = [(longest - mask.shape[1], 0) if side == "left" else (0, longest - mask.shape[1])
              for _, mask in batches]  # fmt: skip
    states = [F.pad(s, (0, 0, *w)) for (s, _), w in zip(batches, widths, strict=True)]
    masks = [F.pad(m, w) for (_, m), w in zip(batches, widths, strict=True)]
    return torch.cat(states), torch.cat(masks)


def unflattened(real_states, mask):
    """Token states (B, T, H), zeros at the padding, from the real tokens' (N, H) in order."""
    states = real_states.new_zeros(*mask.shape, real_states.shape[-1])
    states[mask.bool()] = real_states
    return states


# Tokenizing as encode does ----------------------------------------------------------------------


def tokenized(pipeline: Pipeline, tokenizer, texts: list[str], prompt: str = "", pad_id=0):
    """`texts` as sentence-transformers tokenizes them for `encode`: the prompt before each,
    lower-cased where the directory says, truncated at its length (special tokens counted),
    padded to the longest with `pad_id` on the side the tokenizer's config says (tokenizer.json's
    own truncation and padding replaced);
    and the prompt's length in tokens, a trailing special token not counted. `tokenizer`: a
    `tokenizers.Tokenizer`, changed in place."""
    import torch
    from tokenizers import normalizers

    if pipeline.do_lower_case and not _lowercases(tokenizer.normalizer):
        before = [tokenizer.normalizer] if tokenizer.normalizer is not None else []
        tokenizer.normalizer = normalizers.Sequence([normalizers.Lowercase(), *before])
    tokenizer.no_padding()
    if pipeline.max_seq_length:
        tokenizer.enable_truncation(pipeline.max_seq_length, direction=pipeline.truncation_side)
    else:
        tokenizer.no_truncation()
    encodings = tokenizer.encode_batch([prompt + text for text in texts])
    longest = max((len(e.ids) for e in encodings), default=0)
    rows = [(e.ids, e.attention_mask, e.type_ids) for e in encodings]
    batch = {
        name: torch.tensor(
            [_padded(r[i], fill, longest, pipeline.padding_side) for r in rows], dtype=torch.long
        )
        for i, (name, fill) in enumerate(
            [("input_ids", pad_id), ("attention_mask", 0), ("token_type_ids", 0)]
        )
    }
    return batch, _prompt_length(tokenizer, prompt)


def _padded(values: list[int], fill: int, length: int, side: str) -> list[int]:
    padding = [fill] * (length - len(values))
    return padding + values if side == "left" else values + padding


def _prompt_length(tokenizer, prompt: str) -> int:
    if not prompt:
        return 0
    ids = tokenizer.encode(prompt).ids
    special = {i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special}
    return len(ids) - (1 if ids and ids[-1] in special else 0)


def _lowercases(normalizer) -> bool:
    """Does the tokenizer's normalizer lower-case already (BERT's, uncased)?"""
    if normalizer is None:
        return False
    text = normalizer.normalize_str("A")
    return text == "a"


# Computing it -----------------------------------------------------------------------------------


def embed(pipeline: Pipeline, tokens, mask, prompt_length: int = 0):
    """The sentence embeddings of token states `tokens` (B, T, H) whose real tokens `mask`
    (B, T) marks, each step as sentence-transformers computes it; `prompt_length`: the prompt's
    tokens at the start of each text, left out of the pooling where it says so."""
    import torch.nn.functional as F

    if pipeline.refused:
        raise CheckpointError(f"{pipeline.directory}: no sentence embedding: {pipeline.refused}")
    features = {TOKENS: tokens}  # what sentence-transformers' modules pass along, by name
    for step in pipeline.steps:
        if isinstance(step, Pooling):
            features[SENTENCE] = pooled(features[TOKENS], mask, step, prompt_length)
        elif isinstance(step, Dense):
            features[step.writes] = projected(features[step.reads], step)
        elif step.reads in features:
            features[step.writes] = F.normalize(features[step.reads], p=2, dim=-1)
    return features[SENTENCE]


def pooled(tokens, mask, pooling: Pooling, prompt_length: int = 0):
    """Each of `pooling`'s modes over the real tokens (the prompt's left out where it is not
    included), concatenated in order; sentence-transformers' Pooling, padded either side."""
    import torch

    start = mask.to(torch.int32).argmax(
        dim=1
    )  # the first token: weightedmean's weights count from it
    if prompt_length and not pooling.include_prompt:
        mask = _without_prompt(mask, prompt_length)
    total = torch.float32 if tokens.dtype in (torch.float16, torch.bfloat16) else tokens.dtype
    m = mask.unsqueeze(-1).to(tokens.dtype)
    first = mask.to(torch.int32).argmax(dim=1)  # the first pooled token (cls)
    out = []
    for mode in pooling.modes:
        if mode == "cls":
            out.append(tokens[torch.arange(len(tokens), device=tokens.device), first])
        elif mode == "max":
            out.append(tokens.masked_fill(m == 0, float("-inf")).max(dim=1).values)
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            summed = (tokens * m).sum(dim=1, dtype=total)
            count = m.sum(dim=1, dtype=total).clamp(min=1e-9)
            out.append((summed / (count if mode == "mean" else count.sqrt())).to(tokens.dtype))
        elif mode == "weightedmean":  # weights 1, 2, ... from the first token on, prompt or not
            place = torch.arange(1, tokens.shape[1] + 1, dtype=total, device=tokens.device)
            place = place.view(1, -1, 1)
            weights = mask.unsqueeze(-1).to(total) * (place - start.view(-1, 1, 1))
            summed = (tokens * weights).sum(dim=1)
            out.append((summed / weights.sum(dim=1).clamp(min=1e-9)).to(tokens.dtype))
        else:  # lasttoken: the last real token
            found, back = mask.flip(1).max(1)
            back = torch.where(found == 0, tokens.shape[1] - 1, back)
            out.append(
                (tokens * m)[
                    torch.arange(len(tokens), device=tokens.device), tokens.shape[1] - back - 1
                ]
            )
    return torch.cat(out, dim=-1)


def _without_prompt(mask, prompt_length: int):
    """`mask` with each text's first `prompt_length` real tokens (the prompt's) set to 0."""
    import torch

    first = mask.to(torch.int32).argmax(dim=1)
    place = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0)
    return mask.masked_fill(place < (first + prompt_length).unsqueeze(1), 0)


def projected(x, dense: Dense):
    """Dense: its linear layer (weights from its folder), then its activation."""
    import torch
    import torch.nn.functional as F

    weights = dense_weights(dense)
    bias = weights["linear.bias"].to(x.dtype) if dense.bias else None
    y = F.linear(x, weights["linear.weight"].to(x.dtype), bias)
    functions = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": F.relu, "gelu": F.gelu,
                 "silu": F.silu}  # fmt: skip
    return y if dense.activation is None else functions[dense.activation](y)


def dense_weights(dense: Dense) -> dict:
    """Dense's tensors, in torch (read with the pipeline)."""
    from . import storage

    return storage.all_to_torch(dense.tensors)


def placed(rows: dict[str, str], directory: Path) -> dict:
    """The tensors a table's [sentence] `rows` place ({a model's name: "Dense.linear.weight"}),
    read from the sentence-transformers directory's module folder, under the model's names;
    {} where the directory has no such module."""
    pipeline = read_pipeline(directory) if rows else None
    dense = pipeline.dense if pipeline is not None else None
    return {} if dense is None else dense_placed(dense, rows)


def dense_placed(dense: Dense, rows: dict[str, str]) -> dict:
    """Dense's tensors under the names a table's [sentence] `rows` give them; a row naming
    one this Dense does not have (its bias, where it has none) refused, naming both."""
    out = {}
    for name, which in rows.items():
        tensor = which.partition(".")[2]
        if tensor not in dense.tensors:
            raise CheckpointError(
                f"{dense.folder}: this Dense has no {tensor} (its config.json: bias "
                f"{str(dense.bias).lower()}), where the table's [sentence] row {name!r} places "
                f"{which}; leave the row out of the table"
            )
        out[name] = dense.tensors[tensor]
    return out


def dense_tensors(dense: Dense) -> dict:
    """Dense's tensors from its folder (model.safetensors, or an older pytorch_model.bin read
    without running pickled code), checked against its config's sizes, as read (storage.py)."""
    from . import pickles, storage

    found = [dense.folder / n for n in ("model.safetensors", "pytorch_model.bin")]
    path = next((p for p in found if files.is_present(p)), None)
    if path is None:
        raise CheckpointError(f"{dense.folder}: Dense has no weights (model.safetensors)")
    held = storage.read_header(path)[0] if path.suffix == ".safetensors" else pickles.read_bin(path)
    wanted = {"linear.weight": (dense.out_features, dense.in_features)}
    wanted |= {"linear.bias": (dense.out_features,)} if dense.bias else {}
    wrong = [f"{n}: {held[n].shape if n in held else 'missing'}, not {s}" for n, s in wanted.items()
             if n not in held or tuple(held[n].shape) != s]  # fmt: skip
    if wrong:
        raise CheckpointError(f"{path}: not Dense's weights ({'; '.join(wrong)})")
    return {n: held[n] for n in wanted}


@dataclass
class Encoding:
    """What `BertModel.encode` needs of a sentence-transformers directory: its pipeline, its
    tokenizer (a `tokenizers.Tokenizer`), the pad id."""

    pipeline: Pipeline
    tokenizer: object  # None: the directory has none
    pad_id: int = 0

    def encode(self, model, sentences, batch_size: int, prompt_name=None, prompt=None):
        """`model`'s sentence embeddings of `sentences`, `batch_size` at a time, on its device."""
        import torch

        if isinstance(sentences, str):
            raise TypeError("encode takes a list of sentences; give [sentence] for one")
        if self.tokenizer is None:
            raise CheckpointError(
                f"{self.pipeline.directory}: no tokenizer (tokenizer.json or vocab.txt), which "
                "encoding texts needs, as sentence-transformers does"
            )
        text = self.pipeline.prompt(prompt, prompt_name)
        parameter = next(model.parameters())
        out = []
        for start in range(0, len(sentences), batch_size):
            batch, length = tokenized(
                self.pipeline, self.tokenizer, list(sentences[start : start + batch_size]), text,
                self.pad_id,
            )  # fmt: skip
            batch = {k: v.to(parameter.device) for k, v in batch.items()}
            with torch.inference_mode():
                states = model.encoded(**batch, output_hidden_states=False)[0].last_hidden_state
                out.append(embed(self.pipeline, states, batch["attention_mask"], length))
        if not out:  # no sentence: none of the directory's width
            return torch.empty(0, width(self.pipeline, model.config.hidden_size),
                               device=parameter.device)  # fmt: skip
        return torch.cat(out)
