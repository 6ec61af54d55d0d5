"""Calling styles of public from-scratch BERTs (tests/zoo/style_*.py): masks in every form
(extended, additive, True at the padding, none: made from the pad id), a masked-LM head's
positions given to the forward, vendors' fused code (biases added apart from their projections
in either order, bias and GELU or tanh in TorchScript functions, LayerNorms reading `.data`), a
feed-forward of `Conv1d(kernel_size=1)` (its table row a `conv1d` transform). Each is
inferred, then verified PASSED on the real all-MiniLM-L6-v2, as tests/test_zoo.py does for the
zoo."""

from pathlib import Path

import pytest
import torch

import bertconv
from bertconv.yours import harness

ZOO = Path(__file__).parent / "zoo"

# spec -> the mask form the harness settles on (None: no mask given, the pad id makes it)
STYLES = {
    "style_masks.py:ExtendedMaskBert": "(B, 1, 1, T), 1 at the tokens",
    "style_masks.py:AdditiveMaskBert": "(B, 1, 1, T), -10000 at the padding",
    "style_masks.py:PaddingMaskBert": "(B, T), True at the padding",
    "style_masks.py:PadIdBert": "(B, T, T), 1 at the tokens",  # given, though optional
    "style_masks.py:MaskedLMBert": None,
    "style_fused.py:FusedBert": "(B, T), 1 at the tokens",
    "style_conv.py:ConvBert": "(B, T), True at the padding",
    "style_held.py:BufferBert": "(B, T), 1 at the tokens",
    "style_held.py:ScriptedPoolerBert": "(B, T), 1 at the tokens",
    "style_pretraining.py:PretrainingBert": None,
    "style_time_first.py:TimeFirstBert": "(B, T), True at the padding",
    "style_dict_input.py:Kodierer": "(B, T), 1 at the tokens",
}


@pytest.mark.parametrize("name", STYLES)
def test_each_style_is_inferred_and_verified_on_minilm(name, minilm, tmp_path, cli):
    table = tmp_path / "table.toml"
    code, _, err = cli("infer", ZOO / name, "--out", table)
    assert code == 0, err
    code, out, err = cli("verify", minilm, "--model", ZOO / name, "--layout", table)
    assert code == 0 and "PASSED" in out, out + err
    assert sum(line.startswith("layer") for line in out.splitlines()) == 6


@pytest.mark.parametrize("name", STYLES)
def test_the_harness_says_which_mask_form_the_forward_takes(name):
    from bertconv.batches import random_batch

    config = bertconv.BertConfig(
        hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96
    )
    model = harness.load(str(ZOO / name), {}, config, random_batch(config, 8))
    given = "attention_mask" in model.plan.given
    assert (model.plan.mask if given else None) == STYLES[name]
    assert given or model.prepare(random_batch(config, 8))["input_ids"].eq(0).any()
    assert torch.jit._state._enabled  # TorchScript off only while the model is imported


def test_a_scripted_function_runs_as_python_where_the_trace_sees_it():
    from bertconv.batches import random_batch

    config = bertconv.BertConfig(num_hidden_layers=1)
    model = harness.load(str(ZOO / "style_fused.py:FusedBert"), {}, config, random_batch(config))
    run = model.run(model.prepare(random_batch(config)))
    assert {"erf", "tanh"} <= {call.name for call in run.trace.calls}


def test_where_every_mask_form_raises_the_first_error_is_the_models(tmp_path, cli):
    source = tmp_path / "needs.py"
    source.write_text(
        "import torch\n"
        "class Bert(torch.nn.Module):\n"
        "    def __init__(self, config):\n"
        "        super().__init__()\n"
        "        self.emb = torch.nn.Embedding(config.vocab_size, config.hidden_size)\n"
        "    def forward(self, input_ids, attention_mask):\n"
        "        raise ValueError(f'mask of {attention_mask.dim()} dims')\n"
    )
    code, _, err = cli("infer", f"{source}:Bert", "--out", tmp_path / "t.toml")
    assert code == 2 and "ValueError: mask of 2 dims" in err, err


def test_a_conv1d_projection_is_converted_into_and_back(minilm, tmp_path, cli):
    table = tmp_path / "conv.toml"
    assert cli("infer", ZOO / "style_conv.py:ConvBert", "--out", table)[0] == 0
    assert 'conv1d = "encoder.layer.{layer}.intermediate.dense.weight"' in table.read_text()
    code, _, err = cli("convert", minilm, "--to", table, "--out", tmp_path / "conv")
    assert code == 0, err
    code, _, err = cli("convert", tmp_path / "conv", "--from", table, "--out", tmp_path / "back")
    assert code == 0, err
    code, out, err = cli("verify", tmp_path / "back")
    assert code == 0 and "PASSED" in out, out + err


