"""Sentence embeddings end to end (issue 34): verify's `sentence embedding` row on directories
sentence-transformers writes itself, each pooling mode and wrapper form; convert and fetch
carrying the wrapper byte for byte, into every layout; a from-scratch encoder judged on its
sentence embedding, each faulty step named."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import bertconv
from bertconv.api import Source, convert_checkpoint
from bertconv.sentence import carried
from bertconv.verify import verify
from st_dirs import written

ZOO = Path(__file__).parent / "zoo" / "sentence_encoders.py"
TEXTS = ["a man is eating food.", "Paris IS the capital", "ok", "the quick brown fox " * 9]

# (pooling modes, Dense's activation, Normalize, SentenceTransformer's other arguments)
FORMS = {
    **{mode: (mode, None, True, {}) for mode in ("cls", "max", "mean", "lasttoken")},
    "mean_sqrt_len_tokens": ("mean_sqrt_len_tokens", None, False, {}),
    "weightedmean": ("weightedmean", None, True, {}),
    "concatenated": (("max", "cls", "mean"), None, True, {}),
    "dense tanh": ("mean", torch.nn.Tanh(), True, {}),
    "dense identity, unnormalized": (("cls", "mean"), torch.nn.Identity(), False, {}),
    "prompt left out": (
        "mean",
        None,
        True,
        {"include": False, "prompts": {"q": "b a "}, "default_prompt_name": "q"},
    ),  # fmt: skip
}


def _form(encoder: Path, out: Path, name: str) -> Path:
    modes, dense, normalize, kwargs = FORMS[name]
    return written(encoder, out, modes, dense, normalize, **dict(kwargs))


def _row(report):
    return next(r for r in report.rows if r.name == "sentence embedding")


@pytest.mark.parametrize("name", list(FORMS))
def test_verify_compares_the_whole_pipeline_with_sentence_transformers(name, encoder, tmp_path):
    report = verify(str(_form(encoder, tmp_path / "st", name)), device="cpu")
    row = _row(report)
    assert report.passed and row.passed and row.max_abs <= 1e-5, report.rows
    assert report.rows[-1] is row and not report.notes  # a passing row adds nothing else
    assert report.sentence_truncation == 20  # tokenizer_config.json's model_max_length
    assert max(report.sentence_tokens) > 24  # a text past the truncation and the positions


def test_the_row_in_json_and_its_new_fields_use_no_max(encoder, tmp_path, cli):
    out = _form(encoder, tmp_path / "st", "dense tanh")
    code, printed, _ = cli("verify", out, "--device", "cpu", "--json")
    found = json.loads(printed)
    assert code == 0 and found["rows"][-1]["name"] == "sentence embedding"
    assert found["sentence_truncation"] == 20 and len(found["sentence_tokens"]) == 5
    assert not [k for k in ("sentence_tokens", "sentence_truncation") if "max" in k]
    code, printed, _ = cli("verify", out, "--device", "cpu")
    assert code == 0 and "sentence embedding" in printed


def test_lower_casing_and_bfloat16(encoder, tmp_path):
    out = _form(encoder, tmp_path / "st", "mean")
    settings = json.loads((out / "sentence_bert_config.json").read_text())
    (out / "sentence_bert_config.json").write_text(json.dumps(settings | {"do_lower_case": True}))
    assert _row(verify(str(out), device="cpu")).passed
    low = _row(verify(str(out), device="cpu", dtype="bfloat16"))
    assert low.passed and low.reference_max_abs is not None and low.max_abs > 0


def test_a_module_bertconv_does_not_run_is_named_and_the_encoder_still_verified(encoder, tmp_path):
    out = _form(encoder, tmp_path / "st", "mean")
    modules = json.loads((out / "modules.json").read_text())
    modules.append({"idx": 9, "name": "x", "path": "x", "type": "my_package.Whitening"})
    (out / "modules.json").write_text(json.dumps(modules))
    report = verify(str(out), device="cpu")
    assert report.passed and "sentence embedding" not in [r.name for r in report.rows]
    assert any("not compared" in n and "my_package.Whitening" in n for n in report.notes)


def test_sentence_transformers_missing_is_exit_6_with_the_extra_named(encoder, tmp_path):
    out = _form(encoder, tmp_path / "st", "mean")
    blocker = tmp_path / "blocked" / "sentence_transformers"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = os.environ | {"PYTHONPATH": str(blocker.parent)}
    done = subprocess.run(
        [sys.executable, "-c", "from bertconv.cli import main; main()", "verify", str(out),
         "--device", "cpu"], capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert done.returncode == 6 and "bertconv[sentence]" in done.stderr, done.stderr


# convert and fetch carry the wrapper ------------------------------------------------------------


@pytest.mark.parametrize("to", ["transformers", "minbert", "bertconv"])
def test_convert_carries_the_wrapper_byte_for_byte_and_encodes_as_the_source(to, encoder, tmp_path):
    from sentence_transformers import SentenceTransformer

    source = _form(encoder, tmp_path / "st", "prompt left out")
    dense = _form(encoder, tmp_path / "dense", "dense tanh")
    for src in (source, dense):
        out = tmp_path / f"out-{src.name}"
        convert_checkpoint(Source(str(src), src), out, to)
        names = carried(src)
        assert "modules.json" in names and "1_Pooling/config.json" in names
        for name in names:
            assert (out / name).read_bytes() == (src / name).read_bytes(), name
        expected = SentenceTransformer(str(src), device="cpu").encode(TEXTS, convert_to_tensor=True)
        assert (bertconv.load(out).encode(TEXTS) - expected).abs().max() <= 1e-5
        if to == "transformers":  # a directory sentence-transformers loads itself
            theirs = SentenceTransformer(str(out), device="cpu").encode(
                TEXTS, convert_to_tensor=True
            )
            assert (theirs - expected).abs().max() <= 1e-5
        report = verify(str(out), device="cpu")  # the reference: the same weights, official names
        assert report.passed and _row(report).passed


def test_an_earlier_results_modules_go_and_the_users_files_stay(encoder, tmp_path, checkpoints):
    src = _form(encoder, tmp_path / "st", "dense tanh")
    out = tmp_path / "out"
    convert_checkpoint(Source(str(src), src), out, "minbert")
    (out / "2_Dense" / "notes.txt").write_text("mine")
    plain = checkpoints["pretraining"]
    convert_checkpoint(Source(str(plain), plain), out, "minbert")
    assert not (out / "modules.json").exists() and not (out / "1_Pooling").exists()
    assert sorted(p.name for p in (out / "2_Dense").iterdir()) == ["notes.txt"]


def test_a_changed_module_file_of_an_earlier_result_is_refused(encoder, tmp_path, checkpoints):
    src = _form(encoder, tmp_path / "st", "mean")
    out = tmp_path / "out"
    convert_checkpoint(Source(str(src), src), out, "minbert")
    (out / "1_Pooling" / "config.json").write_text("{}")
    plain = checkpoints["pretraining"]
    with pytest.raises(bertconv.errors.OutputError, match="1_Pooling/config.json .changed"):
        convert_checkpoint(Source(str(plain), plain), out, "minbert")
    assert (out / "1_Pooling" / "config.json").read_text() == "{}"


def test_a_module_folder_that_is_a_link_in_the_output_is_refused(encoder, tmp_path):
    src = _form(encoder, tmp_path / "st", "mean")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "1_Pooling").symlink_to(elsewhere)
    with pytest.raises(bertconv.errors.OutputError, match="1_Pooling: is a link"):
        convert_checkpoint(Source(str(src), src), out, "minbert")
    assert list(elsewhere.iterdir()) == [] and sorted(p.name for p in out.iterdir()) == [
        "1_Pooling"
    ]


# your own encoder -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def table(encoder, tmp_path_factory) -> Path:
    from bertconv.cli import run

    out = tmp_path_factory.mktemp("encoders") / "mean.toml"
    args = ["infer", f"{ZOO}:MeanPooled", "--config", str(encoder / "config.json")]
    assert run([*args, "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("model", ["MeanPooled", "ReturnsTokens"])
def test_a_right_encoder_passes(model, table, encoder, tmp_path, cli):
    out = _form(encoder, tmp_path / "st", "mean")
    code, printed, err = cli("verify", out, "--model", f"{ZOO}:{model}", "--layout", table)
    assert code == 0 and "sentence embedding" in printed, printed + err


@pytest.mark.parametrize(
    "model, form, said",
    [
        ("ClsPooled", "mean", "the pooling differs .*CLS \\(the first token\\) pooled, where the "
         "directory pools by the mean of the real tokens"),
        ("MaxPooled", "mean", "the maximum of each feature over the tokens pooled"),
        ("MeanOverPadding", "mean", "the padding pooled too"),
        ("NotNormalized", "mean", "the normalization differs .*no normalization"),
        ("MeanPooled", "dense tanh", "the Dense layer differs .*the Dense layer skipped"),
        ("MeanPooled", "prompt left out", "the prompt's tokens pooled, where the directory "
         "leaves them out"),
        ("MeanPooled", "max", "the mean of the real tokens pooled, where the directory pools "
         "by the maximum"),
    ],
)  # fmt: skip
def test_each_faulty_encoder_fails_naming_its_step(
    model, form, said, table, encoder, tmp_path, cli
):
    out = _form(encoder, tmp_path / "st", form)
    code, printed, err = cli("verify", out, "--model", f"{ZOO}:{model}", "--layout", table)
    assert code == 1, printed + err
    lines = printed.splitlines()
    assert any(line.startswith("sentence embedding") and "FAIL" in line for line in lines)
    assert all("FAIL" not in line for line in lines if line.startswith(("embeddings", "layer")))
    import re

    assert re.search(said, printed.replace("\n", " ")), printed


@pytest.fixture(scope="module")
def dense_table(encoder, tmp_path_factory) -> tuple[Path, Path]:
    """A directory with Dense (Tanh), and the table infer writes for WithDense given its
    config.json: Dense's weights placed by [sentence]."""
    from bertconv.cli import run

    root = tmp_path_factory.mktemp("dense")
    directory = _form(encoder, root / "st", "dense tanh")
    out = root / "dense.toml"
    args = ["infer", f"{ZOO}:WithDense", "--config", str(directory / "config.json")]
    assert run([*args, "--out", str(out)]) == 0
    return directory, out


