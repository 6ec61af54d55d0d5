"""Your own encoder as real code calls it (issue 45): every mask form (dtype, what it marks,
rank), optional arguments left at their defaults, a forward(*inputs), an output class of its own,
queries scaled after their projection, MPNet's fused time-major in-projection
(tests/zoo/as_called.py): each right model inferred and PASSED, each one-bug variant FAILED with
its cause named."""

from pathlib import Path

import pytest
import torch

import bertconv
from bertconv.batches import random_batch
from bertconv.yours import harness

ZOO = Path(__file__).parent / "zoo" / "as_called.py"
RIGHT = ["KeepMask", "HideMask", "AssertsPositions", "Varargs", "ReturnsItsOwnClass",
         "ScaledQueries", "FoldedQueryScale"]  # fmt: skip


@pytest.mark.parametrize("name", RIGHT)
def test_each_is_inferred_and_passes(name, checkpoints, tmp_path, cli):
    table, bert = tmp_path / "table.toml", checkpoints["base"]
    code, _, err = cli("infer", f"{ZOO}:{name}", "--config", bert / "config.json", "--out", table)
    assert code == 0, err
    code, out, err = cli("verify", bert, "--model", f"{ZOO}:{name}", "--layout", table)
    assert code == 0 and "PASSED" in out, out + err


@pytest.mark.parametrize(
    "name, form",
    [
        ("KeepMask", "(B, T), True at the tokens"),
        ("HideMask", "(B, 1, 1, T), True at the padding"),
        ("ReturnsItsOwnClass", "(B, T), 1 at the tokens"),
    ],
)
def test_the_mask_form_is_the_one_the_model_computes_with(name, form):
    config = bertconv.BertConfig(
        hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96
    )
    model = harness.load(f"{ZOO}:{name}", {}, config, random_batch(config, 8))
    assert model.plan.mask == form


def test_an_optional_argument_is_left_at_its_default():
    """fairseq's `positions=None`, asserted unset: never given; token types given where the
    model has their table, and lengths not beside a mask."""
    config = bertconv.BertConfig(num_hidden_layers=1)
    model = harness.load(f"{ZOO}:AssertsPositions", {}, config, random_batch(config, 8))
    assert model.plan.arguments == {"src_tokens": "input_ids", "segment_labels": "token_type_ids"}
    namespace = {}
    exec("def forward(self, ids, mask, lengths=None, position_ids=None): pass", namespace)
    bare = type("Model", (torch.nn.Module,), {"forward": namespace["forward"]})()
    assert harness.plan(bare, "m.py:Model").arguments == {
        "ids": "input_ids",
        "mask": "attention_mask",
    }


def test_a_call_rejected_for_an_optional_argument_is_tried_without_it():
    config = bertconv.BertConfig(num_hidden_layers=1)
    model = harness.load(f"{ZOO}:RejectsTokenTypes", {}, config, random_batch(config, 8))
    assert model.plan.arguments == {"input_ids": "input_ids"}


def test_an_eps_of_its_own_fails_named(checkpoints, tmp_path, cli):
    table = tmp_path / "table.toml"
    assert cli("infer", f"{ZOO}:KeepMask", "--out", table)[0] == 0
    args = ["--model", f"{ZOO}:KeepMaskEps", "--layout", table]
    code, out, err = cli("verify", checkpoints["base"], *args)
    assert code == 1 and "LayerNorm eps 1e-05" in out, out + err


def test_a_fixed_query_scaling_is_named_with_its_value(minilm, tmp_path, cli):
    """0.125 (BERT-base's 1/sqrt(64)) where MiniLM's heads are 32 wide: named, confirmed."""
    code, _, err = cli("infer", f"{ZOO}:FixedQueryScale", "--config", minilm / "config.json")
    assert code == 1 and "fixed 0.125 (1/sqrt(64))" in err and "head size 32" in err, err
    assert "Your model computes" in err
    table = tmp_path / "table.toml"
    assert cli("infer", f"{ZOO}:ScaledQueries", "--out", table)[0] == 0
    code, out, err = cli("verify", minilm, "--model", f"{ZOO}:FixedQueryScale", "--layout", table)
    assert code == 1 and "fixed 0.125" in out and "Your model computes" in out, out + err


