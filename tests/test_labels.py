"""A head's label count is its shape's (issue 31): tutorials' heads whose count is a number in
their code (`nn.Linear(hidden, 2)`, `num_classes=3`, nine CoNLL tags, two tags), none of them
the probe config's num_labels, are inferred with no --config, placed by how they are read (and,
where two heads are that wide, by name), and verified on transformers' checkpoint of their
count; on a checkpoint of another count verify refuses, naming both. Checkpoints are
transformers' own, made here, seeded."""

from pathlib import Path

import pytest
import torch

ZOO = Path(__file__).parent / "zoo" / "head_labels.py"

# zoo model -> (the group it is placed as, transformers' class of it, its labels)
HEADS = {
    "Sentiment": ("classifier", "BertForSequenceClassification", 2),
    "Polarity": ("classifier", "BertForSequenceClassification", 2),
    "NewsClassifier": ("classifier", "BertForSequenceClassification", 3),
    "NerTagger": ("token_classifier", "BertForTokenClassification", 9),
    "SpanTagger": ("token_classifier", "BertForTokenClassification", 2),
    "InsideOutside": ("token_classifier", "BertForTokenClassification", 2),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """transformers' checkpoint of a class with that many labels: made once, seeded."""
    import transformers

    from conftest import SEED, TINY, write_task

    made = {}

    def make(model_class: str, labels: int) -> Path:
        if (model_class, labels) not in made:
            torch.manual_seed(SEED)
            config = transformers.BertConfig(**TINY, num_labels=labels)
            model = getattr(transformers, model_class)(config).eval()
            path = tmp_path_factory.mktemp(f"{model_class}-{labels}")
            made[model_class, labels] = write_task(model, "safetensors", path)
        return made[model_class, labels]

    return make


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, Path]:
    """Each model's table, as `bertconv infer MODEL --out TABLE` writes it: no --config."""
    from bertconv.cli import run

    root = tmp_path_factory.mktemp("label-tables")
    for name in HEADS:
        assert run(["infer", f"{ZOO}:{name}", "--out", str(root / f"{name}.toml")]) == 0, name
    return {name: root / f"{name}.toml" for name in HEADS}


def verified(cli, ckpt: Path, name: str, table: Path) -> tuple[int, list[str], str]:
    code, out, err = cli("verify", ckpt, "--model", f"{ZOO}:{name}", "--layout", table)
    rows = [line.split()[0] for line in out.splitlines()[2:] if line.endswith(" ok")]
    return code, rows, out + err


@pytest.mark.parametrize("name", HEADS)
def test_a_head_of_a_fixed_count_is_placed_and_verifies_on_a_checkpoint_of_that_count(
    name, tables, checkpoint, cli
):
    group, model_class, labels = HEADS[name]
    text = tables[name].read_text()
    assert f"[groups.{group}]" in text and "nsp" not in text and "qa" not in text, text
    code, rows, out = verified(cli, checkpoint(model_class, labels), name, tables[name])
    assert code == 0 and "PASSED" in out and rows[-1] == group, out


@pytest.mark.parametrize("name", HEADS)
def test_on_a_checkpoint_of_another_count_verify_refuses_naming_both(name, tables, checkpoint, cli):
    group, model_class, labels = HEADS[name]
    code, _, out = verified(cli, checkpoint(model_class, labels + 1), name, tables[name])
    assert code == 4 and "PASSED" not in out and "Traceback" not in out, out
    assert f"its {group} head has {labels} labels" in out
    assert f"the checkpoint's {labels + 1}: verify it on a checkpoint of {labels}" in out


def test_a_config_of_another_count_gives_the_same_table_and_a_note_naming_both(
    tables, checkpoint, cli, tmp_path
):
    """The shape wins: the table is the model's whatever --config says; a note says that a
    checkpoint of the config's count will not load into it."""
    config = checkpoint("BertForSequenceClassification", 3) / "config.json"
    out = tmp_path / "t.toml"
    code, _, err = cli("infer", f"{ZOO}:Sentiment", "--config", config, "--out", out)
    assert code == 0, err
    note = "classifier.weight has 2 labels (its shape) where --config's num_labels is 3"
    assert f"note: {note}" in err and f"# {note}" in out.read_text()

    def rows(path: Path) -> list[str]:
        return [line for line in path.read_text().splitlines() if not line.startswith("#")]

    assert rows(out) == rows(tables["Sentiment"])


@pytest.mark.parametrize("config", ["same count", "MiniLM's"])
def test_a_config_of_the_same_count_or_of_none_says_nothing(config, checkpoint, minilm, cli):
    """MiniLM's config.json names BertModel and no labels: transformers' default 2 is no count
    to set against the head's shape."""
    path = checkpoint("BertForSequenceClassification", 3) if config == "same count" else minilm
    code, _, err = cli("infer", f"{ZOO}:NewsClassifier", "--config", path / "config.json")
    assert code == 0 and "note:" not in err, err
