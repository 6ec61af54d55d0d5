"""Seed 004's BERT-pytorch (codertimo): not BERT (pre-LayerNorm blocks, sinusoid positions, 3
segments, no LayerNorm on the embeddings). Its files are recognised by their names and described
without a config.json (BERT-pytorch writes none), and every conversion from or into its layout
is refused with why, writing nothing; the whole pickled model its trainer saves is refused
before torch runs it, saying how to save a state dict instead."""

import hashlib
import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import bertconv
import seed_models
from bertconv import storage
from bertconv.api import Source, convert_checkpoint, fetch
from bertconv.catalog import of
from bertconv.config import BertConfig
from bertconv.convert import convert
from bertconv.errors import CheckpointError, NotFoundError, TableError, UsageError
from bertconv.tables import TABLES, read_off, read_table, refusal
from conftest import SEED, TINY
from fuzz import ADVICE

# The seed's BERT at the tests' tiny sizes; its feed-forward is always 4 * hidden.
SIZES = dict(hidden=TINY["hidden_size"], n_layers=TINY["num_hidden_layers"], attn_heads=4)
SHOWN = {
    "num_hidden_layers": TINY["num_hidden_layers"],
    "hidden_size": TINY["hidden_size"],
    "num_attention_heads": None,  # no shape shows it
    "intermediate_size": 4 * TINY["hidden_size"],
    "vocab_size": TINY["vocab_size"],
    "max_position_embeddings": None,  # the positions are a buffer, not a weight
    "type_vocab_size": 3,
    "hidden_act": None,
    "num_labels": None,
    "position_embedding_type": None,  # fixed sinusoids: no kind config.json names
}
REFUSED = "is in the 'bert-pytorch' layout, which bertconv recognises but never converts"
WHY = ("pre-LayerNorm", "LN(x + f(x))", "fixed sinusoids", "3 segment embeddings", "What to do")


def seed_bert() -> seed_models.BertPytorchBERT:
    torch.manual_seed(SEED)
    return seed_models.BertPytorchBERT(TINY["vocab_size"], **SIZES).eval()


def save(state_dict: dict, directory, form: str):
    directory.mkdir()
    if form == "safetensors":
        tensors = {k: v.contiguous() for k, v in state_dict.items()}
        save_file(tensors, directory / "model.safetensors")
    else:
        torch.save(state_dict, directory / "pytorch_model.bin")
    return directory


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """The seed's BERT saved as a state dict both ways, without a config.json as BERT-pytorch
    leaves it, and once with one (a user's); its BERTLM, which its trainer trains, too."""
    root, bert = tmp_path_factory.mktemp("bert-pytorch"), seed_bert()
    out = {form: save(bert.state_dict(), root / form, form) for form in ("safetensors", "bin")}
    out["configured"] = save(bert.state_dict(), root / "configured", "safetensors")
    (out["configured"] / "config.json").write_text(json.dumps(TINY | {"type_vocab_size": 3}))
    lm = seed_models.BertPytorchBERTLM(bert, TINY["vocab_size"])
    out["lm"] = save(lm.state_dict(), root / "lm", "bin")
    return out


def snapshot(directory) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


def test_the_seed_model_runs_and_the_table_names_its_every_weight():
    bert = seed_bert()
    ids = torch.randint(1, TINY["vocab_size"], (2, 7))
    assert bert(ids, torch.ones_like(ids)).shape == (2, 7, TINY["hidden_size"])
    weights = {k: tuple(v.shape) for k, v in bert.state_dict().items()}
    placed, sizes = read_off("bert-pytorch", weights)
    assert set(weights) - set(placed) == {"embedding.position.pe"}  # a buffer, ignored
    assert sizes == {k: v for k, v in SHOWN.items() if v is not None}


@pytest.mark.parametrize("form", ["safetensors", "bin", "configured", "lm"])
def test_inspect_finds_it_by_its_names_with_or_without_config_json(form, saved):
    found = bertconv.inspect(saved[form])
    assert (found.layout, found.layout_found) == ("bert-pytorch", "by its names")
    assert found.config == SHOWN and found.config_from == "its weights' shapes"
    assert found.model_class is None and not found.unplaced
    assert found.problems.startswith(f"{saved[form]}: {REFUSED}")
    assert all(reason in found.problems for reason in WHY)


