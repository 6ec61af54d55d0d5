"""MPNet (issue 35): tiny checkpoints of every class transformers writes, its shared relative
attention bias perturbed off its initial value, through verify, load (right and left padding,
sequences past the farthest bucket), a round trip, inspect; layouts without the bias refused; a
sentence-transformers MPNet directory end to end."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import bertconv
from bertconv.api import Source, convert_checkpoint
from bertconv.verify import FLOAT32_MAX_ABS, verify

ZOO = Path(__file__).parent / "zoo"
CLASSES = [
    "MPNetModel",
    "MPNetForMaskedLM",
    "MPNetForSequenceClassification",
    "MPNetForTokenClassification",
    "MPNetForQuestionAnswering",
    "MPNetForMultipleChoice",
]
# 300 positions: sequences of up to 298 tokens, past the farthest bucket (distances of 128)
SMALL = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=20,
             max_position_embeddings=300)  # fmt: skip


def _written(model_class: str, root, vocab_size: int = 60, **config):
    import transformers

    torch.manual_seed(0)
    made = transformers.MPNetConfig(vocab_size=vocab_size, **SMALL, **config)
    model = getattr(transformers, model_class)(made).eval()
    with torch.no_grad():  # its initial values are small: a bias that matters
        model.base_model.encoder.relative_attention_bias.weight.normal_()
    model.save_pretrained(root / model_class)
    return root / model_class


@pytest.fixture(scope="module")
def mpnet(tmp_path_factory):
    root = tmp_path_factory.mktemp("mpnet")
    return {name: _written(name, root) for name in CLASSES}


@pytest.mark.parametrize("model_class", CLASSES)
def test_every_class_verifies_at_every_layer_and_head(model_class, mpnet):
    report = verify(str(mpnet[model_class]), device="cpu")
    assert report.passed and report.model_class == model_class, report.rows
    assert report.longest_sequence == 298  # every position: distances past 128
    assert max(r.max_abs for r in report.rows) <= FLOAT32_MAX_ABS
    heads = [r.name for r in report.rows if "logits" in r.name]
    assert heads or model_class == "MPNetModel"
    assert ("pooler" in [r.name for r in report.rows]) == (
        model_class in ("MPNetModel", "MPNetForMultipleChoice")
    )


def test_load_computes_what_transformers_does_padded_either_side(mpnet):
    import transformers

    path = mpnet["MPNetForMaskedLM"]
    theirs = transformers.MPNetForMaskedLM.from_pretrained(path, attn_implementation="eager")
    ours = bertconv.load(path)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 60, (3, 290), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :100], ids[1, :100] = 0, 1  # left-padded
    mask[2, 200:], ids[2, 200:] = 0, 1  # right-padded
    with torch.no_grad():
        expected = theirs.eval()(ids, attention_mask=mask, output_hidden_states=True)
        got = ours(ids, attention_mask=mask)
    real = mask.bool()
    for a, b in zip(expected.hidden_states, got.hidden_states, strict=True):
        assert (a[real] - b[real]).abs().max() <= FLOAT32_MAX_ABS
    assert (expected.logits[real] - got.logits[real]).abs().max() <= FLOAT32_MAX_ABS


def test_the_buckets_are_transformers(mpnet):
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    from bertconv.model import relative_position_bucket

    distance = torch.arange(-400, 401)[None, :]
    assert torch.equal(
        relative_position_bucket(distance), MPNetEncoder.relative_position_bucket(distance)
    )


@pytest.mark.parametrize("model_class", CLASSES)
def test_a_round_trip_through_bertconvs_names_is_bit_for_bit(model_class, mpnet, tmp_path):
    source = mpnet[model_class]
    convert_checkpoint(Source(str(source), source), tmp_path / "ours", "bertconv")
    ours = load_file(tmp_path / "ours" / "model.safetensors")
    assert "encoder.relative_attention_bias.weight" in ours
    convert_checkpoint(Source("ours", tmp_path / "ours"), tmp_path / "back", "transformers")
    before, after = (
        load_file(source / "model.safetensors"),
        load_file(tmp_path / "back" / "model.safetensors"),
    )
    assert set(before) == set(after)  # no name added, none lost
    assert all(torch.equal(before[n], after[n]) for n in before)


def test_inspect_says_its_type(mpnet, cli):
    code, out, _ = cli("inspect", mpnet["MPNetForMaskedLM"])
    assert code == 0 and "mpnet" in out and "MPNetForMaskedLM" in out


def test_a_layout_without_the_bias_refuses_it_naming_it(mpnet, tmp_path, cli):
    out = tmp_path / "out"
    code, _, err = cli("convert", mpnet["MPNetModel"], "--to", "minbert", "--out", out)
    assert code == 4 and "encoder.relative_attention_bias.weight" in err and not out.exists()
    spec = f"{ZOO}/official_names.py:OfficialNamesBert"
    code, _, err = cli("verify", mpnet["MPNetModel"], "--model", spec, "--device", "cpu")
    assert code == 4 and "relative attention bias" in err  # refused, never PASSED


def test_a_sentence_transformers_mpnet_directory_end_to_end(tmp_path):
    """MPNet's tokenizer (<s>, <pad> = 1, </s>) wrapped with mean pooling and Normalize, as
    sentence-transformers writes it: encode equals its own, verify's row passes, and a
    conversion into bertconv's names encodes alike."""
    import warnings

    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    from st_dirs import WORDS

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.base.modules import Normalize, Transformer
        from sentence_transformers.sentence_transformer.modules import Pooling

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    vocab = {t: i for i, t in enumerate([*specials, *dict.fromkeys(WORDS), ",", "."])}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    words.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=words, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
        eos_token="</s>", cls_token="<s>", sep_token="</s>", mask_token="<mask>",
        model_max_length=200,
    )  # fmt: skip
    encoder = _written("MPNetModel", tmp_path, vocab_size=len(vocab))
    fast.save_pretrained(encoder)
    directory = tmp_path / "st"
    modules = [Transformer(str(encoder), max_seq_length=200), Pooling(16, "mean"), Normalize()]
    SentenceTransformer(modules=modules).save(str(directory))
    texts = ["a man is eating food.", "Paris IS the capital", "the quick brown fox " * 60]
    expected = SentenceTransformer(str(directory), device="cpu").encode(
        texts, convert_to_tensor=True
    )
    assert (bertconv.load(directory).encode(texts) - expected).abs().max() <= FLOAT32_MAX_ABS
    report = verify(str(directory), device="cpu")
    assert report.passed and report.rows[-1].name == "sentence embedding"
    convert_checkpoint(Source("st", directory), tmp_path / "ours", "bertconv")
    assert (bertconv.load(tmp_path / "ours").encode(texts) - expected).abs().max() <= 1e-5