def test_infer_places_the_models_dense_and_verify_gives_it_the_directorys(dense_table, cli):
    import tomllib

    directory, table = dense_table
    found = tomllib.loads(table.read_text())
    assert found["sentence"] == {"dense.weight": "Dense.linear.weight",
                                 "dense.bias": "Dense.linear.bias"}  # fmt: skip
    assert "dense.weight" not in found.get("own", [])
    code, printed, err = cli("verify", directory, "--model", f"{ZOO}:WithDense", "--layout", table)
    assert code == 0 and "sentence embedding" in printed, printed + err
    code, printed, _ = cli("verify", directory, "--model", f"{ZOO}:DenseReLU", "--layout", table)
    assert code == 1 and "Dense's activation ReLU, where the directory's is Tanh" in printed


def test_convert_into_the_table_writes_dense_under_the_models_names(dense_table, tmp_path):
    import importlib.util

    from safetensors.torch import load_file

    spec = importlib.util.spec_from_file_location("sentence_encoders_for_test", ZOO)
    sentence_encoders = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sentence_encoders)
    directory, table = dense_table
    convert_checkpoint(Source(str(directory), directory), tmp_path / "out", str(table))
    config = json.loads((directory / "config.json").read_text())
    model = sentence_encoders.WithDense(type("Config", (), config))
    model.load_state_dict(load_file(tmp_path / "out" / "model.safetensors"), strict=True)
    dense = load_file(directory / "2_Dense" / "model.safetensors")
    assert torch.equal(model.dense.weight, dense["linear.weight"])


