"""The user's own code misbehaving (issue 26, tests/zoo/misbehaving.py): what it prints goes to
stderr, so that stdout parses; its exits and exceptions of any kind are its own (exit 2, said
where); it may write into its inputs, override torch's methods carelessly, sit in a file whose
name is no module name; verify --json stays strict JSON."""

import json
import os
import shutil
import tomllib
from pathlib import Path

import pytest

ZOO = Path(__file__).parent / "zoo"
MODEL = ZOO / "misbehaving.py"


@pytest.fixture(scope="module")
def table(tmp_path_factory, minilm) -> Path:
    from bertconv.cli import run

    out = tmp_path_factory.mktemp("misbehaving") / "bert.toml"
    assert (
        run(["infer", f"{MODEL}:Bert", "--config", str(minilm / "config.json"), "--out", str(out)])
        == 0
    )
    return out


def test_prints_go_to_stderr_so_that_json_and_tables_parse(table, minilm, cli):
    code, out, err = cli(
        "verify", minilm, "--model", f"{MODEL}:Prints", "--layout", table, "--json"
    )
    assert code == 0 and json.loads(out)["passed"], out + err
    assert "forward torch.Size" in err  # its print, on stderr
    code, out, err = cli("infer", f"{MODEL}:Prints", "--config", minilm / "config.json")
    assert code == 0 and tomllib.loads(out)["encoder"], out + err


@pytest.mark.parametrize("name", ["WritesIntoItsMask", "CarelessOverrides"])
def test_a_model_computing_bert_passes_whatever_else_it_does(name, table, minilm, cli):
    code, out, err = cli("verify", minilm, "--model", f"{MODEL}:{name}", "--layout", table)
    assert code == 0 and "PASSED" in out, out + err


@pytest.mark.parametrize(
    "name, said",
    [
        ("Exits", "the model's code called sys.exit(3)"),
        ("RaisesBaseException", "the model's code raised Stop: stop here"),
        ("AlwaysRaises", "the model's code raised RuntimeError: CUDA is required"),
        ("on_meta", "its tensors are on the meta device"),
    ],
)
@pytest.mark.parametrize("command", ["infer", "verify"])
def test_the_models_own_fault_is_exit_2_said_as_its_own(command, name, said, table, minilm, cli):
    spec, config = f"{MODEL}:{name}", minilm / "config.json"
    args = ["--config", config] if command == "infer" else [minilm, "--layout", table]
    code, _, err = cli(
        command, *([spec, *args] if command == "infer" else [args[0], "--model", spec, *args[1:]])
    )
    assert code == 2 and said in err and "Traceback" not in err, err
    if name not in ("on_meta",):
        assert "misbehaving.py:" in err  # where in the model's code


def test_a_file_whose_name_is_no_module_name_is_imported_by_its_path(table, minilm, cli, tmp_path):
    for neighbour in ("misbehaving.py", "family_bert.py", "head_parts.py"):
        shutil.copy(ZOO / neighbour, tmp_path / neighbour)
    (tmp_path / "misbehaving.py").rename(tmp_path / "bert.v2.py")
    spec = f"{tmp_path / 'bert.v2.py'}:Bert"
    code, out, err = cli("verify", minilm, "--model", spec, "--layout", table)
    assert code == 0 and "PASSED" in out, out + err


def test_verify_json_is_strict_where_a_model_returns_nan(table, minilm, cli):
    code, out, err = cli(
        "verify", minilm, "--model", f"{MODEL}:ReturnsNaN", "--layout", table, "--json"
    )
    assert code == 1, out + err
    report = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert report["passed"] is False and "nonfinite_values" in out


def test_a_model_built_in_half_precision_is_verified_on_the_weights_as_read(table, minilm, cli):
    code, out, err = cli("verify", minilm, "--model", f"{MODEL}:BuiltInHalf", "--layout", table)
    assert code == 0 and "PASSED" in out, out + err


def test_a_one_layer_config_is_inferred(tmp_path, cli):
    config = tmp_path / "config.json"
    sizes = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64)
    config.write_text(json.dumps(sizes | {"vocab_size": 100, "max_position_embeddings": 40}))
    code, out, err = cli("infer", f"{MODEL}:Bert", "--config", config)
    assert code == 0 and "{layer}" in out, out + err


def test_names_no_table_can_hold_are_refused_by_name(tmp_path, cli):
    code, out, err = cli("infer", f"{MODEL}:Braces", "--out", tmp_path / "t.toml")
    assert code == 2 and "'{layer}.weight'" in err and not (tmp_path / "t.toml").exists(), err


