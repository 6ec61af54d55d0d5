"""Models that must never pass verify: each computes BERT somewhere, or nearly, and lies about it
(tests/liars/): it returns the embeddings, noise, nothing, the hidden states out of order or the
second-to-last layer where the last belongs, or patches torch on import. Each fails verify on
the real all-MiniLM-L6-v2, its reason named; the honest model they are built on passes."""

import subprocess
import sys
from pathlib import Path

import pytest

LIARS = Path(__file__).parent / "liars"
AS_COMPUTED = "as computed inside: your forward returns"

# spec -> (the first row that fails, what the report says the forward returned in its place)
RETURNS = {
    "ReturnsEmbeddings": ("layer 6", "the embeddings output"),
    "ReturnsNoise": ("layer 6", "no output computed inside it"),
    "ReturnsNone": ("layer 6", "NoneType, nothing that stands for a compared output"),
    "ReturnsStatesReversed": ("embeddings", "the layer 6 output"),
    "ReturnsSecondToLast": ("layer 6", "the layer 5 output"),
}


@pytest.fixture(scope="module")
def table(tmp_path_factory, minilm) -> Path:
    """The table `bertconv infer` writes for the honest model the liars are built on."""
    from bertconv.cli import run

    out = tmp_path_factory.mktemp("liars") / "bert.toml"
    model = f"{LIARS / 'returns.py'}:Bert"
    assert run(["infer", model, "--config", str(minilm / "config.json"), "--out", str(out)]) == 0
    return out


def test_the_model_the_liars_are_built_on_passes(table, minilm, cli):
    code, out, err = cli(
        "verify", minilm, "--model", f"{LIARS / 'returns.py'}:Bert", "--layout", table
    )
    assert code == 0 and "PASSED" in out and AS_COMPUTED not in out, out + err


@pytest.mark.parametrize("name", RETURNS)
def test_a_model_returning_what_it_does_not_stand_for_never_passes(name, table, minilm, cli):
    row, returned = RETURNS[name]
    model = f"{LIARS / 'returns.py'}:{name}"
    code, out, err = cli("verify", minilm, "--model", model, "--layout", table)
    assert code == 1 and "PASSED" not in out, out + err
    failed = [line.split()[:2] for line in out.splitlines() if line.endswith("FAIL")]
    assert " ".join(failed[0]).startswith(row), out
    assert f"{row} {AS_COMPUTED} {returned} " in out, out
    assert "every step agrees" not in out  # no diagnosis of steps that are right


def test_a_model_patching_torch_never_passes(table, minilm):
    """In a process of its own: the patch would stay in this one."""
    model = f"{LIARS / 'patches_torch.py'}:PatchedGeluBert"
    command = ["verify", str(minilm), "--model", model, "--layout", str(table)]
    program = "import sys; from bertconv.cli import run; sys.exit(run(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", program, *command], capture_output=True, text=True)
    assert done.returncode == 1 and "PASSED" not in done.stdout, done.stdout + done.stderr


def test_a_hidden_state_computed_out_of_sight_fails_said_so(table, minilm, cli):
    model = f"{LIARS / 'returns.py'}:NormOutOfSight"
    code, out, err = cli("verify", minilm, "--model", model, "--layout", table)
    assert code == 1 and "PASSED" not in out, out + err
    assert next(line for line in out.splitlines() if line.startswith("embeddings")).endswith("FAIL")
    assert "bertconv never sees your model use ln.bias, ln.weight" in out, out
