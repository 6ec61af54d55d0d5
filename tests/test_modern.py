"""ModernBERT and NomicBERT (issue 47): tiny checkpoints of every class transformers writes,
every parameter moved off its initialisation, through verify (every layer and head, sequences
longer than the local window, padded on either side), a round trip through every layout bit for
bit, load as BERT's classes are called, and config.json read as transformers' config classes
read it, what bertconv does not compute refused when read."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_modern_ports import moved

import bertconv
from bertconv.api import Source, convert_checkpoint
from bertconv.verify import FLOAT32_MAX_ABS, verify

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "NomicBertModel"):  # transformers 4: neither type
    pytest.skip(
        "transformers has no ModernBERT and NomicBERT classes here", allow_module_level=True
    )

# A window of 6 (3 either way) over 4 layers, every third global: verify's 64 positions cross
# the window many times. Every token id inside the 99 words.
MODERN = dict(vocab_size=99, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
              intermediate_size=24, max_position_embeddings=64, local_attention=6,
              global_attn_every_n_layers=3, pad_token_id=0, bos_token_id=2, eos_token_id=3,
              cls_token_id=2, sep_token_id=3)  # fmt: skip
NOMIC = dict(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
             intermediate_size=24, max_position_embeddings=64, type_vocab_size=2)  # fmt: skip
KINDS = ("Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification")
CLASSES = [f"ModernBert{k}" for k in (*KINDS, "ForQuestionAnswering", "ForMultipleChoice")]
CLASSES += [f"NomicBert{k}" for k in KINDS]


def written(model_class: str, root, **config):
    torch.manual_seed(0)
    modern = model_class.startswith("Modern")
    made = (transformers.ModernBertConfig if modern else transformers.NomicBertConfig)(
        **(MODERN if modern else NOMIC) | config
    )
    model = moved(getattr(transformers, model_class)(made))
    model.save_pretrained(root / model_class)
    return root / model_class


@pytest.fixture(scope="module")
def modern(tmp_path_factory):
    root = tmp_path_factory.mktemp("modern")
    return {name: written(name, root) for name in CLASSES}


@pytest.mark.parametrize("model_class", CLASSES)
def test_every_class_verifies_at_every_layer_and_head(model_class, modern):
    report = verify(str(modern[model_class]), device="cpu")
    assert report.passed and report.model_class == model_class, report.rows
    assert report.longest_sequence == 64  # ten windows and more
    assert max(r.max_abs for r in report.rows) <= FLOAT32_MAX_ABS
    layers = MODERN["num_hidden_layers"] if "Modern" in model_class else NOMIC["num_hidden_layers"]
    assert [r.name for r in report.rows][: layers + 1] == [
        "embeddings",
        *(f"layer {i}" for i in range(1, layers + 1)),
    ]
    assert any("logits" in r.name for r in report.rows) == (not model_class.endswith("Model"))


def test_mean_pooling_verifies_and_differs_from_the_first_token(tmp_path):
    path = written("ModernBertForSequenceClassification", tmp_path, classifier_pooling="mean")
    assert verify(str(path), device="cpu").passed
    ours = bertconv.load(path)
    ids = torch.randint(5, 99, (2, 20), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0
    mean = ours(ids, mask).logits
    ours.config.classifier_pooling = "cls"
    assert (ours(ids, mask).logits - mean).abs().max() > 1e-3


def test_bfloat16_within_twice_transformers_own_error(modern):
    report = verify(str(modern["ModernBertForMaskedLM"]), device="cpu", dtype="bfloat16")
    assert report.passed, report.rows


@pytest.mark.parametrize("model_class", CLASSES)
def test_a_round_trip_through_bertconvs_names_is_bit_for_bit(model_class, modern, tmp_path):
    source = modern[model_class]
    convert_checkpoint(Source("src", source), tmp_path / "ours", "bertconv")
    convert_checkpoint(Source("ours", tmp_path / "ours"), tmp_path / "back", "transformers")
    before, after = (
        load_file(source / "model.safetensors"),
        load_file(tmp_path / "back" / "model.safetensors"),
    )
    assert set(before) == set(after)  # no name added, none lost
    assert all(torch.equal(before[n], after[n]) for n in before)


@pytest.mark.parametrize("model_class", [c for c in CLASSES if c.startswith("Nomic")])
def test_either_nomic_naming_converts_into_the_other_bit_for_bit(model_class, modern, tmp_path):
    """The Hub's names (what transformers writes) and transformers' classes' own (what a port of
    its code holds, saved from its state dict: no metadata), each recognised by its names."""
    import transformers as hf

    source = modern[model_class]
    port = tmp_path / "port"
    port.mkdir()
    model = getattr(hf, model_class).from_pretrained(source)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if "decoder" not in k}
    save_file(state, port / "model.safetensors")
    shutil.copy(source / "config.json", port)
    assert bertconv.inspect(str(port)).layout == "transformers-classes"
    convert_checkpoint(Source("port", port), tmp_path / "hub", "transformers")
    hub, original = (
        load_file(tmp_path / "hub" / "model.safetensors"),
        load_file(source / "model.safetensors"),
    )
    assert set(hub) == set(original) and all(torch.equal(hub[n], original[n]) for n in hub)
    convert_checkpoint(Source("src", source), tmp_path / "classes", "transformers-classes")
    classes = load_file(tmp_path / "classes" / "model.safetensors")
    assert set(classes) == set(state) and all(torch.equal(classes[n], state[n]) for n in state)
    assert verify(str(port), device="cpu").passed


@pytest.mark.parametrize("model_class", ["ModernBertForMaskedLM", "NomicBertForMaskedLM"])
def test_load_computes_what_transformers_does_as_berts_classes_are_called(model_class, modern):
    """Positional input_ids, attention_mask (and token types), every hidden state by default,
    the head's output under transformers' name; 60 tokens padded on the right and the left."""
    path = modern[model_class]
    theirs = getattr(transformers, model_class).from_pretrained(path).eval()
    ours = bertconv.load(path)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 99, (3, 60), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :25], ids[1, :25] = 0, 0  # left-padded
    mask[2, 40:], ids[2, 40:] = 0, 0  # right-padded
    types = (torch.arange(60) >= 30).long().expand(3, -1) * (model_class[0] == "N")
    with torch.no_grad():
        expected = theirs(
            input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True
        )
        got = ours(ids, mask, types)
    real = mask.bool()
    assert len(got.hidden_states) == len(expected.hidden_states)
    for a, b in zip(expected.hidden_states, got.hidden_states, strict=True):
        assert (a[real] - b[real]).abs().max() <= FLOAT32_MAX_ABS
    assert (expected.logits[real] - got.logits[real]).abs().max() <= FLOAT32_MAX_ABS


def test_load_gives_the_class_computing_each_head(modern):
    from bertconv import catalog

    for model_class in CLASSES:
        ours = bertconv.load(modern[model_class])
        arch = catalog.of(ours.config.model_type)
        assert type(ours).__name__ == arch.implementation(model_class)


def _with_config(path, tmp_path, **changes):
    out = tmp_path / "changed"
    shutil.copytree(path, out)
    config = json.loads((out / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (out / "config.json").write_text(json.dumps(config))
    return out


REFUSED = {
    "a token id outside the vocabulary": ({"bos_token_id": 50281}, "bos_token_id=50281"),
    "a window of 0": ({"local_attention": 0}, "local_attention=0"),
    "a scaled rope": (
        {
            "rope_parameters": {
                "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 160000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            }
        },
        "'linear'",
    ),  # fmt: skip
    "layer types of no pattern": (
        {"layer_types": ["sliding_attention", "full_attention"] * 2},
        "layer_types=",
    ),
    "biases in the projections": ({"attention_bias": True}, "attention_bias=True"),
    "another pooling": ({"classifier_pooling": "max"}, "classifier_pooling='max'"),
    "an odd head size": ({"num_attention_heads": 32}, "the head size"),
}


@pytest.mark.parametrize("case", REFUSED)
@pytest.mark.parametrize("command", ["inspect", "convert", "verify"])
def test_what_bertconv_does_not_compute_is_refused_when_read(case, command, modern, tmp_path, cli):
    changes, named = REFUSED[case]
    source = _with_config(modern["ModernBertForMaskedLM"], tmp_path, **changes)
    out = tmp_path / "out"
    args = {"convert": ["--to", "bertconv", "--out", out], "verify": ["--device", "cpu"]}
    code, _, err = cli(command, source, *args.get(command, []))
    assert code == 4 and named in err and "Traceback" not in err, err
    assert not out.exists()


def test_the_older_fields_give_the_bases_transformers_reads(modern, tmp_path):
    """global_rope_theta and local_rope_theta (ModernBERT's first configs), rope_theta
    (NomicBERT's), where no rope_parameters are given."""
    from bertconv.catalog import read_config

    old = {"rope_parameters": None, "global_rope_theta": 80000.0, "local_rope_theta": 5000.0}
    source = _with_config(modern["ModernBertModel"], tmp_path, **old)
    d = json.loads((source / "config.json").read_text())
    theirs = transformers.ModernBertConfig.from_dict(dict(d)).rope_parameters
    ours = read_config(d)
    assert ours.rotary_theta == theirs["full_attention"]["rope_theta"] == 80000.0
    assert ours.local_rotary_theta == theirs["sliding_attention"]["rope_theta"] == 5000.0
    layers_gone = read_config({k: v for k, v in d.items() if k != "layer_types"})
    assert [layers_gone.is_local(i) for i in range(4)] == [False, True, True, False]
    nomic = json.loads((modern["NomicBertModel"] / "config.json").read_text())
    nomic.pop("rope_parameters")
    assert read_config(nomic | {"rope_theta": 500.0}).rotary_theta == 500.0
    assert read_config(nomic).rotary_theta == 1000.0  # NomicBertConfig's default


def test_a_berts_layout_refuses_them_saying_why(modern, tmp_path, cli):
    for model_class, named in (("ModernBertModel", "norms before each sublayer"),
                               ("NomicBertModel", "rotary positions")):  # fmt: skip
        out = tmp_path / model_class
        code, _, err = cli("convert", modern[model_class], "--to", "minbert", "--out", out)
        assert code == 4 and named in err and not out.exists(), err
    code, _, err = cli(
        "convert", modern["ModernBertModel"], "--to", "transformers-classes", "--out", out
    )
    assert code == 4 and "nomic_bert's alone" in err and not out.exists(), err


def test_layouts_lists_nomics_second_naming(cli):
    code, out, _ = cli("layouts")
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert code == 0 and "self_attn.q_proj" in lines["transformers-classes"]


def test_a_nomic_sentence_directory_with_its_prompts_end_to_end(tmp_path):
    """nomic-embed's pipeline: NomicBERT, mean pooling, Normalize, and its task prompts in
    config_sentence_transformers.json. encode(prompt_name=...) equals sentence-transformers',
    verify's sentence row passes, and a conversion into bertconv's names keeps the prompts."""
    import warnings

    import st_dirs

    bert = st_dirs.encoder(tmp_path / "bert")
    vocab = json.loads((bert / "config.json").read_text())["vocab_size"]
    nomic = written("NomicBertModel", tmp_path, vocab_size=vocab, hidden_size=16,
                    num_attention_heads=2, intermediate_size=20, max_position_embeddings=24,
                    num_hidden_layers=2)  # fmt: skip
    for f in bert.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "vocab")):
            shutil.copy(f, nomic)
    prompts = {"query": "search_query: ", "document": "search_document: "}
    directory = st_dirs.written(nomic, tmp_path / "st", "mean", prompts=prompts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sentence_transformers import SentenceTransformer

        theirs = SentenceTransformer(str(directory), device="cpu")
    texts = ["a man is eating food", "paris is the capital of france and its museums"]
    ours = bertconv.load(directory)
    for name in ("query", "document", None):
        expected = theirs.encode(texts, prompt_name=name, convert_to_tensor=True)
        assert (ours.encode(texts, prompt_name=name) - expected).abs().max() <= FLOAT32_MAX_ABS
    plain = theirs.encode(texts, convert_to_tensor=True)
    assert (ours.encode(texts, prompt_name="query") - plain).abs().max() > 1e-3  # it matters
    report = verify(str(directory), device="cpu")
    assert report.passed and report.rows[-1].name == "sentence embedding", report.rows
    convert_checkpoint(Source("st", directory), tmp_path / "ours", "bertconv")
    again = bertconv.load(tmp_path / "ours").encode(texts, prompt_name="query")
    expected = theirs.encode(texts, prompt_name="query", convert_to_tensor=True)
    assert (again - expected).abs().max() <= FLOAT32_MAX_ABS


@pytest.mark.parametrize("model_class", ["ModernBertForMaskedLM", "NomicBertModel"])
def test_fetch_brings_them_through_the_hub(model_class, modern, tmp_path):
    """Through the local Hub, as a user fetches ModernBERT-base or nomic-embed-text: written in
    bertconv's names, verified."""
    import os
    import subprocess
    import sys

    from localhub import LocalHub

    source = tmp_path / "repo"
    shutil.copytree(modern[model_class], source)
    with LocalHub() as hub:
        hub.add_repo("org/modern", source)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
        env |= {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1"}
        out = tmp_path / "out"
        done = subprocess.run(
            [sys.executable, "-c", "from bertconv.cli import main; main()", "fetch", "org/modern",
             "--out", str(out)], capture_output=True, text=True, env=env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert bertconv.inspect(str(out)).layout == "bertconv"
    assert verify(str(out), device="cpu").passed


def test_several_end_ids_are_read_each_within_the_vocabulary(modern):
    """ModernBertConfig takes eos_token_id as an id or a list of them."""
    from bertconv.catalog import read_config
    from bertconv.errors import CheckpointError

    d = json.loads((modern["ModernBertModel"] / "config.json").read_text())
    assert read_config(d | {"eos_token_id": [3, 2]}).model_type == "modernbert"
    with pytest.raises(CheckpointError, match=r"eos_token_id=\[3, 200\]"):
        read_config(d | {"eos_token_id": [3, 200]})