def test_a_projects_own_modules_named_as_bertconvs_dependencies_change_nothing(
    table, minilm, tmp_path, cli
):
    """tokenizers.py, safetensors.py, numpy.py beside the model file: bertconv's own imports are
    made before the model's directory is on the path."""
    for neighbour in ("family_bert.py", "head_parts.py"):
        shutil.copy(ZOO / neighbour, tmp_path / neighbour)
    for module in ("tokenizers", "safetensors", "numpy"):
        (tmp_path / f"{module}.py").write_text(f"raise ImportError('the project\\'s own {module}')")
    spec, config = f"{tmp_path / 'family_bert.py'}:PooledBert", minilm / "config.json"
    assert cli("infer", spec, "--config", config, "--out", tmp_path / "t.toml")[0] == 0
    code, out, err = cli("verify", minilm, "--model", spec, "--layout", table)
    assert code == 0 and "PASSED" in out, out + err


def test_a_config_transformers_cannot_run_is_exit_4_naming_the_field(tmp_path, cli):
    import transformers

    config = transformers.BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, chunk_size_feed_forward=7,
    )  # fmt: skip
    transformers.BertModel(config).save_pretrained(tmp_path)
    code, _, err = cli("verify", tmp_path, "--device", "cpu")
    assert code == 4 and "config.json's chunk_size_feed_forward=7" in err, err
    assert "transformers cannot compute it" in err and "Traceback" not in err


def test_a_time_first_model_is_read_right_where_rows_and_tokens_are_as_many(tmp_path, cli):
    """A checkpoint of 4 positions: verify's batches would be 4 rows of 4 tokens, and a model's
    (tokens, batch, features) outputs would read as (batch, tokens, features). Its batches have
    two rows more."""
    import torch
    import transformers

    from tiny import TINY, VOCAB

    torch.manual_seed(0)
    small = transformers.BertConfig(**TINY | {"max_position_embeddings": 4})
    transformers.BertModel(small).save_pretrained(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    spec, table = f"{ZOO / 'style_time_first.py'}:TimeFirstBert", tmp_path / "t.toml"
    code, _, err = cli("infer", spec, "--config", tmp_path / "ckpt" / "config.json", "--out", table)
    assert code == 0, err
    code, out, err = cli("verify", tmp_path / "ckpt", "--model", spec, "--layout", table)
    assert code == 0 and "PASSED" in out and "tokenized text" in out, out + err


@pytest.mark.parametrize("rows, length", [(4, 4), (1, 1), (2, 2), (4, 6)])
def test_every_batch_has_a_row_count_other_than_its_length(rows, length):
    import torch

    from bertconv.batches import CHOICES, apart

    batch = {"input_ids": torch.arange(rows * length).view(rows, length)}
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    got = apart(batch)
    assert got["input_ids"].shape[0] != length and got["input_ids"].shape[1] == length
    assert torch.equal(got["input_ids"][:rows], batch["input_ids"])
    assert rows == length or got is batch
    assert (got["input_ids"].shape[0] - rows) % CHOICES == 0


PROCESS_CHANGES = """
import os, signal, sys, warnings
from family_bert import PooledBert

os.chdir("/")  # a script's habit: paths from the root from here on
sys.stderr = open(os.devnull, "w")  # quiet, please
signal.signal(signal.SIGINT, signal.SIG_IGN)
warnings.simplefilter("error")


class Bert(PooledBert):
    pass


class Raises(PooledBert):
    def forward(self, input_ids, attention_mask, token_type_ids):
        raise RuntimeError("out of memory")
"""


def test_what_the_models_module_changes_of_the_process_is_put_back(
    table, minilm, tmp_path, cli, monkeypatch
):
    """A module that changes directory, silences stderr and ignores Ctrl-C as it is imported:
    infer's relative --out lands where the user meant, bertconv's messages are seen, Ctrl-C
    still stops it."""
    import signal

    for neighbour in ("family_bert.py", "head_parts.py"):
        shutil.copy(ZOO / neighbour, tmp_path / neighbour)
    (tmp_path / "changes.py").write_text(PROCESS_CHANGES)
    monkeypatch.chdir(tmp_path)
    handler = signal.getsignal(signal.SIGINT)
    config = minilm / "config.json"
    code, _, err = cli("infer", "changes.py:Bert", "--config", config, "--out", "mine.toml")
    assert code == 0 and (tmp_path / "mine.toml").is_file(), err
    assert "wrote mine.toml" in err  # said on the stderr bertconv was given
    code, _, err = cli("verify", minilm, "--model", "changes.py:Raises", "--layout", table)
    assert code == 2 and "the model's code raised RuntimeError: out of memory" in err, err
    assert os.getcwd() == str(tmp_path) and signal.getsignal(signal.SIGINT) is handler


def test_a_tensor_of_another_shape_than_the_models_is_exit_4_naming_both():
    """load_state_dict raises on a size mismatch even where not strict: bertconv checks the
    shapes first, and names them (it was exit 70)."""
    import torch
    from torch import nn

    from bertconv.errors import CheckpointError
    from bertconv.yours.harness import load_weights

    model = nn.Sequential(nn.Linear(4, 3))
    tensors = {"0.weight": torch.zeros(2, 4), "0.bias": torch.zeros(3)}
    with pytest.raises(
        CheckpointError, match=r"0.weight: \(3, 4\) in the model, \(2, 4\) converted"
    ):
        load_weights(model, "m.py:M", tensors, set())
