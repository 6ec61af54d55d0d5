"""The mapping tables: each checked against the model it describes, and the conversion that
applies them checked as a pure function on random tensors."""

import pytest
import torch

import seed_models
from bertconv import storage
from bertconv.config import BertConfig
from bertconv.convert import _unpack, convert, from_official, to_official
from bertconv.errors import CheckpointError, UsageError
from bertconv.mapping import Layout, Row, head_names, layout, layout_names, official_shapes
from bertconv.model import BertForPreTraining
from conftest import TINY

CONFIG = BertConfig(**TINY)


def random_official(heads: bool = True) -> dict[str, storage.Tensor]:
    g = torch.Generator().manual_seed(0)
    shapes = official_shapes(CONFIG, heads)
    return {name: storage.from_torch(torch.randn(s, generator=g)) for name, s in shapes.items()}


def tensor(t: storage.Tensor) -> torch.Tensor:
    return storage.to_torch(t)


def model_names(name: str) -> dict[str, tuple]:
    """The state dict each layout's own model expects: names and shapes."""
    if name == "bertconv":
        model = BertForPreTraining(CONFIG)
    elif name == "minbert":
        model = seed_models.MinbertModel(seed_models.MinbertConfig(**TINY))
    else:
        from transformers import BertConfig as HFConfig
        from transformers import BertForPreTraining as HFModel

        model = HFModel(HFConfig(**TINY))
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def test_the_shipped_layouts():
    assert layout_names() == ["bertconv", "minbert", "transformers"]


@pytest.mark.parametrize("name", ["bertconv", "minbert"])
def test_table_produces_every_model_tensor_exactly_once(name):
    table = layout(name, CONFIG)
    written = from_official(random_official(), CONFIG, table)
    assert {k: tuple(v.shape) for k, v in written.items()} == model_names(name)
    claimed = [o for row in table.rows.values() for o in row.official]
    assert len(claimed) == len(set(claimed)), "an official tensor is claimed twice"
    wanted = official_shapes(CONFIG, heads=table.has_heads(CONFIG))
    assert set(claimed) == set(wanted)