def test_inspect_on_the_command_line_says_what_the_shapes_do_not_show(saved, cli):
    code, out, err = cli("inspect", saved["bin"])
    assert code == 0, err
    assert "layout      bert-pytorch (by its names)" in out
    assert (
        "config      2 layers, hidden 32, intermediate 128, vocab 99, 3 token types (read off its "
        "weights' shapes; they do not show num_attention_heads, max_position_embeddings, "
        "hidden_act)"
    ) in out
    assert "would not convert:" in out and "pre-LayerNorm" in out
    code, out, _ = cli("inspect", saved["safetensors"], "--json")
    shown = json.loads(out)
    assert code == 0 and shown["config"]["num_attention_heads"] is None
    assert REFUSED in shown["problems"]


@pytest.mark.parametrize("form", ["safetensors", "bin", "configured"])
@pytest.mark.parametrize(
    "args",
    [
        ["convert", "{src}", "--out", "{out}"],
        ["convert", "{src}", "--from", "bert-pytorch", "--to", "minbert", "--out", "{out}"],
        ["verify", "{src}"],
    ],
)
def test_converting_it_is_refused_with_why_and_nothing_is_written(form, args, saved, cli, tmp_path):
    src, out = saved[form], tmp_path / "new" / "out"
    before = snapshot(src)
    code, _, err = cli(*[a.format(src=src, out=out) for a in args])
    assert code == CheckpointError.exit_code, err
    assert err.startswith(f"bertconv: error: {src}: {REFUSED}")
    assert all(reason in err for reason in WHY) and "Traceback" not in err
    assert not (tmp_path / "new").exists() and snapshot(src) == before


def test_without_config_json_any_other_layout_is_still_not_found(tmp_path):
    model = seed_models.MinbertModel(seed_models.MinbertConfig(**TINY))
    src = save(model.state_dict(), tmp_path / "minbert", "safetensors")
    with pytest.raises(NotFoundError, match="config.json: no config.json"):
        bertconv.inspect(src)
    with pytest.raises(NotFoundError, match="config.json: no config.json"):
        bertconv.load(src, layout="minbert")


@pytest.mark.parametrize("form", ["safetensors", "configured"])
def test_load_is_refused_with_why(form, saved):
    with pytest.raises(CheckpointError, match=f"{REFUSED}.\nBERT-pytorch's model is not BERT"):
        bertconv.load(saved[form])
    with pytest.raises(CheckpointError, match=REFUSED):
        bertconv.load(saved[form], layout="bert-pytorch")


def test_converting_into_it_is_refused_before_anything_is_read(checkpoints, cli, tmp_path):
    src, out = checkpoints["base"], tmp_path / "out"
    code, _, err = cli("convert", src, "--to", "bert-pytorch", "--out", out)
    assert code == UsageError.exit_code, err
    never = "bertconv never converts into the 'bert-pytorch' layout, which it recognises only"
    assert f"{src}: {never}" in err and "pre-LayerNorm" in err and not out.exists()
    # no Hub is asked: the refusal comes first
    code, _, err = cli("fetch", "org/model", "--to", "bert-pytorch", "--out", out)
    assert code == UsageError.exit_code and f"org/model: {never}" in err and not out.exists()
    with pytest.raises(UsageError, match=never):
        fetch("org/model", out, "bert-pytorch")  # in Python too
    with pytest.raises(UsageError, match=never):
        convert_checkpoint(Source(str(src), src), out, "bert-pytorch")
    assert not out.exists()
    config = BertConfig(**TINY)
    official = {n: storage.from_torch(torch.zeros(s)) for n, s in of("bert").shapes(config).items()}
    with pytest.raises(UsageError, match=never):
        convert(official, config, "transformers", "bert-pytorch")


