"""The architecture catalog is keyed by config.json's model_type: a second catalog placed beside
BERT's is the one a checkpoint naming its type is read with, and a type without one is refused."""

import json
import shutil

import pytest

import bertconv
from bertconv import catalog, mapping
from bertconv.errors import CheckpointError, TableError


@pytest.fixture
def architectures(tmp_path, monkeypatch):
    """A catalog directory holding BERT's catalog, where a test adds another."""
    where = tmp_path / "architectures"
    where.mkdir()
    shutil.copy(catalog.ARCHITECTURES / "bert.toml", where)
    monkeypatch.setattr(catalog, "ARCHITECTURES", where)
    mapping.forget()
    yield where
    monkeypatch.undo()
    mapping.forget()


def _with_type(source, tmp_path, model_type: str):
    """A copy of the checkpoint directory `source` whose config.json names `model_type`."""
    out = tmp_path / f"ckpt-{model_type}"
    shutil.copytree(source, out)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(config | {"model_type": model_type}))
    return out


def test_the_catalog_is_chosen_by_model_type(architectures, checkpoints, tmp_path):
    """A catalog `toybert` that knows no pre-training class: a pre-training checkpoint is that
    class under `bert`, and makes no class under `toybert`."""
    text = (architectures / "bert.toml").read_text()
    start = text.index("[classes.BertForPreTraining]")
    end = text.index("[classes.BertForMaskedLM]")
    toy = text[:start] + text[end:]
    (architectures / "toybert.toml").write_text(
        toy.replace('model_type = "bert"', 'model_type = "toybert"')
    )
    assert catalog.model_types() == ["bert", "toybert"]

    as_bert = bertconv.inspect(_with_type(checkpoints["pretraining"], tmp_path, "bert"))
    assert as_bert.model_class == "BertForPreTraining"
    as_toy = bertconv.inspect(_with_type(checkpoints["pretraining"], tmp_path, "toybert"))
    assert as_toy.model_class is None and "make no BERT class" in as_toy.problems


def test_a_model_type_without_a_catalog_is_refused_naming_those_there_are(checkpoints, tmp_path):
    with pytest.raises(CheckpointError, match=r"model_type='albert' is not supported.*'bert'"):
        bertconv.load(_with_type(checkpoints["base"], tmp_path, "albert"))


def test_a_catalog_names_its_own_model_type(architectures):
    text = (architectures / "bert.toml").read_text()
    (architectures / "other.toml").write_text(text)  # says model_type = "bert"
    with pytest.raises(TableError, match="other.toml: not a valid architecture"):
        catalog.of("other")


def test_google_bert_config_without_model_type_is_bert():
    config = bertconv.BertConfig.from_dict({"hidden_size": 64, "num_attention_heads": 4})
    assert config.model_type == "bert"


@pytest.mark.parametrize("model_type", ["albert", "deberta-v2", "longformer"])
@pytest.mark.parametrize("command", ["inspect", "convert", "verify"])
def test_kin_that_is_not_bert_is_refused_quoting_its_type_and_why(
    model_type, command, checkpoints, tmp_path, cli
):
    from bertconv.config import NOT_BERT

    source, out = _with_type(checkpoints["base"], tmp_path, model_type), tmp_path / "out"
    args = {"convert": ["--to", "bertconv", "--out", out], "verify": ["--device", "cpu"]}
    code, said, err = cli(command, source, *args.get(command, []))
    assert code == 4 and f"model_type={model_type!r}" in err and NOT_BERT[model_type] in err, err
    assert not out.exists() and "Traceback" not in err


def test_a_catalog_extending_berts_states_only_what_differs(architectures, checkpoints, tmp_path):
    """Four lines make a model type: BERT's tensors and classes but the pre-training one, and
    a config class whose pad id defaults to 3 (read where config.json gives none)."""
    (architectures / "toybert.toml").write_text(
        'model_type = "toybert"\nextends = "bert"\nconfig_class = "ToyConfig"\n'
        'drop = ["classes.BertForPreTraining"]\n[config.defaults]\npad_token_id = 3\n'
    )
    toy = catalog.of("toybert")
    assert "BertForPreTraining" not in toy.classes and "BertForMaskedLM" in toy.classes
    assert toy.tensors == catalog.of("bert").tensors and toy.config_class == "ToyConfig"
    assert catalog.read_config({"model_type": "toybert"}).pad_token_id == 3
    as_toy = bertconv.inspect(_with_type(checkpoints["pretraining"], tmp_path, "toybert"))
    assert as_toy.model_class is None and "make no BERT class" in as_toy.problems


@pytest.mark.parametrize(
    "text, problem",
    [
        ('extends = "nosuch"', "extends 'nosuch', which is no other catalog here"),
        ('extends = "bert"\ndrop = ["groups.nosuch"]', "drop 'groups.nosuch'"),
        ('extends = "bert"\n[serves]\ntoy2 = "Toy2"', "serves.toy2: a table"),
        ('extends = "bert"\n[config.renamed]\nhidden_size = "dim"', "config.renamed: one of"),
    ],
)
def test_a_catalog_extending_another_is_held_to_its_schema(architectures, text, problem):
    (architectures / "toybert.toml").write_text(f'model_type = "toybert"\n{text}\n')
    with pytest.raises(TableError, match=problem.replace("(", r"\(")):
        catalog.of("toybert")