def test_a_table_placing_dense_on_a_directory_without_one_says_so(dense_table, encoder, tmp_path):
    _, table = dense_table
    out = _form(encoder, tmp_path / "st", "mean")
    report = verify(str(out), device="cpu", model=f"{ZOO}:WithDense", model_layout=str(table))
    assert any("the directory has no Dense layer" in n for n in report.notes)
    assert not report.passed  # its 8 features, where the directory's mean has 16


def test_a_tables_sentence_rows_name_only_what_sentence_transformers_holds(tmp_path):
    from bertconv.errors import TableError
    from bertconv.tables import read_table

    good = (Path(__file__).parent.parent / "mappings" / "minbert.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(good + '\n[sentence]\n"dense.weight" = "Dense.linear.kernel"\n')
    with pytest.raises(TableError, match="Dense.linear.weight"):
        read_table(bad)


def test_a_truncation_length_past_the_positions_is_said_not_a_crash(encoder, tmp_path, cli):
    """sentence-transformers itself cannot encode a text of 512 tokens with 24 positions:
    verify says which file asks for it (exit 4), never an internal error."""
    out = _form(encoder, tmp_path / "st", "mean")
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512}))
    code, _, err = cli("verify", out, "--device", "cpu")
    assert code == 4 and "sentence-transformers cannot encode" in err and "max_seq_length" in err


