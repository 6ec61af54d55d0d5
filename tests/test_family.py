"""BERT's family through the catalog keyed by model type: RoBERTa, XLM-RoBERTa and CamemBERT
(mappings/architectures/roberta.toml serves all three, their tables in mappings/roberta/),
ELECTRA and DistilBERT (config.json fields of its own, no token types).
Tiny checkpoints transformers writes for every class, every parameter moved off transformers'
initialisation (no zero bias, no identity LayerNorm, no zero padding row). Each verifies, is
converted into bertconv's layout and verifies there, comes back bit for bit under its own names,
and bertconv's model equals transformers' on left-padded batches too (RoBERTa counts positions
over the real tokens, from the pad id + 1)."""

import json

import pytest
import torch
from safetensors.torch import load_file

import bertconv

TASKS = ("Model", "ForMaskedLM", "ForSequenceClassification", "ForMultipleChoice",
         "ForTokenClassification", "ForQuestionAnswering")  # fmt: skip
ELECTRA = ("Model", "ForPreTraining", "ForMaskedLM", "ForSequenceClassification",
           "ForTokenClassification", "ForQuestionAnswering")  # fmt: skip
PREFIXES = {"roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert",
            "electra": "Electra", "distilbert": "DistilBert"}  # fmt: skip
CLASSES = (
    [("roberta", f"Roberta{task}") for task in TASKS]
    + [
        (kind, f"{PREFIXES[kind]}{task}")
        for kind in ("xlm-roberta", "camembert")
        for task in ("Model", "ForMaskedLM", "ForSequenceClassification")
    ]
    + [("electra", f"Electra{task}") for task in ELECTRA]
    + [("distilbert", f"DistilBert{task}") for task in TASKS if task != "ForMultipleChoice"]
)
SIZES = dict(vocab_size=61, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=40, max_position_embeddings=34, type_vocab_size=1,
             pad_token_id=1, layer_norm_eps=1e-5, num_labels=3)  # fmt: skip
# ELECTRA's as BERT's: two token types, the pad id 0, embeddings of the hidden size
OWN = {"electra": dict(type_vocab_size=2, pad_token_id=0, layer_norm_eps=1e-12, embedding_size=16)}
# DistilBERT's config.json names its fields otherwise, and has no token types
DISTILBERT = dict(vocab_size=61, dim=16, n_layers=2, n_heads=2, hidden_dim=40,
                  max_position_embeddings=34, pad_token_id=0, num_labels=3)  # fmt: skip


def _moved(model: torch.nn.Module, seed: int) -> None:
    """Every parameter off transformers' initialisation, the padding row and LayerNorms too."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> dict[str, object]:
    """{class name: its directory}, written by transformers."""
    import transformers

    root = tmp_path_factory.mktemp("family")
    out = {}
    for i, (kind, name) in enumerate(CLASSES):
        labels = 2 if name.endswith("QuestionAnswering") else SIZES["num_labels"]  # start, end
        sizes = DISTILBERT if kind == "distilbert" else SIZES | OWN.get(kind, {})
        sizes = sizes | {"num_labels": labels}
        config = getattr(transformers, f"{PREFIXES[kind]}Config")(**sizes)
        model = getattr(transformers, name)(config)
        _moved(model, i)
        model.save_pretrained(root / name)
        out[name] = root / name
    return out


@pytest.mark.parametrize("kind, name", CLASSES)
def test_each_class_verifies_converts_and_comes_back_bit_for_bit(kind, name, family, tmp_path, cli):
    source, ours, back = family[name], tmp_path / "bertconv", tmp_path / "back"
    code, out, err = cli("verify", source, "--device", "cpu")
    assert code == 0 and "PASSED" in out and f"({name})" in out, out + err
    assert cli("convert", source, "--to", "bertconv", "--out", ours)[0] == 0
    code, out, err = cli("verify", ours, "--device", "cpu")
    assert code == 0 and "PASSED" in out, out + err
    assert cli("convert", ours, "--to", "transformers", "--out", back)[0] == 0
    before, after = load_file(source / "model.safetensors"), load_file(back / "model.safetensors")
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    code, out, _ = cli("inspect", source, "--json")
    assert json.loads(out)["model_type"] == kind


@pytest.mark.parametrize("name", ["RobertaModel", "RobertaForMaskedLM", "XLMRobertaModel"])
def test_left_padded_batches_equal_transformers_at_real_positions(name, family, tmp_path, cli):
    """RoBERTa reads positions off input_ids != pad: left padding shifts them, in both models."""
    import transformers

    assert cli("convert", family[name], "--to", "bertconv", "--out", tmp_path / "ours")[0] == 0
    ours = bertconv.load(tmp_path / "ours")
    theirs = getattr(transformers, name).from_pretrained(family[name]).eval()
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, SIZES["vocab_size"], (3, 12), generator=g)
    mask = torch.ones_like(ids)
    for row, pad in ((1, 4), (2, 9)):  # left padding
        ids[row, :pad], mask[row, :pad] = SIZES["pad_token_id"], 0
    with torch.inference_mode():
        got = ours(ids, mask)
        want = theirs(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    real = mask.bool()
    for a, b in zip(got.hidden_states, want.hidden_states, strict=True):
        assert (a[real] - b[real]).abs().max() < 1e-5
    if hasattr(want, "logits"):
        assert (got.logits[real] - want.logits[real]).abs().max() < 1e-5


def test_a_bert_layout_takes_a_roberta_as_a_bert_holds_it(family, tmp_path, cli):
    """minbert's model is a BERT: RoBERTa's weights go in as family.py holds them (positions
    from 0, two token types), and verify as a BERT; minbert's pooler is one a masked LM lacks."""
    out = tmp_path / "minbert"
    assert cli("convert", family["RobertaModel"], "--to", "minbert", "--out", out)[0] == 0
    assert json.loads((out / "config.json").read_text())["max_position_embeddings"] == 32
    code, said, err = cli("verify", out, "--device", "cpu")
    assert code == 0 and "PASSED" in said, said + err
    code, _, err = cli("convert", family["RobertaForMaskedLM"], "--to", "minbert", "--out", out)
    assert code == 4 and "cannot do without the pooler" in err, err


