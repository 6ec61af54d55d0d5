"""Your own from-scratch BERT: tables from a file, `bertconv infer` writing one for a
model it has never seen, and `bertconv verify --model` proving parity on the user's own class
with no change to its code. The models are the seeds' (as their write-ups define them) and a zoo
written the ways people write BERT (zoo/assorted.py; test_zoo.py has the rest of the zoo)."""

import json
import tomllib
from pathlib import Path

import pytest
from safetensors.torch import load_file

import bertconv
from bertconv.tables import TABLES, read_table
from bertconv.verify import FLOAT32_MAX_ABS, verify
from bertconv.yours import fence
from bertconv.yours import harness as usermodel
from bertconv.yours.infer import infer
from conftest import TINY

HERE = Path(__file__).parent
SEED_000 = f"{HERE / 'seed_models.py'}:BertModel"
SEED_FACTORIES = str(HERE / "seed_factories.py")
MINBERT = f"{SEED_FACTORIES}:minbert"
BERT_ZOO = ["FusedBert", "RawBert", "BlocksBert", "OtherOrderBert"]


def zoo_model(name: str) -> str:
    return f"{HERE / 'zoo' / 'assorted.py'}:{name}"


def rows(table: dict) -> dict:
    """A table's rows, section by section (what `infer` must give back row for row)."""
    sections = {"encoder": table["encoder"], **table.get("groups", {})}
    return sections | {"generated": table.get("generated", {})}


@pytest.mark.parametrize(
    "spec, shipped, groups",
    [(SEED_000, "bertconv", ["pooler"]), (MINBERT, "minbert", ["pooler"])],
)
def test_infer_gives_back_the_shipped_tables_row_for_row(spec, shipped, groups):
    found = infer(spec)
    assert found.text is not None, found.reason
    inferred = tomllib.loads(found.text)
    expected = tomllib.loads((TABLES / f"{shipped}.toml").read_text())
    expected["groups"] = {g: expected["groups"][g] for g in groups}  # the seed has no heads
    assert rows(inferred) == rows(expected)
    assert list(inferred["encoder"]) == list(expected["encoder"])  # in the same order, too
    assert all(d <= FLOAT32_MAX_ABS for d in found.checked.values())


@pytest.fixture(scope="module")
def inferred(tmp_path_factory) -> dict[str, Path]:
    """A table inferred for each model of the zoo that computes BERT, as `bertconv infer
    --out` writes it."""
    from bertconv.cli import run

    root = tmp_path_factory.mktemp("tables")
    for name in BERT_ZOO:
        assert run(["infer", zoo_model(name), "--out", str(root / f"{name}.toml")]) == 0
    return {name: root / f"{name}.toml" for name in BERT_ZOO}


@pytest.mark.parametrize("name", BERT_ZOO)
def test_an_inferred_table_converts_minilm_into_the_models_names_and_verifies(
    name, inferred, minilm, tmp_path, cli
):
    table = inferred[name]
    assert read_table(table)["name"] == name  # a valid table, as the schema holds it
    code, _, err = cli("convert", minilm, "--to", table, "--out", tmp_path / "out")
    assert code == 0, err
    config_dict = json.loads((minilm / "config.json").read_text())
    config = usermodel.config_object(config_dict, bertconv.BertConfig.from_dict(config_dict))
    model = fence.import_factory(zoo_model(name))(config)
    written = load_file(tmp_path / "out" / "model.safetensors")
    model.load_state_dict(written, strict=True)  # the converted file loads into the class itself
    report = verify(str(minilm), "cpu", model=zoo_model(name), model_layout=str(table))
    layers = [r for r in report.rows if r.name.startswith("layer")]
    assert len(layers) == 6 and report.passed
    assert all(r.max_abs <= FLOAT32_MAX_ABS for r in report.rows), report.rows


def test_verify_model_finds_a_shipped_table_by_the_models_names(checkpoints):
    report = verify(str(checkpoints["pretraining"]), "cpu", model=SEED_000)
    assert report.passed and report.model_class == SEED_000
    assert [r.name for r in report.rows] == ["embeddings", "layer 1", "layer 2", "pooler"]


def test_a_pre_ln_bert_is_refused_naming_where_it_diverges(cli):
    code, _, err = cli("infer", zoo_model("PreLNBert"))
    assert code == 1, err
    assert "no assignment of its tensors makes it compute BERT" in err
    assert "matches embeddings and diverges at layer 1" in err and "pre-LN" in err


def test_a_model_without_token_types_is_held_so_and_fails_on_bert_naming_them(
    cli, checkpoints, tmp_path
):
    """No token type table: infer records it ([holding] token_types = 0); on BERT, whose token
    type rows are not zeros, verify fails naming them (a RoBERTa's zeros would pass)."""
    table = tmp_path / "t.toml"
    code, _, err = cli("infer", zoo_model("NoSegmentsBert"), "--out", table)
    assert code == 0, err
    assert '"token_types" = 0' in table.read_text()
    code, out, err = cli(
        "verify", checkpoints["base"], "--model", zoo_model("NoSegmentsBert"), "--layout", table
    )
    assert code == 1 and "FAILED" in out, out + err
    assert "your model has no token type embeddings, and the checkpoint's are not zero" in out


