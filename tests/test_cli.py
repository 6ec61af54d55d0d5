"""The command line, as a user runs it: exit codes, what goes to stdout and stderr."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bertconv import cli

runner = CliRunner()


def bertconv(*args, env=None):
    """Run the installed command in a fresh process."""
    return subprocess.run(
        [sys.executable, "-c", "from bertconv.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
    )


def test_help_explains_and_imports_no_torch():
    probe = (
        "import sys; sys.argv = ['bertconv', '--help']\n"
        "from bertconv.cli import main\n"
        "try: main()\nexcept SystemExit: pass\n"
        "assert not {'torch', 'transformers', 'numpy'} & sys.modules.keys(), 'heavy import'\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for command in ("layouts", "convert", "fetch", "verify"):
        assert command in done.stdout
    assert "Exit codes" in done.stdout


def test_layouts_lists_the_tables():
    result = runner.invoke(cli.app, ["layouts"])
    assert result.exit_code == 0
    assert [line.split()[0] for line in result.stdout.splitlines()] == [
        "bert-pytorch",
        "bertconv",
        "google-tf",
        "minbert",
        "transformers",
        "transformers-tf",
        "transformers-classes",  # NomicBERT's alone
    ]


def test_convert_then_verify_passes(checkpoints, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(
        cli.app, ["convert", str(checkpoints["legacy-bin"]), "--to", "minbert", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "left out the mlm group: the 'minbert' layout has no place for it" in result.stderr
    assert "left out the nsp group" in result.stderr and "(BertModel: pooler)" in result.stderr
    assert result.stdout.strip() == str(out)
    result = runner.invoke(cli.app, ["verify", str(out)])
    assert result.exit_code == 0, result.output
    assert "layer 2" in result.stdout and result.stdout.rstrip().endswith("PASSED")


def test_verify_reports_every_layer_and_both_heads_as_json(checkpoints):
    result = runner.invoke(
        cli.app, ["verify", str(checkpoints["pretraining"]), "--json", "--device", "cpu"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    names = [row["name"] for row in report["rows"]]
    assert names == ["embeddings", "layer 1", "layer 2", "pooler", "mlm logits", "nsp logits"]
    full = report["float32_full"]  # the 64-position batch, in float32
    assert full["passed"] and full["max_abs"] <= full["limit"] == 1e-4
    assert report["inputs"] == [
        "tokenized text", "random ids", "random ids padded on the left",
        "random ids of all 64 positions",
    ]  # fmt: skip
    assert report["longest_sequence"] == 64
    assert not [key for key in report if "max" in key]  # the word is kept for differences
    assert report["passed"] and all(
        row["max_abs"] <= row["limit"] == 1e-5 for row in report["rows"]
    )


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_verify_in_low_precision_compares_with_transformers_own_error(dtype, checkpoints):
    result = runner.invoke(
        cli.app, ["verify", str(checkpoints["base"]), "--dtype", dtype, "--json"]
    )
    assert result.exit_code == 0, result.output
    for row in json.loads(result.stdout)["rows"]:
        assert row["reference_max_abs"] > 0
        assert row["limit"] == 2 * row["reference_max_abs"]


def test_verify_fails_when_the_model_computes_something_else(checkpoints, computing):
    computing(lambda x: x.relu())
    result = runner.invoke(cli.app, ["verify", str(checkpoints["base"])])
    assert result.exit_code == 1
    assert "layer 1" in result.stdout and "FAIL" in result.stdout
    assert result.stdout.rstrip().endswith("FAILED: outside tolerance")


def test_verify_without_transformers_says_which_extra():
    probe = (
        "import sys; sys.modules['transformers'] = None\n"
        "sys.argv = ['bertconv', 'verify', '.']\n"
        "from bertconv.cli import main; main()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 6
    assert (
        done.stderr.strip()
        == "bertconv: error: verify needs transformers: pip install 'bertconv[verify]'"
    )


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["convert", "./no/such/dir"], 3, "./no/such/dir: no such directory"),
        (["convert", "{ckpt}", "--to", "nanobert"], 2, "--to 'nanobert': no such layout"),
        (["verify", "{ckpt}", "--dtype", "int8"], 2, "--dtype 'int8': one of float32"),
        (["fetch", "./local/dir"], 2, "is not a Hub model id"),
    ],
)
def test_user_mistakes_get_one_line_and_an_exit_code(args, code, message, checkpoints):
    args = [a.replace("{ckpt}", str(checkpoints["base"])) for a in args]
    done = bertconv(*args)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_bad_checkpoint_exits_4_naming_the_tensor(checkpoints, tmp_path):
    from safetensors.torch import load_file, save_file

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_bytes((checkpoints["base"] / "config.json").read_bytes())
    tensors = load_file(checkpoints["base"] / "model.safetensors")
    del tensors["pooler.dense.bias"]
    save_file(tensors, bad / "model.safetensors")
    done = bertconv("convert", str(bad), "--out", str(tmp_path / "out"))
    assert done.returncode == 4
    assert (
        "missing tensors (1): pooler.dense.bias" in done.stderr and "Traceback" not in done.stderr
    )
    assert not (tmp_path / "out").exists()


def test_a_plain_install_finds_the_mapping_tables(tmp_path):
    """`pip install .`, not only -e: the tables must ship inside the package."""
    root = Path(__file__).parent.parent
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(tmp_path),
            str(root),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr and "would be ignored" not in done.stderr, done.stderr
    probe = "import bertconv.tables as m; print(m.__file__); print(m.layout_names())"
    shown = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert shown.stdout.splitlines() == [
        str(tmp_path / "bertconv" / "tables.py"),
        "['bert-pytorch', 'bertconv', 'google-tf', 'minbert', 'transformers', 'transformers-tf']",
    ], shown.stderr


def test_a_renaming_conversion_never_imports_torch(checkpoints, tmp_path):
    """Renaming needs no tensor arithmetic: convert reads headers and copies bytes."""
    probe = (
        "import sys\n"
        f"sys.argv = ['bertconv', 'convert', {str(checkpoints['legacy'])!r}, '--to', 'minbert',"
        f" '--out', {str(tmp_path / 'out')!r}]\n"
        "from bertconv.cli import main\n"
        "try: main()\nexcept SystemExit as e: assert not e.code, e.code\n"
        "print('torch' in sys.modules, 'numpy' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "False False"  # numpy: for transposing only
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_a_bug_is_one_line_with_its_own_exit_code(checkpoints, cli, monkeypatch, tmp_path):
    """Never a traceback, even for bertconv's own mistakes; BERTCONV_DEBUG=1 shows it."""
    from bertconv import storage

    def broken(path):
        raise KeyError("data_offsets")

    monkeypatch.setattr(storage, "read_header", broken)
    code, _, err = cli("convert", checkpoints["base"], "--out", tmp_path / "out")
    assert code == 70 and err.count("\n") == 1
    assert "internal error: KeyError" in err and "BERTCONV_DEBUG=1" in err
    monkeypatch.setenv("BERTCONV_DEBUG", "1")
    with pytest.raises(KeyError):
        cli("convert", checkpoints["base"], "--out", tmp_path / "out")
    assert not (tmp_path / "out").exists()
