"""Heads are never guessed into a pass (issue 24): a head read once per sequence is placed by
config.json's architectures or its name, never by its width; a checkpoint's head the model has
under another role (or as its own) is an error naming both; a masked-LM head on a model with no
pooler, a classifier read off the [CLS] state, and parameters the forward never reads (the
table's `own`) are inferred and verified. Checkpoints are transformers' own, made here."""

from pathlib import Path

import pytest
import torch

from bertconv.errors import TableError
from bertconv.tables import read_table

ZOO = Path(__file__).parent / "zoo"
LIAR = Path(__file__).parent / "liars" / "head_misplaced.py:MisplacedHead"


@pytest.fixture(scope="module")
def sentiment(tmp_path_factory) -> Path:
    """A BertForSequenceClassification of two labels: its classifier the width of NSP's."""
    import transformers

    from conftest import SEED, TINY, write_task

    torch.manual_seed(SEED)
    config = transformers.BertConfig(**TINY, num_labels=2)
    model = transformers.BertForSequenceClassification(config).eval()
    return write_task(model, "safetensors", tmp_path_factory.mktemp("sentiment"))


@pytest.fixture(scope="module")
def masked_lm(tmp_path_factory) -> Path:
    from conftest import task_model, write_task

    path = tmp_path_factory.mktemp("mlm")
    return write_task(task_model("BertForMaskedLM"), "safetensors", path)


def inferred(cli, tmp_path, spec: str, *config) -> Path:
    out = tmp_path / "table.toml"
    code, _, err = cli("infer", spec, *config, "--out", out)
    assert code == 0, err
    return out


def verified(cli, ckpt, spec: str, table: Path) -> tuple[int, list[str], str]:
    code, out, err = cli("verify", ckpt, "--model", spec, "--layout", table)
    rows = [line.split()[0] for line in out.splitlines()[2:] if line.endswith(" ok")]
    return code, rows, out + err


@pytest.mark.parametrize("name", ["SentimentBert", "UnnamedHead"])
def test_a_two_class_head_is_placed_by_architectures_and_its_logits_compared(
    name, sentiment, cli, tmp_path
):
    """`classifier` by its name, `fc` by config.json's BertForSequenceClassification: both the
    checkpoint's classifier, loaded and compared, though NSP's head has their width."""
    spec = f"{ZOO}/head_sentiment.py:{name}"
    table = inferred(cli, tmp_path, spec, "--config", sentiment / "config.json")
    assert "[groups.classifier]" in table.read_text() and "nsp" not in table.read_text()
    code, rows, out = verified(cli, sentiment, spec, table)
    assert code == 0 and "PASSED" in out and rows[-2:] == ["pooler", "classifier"], out


def test_a_head_neither_named_nor_declared_is_refused_never_placed_by_its_width(cli):
    code, _, err = cli("infer", f"{ZOO}/head_sentiment.py:UnnamedHead")
    assert code == 1 and "fc.weight" in err, err


def test_a_classifier_taken_for_nsp_fails_naming_both_heads(sentiment, minilm, cli, tmp_path):
    """The liar's head is named for NSP: on a sentiment checkpoint the checkpoint's classifier
    would be left out, so verify refuses; on MiniLM (no head) its encoder still verifies."""
    table = inferred(cli, tmp_path, str(LIAR))
    assert "[groups.nsp]" in table.read_text()
    code, _, out = verified(cli, sentiment, str(LIAR), table)
    assert code == 4 and "PASSED" not in out, out
    assert "checkpoint's classifier head" in out and "seq_relationship.weight" in out
    assert "as nsp" in out
    code, _, out = verified(cli, minilm, str(LIAR), table)
    assert code == 0 and "nsp: the checkpoint has none" in out, out


def test_a_masked_lm_head_on_a_model_without_a_pooler(masked_lm, minilm, cli, tmp_path):
    spec = f"{ZOO}/head_mlm.py:MaskedLMBert"
    table = inferred(cli, tmp_path, spec)
    assert "[groups.mlm]" in table.read_text() and "pooler" not in table.read_text()
    code, rows, out = verified(cli, masked_lm, spec, table)
    assert code == 0 and rows[-1] == "mlm" and "pooler" not in rows, out
    code, rows, out = verified(cli, minilm, spec, table)  # its head given seeded weights
    assert code == 0 and "mlm: the checkpoint has none" in out and rows[-2] == "mlm", out
    assert rows[-1] == "sentence"  # MiniLM's sentence embedding, after the rows of the model
    assert "seeded weights" in out and len(rows) == 9, out


def test_a_classifier_read_off_the_cls_state_is_the_models_own(sentiment, minilm, cli, tmp_path):
    """No pooler between: not transformers' classifier, so the model's own. It verifies where
    the checkpoint has no classifier; where it has one, the head is never left out silently."""
    spec = f"{ZOO}/head_cls.py:ClsHeadBert"
    table = inferred(cli, tmp_path, spec)
    assert 'own = ["classifier.weight", "classifier.bias"]' in table.read_text()
    code, rows, out = verified(cli, minilm, spec, table)
    assert (
        code == 0
        and "classifier.bias, classifier.weight: your model's own" in out
        and len(rows) == 8  # the embeddings, 6 layers, MiniLM's sentence embedding
    ), out
    code, _, out = verified(cli, sentiment, spec, table)
    assert code == 4 and "checkpoint's classifier head" in out and "as its own" in out, out


def test_a_parameter_the_forward_never_reads_is_the_models_own(minilm, cli, tmp_path):
    """A final LayerNorm left from a pre-LN configuration: written as `own` by infer, never
    loaded or compared by verify, left out by convert."""
    spec = f"{ZOO}/head_unused.py:UnusedNormBert"
    table = inferred(cli, tmp_path, spec)
    assert 'own = ["final_ln.weight", "final_ln.bias"]' in table.read_text()
    code, rows, out = verified(cli, minilm, spec, table)
    assert code == 0 and rows[-2:] == ["pooler", "sentence"]
    assert "final_ln.bias, final_ln.weight: your" in out
    code, _, err = cli("convert", minilm, "--to", table, "--out", tmp_path / "out")
    assert code == 0, err


@pytest.mark.parametrize(
    "own, problem",
    [('own = "x.weight"', "should be a list"), ('own = ["a.weight"]', "none a row's")],
)
def test_own_is_a_list_of_names_none_of_them_a_row(own, problem, tmp_path):
    path = tmp_path / "t.toml"
    rows = "\n".join(f'"{n}" = "{n}"' for n in ["a.weight"])
    path.write_text(f'name = "t"\ndescription = "d"\n{own}\n[encoder]\n{rows}\n')
    with pytest.raises(TableError, match=problem):
        read_table(path)