def test_the_trainers_pickled_model_is_refused_naming_its_classes(tmp_path, monkeypatch, cli):
    """BERTTrainer.save: torch.save(self.bert.cpu(), path), the model object itself."""
    src = tmp_path / "ep0"
    src.mkdir()
    torch.save(seed_bert(), src / "pytorch_model.bin")
    built = []
    monkeypatch.setattr(
        seed_models.BertPytorchBERT, "__setstate__", lambda self, state: built.append(self)
    )
    message = (
        r"pytorch_model.bin: holds a pickled model object, as torch.save\(model\) writes "
        r"\(its classes: seed_models.BertPytorchAttention, seed_models.BertPytorchBERT, .*"
        r"and \d+ more\), not a state dict"  # its own first; torch.nn's, counted
    )
    with pytest.raises(CheckpointError, match=message) as refused:
        bertconv.load(src)
    assert 'torch.save(model.state_dict(), "pytorch_model.bin")' in str(refused.value)
    code, _, err = cli("inspect", src)
    assert code == CheckpointError.exit_code and "holds a pickled model object" in err
    for said in (str(refused.value), err):
        assert not any(advice in said for advice in (*ADVICE, "allowlist", "add_safe_globals"))
    assert not built  # the model's own code never ran


def test_the_table_follows_the_schema_and_layouts_lists_it(cli):
    table = read_table(TABLES / "bert-pytorch.toml")
    assert table["name"] == "bert-pytorch" and refusal("bert-pytorch") == table["refused"]
    assert all(reason in table["refused"] for reason in WHY)
    assert "no LayerNorm after the embeddings" in table["refused"]
    code, out, _ = cli("layouts")
    listed = dict(line.split(maxsplit=1) for line in out.splitlines())
    assert code == 0 and listed["bert-pytorch"].startswith("codertimo/BERT-pytorch")
    assert listed["bert-pytorch"].endswith("recognised, never converted")
    assert refusal("transformers") == refusal("minbert") == ""


# A part of the table, replaced; the key the error names, and what it says of it.
MUTATIONS = {
    "an explanation that is no text": (
        r'refused = """.*?"""',
        "refused = 42",
        "refused",
        "should be a str",
    ),
    "an empty explanation": (r'refused = """.*?"""', 'refused = "  "', "refused", "says nothing"),
    "a row that maps, not a shape": (
        r'"embedding.token.weight" = [^\n]*',
        '"embedding.token.weight" = "embeddings.word_embeddings.weight"',
        "embedding.token.weight",
        "a recognised-only layout's row's value is its shape",
    ),
    "a group that is none of BERT's": (
        r"\[groups.nsp\]",
        "[groups.next]",
        "groups.next",
        "no such group",
    ),
}


@pytest.mark.parametrize("kind", MUTATIONS)
def test_a_mutated_table_is_refused_naming_the_line(kind, tmp_path):
    part, replacement, key, problem = MUTATIONS[kind]
    text = (TABLES / "bert-pytorch.toml").read_text()
    mutated, found = re.subn(part, replacement, text, count=1, flags=re.DOTALL)
    assert found == 1
    (tmp_path / "bp.toml").write_text(mutated)
    line = mutated.splitlines().index(replacement) + 1
    with pytest.raises(TableError, match=re.escape(f"line {line} ({key}): {problem}")):
        read_table(tmp_path / "bp.toml")


def test_a_state_dict_saved_by_hand_is_named_as_the_source(tmp_path, cli):
    """As its users save it: torch.save(model.state_dict(), "bert.pt"), no directory of its
    own, no config.json."""
    torch.save(seed_bert().state_dict(), tmp_path / "bert.pt")
    found = bertconv.inspect(tmp_path / "bert.pt")
    assert found.layout == "bert-pytorch" and found.config["hidden_size"] == TINY["hidden_size"]
    code, out, err = cli("inspect", tmp_path / "bert.pt")
    assert code == 0 and "layout      bert-pytorch (by its names)" in out, err
    code, _, err = cli("convert", tmp_path / "bert.pt", "--out", tmp_path / "out")
    assert code == CheckpointError.exit_code and REFUSED in err and not (tmp_path / "out").exists()
