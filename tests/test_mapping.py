"""The mapping tables: each checked against the models it describes (transformers' BERT classes,
bertconv's, minbert's), and the conversion that applies them checked as a pure function on
random tensors: groups, classes, what is left out and why."""

import pytest
import torch

import bertconv.heads
import seed_models
from bertconv import storage
from bertconv.catalog import of
from bertconv.config import BertConfig
from bertconv.convert import convert, official_parts, read_official, write_layout
from bertconv.errors import CheckpointError, TableError, UsageError
from bertconv.mapping import Layout, Row, class_for, layout
from bertconv.tables import TABLES, layout_names, read_table, refusal
from conftest import TINY

CONFIG = BertConfig(**TINY)
BERT = of("bert")
CLASSES = list(BERT.classes)


def random_official(groups=("pooler", "mlm", "nsp")) -> dict[str, storage.Tensor]:
    g = torch.Generator().manual_seed(0)
    official = BERT.shapes(CONFIG, list(groups))
    return {name: storage.from_torch(torch.randn(s, generator=g)) for name, s in official.items()}


def class_groups(name: str, pooler: bool | None = None) -> list[str]:
    """A class's groups, with its pooler (or, where asked, with one it does not need)."""
    wanted = list(BERT.groups_of(name))
    return wanted + ["pooler"] if pooler and "pooler" not in wanted else wanted


def tensor(t: storage.Tensor) -> torch.Tensor:
    return storage.to_torch(t)


def transformers_names(name: str, pooler: bool = True) -> dict[str, tuple]:
    """What transformers' class writes: its state dict but the tied copies."""
    import transformers

    config = transformers.BertConfig(**TINY)
    extra = {"add_pooling_layer": pooler} if name == "BertModel" else {}
    model = getattr(transformers, name)(config, **extra)
    tied = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    return {k: tuple(v.shape) for k, v in model.state_dict().items() if k not in tied}


def bertconv_names(name: str, pooler: bool) -> dict[str, tuple]:
    model = bertconv.heads.CLASSES[name](CONFIG, pooler=pooler)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def written(name: str, layout_name: str, groups: list[str]) -> dict[str, tuple]:
    out = write_layout(
        random_official(groups), CONFIG, layout(layout_name, CONFIG), frozenset(groups)
    )
    return {k: tuple(v.shape) for k, v in out.items()}


def test_the_shipped_layouts():
    assert layout_names() == [
        "bert-pytorch",
        "bertconv",
        "google-tf",
        "minbert",
        "transformers",
        "transformers-tf",
    ]
    assert layout("minbert", CONFIG).groups == {"pooler"}
    assert layout("bertconv", CONFIG).groups == set(BERT.group_names)


# transformers' classes as transformers builds them; BertModel with its pooler or without.
AS_TRANSFORMERS_BUILDS = [(n, "pooler" in BERT.groups_of(n)) for n in CLASSES] + [
    ("BertModel", True)
]


@pytest.mark.parametrize("name, pooler", AS_TRANSFORMERS_BUILDS)
def test_the_official_table_writes_what_each_transformers_class_writes(name, pooler):
    groups = class_groups(name, pooler)
    assert written(name, "transformers", groups) == transformers_names(name, pooler)


# Every class with its pooler, and without it where the class does not read the pooled output.
WITH_AND_WITHOUT_POOLER = [(n, True) for n in CLASSES] + [
    (n, False) for n in CLASSES if "pooler" not in BERT.groups_of(n)
]


@pytest.mark.parametrize("name, pooler", WITH_AND_WITHOUT_POOLER)
def test_the_bertconv_table_writes_each_bertconv_class_exactly(name, pooler):
    groups = class_groups(name, pooler)
    assert written(name, "bertconv", groups) == bertconv_names(name, pooler)


def test_the_minbert_table_writes_minberts_model_exactly():
    model = seed_models.MinbertModel(seed_models.MinbertConfig(**TINY))
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert written("BertModel", "minbert", ["pooler"]) == expected


def holds(layout_name: str, name: str) -> bool:
    table, groups = layout(layout_name, CONFIG), set(class_groups(name))
    return groups <= table.groups and table.requires <= groups and not refusal(layout_name)


# Each class in each layout that has a place for it (minbert: BertModel alone; bert-pytorch,
# recognised only, none).
PLACES = [(n, t) for t in layout_names() for n in CLASSES if holds(t, n)]


@pytest.mark.parametrize("name, layout_name", PLACES)
def test_every_class_round_trips_exactly_through_every_layout_that_holds_it(name, layout_name):
    table, groups = layout(layout_name, CONFIG), class_groups(name)
    official = random_official(groups)
    there = write_layout(official, CONFIG, table, frozenset(groups))
    back = read_official(there, CONFIG, table, "t")
    assert back.model_class == name and back.groups == set(groups)
    assert back.official.keys() == official.keys()
    assert all(storage.equal(back.official[k], official[k]) for k in official)