def test_a_tokenizer_padding_on_the_left_is_padded_so(encoder, tmp_path):
    """sentence-transformers pads on the side tokenizer_config.json says: a BERT's positions
    then differ, and bertconv's encode and verify's row follow it."""
    from sentence_transformers import SentenceTransformer

    out = _form(encoder, tmp_path / "st", "lasttoken")
    config = json.loads((out / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps(config | {"padding_side": "left"}))
    expected = SentenceTransformer(str(out), device="cpu").encode(TEXTS, convert_to_tensor=True)
    assert (bertconv.load(out).encode(TEXTS) - expected).abs().max() <= 1e-5
    assert _row(verify(str(out), device="cpu")).passed


def test_the_old_wrapper_form_reads_as_sentence_transformers_reads_it(encoder, tmp_path):
    """`sentence_transformers.models.*` types, the pooling's legacy flags, Dense's weights in a
    pytorch_model.bin: encode and verify as sentence-transformers does."""
    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformer

    out = _form(encoder, tmp_path / "st", "dense identity, unnormalized")
    modules = json.loads((out / "modules.json").read_text())
    for m in modules:
        m["type"] = "sentence_transformers.models." + m["type"].rpartition(".")[2]
    (out / "modules.json").write_text(json.dumps(modules))
    flags = {"word_embedding_dimension": 16, "pooling_mode_mean_tokens": True,
             "pooling_mode_cls_token": True, "pooling_mode_max_tokens": False}  # fmt: skip
    (out / "1_Pooling" / "config.json").write_text(json.dumps(flags))
    dense = out / "2_Dense"
    torch.save(load_file(dense / "model.safetensors"), dense / "pytorch_model.bin")
    (dense / "model.safetensors").unlink()
    expected = SentenceTransformer(str(out), device="cpu").encode(TEXTS, convert_to_tensor=True)
    assert (bertconv.load(out).encode(TEXTS) - expected).abs().max() <= 1e-5
    assert _row(verify(str(out), device="cpu")).passed


def test_a_sentence_encoder_that_must_not_pass_fails(table, encoder, minilm, tmp_path, cli):
    """One giving a shape's embeddings again for a later batch of that shape; one pooling the
    first 128 tokens alone, right on any shorter text (on MiniLM, which reads 256): each fails
    (exit 1) at its sentence row, never PASSED."""
    out = _form(encoder, tmp_path / "st", "mean")
    args = ["infer", f"{ZOO}:MeanPooled", "--config", minilm / "config.json", "--out"]
    assert cli(*args, tmp_path / "minilm.toml")[0] == 0
    cases = [(out, "CachesByShape", table), (minilm, "FirstTokensOnly", tmp_path / "minilm.toml")]
    for directory, model, layout in cases:
        code, printed, err = cli(
            "verify", directory, "--model", f"{ZOO}:{model}", "--layout", layout
        )
        assert code == 1 and "PASSED" not in printed, printed + err
        row = next(line for line in printed.splitlines() if line.startswith("sentence embedding"))
        assert "FAIL" in row


@pytest.mark.parametrize(
    "model",
    ["SlicedBatch", "OneTextSqueezed", "AllThreeCls", "MeanOverPadding"],
)
def test_a_sentence_encoder_wrong_on_batches_users_send_fails_at_its_row(
    model, encoder, tmp_path, cli
):
    """The sixth pass: wrong beyond 8 texts a call, at one text a call, pooling the padding of
    a batch of short texts, or returning a wrong sentence vector beside a right pooler and last
    layer: each FAILS at its sentence row, its encoder's rows right; never PASSED."""
    out = _form(encoder, tmp_path / "st", "mean")
    table = tmp_path / "mine.toml"
    named = "AllThree" if model.startswith("AllThree") else "MeanPooled"  # of the same names
    code, printed, err = cli(
        "infer", f"{ZOO}:{named}", "--config", out / "config.json", "--out", table
    )
    assert code == 0, printed + err
    code, printed, err = cli("verify", out, "--model", f"{ZOO}:{model}", "--layout", table)
    assert code == 1 and "PASSED" not in printed, printed + err
    lines = printed.splitlines()
    assert next(line for line in lines if line.startswith("sentence embedding")).endswith("FAIL")
    encoder_rows = [line for line in lines if line.startswith(("embeddings ", "layer "))]
    assert encoder_rows and all(line.endswith("ok") for line in encoder_rows), printed


@pytest.mark.parametrize("model", ["AllThree", "PoolerAndVector"])
def test_a_right_encoder_returning_its_vector_beside_a_pooler_passes(model, encoder, tmp_path, cli):
    """A per-text vector of the directory's width that is not the pooler it computes is its
    sentence embedding, compared as such: returned beside the pooler, or alone while the pooler
    runs inside (it FAILED at the pooler, "no output computed inside it in its place")."""
    out = _form(encoder, tmp_path / "st", "mean")
    table = tmp_path / "mine.toml"
    code, printed, err = cli(
        "infer", f"{ZOO}:{model}", "--config", out / "config.json", "--out", table
    )
    assert code == 0, printed + err
    code, printed, err = cli("verify", out, "--model", f"{ZOO}:{model}", "--layout", table)
    assert code == 0 and "PASSED" in printed, printed + err
    assert any(line.startswith("sentence embedding") for line in printed.splitlines())
    assert any(line.startswith("pooler") for line in printed.splitlines())


def test_a_sentence_row_for_a_bias_the_dense_lacks_is_refused_naming_both(
    dense_table, tmp_path, cli
):
    """The directory's Dense saved without a bias, the table placing one: exit 4 in verify and
    in convert (it was a KeyError, exit 70), nothing written."""
    import shutil

    from safetensors.torch import load_file, save_file

    directory, table = dense_table
    biasless = tmp_path / "st"
    shutil.copytree(directory, biasless)
    dense = biasless / "2_Dense"
    save_file({"linear.weight": load_file(dense / "model.safetensors")["linear.weight"]},
              dense / "model.safetensors")  # fmt: skip
    config = json.loads((dense / "config.json").read_text())
    (dense / "config.json").write_text(json.dumps(config | {"bias": False}))
    code, _, err = cli("verify", biasless, "--model", f"{ZOO}:WithDense", "--layout", table)
    assert code == 4 and "this Dense has no linear.bias" in err and "'dense.bias'" in err, err
    code, _, err = cli("convert", biasless, "--to", table, "--out", tmp_path / "o")
    assert code == 4 and "this Dense has no linear.bias" in err, err
    assert not (tmp_path / "o").exists()


def test_a_sentence_row_naming_a_tensor_a_row_places_is_refused(dense_table, tmp_path, cli):
    """A [sentence] row naming one of the model's tensors the rows place already (a layer's,
    under `{layer}`): Dense's weight would replace it silently; refused naming the row."""
    directory, table = dense_table
    text = table.read_text()
    row = next(line.split(" = ")[0].strip('"') for line in text.splitlines()
               if "{layer}" in line and " = " in line)  # fmt: skip
    clash = row.replace("{layer}", "0")
    mine = tmp_path / "clash.toml"
    mine.write_text(text.replace('"dense.weight" = "Dense', f'"{clash}" = "Dense'))
    code, _, err = cli("convert", directory, "--to", mine, "--out", tmp_path / "o")
    assert code == 2 and f"sentence.{clash}" in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("mode, model", [("cls", "SquareDense"), ("mean", "SquareDenseMean")])
def test_a_dense_that_keeps_the_hidden_width_is_the_directorys_not_the_pooler(
    mode, model, encoder, tmp_path, cli
):
    """LaBSE's Dense (hidden to hidden, Tanh) has BERT's pooler's shape: infer places it in
    [sentence] where the model computes the directory's pipeline with it, and verify PASSES."""
    import tomllib

    directory = written(encoder, tmp_path / "st", mode, torch.nn.Tanh(), width=16)
    table = tmp_path / "labse.toml"
    args = ["infer", f"{ZOO}:{model}", "--config", directory / "config.json", "--out", table]
    code, _, err = cli(*args)
    assert code == 0, err
    found = tomllib.loads(table.read_text())
    assert found["sentence"] == {"dense.weight": "Dense.linear.weight",
                                 "dense.bias": "Dense.linear.bias"}  # fmt: skip
    assert not any("pooler" in v for v in found["encoder"].values())
    code, printed, err = cli("verify", directory, "--model", f"{ZOO}:{model}", "--layout", table)
    assert code == 0 and "sentence embedding" in printed, printed + err


def test_a_sentence_vector_read_at_the_first_place_fails_where_the_directory_pads_left(
    encoder, tmp_path, cli
):
    """x[:, 0] is the directory's CLS on every batch its tokenizer pads on the right (not
    compared on the batch padded on the left, said); where it pads on the left, it reads
    padding there, and the report says so."""
    directory = written(encoder, tmp_path / "st", "cls", torch.nn.Tanh(), width=16)
    table = tmp_path / "labse.toml"
    args = ["infer", f"{ZOO}:SquareDense", "--config", directory / "config.json", "--out", table]
    assert cli(*args)[0] == 0
    report = verify(str(directory), "cpu", model=f"{ZOO}:SquareDense", model_layout=str(table))
    assert report.passed and any("not compared on the batch padded on the left" in n
                                 for n in report.notes)  # fmt: skip
    config = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps(config | {"padding_side": "left"}))
    report = verify(str(directory), "cpu", model=f"{ZOO}:SquareDense", model_layout=str(table))
    assert not report.passed and not _row(report).passed
    cause = report.diagnosis.cause
    assert "on the texts without padding it agrees" in cause and "pool over the real" in cause