def test_convert_into_your_table_fits_your_bert(family, tmp_path, cli):
    import sys
    from pathlib import Path

    zoo, table, out = Path(__file__).parent / "zoo", tmp_path / "table.toml", tmp_path / "out"
    config = family["XLMRobertaModel"] / "config.json"
    assert (
        cli("infer", f"{zoo}/family_bert.py:PooledBert", "--config", config, "--out", table)[0] == 0
    )
    assert cli("convert", family["XLMRobertaModel"], "--to", table, "--out", out)[0] == 0
    sys.path.insert(0, str(zoo))
    try:
        from family_bert import PooledBert
    finally:
        sys.path.remove(str(zoo))
    fields = json.loads((out / "config.json").read_text())
    model = PooledBert(type("Config", (), fields)())
    model.load_state_dict(load_file(out / "model.safetensors"), strict=True)


def test_fetch_carries_a_roberta_tokenizer_into_the_output(family, tmp_path):
    """vocab.json and merges.txt (RoBERTa's), sentencepiece.bpe.model (XLM-R's) come along."""
    import shutil

    from test_fetch import bertconv as run
    from test_fetch import hub_env

    from localhub import LocalHub

    repo = tmp_path / "repo"
    shutil.copytree(family["RobertaForMaskedLM"], repo)
    tokenizer = {"vocab.json": '{"<s>": 0}', "merges.txt": "#version: 0.2\n", "README.md": "x"}
    for name, text in tokenizer.items():
        (repo / name).write_text(text)
    with LocalHub() as hub:
        hub.add_repo("org/roberta", repo)
        out = tmp_path / "out"
        done = run("fetch", "org/roberta", "--out", str(out), env=hub_env(hub.url, tmp_path))
    assert done.returncode == 0, done.stderr
    names = {p.name for p in out.iterdir()}
    assert {"vocab.json", "merges.txt", "model.safetensors"} <= names and "README.md" not in names
    assert (out / "merges.txt").read_text() == "#version: 0.2\n"


def test_electra_with_its_embeddings_projected_is_refused_naming_the_projection(tmp_path, cli):
    import transformers

    sizes = SIZES | OWN["electra"] | {"embedding_size": 8}
    transformers.ElectraForMaskedLM(transformers.ElectraConfig(**sizes)).save_pretrained(tmp_path)
    code, _, err = cli("convert", tmp_path, "--to", "bertconv", "--out", tmp_path / "out")
    assert code == 4 and "embedding_size=8 differs from hidden_size=16" in err, err
    assert "embeddings_project" in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["RobertaModel", "XLMRobertaModel"])