@pytest.mark.parametrize("name", CLASSES)
def test_each_class_is_identified_by_its_tensors(name):
    state_dict = write_layout(
        random_official(class_groups(name)),
        CONFIG,
        layout("transformers", CONFIG),
        frozenset(class_groups(name)),
    )
    result = convert(state_dict, CONFIG, "transformers", "transformers")
    assert result.model_class == name and not result.dropped


def test_a_classifier_without_a_hint_is_read_from_the_pooler_and_its_rows():
    """classifier.* after a pooler: a label per sequence; a single row where config.json has
    more labels: a score per choice; no pooler: a label per token."""
    one_row = BERT.shapes(CONFIG, ["choice"])
    sequence = random_official(["pooler", "classifier"])
    choice = random_official(["pooler"]) | {
        n: storage.from_torch(torch.zeros(s)) for n, s in one_row.items() if n.startswith("class")
    }
    token = random_official(["token_classifier"])
    for official, expected in [
        (sequence, "BertForSequenceClassification"),
        (choice, "BertForMultipleChoice"),
        (token, "BertForTokenClassification"),
    ]:
        assert convert(official, CONFIG, "transformers", "bertconv").model_class == expected


def test_architectures_breaks_ties_but_never_overrules_the_tensors():
    """An older BertForTokenClassification kept a pooler it never used: its tensors are a
    sequence classifier's too, and config.json's `architectures` says which."""
    official = random_official(["pooler", "classifier"])
    hint = ["BertForTokenClassification"]
    result = convert(official, CONFIG, "transformers", "bertconv", hint=hint)
    assert result.model_class == "BertForTokenClassification"
    assert result.groups == {"pooler", "token_classifier"}
    masked = random_official(["mlm"])  # the hint names a class whose tensors are not there
    result = convert(masked, CONFIG, "transformers", "bertconv", hint=["BertForPreTraining"])
    assert result.model_class == "BertForMaskedLM"


def test_groups_a_layout_has_no_place_for_are_left_out_and_said_to_be():
    result = convert(random_official(), CONFIG, "transformers", "minbert")
    assert result.model_class == "BertModel" and result.groups == {"pooler"}
    reason = "the 'minbert' layout has no place for it"
    assert result.dropped == {"mlm": reason, "nsp": reason}


def test_heads_narrow_the_groups_kept():
    everything = random_official()
    kept = lambda heads: convert(everything, CONFIG, heads=heads)  # noqa: E731
    assert kept(False).groups == {"pooler"} and kept(False).dropped == {
        "mlm": "as asked",
        "nsp": "as asked",
    }
    assert kept(["pooler", "mlm"]).model_class == "BertForMaskedLM"
    assert kept(True).model_class == "BertForPreTraining"
    with pytest.raises(CheckpointError, match="'minbert' layout has no place for mlm, nsp"):
        convert(everything, CONFIG, "transformers", "minbert", heads=True)
    with pytest.raises(CheckpointError, match=r"has no \['qa'\]"):
        kept(["qa"])
    with pytest.raises(UsageError, match=r"no group \['heads'\]"):
        kept(["heads"])
    with pytest.raises(CheckpointError, match="make no BERT class; keep the pooler too"):
        kept(["mlm", "nsp"])


def test_a_layout_whose_model_needs_the_pooler_refuses_a_file_without_one():
    with pytest.raises(CheckpointError, match="cannot do without the pooler"):
        convert(random_official(["mlm"]), CONFIG, "transformers", "minbert")


def test_every_problem_is_reported_at_once():
    sd = random_official()
    del sd["encoder.layer.1.output.dense.bias"]
    sd["lm_head.weight"] = storage.from_torch(torch.zeros(2, 32))
    sd["pooler.dense.weight"] = storage.from_torch(torch.zeros(31, 32))
    with pytest.raises(CheckpointError) as err:
        convert(sd, CONFIG, source="ckpt/model.safetensors")
    message = str(err.value)
    assert message.startswith("ckpt/model.safetensors:")
    assert "missing tensors (1): encoder.layer.1.output.dense.bias" in message
    assert "unexpected tensors, which no table maps (1): lm_head.weight" in message
    assert "pooler.dense.weight is (31, 32), config.json implies (32, 32)" in message
    assert "What to do" in message


def test_a_group_only_partly_there_names_what_it_misses():
    sd = random_official()
    del sd["cls.seq_relationship.bias"]
    with pytest.raises(CheckpointError, match=r"missing tensors \(1\): cls.seq_relationship.bias"):
        convert(sd, CONFIG)


def test_heads_that_make_no_class_together_are_named():
    sd = random_official(["pooler", "mlm", "qa"])
    with pytest.raises(CheckpointError, match="the heads mlm, pooler, qa together make no BERT"):
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
    out = convert(random_official(["pooler"]), CONFIG, "transformers", "minbert").state_dict
    del out["bert_layers.0.interm_dense.weight"]
    with pytest.raises(
        CheckpointError, match=r"missing tensors \(1\): bert_layers.0.interm_dense.weight"
    ):
        convert(out, CONFIG, "minbert", "bertconv")


