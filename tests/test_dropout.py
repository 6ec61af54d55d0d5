"""A dropout left active (`F.dropout(x, p, training=True)` after the attention): two runs of the
same batch differ, so the model never computes BERT. infer refuses it and verify fails it, each
naming the dropout and where it is; the same model with its dropout following the mode passes."""

from pathlib import Path

import pytest

MODEL = Path(__file__).parent / "liars" / "dropout_forced.py"
NAMED = "dropout left active after layers.0.w_o (dropout in training mode, p = 0.1)"


@pytest.fixture(scope="module")
def table(tmp_path_factory, minilm) -> Path:
    """The table infer writes for the model with its dropout following the mode."""
    from bertconv.cli import run

    out = tmp_path_factory.mktemp("dropout") / "eval.toml"
    config = minilm / "config.json"
    assert run(["infer", f"{MODEL}:EvalBert", "--config", str(config), "--out", str(out)]) == 0
    return out


def test_the_model_with_its_dropout_following_the_mode_passes(table, minilm, cli):
    code, out, err = cli("verify", minilm, "--model", f"{MODEL}:EvalBert", "--layout", table)
    assert code == 0 and "PASSED" in out and "left active" not in out + err, out + err


def test_a_dropout_left_active_fails_verify_named(table, minilm, cli):
    model = f"{MODEL}:ForcedDropoutBert"
    code, out, err = cli("verify", minilm, "--model", model, "--layout", table)
    assert code == 1 and "PASSED" not in out, out + err
    assert f"layer 1: {NAMED}: two runs of the same batch differ" in out, out
    assert "confirmed" not in out and "No deviation bertconv knows" not in out, out


def test_infer_refuses_a_dropout_left_active_naming_it(tmp_path, minilm, cli):
    out = tmp_path / "t.toml"
    model = f"{MODEL}:ForcedDropoutBert"
    code, said, err = cli("infer", model, "--config", minilm / "config.json", "--out", out)
    assert code == 1 and not out.exists(), said + err
    assert NAMED in err and "Traceback" not in err, err


def test_noise_of_the_models_own_fails_verify_as_outputs_that_differ(table, minilm, cli):
    model = f"{MODEL}:NoisyBert"
    code, out, err = cli("verify", minilm, "--model", model, "--layout", table)
    assert code == 1 and "PASSED" not in out, out + err
    assert "outputs that differ between two forwards of the same batch" in out, out
    assert "confirmed" not in out and "Your model computes" not in out, out