def test_a_from_scratch_bert_on_a_roberta_fails_padded_on_the_left_alone_as_fixed_eps_fails(
    name, family, tmp_path, cli
):
    """Its factory is given the BERT equivalent of the config (positions from 0, two token
    types, RoBERTa's eps 1e-5), the same in infer and verify; the table converts the weights
    into it (positions past the pad id's, the one token type as both). It agrees with RoBERTa
    on right padding; on the left, RoBERTa counts positions from the first real token and the
    BERT over the padding: FAILED there, said (the sixth pass's rule)."""
    from pathlib import Path

    zoo, table = Path(__file__).parent / "zoo" / "family_bert.py", tmp_path / "table.toml"
    config = family[name] / "config.json"
    assert cli("infer", f"{zoo}:PooledBert", "--config", config, "--out", table)[0] == 0
    code, out, err = cli("verify", family[name], "--model", f"{zoo}:PooledBert", "--layout", table)
    assert code == 1 and "agrees on right padding" in out, out + err  # a BERT counts from 0
    assert "over the padding, where" in out and "counts them from its first real token" in out
    code, out, err = cli(
        "verify", family[name], "--model", f"{zoo}:FixedEpsBert", "--layout", table
    )
    assert code == 1 and "LayerNorm eps 1e-12 (the config's layer_norm_eps is 1e-05)" in out, out


@pytest.mark.parametrize("name", ["ElectraForPreTraining", "DistilBertForMaskedLM"])
def test_a_from_scratch_bert_passes_on_electra_and_distilbert(name, family, tmp_path, cli):
    """Heads with no place in BERT (the discriminator) are named and not compared."""
    from pathlib import Path

    zoo, table = Path(__file__).parent / "zoo" / "head_parts.py", tmp_path / "table.toml"
    config = family[name] / "config.json"
    assert cli("infer", f"{zoo}:Encoder", "--config", config, "--out", table)[0] == 0
    code, out, err = cli("verify", family[name], "--model", f"{zoo}:Encoder", "--layout", table)
    assert code == 0 and "PASSED" in out, out + err
    if name == "ElectraForPreTraining":
        assert "discriminator: electra's head has no place in BERT" in out


def test_verify_tokenizes_with_a_roberta_tokenizer_within_its_positions(tmp_path, cli):
    """A byte-level BPE tokenizer.json, texts longer than the model's positions: truncated to
    max_position_embeddings less RoBERTa's reserved rows, padded with its pad id."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    sizes = SIZES | {"vocab_size": 100, "max_position_embeddings": 12}
    model = transformers.RobertaForMaskedLM(transformers.RobertaConfig(**sizes))
    _moved(model, 7)
    model.save_pretrained(tmp_path)
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()[:50]
    special = ["<s>", "<pad>", "</s>", "<unk>"]
    trainer = trainers.BpeTrainer(vocab_size=80, special_tokens=special, initial_alphabet=alphabet)
    tokenizer.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 10, trainer)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    code, out, err = cli("verify", tmp_path, "--device", "cpu")
    assert code == 0 and "inputs: tokenized text, random ids" in out and "PASSED" in out, out + err


@pytest.mark.parametrize("name", ["ElectraModel", "DistilBertForMaskedLM"])
def test_a_bert_with_a_pooler_on_a_checkpoint_without_one_has_its_encoder_compared(
    name, family, tmp_path, cli
):
    """ELECTRA and DistilBERT have no pooler: a from-scratch BERT with one is not refused; its
    encoder is compared and its pooler said to be absent (it was exit 4: "the layout's model
    cannot do without the pooler")."""
    from pathlib import Path

    zoo, table = Path(__file__).parent / "zoo" / "family_bert.py", tmp_path / "table.toml"
    config = family[name] / "config.json"
    assert cli("infer", f"{zoo}:PooledBert", "--config", config, "--out", table)[0] == 0
    code, out, err = cli("verify", family[name], "--model", f"{zoo}:PooledBert", "--layout", table)
    assert code == 0 and "PASSED" in out, out + err
    assert "pooler: the checkpoint has none (not compared" in out
    assert not any(line.startswith("pooler ") for line in out.splitlines())


def test_the_left_padded_failure_names_positions_only_where_recomputed(family, tmp_path, cli):
    """A BERT whose mask assumes right padding differs on RoBERTa's left-padded batch, but not
    by counting positions over the padding: bertconv's model counting so does not compute what
    it computes, and no cause is said (PooledBert, which does, is told so above)."""
    from pathlib import Path

    zoo, table = Path(__file__).parent / "zoo" / "family_bert.py", tmp_path / "table.toml"
    config = family["RobertaModel"] / "config.json"
    model = f"{zoo}:RightPaddedMaskBert"
    assert cli("infer", model, "--config", config, "--out", table)[0] == 0
    code, out, err = cli("verify", family["RobertaModel"], "--model", model, "--layout", table)
    assert code == 1 and "agrees on right padding (no cause bertconv recomputed" in out, out + err
    assert "over the padding" not in out, out
