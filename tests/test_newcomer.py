"""The newcomer's path (issue 36): a directory written in a table of yours reads back without
naming the table where its copy lies beside it, and by naming it once (--from, verify's
--layout, `layout=` in Python) where not, the error saying which in the caller's terms; inspect
counts its parameters; infer's messages name MODEL as typed; --revision with a local source is
refused; the model's hidden states are None where not asked for, as the page says."""

import hashlib
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import bertconv
from bertconv.errors import UnnamedTable, UsageError

MODEL = f"{Path(__file__).parent / 'zoo' / 'verdicts.py'}:TutorialBert"


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    from bertconv.cli import run

    out = tmp_path_factory.mktemp("table") / "mybert.toml"
    assert run(["infer", MODEL, "--out", str(out)]) == 0
    return out


@pytest.fixture
def mine(table, checkpoints, tmp_path, cli) -> Path:
    """`convert SRC --to mybert.toml --out D`, as your-own-bert.md's flow writes it."""
    out = tmp_path / "bert-base-mine"
    code, _, err = cli("convert", checkpoints["base"], "--to", table, "--out", out)
    assert code == 0, err
    return out


def test_the_table_is_copied_beside_and_recorded_by_its_digest(mine, table):
    assert (mine / "mybert.toml").read_bytes() == table.read_bytes()
    metadata = bertconv.api.read_metadata(mine / "model.safetensors")
    assert metadata["bertconv.layout"] == "file:mybert.toml"
    assert metadata["bertconv.table_sha256"] == hashlib.sha256(table.read_bytes()).hexdigest()


def test_the_directory_reads_back_without_naming_the_table(mine, table, cli):
    code, out, err = cli("verify", mine, "--model", MODEL, "--layout", table)
    assert code == 0 and "PASSED" in out, err
    assert type(bertconv.load(mine)).__name__ == "BertModel"
    found = bertconv.inspect(mine)
    assert found.parameters > 0 and "mybert.toml" in found.layout_found
    code, out, _ = cli("inspect", mine)
    assert code == 0 and "parameters  0 " not in out


def test_without_its_copy_the_table_is_named_once_and_the_error_says_how(mine, table, cli):
    (mine / "mybert.toml").unlink()
    with pytest.raises(UnnamedTable) as raised:
        bertconv.load(mine)
    assert "layout='path/to/mybert.toml'" in str(raised.value) and "--from" not in str(raised.value)
    code, _, err = cli("convert", mine, "--to", "transformers", "--out", mine.parent / "t")
    assert code == 4 and "--from path/to/mybert.toml" in err and "layout=" not in err
    code, out, err = cli("verify", mine, "--model", MODEL, "--layout", table)  # named once
    assert code == 0 and "PASSED" in out, err
    assert type(bertconv.load(mine, layout=str(table))).__name__ == "BertModel"
    found = bertconv.inspect(mine)
    assert found.layout == "unknown" and found.parameters > 0  # every tensor counted


def test_a_changed_copy_is_not_the_table(mine, table, cli):
    copy = mine / "mybert.toml"
    copy.write_text(copy.read_text() + "\n# edited\n")
    code, _, err = cli("inspect", mine, "--json")
    assert code == 0
    with pytest.raises(UnnamedTable) as raised:
        bertconv.load(mine)
    assert "is not that table" in str(raised.value)
    edited = mine.parent / "elsewhere" / "mybert.toml"
    edited.parent.mkdir()
    shutil.copy(copy, edited)  # the same name, other bytes: not the table it was written with
    code, out, err = cli("verify", mine, "--model", MODEL, "--layout", edited)
    assert code == 4 and "PASSED" not in out


def test_reconverting_removes_bertconvs_copy_never_a_file_of_yours(mine, checkpoints, cli):
    code, _, err = cli("convert", checkpoints["base"], "--to", "transformers", "--out", mine)
    assert code == 0, err
    assert not (mine / "mybert.toml").exists()
    (mine / "mybert.toml").write_text("# yours\n")
    table_elsewhere = mine.parent / "t" / "mybert.toml"
    table_elsewhere.parent.mkdir()
    shutil.copy(Path(bertconv.__file__).parent / "mappings" / "minbert.toml", table_elsewhere)
    code, _, err = cli("convert", checkpoints["base"], "--to", table_elsewhere, "--out", mine)
    assert code == 7 and "mybert.toml" in err
    assert (mine / "mybert.toml").read_text() == "# yours\n"


def test_a_table_written_inside_the_output_is_recorded_not_copied(
    table, checkpoints, tmp_path, cli
):
    out = tmp_path / "d"
    out.mkdir()
    inside = out / "mybert.toml"
    shutil.copy(table, inside)
    code, _, err = cli("convert", checkpoints["base"], "--to", inside, "--out", out)
    assert code == 0, err
    assert inside.read_bytes() == table.read_bytes()
    assert type(bertconv.load(out)).__name__ == "BertModel"


@pytest.mark.parametrize(
    "recorded", ["file:../mybert.toml", "file:/tmp/mybert.toml", "file:.x.toml"]
)
def test_a_recorded_table_name_is_never_a_path(recorded, mine, tmp_path):
    weights = mine / "model.safetensors"
    save_file(load_file(weights), weights, {"bertconv.layout": recorded})
    shutil.copy(mine / "mybert.toml", tmp_path / "mybert.toml")  # where ../ would lead
    with pytest.raises(bertconv.BertconvError) as raised:
        bertconv.load(mine)
    assert raised.value.exit_code == 4


def test_infers_messages_name_model_as_it_was_typed(cli, checkpoints, tmp_path):
    missing = str(tmp_path / "nosuch.py") + ":MyBert"
    code, _, err = cli("infer", missing)
    assert code == 2 and f"MODEL {missing!r}" in err and "--model" not in err
    assert "no such file" in err
    code, _, err = cli("verify", checkpoints["base"], "--model", missing)
    assert code == 2 and f"--model {missing!r}" in err


@pytest.mark.parametrize("command", ["convert", "inspect", "verify"])
def test_revision_with_a_local_source_is_refused_not_ignored(command, checkpoints, cli, tmp_path):
    extra = ["--out", str(tmp_path / "o")] if command == "convert" else []
    code, _, err = cli(command, checkpoints["base"], "--revision", "v1", *extra)
    assert code == 2 and "--revision v1" in err and "local" in err
    assert not (tmp_path / "o").exists()
    with pytest.raises(UsageError):
        bertconv.load(checkpoints["base"], revision="v1")


def test_hidden_states_are_none_where_not_asked_for(checkpoints):
    model = bertconv.load(checkpoints["base"], heads=False)
    ids = torch.randint(0, model.config.vocab_size, (2, 7))
    assert model(ids, output_hidden_states=False).hidden_states is None
    assert len(model(ids).hidden_states) == model.config.num_hidden_layers + 1


def test_inspects_help_says_its_own_default(cli):
    code, out, _ = cli("inspect", "--help")
    assert code == 0 and "place the most of its tensors" in " ".join(out.split())