def test_unknown_layout_names_the_known_ones():
    with pytest.raises(
        UsageError,
        match="no layout 'nanobert'; known layouts: bert-pytorch, bertconv, google-tf, minbert",
    ):
        layout("nanobert", CONFIG)


def test_class_for_groups():
    assert class_for({"pooler"}, BERT) == class_for(set(), BERT) == "BertModel"
    assert class_for({"pooler", "mlm"}, BERT) == "BertForMaskedLM"  # an older masked LM's pooler
    with pytest.raises(ValueError):
        class_for({"classifier"}, BERT)  # a label per sequence reads the pooler


def test_transpose_and_concat_transforms_invert_each_other():
    q, k, v = (f"encoder.layer.0.attention.self.{p}.weight" for p in ("query", "key", "value"))
    shape = BERT.shapes(CONFIG, ["pooler"])
    rows = {
        "qkv": Row("qkv", (q, k, v), "concat", "encoder", tuple(shape[n] for n in (q, k, v))),
        "pooler_t": Row(
            "pooler_t",
            ("pooler.dense.weight",),
            "transpose",
            "pooler",
            (shape["pooler.dense.weight"],),
        ),
    }
    empty = frozenset()
    fused = Layout(
        "fused",
        "fused projections, pooler (in, out)",
        rows,
        {},
        {},
        {},
        empty,
        "",
        empty,
        empty,
        BERT,
    )
    official = random_official()
    out = write_layout(official, CONFIG, fused, frozenset({"pooler"}))
    assert torch.equal(tensor(out["qkv"]), torch.cat([tensor(official[n]) for n in (q, k, v)]))
    pooler = tensor(official["pooler.dense.weight"])
    assert torch.equal(tensor(out["pooler_t"]), pooler.T)
    # and as bytes, as a file holds them
    assert storage.read_bytes(out["pooler_t"]) == storage.from_torch(pooler.T).data
    back = {}
    for name, row in fused.rows.items():
        back.update(zip(row.official, official_parts(row, out[name]), strict=True))
    assert all(storage.equal(back[n], official[n]) for n in back) and len(back) == 4


# The schema, held when a table is read --------------------------------------------------------

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
        "concat takes a list of official names",
    ),
    "a transposed bias": (
        '"x.{layer}.bias" = { transpose = "encoder.layer.{layer}.attention.self.query.bias" }',
        "transpose applies to tensors of rank (2,)",
    ),
    "a weight fused with a bias": (
        '"x.{layer}" = { concat = ["encoder.layer.{layer}.attention.self.query.weight", '
        '"encoder.layer.{layer}.attention.self.query.bias"] }',
        "the tensors do not stack",
    ),
    "a head's tensor in the encoder": (
        '"x.weight" = "pooler.dense.weight"',
        "'pooler.dense.weight' is not an official tensor of this section",
    ),
}


@pytest.mark.parametrize("kind", TABLE_PROBLEMS)
def test_a_table_that_breaks_the_schema_names_the_file_and_the_row_line(kind, tmp_path):
    row, message = TABLE_PROBLEMS[kind]
    text = (TABLES / "minbert.toml").read_text()
    text = text.replace("[groups.pooler]", f"{row}\n\n[groups.pooler]")
    path = tmp_path / "mybert.toml"
    path.write_text(text)
    line = text.splitlines().index(row) + 1
    with pytest.raises(TableError) as err:
        read_table(path)
    assert str(err.value).startswith(f"{path}: not a valid mapping table")
    assert f"line {line}" in str(err.value) and message in str(err.value)


@pytest.mark.parametrize(
    "dropped, message",
    [
        ('"encoder.layer.{layer}.output.dense.bias" = ', "no row for encoder.layer.{layer}.output"),
        ('"pooler.dense.bias" = ', "no row for pooler.dense.bias (a group comes whole)"),
        ('"cls.seq_relationship.bias" = ', "no row for cls.seq_relationship.bias"),
        ('"qa_outputs.bias" = ', "no row for qa_outputs.bias"),
    ],
)
def test_a_table_that_leaves_an_official_tensor_without_a_row_is_refused(
    dropped, message, tmp_path
):
    """No official tensor is dropped silently: a group is mapped whole, or not at all."""
    lines = (TABLES / "bertconv.toml").read_text().splitlines()
    kept = [line for line in lines if not line.startswith(dropped)]
    (tmp_path / "t.toml").write_text("\n".join(kept) + "\n")
    with pytest.raises(TableError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_table(tmp_path / "t.toml")


def test_every_shipped_table_follows_the_schema():
    for name in layout_names():
        assert read_table(TABLES / f"{name}.toml")["name"] == name
