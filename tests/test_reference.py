"""transformers' reference is never touched by the user's code: a model whose module patches torch
on import (tests/liars/patch_*.py: GELU made tanh, an apex-style LayerNorm of eps 1e-5, a
half-precision softmax) fails verify on the real all-MiniLM-L6-v2, the patch named; a patch that
changes only transformers' arithmetic (scaled_dot_product_attention) no longer fails a right
model; torch is as shipped again for the next command."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bertconv.yours import fence

LIARS = Path(__file__).parent / "liars"
SHIPPED = F.gelu, torch.nn.LayerNorm, F.scaled_dot_product_attention

# module -> (the patch the report names, what the diagnosis, BERT recomputed with torch as
# shipped, finds the model computes)
PATCHES = {
    "patch_gelu": ("torch.nn.functional.gelu", "computes tanh-approximate GELU"),
    "patch_layernorm": ("torch.nn.LayerNorm", "computes LayerNorm eps 1e-05"),
    "patch_softmax": (
        "torch.Tensor.softmax",
        "the attention (scores, scaling, mask, softmax) differs",
    ),
}


@pytest.fixture(autouse=True)
def shipped():
    """No patch outlives its test: other tests in this process compute with torch as shipped."""
    yield
    fence.unpatch()
    assert (F.gelu, torch.nn.LayerNorm, F.scaled_dot_product_attention) == SHIPPED
    assert "softmax" not in vars(torch.Tensor)


@pytest.fixture(scope="module")
def table(tmp_path_factory, minilm):
    """The table infer writes for the BERT the patching scripts build."""
    from bertconv.cli import run

    out = tmp_path_factory.mktemp("patches") / "bert.toml"
    config = minilm / "config.json"
    assert run(["infer", f"{LIARS / 'patch_free.py'}:Bert", "--config", config, "--out", out]) == 0
    return out


def verify(cli, minilm, table, module: str):
    return cli("verify", minilm, "--model", f"{LIARS / module}.py:Bert", "--layout", table)


def test_the_model_patching_nothing_passes_with_nothing_named(cli, minilm, table):
    code, out, err = verify(cli, minilm, table, "patch_free")
    assert code == 0 and "PASSED" in out and "replaces" not in out, out + err


@pytest.mark.parametrize("module", PATCHES)
def test_a_model_computing_with_its_patch_of_torch_fails_the_patch_named(
    module, cli, minilm, table
):
    code, out, err = verify(cli, minilm, table, module)
    assert code == 1 and "PASSED" not in out, out + err
    patch, cause = PATCHES[module]
    assert f"the model's module replaces {patch}" in out and cause in out, out


def test_the_patch_is_named_and_fails_again_on_a_second_verify_in_the_same_process(
    cli, minilm, table
):
    """The module is imported once per process: its patch, undone after the first verify, is
    made again for the second."""
    for _ in range(2):
        code, out, _ = verify(cli, minilm, table, "patch_gelu")
        assert code == 1 and "torch.nn.functional.gelu" in out, out
        fence.unpatch()


def test_a_patch_of_what_only_transformers_uses_passes_a_right_model_named(cli, minilm, table):
    """The model attends by its own arithmetic; transformers' reference, were it built after the
    import, would attend with the patched scale and fail the right model."""
    code, out, err = verify(cli, minilm, table, "patch_sdpa")
    assert code == 0 and "PASSED" in out, out + err
    assert "replaces torch.nn.functional.scaled_dot_product_attention" in out, out


def test_torch_is_as_shipped_for_the_reference_after_an_earlier_import(cli, minilm, table):
    """A patching module imported by an earlier command of this process (infer, here) does not
    reach the reference of the next: bertconv's own model still verifies."""
    fence.import_factory(f"{LIARS / 'patch_gelu.py'}:Bert")
    assert F.gelu is not SHIPPED[0]
    code, out, err = cli("verify", minilm, "--device", "cpu")
    assert code == 0 and "PASSED" in out, out + err
