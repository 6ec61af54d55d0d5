"""sentence-transformers' wrapper read as SentenceTransformer reads it (bertconv/sentence.py):
directories sentence-transformers writes itself, old files (legacy pooling flags, the
`sentence_transformers.models.*` types) and new, and the real all-MiniLM-L6-v2."""

import json
import warnings

import pytest
import torch

from bertconv.errors import CheckpointError
from bertconv.sentence import Dense, Normalize, Pooling, read_pipeline
from st_dirs import written

MODES = ["cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"]


@pytest.mark.parametrize("modes", [*MODES, ("max", "cls", "mean")])
def test_every_pooling_mode_sentence_transformers_writes_is_read_in_its_order(
    modes, encoder, tmp_path
):
    found = read_pipeline(written(encoder, tmp_path / "st", modes), 24)
    assert found.steps == (Pooling((modes,) if isinstance(modes, str) else modes), Normalize())
    assert found.refused is None and found.max_seq_length == 20  # the tokenizer's, saved


def test_legacy_flags_concatenate_in_sentence_transformers_order(encoder, tmp_path):
    """Old files set a flag per mode: concatenated cls, max, mean, ..., whatever the file's
    order; none set is mean. The old types (`sentence_transformers.models.Pooling`) too."""
    out = written(encoder, tmp_path / "st", "mean")
    modules = json.loads((out / "modules.json").read_text())
    for m in modules:
        m["type"] = "sentence_transformers.models." + m["type"].rpartition(".")[2]
    (out / "modules.json").write_text(json.dumps(modules))
    flags = {"word_embedding_dimension": 16, "pooling_mode_mean_tokens": True,
             "pooling_mode_max_tokens": False, "pooling_mode_cls_token": True}  # fmt: skip
    (out / "1_Pooling" / "config.json").write_text(json.dumps(flags))
    assert read_pipeline(out, 24).steps[0] == Pooling(("cls", "mean"))
    (out / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 16}))
    assert read_pipeline(out, 24).steps[0] == Pooling(("mean",))


@pytest.mark.parametrize(
    "activation, name", [(torch.nn.Tanh(), "tanh"), (torch.nn.Identity(), None)]
)
def test_dense_is_read_with_its_activation_and_folder(activation, name, encoder, tmp_path):
    found = read_pipeline(written(encoder, tmp_path / "st", ("cls", "mean"), activation), 24)
    dense = found.steps[1]
    assert isinstance(dense, Dense) and (dense.in_features, dense.out_features) == (32, 8)
    assert dense.activation == name and dense.bias and (dense.folder / "config.json").is_file()


def test_prompts_resolve_as_encode_does(encoder, tmp_path):
    """An explicit prompt, then prompt_name's, then the default's; an empty prompt is none;
    include_prompt is read from the pooling."""
    out = written(encoder, tmp_path / "st", "mean", include=False,
                   prompts={"query": "q: ", "doc": ""}, default_prompt_name="query")  # fmt: skip
    found = read_pipeline(out, 24)
    assert found.steps[0].include_prompt is False
    assert found.prompt() == "q: " and found.prompt(prompt_name="doc") == ""
    assert found.prompt(prompt="x: ", prompt_name="doc") == "x: "
    with pytest.raises(CheckpointError, match="no prompt named 'other'"):
        found.prompt(prompt_name="other")


def test_truncation_is_the_settings_then_the_tokenizers_capped_at_the_positions(encoder, tmp_path):
    out = written(encoder, tmp_path / "st", "mean")
    assert read_pipeline(out, 12).max_seq_length == 12  # the tokenizer's 20, capped
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 8}))
    assert read_pipeline(out, 24).max_seq_length == 8


def test_the_real_minilm_pipeline(minilm):
    """mean pooling, Normalize (its folder never written), truncated at 256 of 512 positions."""
    found = read_pipeline(minilm, 512)
    assert found.steps == (Pooling(("mean",)), Normalize())
    assert found.max_seq_length == 256 and found.prompts == {} and found.refused is None


def test_a_module_bertconv_does_not_know_is_named_and_never_run(encoder, tmp_path):
    out = written(encoder, tmp_path / "st", "mean")
    modules = json.loads((out / "modules.json").read_text())
    modules.insert(2, {"idx": 9, "name": "x", "path": "x", "type": "my_package.Whitening"})
    (out / "modules.json").write_text(json.dumps(modules))
    found = read_pipeline(out, 24)
    assert "'my_package.Whitening'" in found.refused and "module 2" in found.refused