def test_fetch_brings_an_mpnet_repository_with_its_tokenizer(mpnet, tmp_path):
    """Through the local Hub, as a user fetches all-mpnet-base-v2's encoder."""
    import os
    import subprocess
    import sys

    from localhub import LocalHub

    source = tmp_path / "repo"
    shutil.copytree(mpnet["MPNetForMaskedLM"], source)
    words = ["<s>", "<pad>", "</s>", "<unk>", "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]
    (source / "vocab.txt").write_text("\n".join(words) + "\n")  # MPNet's: BERT's and RoBERTa's
    with LocalHub() as hub:
        hub.add_repo("org/mpnet", source)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
        env |= {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1"}
        out = tmp_path / "out"
        done = subprocess.run(
            [sys.executable, "-c", "from bertconv.cli import main; main()", "fetch", "org/mpnet",
             "--out", str(out)], capture_output=True, text=True, env=env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (out / "vocab.txt").read_bytes() == (source / "vocab.txt").read_bytes()
    ours = load_file(out / "model.safetensors")
    assert "encoder.relative_attention_bias.weight" in ours
    assert verify(str(out), device="cpu").passed


@pytest.mark.parametrize("buckets", [1, 16, 31])
def test_fewer_than_32_buckets_are_refused_when_config_json_is_read(buckets, mpnet, tmp_path, cli):
    """transformers' MPNet (and bertconv's) looks up 32 buckets of distance whatever config.json
    says: a table of fewer rows has none for the farthest (transformers fails on it too, an
    IndexError at the first forward). Refused by name when read, exit 4."""
    src = tmp_path / "src"
    shutil.copytree(mpnet["MPNetModel"], src)
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(
        json.dumps(config | {"relative_attention_num_buckets": buckets})
    )
    code, _, err = cli("convert", src, "--out", tmp_path / "o")
    assert code == 4 and f"relative_attention_num_buckets={buckets}" in err, err
    assert "32 buckets" in err and not (tmp_path / "o").exists()