def test_a_verify_against_the_wrong_table_fails_at_the_first_wrong_layer(inferred, checkpoints):
    """The Blocks table on FusedBert's class: its names do not fit, and bertconv says so."""
    with pytest.raises(bertconv.BertconvError, match="the table's names do not fit the model"):
        verify(
            str(checkpoints["base"]),
            "cpu",
            model=zoo_model("FusedBert"),
            model_layout=str(inferred["BlocksBert"]),
        )


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nosuchmodule:Bert", "cannot import nosuchmodule (ModuleNotFoundError"),
        (zoo_model("Nothing"), "has no class or function 'Nothing'"),
        ("Bert", "expected PKG.MODULE:NAME or path/to/file.py:NAME"),
        (f"{HERE / 'seed_models.py'}:MinbertModel", "give a function that builds it"),
        (f"{HERE / 'seed_factories.py'}:unusual_call", "no shipped layout names its tensors"),
    ],
)
def test_a_model_bertconv_cannot_use_is_one_message(spec, message, checkpoints, cli):
    code, _, err = cli("verify", checkpoints["base"], "--model", spec)
    assert code == 2 and message in err and "Traceback" not in err, err


def test_bert_pytorch_is_called_and_refused_as_not_bert(checkpoints, cli):
    """Seed 004's BERT takes no mask (it makes its own from the pad id): it is called, and
    recognised by its names as a layout whose blocks are not BERT's."""
    code, _, err = cli("verify", checkpoints["base"], "--model", SEED_FACTORIES + ":bert_pytorch")
    assert code == 1 and "'bert-pytorch' layout" in err and "pre-LayerNorm" in err, err


def test_layout_without_model_is_a_usage_error(checkpoints, cli):
    code, _, err = cli("verify", checkpoints["base"], "--layout", "minbert")
    assert code == 2 and "give --model too" in err


def test_tables_from_a_file_for_convert_load_and_verify(inferred, checkpoints, tmp_path, cli):
    table = inferred["RawBert"]
    out = tmp_path / "raw"
    assert cli("convert", checkpoints["pretraining"], "--to", table, "--out", out)[0] == 0
    # The file records the table by its file name and digest, never a path: its copy beside
    # the weights is that table; gone, reading it back asks for it.
    assert (out / "RawBert.toml").read_bytes() == table.read_bytes()
    (out / "RawBert.toml").unlink()
    code, _, err = cli("verify", out)
    assert code == 4 and "your table RawBert.toml" in err and "--from" in err
    code, stdout, err = cli("verify", out, "--from", table)
    assert code == 0, err
    model = bertconv.load(out, layout=str(table))
    assert type(model).__name__ == "BertModel" and model.pooler is None  # RawBert has none
    code, _, err = cli(
        "convert", out, "--from", table, "--to", "transformers", "--out", tmp_path / "t"
    )
    assert code == 0, err
    back = load_file(tmp_path / "t" / "model.safetensors")
    original = load_file(checkpoints["base"] / "model.safetensors")
    assert {k for k in original if not k.startswith("pooler")} == set(back)
    assert all((back[k] == original[k]).all() for k in back)


def test_an_edited_table_file_is_read_again(tmp_path, checkpoints, cli):
    table = tmp_path / "mine.toml"
    text = (TABLES / "minbert.toml").read_text()
    table.write_text(text)
    assert cli("convert", checkpoints["base"], "--to", table, "--out", tmp_path / "a")[0] == 0
    table.write_text(text.replace('"word_embedding.weight"', '"words.weight"'))
    assert cli("convert", checkpoints["base"], "--to", table, "--out", tmp_path / "b")[0] == 0
    assert "words.weight" in load_file(tmp_path / "b" / "model.safetensors")


def test_a_missing_table_file_is_no_such_layout_as_a_wrong_name_is(checkpoints, tmp_path, cli):
    """One code for a layout that is not there (exit 2), a shipped name or a table file."""
    code, _, err = cli(
        "convert", checkpoints["base"], "--to", tmp_path / "x.toml", "--out", tmp_path / "o"
    )
    assert code == 2 and "no such table file" in err
    assert cli("convert", checkpoints["base"], "--to", "nosuch", "--out", tmp_path / "o")[0] == 2
    assert not (tmp_path / "o").exists()


def test_the_models_forward_is_called_by_its_parameter_names():
    """Each zoo model spells its inputs its own way; each is found (TINY is the config)."""
    config = usermodel.config_object({}, bertconv.BertConfig(**TINY))
    spellings = {
        "FusedBert": {
            "input_ids": "input_ids",
            "attention_mask": "attention_mask",
            "token_type_ids": "token_type_ids",
        },
        "RawBert": {"ids": "input_ids", "mask": "attention_mask", "segment_ids": "token_type_ids"},
        "BlocksBert": {
            "input_ids": "input_ids",
            "key_padding_mask": "attention_mask",
            "token_type_ids": "token_type_ids",
        },
        "OtherOrderBert": {
            "tokens": "input_ids",
            "attn_mask": "attention_mask",
            "token_type": "token_type_ids",
        },
        "NoSegmentsBert": {"tokens": "input_ids", "attn_mask": "attention_mask"},
    }
    for name, expected in spellings.items():
        model = fence.import_factory(zoo_model(name))(config)
        assert usermodel.plan(model, name).arguments == expected


def test_a_factory_building_bertconvs_own_model_from_the_dict_infer_gives(tmp_path, cli):
    """`BertModel(BertConfig.from_dict(config))`, infer with no --config: the dict infer gives
    is one BertConfig reads back (it carried relative_attention_num_buckets 0, refused as
    outside 1..4096: exit 2)."""
    (tmp_path / "factory.py").write_text(
        "import bertconv\n\n\ndef make(config):\n"
        "    return bertconv.BertModel(bertconv.BertConfig.from_dict(config))\n"
    )
    code, out, err = cli("infer", f"{tmp_path / 'factory.py'}:make", "--out", tmp_path / "t.toml")
    assert code == 0 and (tmp_path / "t.toml").is_file(), out + err
