"""config.json read as its model type says (catalog.read_config through the type's Architecture):
the type's own defaults, as transformers' config class of that type has them; its own field
names; two names for one size that disagree refused, naming both; a config that leaves no
positions refused at reading. Each case as transformers itself reads the same file: bertconv
computes what transformers computes, or refuses (exit 4) naming the fields, writing nothing."""

import json
from pathlib import Path

import pytest
import torch

import bertconv
from bertconv.catalog import read_config
from bertconv.errors import CheckpointError

SIZES = dict(vocab_size=100, hidden_size=16, num_hidden_layers=2, intermediate_size=40,
             max_position_embeddings=40, layer_norm_eps=1e-12)  # fmt: skip


def _written(root: Path, name: str, config: dict, drop=(), add=None) -> Path:
    """A tiny checkpoint transformers writes (every parameter moved off its initialisation),
    its config.json then edited: the fields `drop` taken out, `add` put in."""
    import transformers

    kind = transformers.CONFIG_MAPPING[config["model_type"]]
    model = getattr(transformers, name)(
        kind(**{k: v for k, v in config.items() if k != "model_type"})
    )
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    out = root / name
    model.save_pretrained(out)
    path = out / "config.json"
    written = json.loads(path.read_text())
    written = {k: v for k, v in written.items() if k not in drop} | (add or {})
    path.write_text(json.dumps(written))
    return out


def _transformers_reads(path: Path, name: str):
    import transformers

    return getattr(transformers, name).from_pretrained(path).eval()


def _same_as_transformers(path: Path, name: str, pad: int) -> None:
    """bertconv.load(path) computes what transformers computes from the same files, on a batch
    with padding (RoBERTa's positions follow the pad id)."""
    ours, theirs = bertconv.load(path), _transformers_reads(path, name)
    ids = torch.tensor([[5, 9, 14, 22, 7, 3], [5, 30, 12, pad, pad, pad]])
    mask = (ids != pad).long()
    with torch.no_grad():
        got = ours(ids, mask).last_hidden_state
        want = theirs(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert (got[real] - want[real]).abs().max() <= 1e-5


@pytest.mark.parametrize(
    "kind, name", [("roberta", "RobertaModel"), ("xlm-roberta", "XLMRobertaModel")]
)
def test_a_roberta_config_without_pad_token_id_counts_positions_from_2(kind, name, tmp_path, cli):
    """RobertaConfig's pad_token_id is 1 where config.json gives none: positions from 2."""
    config = {"model_type": kind, **SIZES, "num_attention_heads": 2, "pad_token_id": 1}
    path = _written(tmp_path, name, config, drop=("pad_token_id",))
    assert read_config(json.loads((path / "config.json").read_text())).pad_token_id == 1
    _same_as_transformers(path, name, pad=1)
    code, out, err = cli("verify", path, "--device", "cpu")
    assert code == 0 and "PASSED" in out, out + err


def test_an_electra_config_without_num_attention_heads_has_electras_4(tmp_path, cli):
    config = {"model_type": "electra", **SIZES, "embedding_size": 16, "num_attention_heads": 4}
    path = _written(tmp_path, "ElectraModel", config, drop=("num_attention_heads",))
    assert read_config(json.loads((path / "config.json").read_text())).num_attention_heads == 4
    _same_as_transformers(path, "ElectraModel", pad=0)
    code, out, err = cli("verify", path, "--device", "cpu")
    assert code == 0 and "PASSED" in out, out + err


def _refused(cli, path: Path, tmp_path: Path, *named: str) -> None:
    """convert, inspect and load refuse it at reading (exit 4), naming the fields; convert
    writes nothing."""
    out = tmp_path / "out"
    for args in (("convert", path, "--to", "bertconv", "--out", out), ("inspect", path)):
        code, _, err = cli(*args)
        assert code == 4 and all(n in err for n in named), err
    assert not out.exists()
    with pytest.raises(CheckpointError) as raised:
        bertconv.load(path)
    assert all(n in str(raised.value) for n in named)


def test_an_electra_config_without_embedding_size_is_refused_naming_it(tmp_path, cli):
    """ElectraConfig's embedding_size is 128 where config.json gives none: with a hidden size of
    16 its embeddings would be projected up, which the file's weights do not hold."""
    config = {"model_type": "electra", **SIZES, "embedding_size": 16, "num_attention_heads": 2}
    path = _written(tmp_path, "ElectraModel", config, drop=("embedding_size",))
    _refused(cli, path, tmp_path, "embedding_size=128", "hidden_size=16")


@pytest.mark.parametrize(
    "theirs, ours",
    [({"n_heads": 4}, {"num_attention_heads": 8}), ({"dim": 16}, {"hidden_size": 32})],
)
def test_distilbert_fields_of_two_names_that_disagree_are_refused_naming_both(
    theirs, ours, tmp_path, cli
):
    config = {"model_type": "distilbert", "vocab_size": 100, "dim": 16, "n_layers": 2, "n_heads": 4,
              "hidden_dim": 40, "max_position_embeddings": 40}  # fmt: skip
    path = _written(tmp_path, "DistilBertModel", config, add=theirs | ours)
    named = [f"{k}={v!r}" for k, v in (theirs | ours).items()]
    _refused(cli, path, tmp_path, *named)


def test_distilbert_reads_its_own_names_and_ignores_berts_where_transformers_does(tmp_path):
    """hidden_dim is DistilBERT's feed-forward size; an intermediate_size beside it is no field
    of DistilBertConfig, and transformers reads none: nor does bertconv."""
    config = {"model_type": "distilbert", "vocab_size": 100, "dim": 16, "n_layers": 2, "n_heads": 4,
              "hidden_dim": 40, "max_position_embeddings": 40}  # fmt: skip
    path = _written(tmp_path, "DistilBertModel", config, add={"intermediate_size": 99})
    read = read_config(json.loads((path / "config.json").read_text()))
    assert (read.intermediate_size, read.num_attention_heads, read.hidden_size) == (40, 4, 16)
    _same_as_transformers(path, "DistilBertModel", pad=0)


def test_a_roberta_whose_pad_id_leaves_no_positions_is_refused_at_reading(tmp_path, cli):
    """pad_token_id 70 and 66 positions: RoBERTa's first token would read position 71.
    transformers refuses to build it; bertconv refuses to read it, naming both fields."""
    config = {"model_type": "roberta", **SIZES, "num_attention_heads": 2, "pad_token_id": 1}
    path = _written(
        tmp_path, "RobertaModel", config, add={"pad_token_id": 70, "max_position_embeddings": 66}
    )
    _refused(cli, path, tmp_path, "pad_token_id=70", "max_position_embeddings=66")


def test_a_roberta_pad_id_of_null_is_refused():
    with pytest.raises(CheckpointError, match="pad_token_id=None"):
        read_config(
            {"model_type": "roberta", **SIZES, "num_attention_heads": 2, "pad_token_id": None}
        )


def test_a_config_names_its_type_once_and_bertconfig_never_rereads_it():
    """A dict of another type's fields given to BertConfig.from_dict, which reads BERT's, is
    refused rather than read as BERT's."""
    with pytest.raises(CheckpointError, match="read_config"):
        bertconv.BertConfig.from_dict({"model_type": "roberta", **SIZES})