IDS, TYPES, MASK = "input_ids", "token_type_ids", "attention_mask"


@pytest.mark.parametrize(
    "signature, expected",
    [
        ("ids, segs, keep", {"ids": IDS, "segs": TYPES, "keep": MASK}),
        ("ids, segment_ids, m", {"ids": IDS, "segment_ids": TYPES, "m": MASK}),
        ("x, y", {"x": IDS, "y": TYPES}),
    ],
)
def test_a_parameter_left_after_the_ids_and_token_types_is_the_mask(signature, expected):
    namespace = {}
    exec(f"def forward(self, {signature}): pass", namespace)
    model = type("Model", (torch.nn.Module,), {"forward": namespace["forward"]})()
    assert harness.plan(model, "model.py:Model").arguments == expected


def test_a_classifier_beside_a_masked_lm_head_is_next_sentence_prediction(
    checkpoints, tmp_path, cli
):
    """No class has a masked-LM head and a sequence classifier: the `classifier` is NSP, and on a
    pre-training checkpoint both heads are loaded and compared."""
    name, table = ZOO / "style_pretraining.py:PretrainingBert", tmp_path / "table.toml"
    pretraining = checkpoints["pretraining"]
    code, _, err = cli("infer", name, "--config", pretraining / "config.json", "--out", table)
    assert code == 0 and '"classifier.weight" = "cls.seq_relationship.weight"' in table.read_text()
    code, out, err = cli("verify", pretraining, "--model", name, "--layout", table)
    assert code == 0 and "PASSED" in out, out + err
    assert "mlm logits" in out and "nsp logits" in out, out


def test_a_forward_taking_one_dict_of_inputs_is_given_one():
    """`forward(self, batch: dict)` (or Dict[...], Mapping, as a string under `from __future__
    import annotations`): the inputs in one dict, under transformers' names."""
    for annotation in ("dict", "dict[str, torch.Tensor]", "'Mapping[str, torch.Tensor]'"):
        namespace = {"torch": torch, "Mapping": __import__("typing").Mapping}
        exec(f"def forward(self, batch: {annotation}, labels=None): pass", namespace)
        model = type("Model", (torch.nn.Module,), {"forward": namespace["forward"]})()
        found = harness.plan(model, "model.py:Model")
        assert found.packed and set(found.arguments) == {IDS, MASK, TYPES}, annotation
    namespace = {}
    exec("def forward(self, batch): pass", namespace)  # no annotation: the ids, as ever
    model = type("Model", (torch.nn.Module,), {"forward": namespace["forward"]})()
    assert not harness.plan(model, "model.py:Model").packed


@pytest.mark.parametrize(
    "name, said",
    [
        ("Verschoben", "layer 6 as computed inside: your forward returns no output computed"),
        # on a sentence directory, a per-text vector that is not its pooler is its sentence
        # vector: the first token's, where MiniLM pools by mean
        ("OhneBuendel", "sentence embedding: your last hidden state agrees"),
        ("Eps", "Your model computes LayerNorm eps 1e-05"),
    ],
)
def test_a_dict_taking_model_that_is_not_bert_fails_for_its_own_reason(
    name, said, minilm, tmp_path, cli
):
    """It returns something else than it computes, drops its pooler, or has an eps of its own:
    FAILED, the reason named."""
    model, table = ZOO / "style_dict_input.py", tmp_path / "table.toml"
    assert cli("infer", f"{model}:Kodierer", "--out", table)[0] == 0
    code, out, err = cli("verify", minilm, "--model", f"{model}:{name}", "--layout", table)
    assert code == 1 and "FAILED" in out and said in out, out + err


def test_a_patch_of_torch_erf_fails_named_and_never_confirmed_as_a_cause(minilm, tmp_path, cli):
    """The module swaps torch.erf for a tanh formula ("faster"): the hand-written GELU follows
    it, transformers' reference does not."""
    model, table = ZOO / "style_dict_input.py", tmp_path / "table.toml"
    assert cli("infer", f"{model}:Kodierer", "--out", table)[0] == 0
    (tmp_path / "patched.py").write_text(
        "import sys, torch\n"
        f"sys.path.insert(0, {str(ZOO)!r})\n"
        "from style_dict_input import Kodierer\n"
        "torch.erf = lambda x: torch.tanh(1.1283791670955126 * x * (1 + 0.044715 * x * x))\n"
    )
    code, out, err = cli("verify", minilm, "--model", f"{tmp_path / 'patched.py'}:Kodierer",
                         "--layout", table)  # fmt: skip
    assert code == 1 and "the model's module replaces torch.erf" in out, out + err
    assert "Your model computes" not in out  # how a confirmed cause is said
    assert "computes something else than BERT's. The config's hidden_act" in out, out