def test_official_table_matches_what_transformers_writes():
    ours = set(from_official(random_official(), CONFIG, layout("transformers", CONFIG)))
    theirs = set(model_names("transformers"))
    # transformers' state dict also holds the tied copies, which files leave out
    assert theirs - ours == {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    assert ours <= theirs


@pytest.mark.parametrize("name", ["bertconv", "minbert", "transformers"])
def test_round_trip_through_every_layout_is_exact(name):
    official = random_official(heads=name != "minbert")
    back = to_official(
        from_official(official, CONFIG, layout(name, CONFIG)), CONFIG, layout(name, CONFIG), "t"
    )
    assert back.keys() == official.keys()
    assert all(storage.equal(back[k], official[k]) for k in official)


def test_heads_are_left_out_where_the_layout_has_none():
    result = convert(random_official(), CONFIG, "transformers", "minbert")
    assert sorted(result.dropped_heads) == sorted(head_names(CONFIG)) and not result.heads
    with pytest.raises(CheckpointError, match="'minbert' layout has no pre-training heads"):
        convert(random_official(), CONFIG, "transformers", "minbert", heads=True)


def test_every_problem_is_reported_at_once():
    sd = random_official()
    del sd["encoder.layer.1.output.dense.bias"]
    sd["classifier.weight"] = storage.from_torch(torch.zeros(2, 32))
    sd["pooler.dense.weight"] = storage.from_torch(torch.zeros(31, 32))
    with pytest.raises(CheckpointError) as err:
        convert(sd, CONFIG, source="ckpt/model.safetensors")
    message = str(err.value)
    assert message.startswith("ckpt/model.safetensors:")
    assert "missing tensors (1): encoder.layer.1.output.dense.bias" in message
    assert "unexpected tensors, which no table maps (1): classifier.weight" in message
    assert "pooler.dense.weight is (31, 32), config.json implies (32, 32)" in message
    assert "What to do" in message


def test_heads_come_all_or_none():
    sd = random_official()
    del sd["cls.seq_relationship.bias"]
    with pytest.raises(CheckpointError, match=r"missing tensors \(1\): cls.seq_relationship.bias"):
        convert(sd, CONFIG)


def test_an_untied_decoder_is_refused():
    untied = storage.from_torch(torch.zeros(99, 32))
    sd = random_official() | {"cls.predictions.decoder.weight": untied}
    with pytest.raises(CheckpointError, match="differs from embeddings.word_embeddings.weight"):
        convert(sd, CONFIG)


def test_two_copies_of_a_tensor_must_agree():
    sd = random_official()
    sd["cls.predictions.decoder.bias"] = storage.from_torch(tensor(sd["cls.predictions.bias"]) + 1)
    with pytest.raises(
        CheckpointError, match="cls.predictions.decoder.bias differs from the other copy"
    ):
        convert(sd, CONFIG)


def test_minbert_position_ids_are_generated_and_checked():
    out = convert(random_official(), CONFIG, "transformers", "minbert").state_dict
    assert torch.equal(tensor(out["position_ids"]), torch.arange(64)[None])
    out["position_ids"] = storage.from_torch(tensor(out["position_ids"]).flip(-1))
    with pytest.raises(CheckpointError, match=r"position_ids should be arange\(64\)"):
        convert(out, CONFIG, "minbert", "bertconv")


def test_a_file_in_another_layout_is_named_in_its_own_names():
    out = convert(random_official(heads=False), CONFIG, "transformers", "minbert").state_dict
    del out["bert_layers.0.interm_dense.weight"]
    with pytest.raises(
        CheckpointError, match=r"missing tensors \(1\): bert_layers.0.interm_dense.weight"
    ):
        convert(out, CONFIG, "minbert", "bertconv")


def test_unknown_layout_names_the_known_ones():
    with pytest.raises(
        UsageError, match="no layout 'nanobert'; known layouts: bertconv, minbert, transformers"
    ):
        layout("nanobert", CONFIG)


def test_transpose_and_concat_transforms_invert_each_other():
    q, k, v = (f"encoder.layer.0.attention.self.{p}.weight" for p in ("query", "key", "value"))
    fused = Layout(
        "fused",
        "a layout storing the projections fused, and the pooler (in, out)",
        {
            "qkv": Row("qkv", (q, k, v), "concat"),
            "pooler_t": Row("pooler_t", ("pooler.dense.weight",), "transpose"),
        },
    )
    official = random_official()
    out = from_official(official, CONFIG, fused)
    assert torch.equal(tensor(out["qkv"]), torch.cat([tensor(official[n]) for n in (q, k, v)]))
    pooler = tensor(official["pooler.dense.weight"])
    assert torch.equal(tensor(out["pooler_t"]), pooler.T)
    # and as bytes, as a file holds them
    assert storage.read_bytes(out["pooler_t"]) == storage.from_torch(pooler.T).data
    back = {}
    for name, row in fused.rows.items():
        back.update(zip(row.official, _unpack(row, out[name], CONFIG), strict=True))
    assert all(storage.equal(back[n], official[n]) for n in back) and len(back) == 4


TABLE_PROBLEMS = {
    "an unknown official name": (
        '"x.weight" = "encoder.layer.{layer}.attention.self.qkv.weight"',
        "'encoder.layer.{layer}.attention.self.qkv.weight' is not an official tensor",
    ),
    "{layer} on one side": (
        '"x.weight" = "encoder.layer.{layer}.output.dense.weight"',
        "{layer} must appear on both sides",
    ),
    "a tensor claimed twice": (
        '"x.{layer}.weight" = "encoder.layer.{layer}.attention.self.query.weight"',
        "is claimed by",
    ),
    "an unknown transform": (
        '"x.{layer}.weight" = { rotate = "encoder.layer.{layer}.attention.self.query.weight" }',
        "unknown transform 'rotate'",
    ),
    "a concat of one": (
        '"x.{layer}.weight" = { concat = "encoder.layer.{layer}.attention.self.query.weight" }',
        'a row is "official name"',
    ),
}


@pytest.mark.parametrize("kind", TABLE_PROBLEMS)
def test_a_table_that_breaks_the_schema_names_the_file_and_the_row_line(kind, tmp_path):
    from bertconv.errors import TableError
    from bertconv.mapping import TABLES, read_table

    row, message = TABLE_PROBLEMS[kind]
    text = (TABLES / "minbert.toml").read_text()
    text = text.replace("[generated]", f"{row}\n\n[generated]")
    path = tmp_path / "mybert.toml"
    path.write_text(text)
    line = text.splitlines().index(row) + 1
    with pytest.raises(TableError) as err:
        read_table(path)
    assert str(err.value).startswith(f"{path}: not a valid mapping table")
    assert f"line {line}" in str(err.value) and message in str(err.value)


def test_a_table_missing_encoder_rows_or_half_the_heads_is_refused(tmp_path):
    from bertconv.errors import TableError
    from bertconv.mapping import TABLES, read_table

    text = (TABLES / "bertconv.toml").read_text()
    for dropped, message in [
        ('"pooler.dense.bias" = "pooler.dense.bias"\n', "no row for the encoder tensors"),
        ('"cls.seq_relationship.bias" = "cls.seq_relationship.bias"\n', "all or none"),
    ]:
        (tmp_path / "t.toml").write_text(text.replace(dropped, ""))
        with pytest.raises(TableError, match=message):
            read_table(tmp_path / "t.toml")


def test_every_shipped_table_follows_the_schema():
    from bertconv.mapping import TABLES, read_table

    for name in layout_names():
        assert read_table(TABLES / f"{name}.toml")["name"] == name