def test_mpnets_fused_time_major_in_projection_is_split_and_passes(tmp_path, cli):
    """The original MPNet code's attention: one in_proj_weight (3H, H) sliced in forward,
    time-major states, queries scaled after the projection, a key_padding_mask."""
    from test_mpnet import _written

    checkpoint, table = _written("MPNetModel", tmp_path), tmp_path / "fused.toml"
    args = ["infer", f"{ZOO}:FusedMPNet", "--config", checkpoint / "config.json", "--out", table]
    code, _, err = cli(*args)
    assert code == 0, err
    assert '"layers.{layer}.self_attn.in_proj_weight"' in table.read_text()
    code, out, err = cli("verify", checkpoint, "--model", f"{ZOO}:FusedMPNet", "--layout", table)
    assert code == 0 and "PASSED" in out, out + err


def test_a_time_major_model_with_a_key_padding_mask_passes_and_its_eps_is_named(
    checkpoints, tmp_path, cli
):
    table, bert = tmp_path / "table.toml", checkpoints["base"]
    code, _, err = cli("infer", f"{ZOO}:TimeMajor", "--out", table)
    assert code == 0, err
    code, out, err = cli("verify", bert, "--model", f"{ZOO}:TimeMajor", "--layout", table)
    assert code == 0 and "PASSED" in out, out + err
    code, out, err = cli("verify", bert, "--model", f"{ZOO}:TimeMajorEps", "--layout", table)
    assert code == 1 and "LayerNorm eps 1e-05" in out, out + err
    code, _, err = cli("infer", f"{ZOO}:TimeMajorEps", "--config", bert / "config.json")
    assert code == 1 and "eps 1e-05" in err, err


def test_a_fixed_scaling_inside_the_query_projection_is_named_there(minilm, tmp_path, cli):
    table = tmp_path / "table.toml"
    assert cli("infer", f"{ZOO}:FoldedQueryScale", "--out", table)[0] == 0
    code, out, err = cli("verify", minilm, "--model", f"{ZOO}:FoldedFixedScale", "--layout", table)
    assert code == 1 and "the query projection differs" in out, out + err
    assert "queries multiplied by a fixed 0.125 (1/sqrt(64)) after their projection" in out


def test_a_roberta_counting_from_zero_fails_on_left_padding_alone(tmp_path, cli):
    """A table written for it (RoBERTa's reserved rows left out); verify FAILS on the batch
    padded on the left, saying it agrees on right padding and why."""
    import transformers
    from test_family_own import SIZES

    torch.manual_seed(0)
    checkpoint, table = tmp_path / "roberta", tmp_path / "t.toml"
    transformers.RobertaModel(transformers.RobertaConfig(**SIZES)).save_pretrained(checkpoint)
    args = ["--config", checkpoint / "config.json", "--out", table]
    code, _, err = cli("infer", f"{ZOO}:FromZeroRoberta", *args)
    assert code == 0, err
    code, out, err = cli(
        "verify", checkpoint, "--model", f"{ZOO}:FromZeroRoberta", "--layout", table
    )
    assert code == 1 and "agrees on right padding: it numbers positions" in out, out + err


@pytest.mark.parametrize(
    "name, said",
    [
        ("Sinusoidal", "no tensor for the position embeddings (a (512, 384) table)"),
        ("NoEmbeddingNorm", "no tensor for the embeddings' LayerNorm"),
        ("PreLNWithFinalNorm", "no part of BERT fits its tensors final_norm.weight"),
        ("PreLNWithFinalNorm", "Your model computes the LayerNorm before the sublayer (pre-LN)"),
        ("ScaledWords", "Your model computes the word embeddings scaled by sqrt(hidden_size)"),
        ("ReluBlocks", 'Your model computes ReLU ("relu")'),
    ],
)
def test_a_model_lacking_or_adding_a_part_is_refused_naming_it(name, said, minilm, cli):
    code, _, err = cli("infer", f"{ZOO}:{name}", "--config", minilm / "config.json")
    assert code == 1 and said in err and "No deviation bertconv knows" not in err, err


def test_a_token_type_table_of_other_rows_is_named(minilm, cli):
    """BERT-pytorch's three segments (0 for the padding), where the checkpoint has two."""
    seed = Path(__file__).parent / "seed_factories.py"
    code, _, err = cli("infer", f"{seed}:bert_pytorch", "--config", minilm / "config.json")
    assert code == 1 and "embedding.segment.weight is a table of 3 token types" in err, err
    assert "where the checkpoint has 2 (type_vocab_size)" in err