@pytest.mark.parametrize("path", ["../elsewhere", "/etc"])
def test_a_module_outside_the_directory_is_refused(path, encoder, tmp_path):
    out = written(encoder, tmp_path / "st", "mean")
    modules = json.loads((out / "modules.json").read_text())
    modules[1]["path"] = path
    (out / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(CheckpointError, match="is not a folder inside"):
        read_pipeline(out, 24)


def test_a_directory_without_modules_json_has_no_pipeline(encoder):
    assert read_pipeline(encoder, 24) is None


@pytest.mark.parametrize("modes", [*MODES, ("lasttoken", "weightedmean", "cls", "max")])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("prompt", [0, 2])
def test_pooling_computes_what_sentence_transformers_pooling_does(modes, side, prompt):
    """Each mode, padded either side, the prompt's tokens left out where include_prompt is
    False: sentence-transformers' Pooling module on the same token states."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sentence_transformers.sentence_transformer.modules import Pooling as STPooling
    from bertconv.sentence import pooled

    g = torch.Generator().manual_seed(3)
    tokens = torch.randn(3, 7, 16, generator=g)
    lengths = torch.tensor([7, 4, 5])
    mask = (torch.arange(7) < lengths[:, None]).long()
    mask = mask.flip(1) if side == "left" else mask
    theirs = STPooling(16, modes, include_prompt=not prompt)
    features = {"token_embeddings": tokens, "attention_mask": mask}
    expected = theirs(features | ({"prompt_length": prompt} if prompt else {}))
    got = pooled(tokens, mask, Pooling((modes,) if isinstance(modes, str) else modes, not prompt),
                 prompt)  # fmt: skip
    assert (got - expected["sentence_embedding"]).abs().max() <= 1e-6


@pytest.mark.parametrize("dense", [None, torch.nn.Tanh(), torch.nn.Identity()])
def test_the_pipeline_after_the_encoder_computes_what_sentence_transformers_does(
    dense, encoder, tmp_path
):
    """Pooling, Dense (its weights read from its folder), Normalize: bertconv's embed on the
    encoder's token states against sentence-transformers' modules after it."""
    from sentence_transformers import SentenceTransformer

    from bertconv.sentence import embed

    out = written(encoder, tmp_path / "st", ("cls", "mean"), dense)
    model = SentenceTransformer(str(out), device="cpu").eval()
    features = model.tokenize(["a b a", "b", "a a a a a a a a a a a a a a a a a a a a a a"])
    with torch.no_grad():
        features = model[0](features)
        tokens, mask = features["token_embeddings"], features["attention_mask"]
        for module in list(model)[1:]:
            features = module(features)
    got = embed(read_pipeline(out, 24), tokens, mask)
    assert got.shape == features["sentence_embedding"].shape
    assert (got - features["sentence_embedding"]).abs().max() <= 1e-6


TEXTS = [
    "A man is playing a guitar.",
    "Deux hommes poussent des chariots dans les bois.",
    "the quick brown fox " * 90,  # past MiniLM's 256 tokens: truncated there, not at 512
]


@pytest.mark.parametrize("prompt", ["", "query: "])
def test_minilm_sentence_embeddings_through_bertconv_equal_encode(prompt, minilm):
    """Tokenized as encode tokenizes (truncated at 256 of 512 positions, the prompt before
    each text), run by bertconv's model of the real all-MiniLM-L6-v2, pooled and normalized:
    SentenceTransformer(DIR).encode within the float32 tolerance."""
    from sentence_transformers import SentenceTransformer

    import bertconv
    from bertconv.batches import tokenizer
    from bertconv.sentence import embed, tokenized

    pipeline = read_pipeline(minilm, 512)
    batch, prompt_length = tokenized(pipeline, tokenizer(minilm), TEXTS, prompt)
    assert batch["input_ids"].shape[1] == 256
    model = bertconv.load(minilm)
    with torch.no_grad():
        states = model(**batch).last_hidden_state
    got = embed(pipeline, states, batch["attention_mask"], prompt_length)
    theirs = SentenceTransformer(str(minilm), device="cpu")
    expected = theirs.encode(TEXTS, convert_to_tensor=True, prompt=prompt or None)
    assert (got - expected).abs().max() <= 1e-5


def test_prompts_left_out_of_the_pooling_and_lower_casing_as_encode_does(encoder, tmp_path):
    """A prompt excluded from the pooling (include_prompt false), its length counted as
    sentence-transformers counts it; do_lower_case set: 'A B' read as 'a b'. bertconv's model of the
    directory's encoder, then embed, against encode with the prompt's name."""
    from sentence_transformers import SentenceTransformer

    import bertconv
    from bertconv.batches import tokenizer
    from bertconv.sentence import embed, tokenized

    out = written(encoder, tmp_path / "st", ("weightedmean", "cls"), include=False,
                   prompts={"query": "b a "}, default_prompt_name="query")  # fmt: skip
    settings = json.loads((out / "sentence_bert_config.json").read_text())
    (out / "sentence_bert_config.json").write_text(json.dumps(settings | {"do_lower_case": True}))
    texts = ["A B a", "b", "a B " * 12]
    pipeline = read_pipeline(out, 24)
    batch, prompt_length = tokenized(pipeline, tokenizer(out), texts, pipeline.prompt())
    theirs = SentenceTransformer(str(out), device="cpu")
    assert prompt_length == theirs[0]._get_prompt_length("b a ") == 2
    with torch.no_grad():
        states = bertconv.load(out)(**batch).last_hidden_state
    got = embed(pipeline, states, batch["attention_mask"], prompt_length)
    expected = theirs.encode(texts, convert_to_tensor=True)
    assert (got - expected).abs().max() <= 1e-5


def test_load_gives_the_model_encode_as_sentence_transformers_encodes(minilm):
    """bertconv.load(DIR) on a sentence-transformers directory: the same model as ever, with
    encode(sentences) -> (N, D) equal to SentenceTransformer(DIR).encode, batch by batch."""
    from sentence_transformers import SentenceTransformer

    import bertconv

    model = bertconv.load(minilm)
    expected = SentenceTransformer(str(minilm), device="cpu").encode(TEXTS, convert_to_tensor=True)
    for batch_size in (32, 2):
        got = model.encode(TEXTS, batch_size=batch_size)
        assert got.shape == (3, 384) and (got - expected).abs().max() <= 1e-5
    assert model(torch.tensor([[101, 102]])).last_hidden_state.shape == (1, 2, 384)  # as ever


def test_encode_resolves_prompts_by_name(encoder, tmp_path):
    from sentence_transformers import SentenceTransformer

    import bertconv

    out = written(encoder, tmp_path / "st", "mean", include=False,
                   prompts={"query": "b a ", "doc": "a "}, default_prompt_name="query")  # fmt: skip
    theirs, model = SentenceTransformer(str(out), device="cpu"), bertconv.load(out)
    for kwargs in ({}, {"prompt_name": "doc"}, {"prompt": "a b "}):
        expected = theirs.encode(["a b", "b b b"], convert_to_tensor=True, **kwargs)
        assert (model.encode(["a b", "b b b"], **kwargs) - expected).abs().max() <= 1e-5


def test_encode_on_a_model_of_no_sentence_transformers_directory_says_so(encoder):
    import bertconv

    with pytest.raises(ValueError, match="load\\(\\) it from a sentence-transformers directory"):
        bertconv.load(encoder).encode(["a"])


def test_encode_refuses_a_pipeline_with_a_module_bertconv_does_not_run(encoder, tmp_path):
    """The model loads and computes as ever; its sentence embedding is refused, naming it."""
    import bertconv

    out = written(encoder, tmp_path / "st", "mean")
    modules = json.loads((out / "modules.json").read_text())
    modules.append({"idx": 9, "name": "x", "path": "x", "type": "my_package.Whitening"})
    (out / "modules.json").write_text(json.dumps(modules))
    model = bertconv.load(out)
    assert model(torch.tensor([[5, 6]])).last_hidden_state.shape == (1, 2, 16)
    with pytest.raises(CheckpointError, match="modules bertconv does not run: 'my_package"):
        model.encode(["a b"])


# The sixth pass: directories read as sentence-transformers reads them ----------------------------

LONG = ["paris is the capital of france and its museums are open on sundays " * 3, "ok"]


def _st(out):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(str(out), device="cpu")


def test_a_tokenizer_truncating_on_the_left_is_truncated_so(encoder, tmp_path):
    import bertconv

    out = written(encoder, tmp_path / "st", "mean")
    config = json.loads((out / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps(config | {"truncation_side": "left"}))
    expected = _st(out).encode(LONG, convert_to_tensor=True)
    assert read_pipeline(out, 24).truncation_side == "left"
    assert (bertconv.load(out).encode(LONG) - expected).abs().max() <= 1e-5


def _module_config(out, folder: str, **fields):
    path = out / folder / "config.json"
    path.parent.mkdir(exist_ok=True)
    config = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps(config | fields))


def test_a_side_output_dense_and_a_normalize_of_the_tokens_compute_as_sentence_transformers(
    encoder, tmp_path
):
    """module_input_name / module_output_name (sentence-transformers 5 and 6 write them): a Dense
    writing another feature leaves the sentence vector as it is; a Normalize of the tokens
    before Pooling normalises each token."""
    import bertconv

    out = written(encoder, tmp_path / "st", "mean", dense=torch.nn.Tanh())
    _module_config(out, "2_Dense", module_output_name="projected")
    expected = _st(out).encode(LONG, convert_to_tensor=True)
    assert expected.shape == (2, 16)
    assert (bertconv.load(out).encode(LONG) - expected).abs().max() <= 1e-5
    out = written(encoder, tmp_path / "norm", "mean", normalize=False)
    modules = json.loads((out / "modules.json").read_text())
    normalize = {"path": "0_Normalize", "type": "sentence_transformers.base.modules.Normalize"}
    modules.insert(1, normalize)
    modules = [m | {"idx": i, "name": str(i)} for i, m in enumerate(modules)]
    (out / "modules.json").write_text(json.dumps(modules))
    _module_config(out, "0_Normalize", module_input_name="token_embeddings")
    expected = _st(out).encode(LONG, convert_to_tensor=True)
    assert (bertconv.load(out).encode(LONG) - expected).abs().max() <= 1e-5


def test_a_dense_reading_what_nothing_writes_refuses_the_sentence_embedding(encoder, tmp_path):
    out = written(encoder, tmp_path / "st", "mean", dense=torch.nn.Tanh())
    _module_config(out, "2_Dense", module_input_name="nowhere")
    assert (
        "a Dense reading 'nowhere', which no module before it writes"
        in read_pipeline(out, 24).refused
    )


def test_an_encoder_in_a_folder_of_its_own_is_refused_for_the_sentence_embedding(
    encoder, tmp_path, cli
):
    """modules.json's Transformer at `0_Transformer` beside another checkpoint at the top:
    sentence-transformers encodes with the folder's, so bertconv's sentence vector of the top
    one is refused by name; convert carries the folder, so that the output still loads."""
    import shutil

    out = written(encoder, tmp_path / "st", "mean")
    shutil.copytree(encoder, out / "0_Transformer")
    modules = json.loads((out / "modules.json").read_text())
    modules[0]["path"] = "0_Transformer"
    (out / "modules.json").write_text(json.dumps(modules))
    assert "its encoder is the folder '0_Transformer'" in read_pipeline(out, 24).refused
    assert cli("convert", out, "--to", "minbert", "--out", tmp_path / "o")[0] == 0
    assert (tmp_path / "o" / "0_Transformer" / "model.safetensors").is_file()


@pytest.mark.parametrize("name", [["query"], 3, "nowhere"])
def test_a_default_prompt_name_not_among_the_prompts_is_refused_by_name(name, encoder, tmp_path):
    out = written(encoder, tmp_path / "st", "mean", prompts={"query": "query: "})
    path = out / "config_sentence_transformers.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"default_prompt_name": name}))
    with pytest.raises(CheckpointError, match="default_prompt_name .* is not the name of one"):
        read_pipeline(out, 24)


@pytest.mark.parametrize("length", ["8", 0, -5, 8.7, True])
def test_a_max_seq_length_that_is_no_count_of_tokens_is_refused_by_name(length, encoder, tmp_path):
    out = written(encoder, tmp_path / "st", "mean")
    path = out / "sentence_bert_config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"max_seq_length": length}))
    with pytest.raises(CheckpointError, match="max_seq_length .* is not a number of tokens"):
        read_pipeline(out, 24)


@pytest.mark.parametrize("made", ["missing", "a file"])
def test_a_module_folder_that_is_not_a_folder_is_refused_and_nothing_written(
    made, encoder, tmp_path, cli
):
    import shutil

    out = written(encoder, tmp_path / "st", "mean")
    shutil.rmtree(out / "1_Pooling")
    if made == "a file":
        (out / "1_Pooling").write_text("pooling")
    code, _, err = cli("convert", out, "--out", tmp_path / "o")
    assert code == 4 and "1_Pooling: is not" in err and not (tmp_path / "o").exists(), err


def test_a_sentence_directory_without_a_tokenizer_says_which_files_it_needs(encoder, tmp_path):
    import bertconv
    from bertconv.errors import BertconvError

    out = written(encoder, tmp_path / "st", "mean")
    for name in ("tokenizer.json", "vocab.txt"):
        (out / name).unlink(missing_ok=True)
    with pytest.raises(BertconvError, match="no tokenizer \\(tokenizer.json or vocab.txt\\)"):
        bertconv.load(out).encode(["a man"])


def test_encode_of_no_sentence_is_none_of_the_directorys_width(encoder, tmp_path):
    import bertconv

    out = written(encoder, tmp_path / "st", "mean", dense=torch.nn.Tanh())
    assert bertconv.load(out).encode([]).shape == (0, 8)
