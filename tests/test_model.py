"""bertconv's model against transformers' on the same weights: every variant of checkpoint,
every layer, the pooler and both heads."""

import pytest
import torch

import bertconv
import bertconv.catalog
import bertconv.heads
from bertconv.catalog import read_config
from bertconv.config import ACTIVATIONS, BertConfig
from bertconv.errors import CheckpointError
from bertconv.model import activation
from bertconv.verify import FLOAT32_MAX_ABS
from conftest import TINY, VARIANTS


def transformers_outputs(reference, batch, heads: bool):
    with torch.no_grad():
        base = reference.bert(**batch, output_hidden_states=True)
        full = reference(**batch)
    out = {f"hidden {i}": h for i, h in enumerate(base.hidden_states)}
    out["pooler"] = base.pooler_output
    if heads:
        out["mlm"] = full.prediction_logits
        out["nsp"] = full.seq_relationship_logits
    return out


def bertconv_outputs(model, batch):
    with torch.no_grad():
        result = model(**batch)
    out = {f"hidden {i}": h for i, h in enumerate(result.hidden_states)}
    out["pooler"] = result.pooler_output
    if hasattr(result, "prediction_logits"):
        out["mlm"] = result.prediction_logits
        out["nsp"] = result.seq_relationship_logits
    return out


def max_differences(ours: dict, theirs: dict, mask: torch.Tensor) -> dict[str, float]:
    assert ours.keys() == theirs.keys()
    real = mask.bool()
    per_token = lambda k: k.startswith("hidden") or k == "mlm"  # noqa: E731
    return {
        k: (ours[k][real] - theirs[k][real]).abs().max().item()
        if per_token(k)
        else (ours[k] - theirs[k]).abs().max().item()
        for k in ours
    }


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_checkpoint_variant_computes_what_transformers_computes(
    variant, checkpoints, reference, batch
):
    model = bertconv.load(checkpoints[variant])
    heads = variant != "base"
    assert type(model) is (bertconv.BertForPreTraining if heads else bertconv.BertModel)
    assert not model.training
    diffs = max_differences(
        bertconv_outputs(model, batch),
        transformers_outputs(reference, batch, heads),
        batch["attention_mask"],
    )
    assert len(diffs) == TINY["num_hidden_layers"] + 2 + (2 if heads else 0)
    assert max(diffs.values()) <= FLOAT32_MAX_ABS, diffs


def test_load_without_heads_gives_the_encoder(checkpoints):
    model = bertconv.load(checkpoints["pretraining"], heads=False)
    assert type(model) is bertconv.BertModel


def test_every_parameter_comes_from_the_file(checkpoints, reference):
    model = bertconv.load(checkpoints["legacy"])
    expected = reference.state_dict()
    params = dict(model.named_parameters())
    assert all(p.device.type == "cpu" and p.requires_grad for p in params.values())
    assert torch.equal(
        params["encoder.layer.1.attention.self.Wk.weight"],
        expected["bert.encoder.layer.1.attention.self.key.weight"],
    )
    assert torch.equal(
        params["embeddings.LayerNorm.gamma"], expected["bert.embeddings.LayerNorm.weight"]
    )
    # The MLM decoder is the word-embedding matrix itself, not a copy.
    assert "cls.predictions.decoder.weight" not in params


def test_the_model_trains(checkpoints, batch):
    model = bertconv.load(checkpoints["pretraining"]).train()
    out = model(**batch)
    loss = out.prediction_logits.logsumexp(-1).mean() + out.seq_relationship_logits.sum()
    loss.backward()
    assert model.embeddings.word_embeddings.weight.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "field, value, message",
    [
        (
            "position_embedding_type",
            "rotary",
            "position_embedding_type='rotary' is not supported",
        ),
        ("hidden_act", "swish", "hidden_act='swish' is not supported"),
        ("is_decoder", True, "is_decoder=True is not supported"),
        ("model_type", "albert", "model_type='albert' is not supported"),
        ("num_attention_heads", 5, "hidden_size=32 is not a multiple of num_attention_heads=5"),
    ],
)
def test_config_refuses_what_the_model_does_not_implement(field, value, message):
    with pytest.raises(CheckpointError, match=message):
        read_config({**TINY, field: value}, source="some/config.json")


def test_config_keeps_known_fields_and_leaves_metadata_out():
    config = BertConfig.from_dict({**TINY, "architectures": ["BertModel"], "dtype": "float32"})
    assert config.hidden_size == 32 and config.layer_norm_eps == 1e-12


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_every_accepted_activation_computes_what_transformers_does(name):
    from transformers.activations import ACT2FN

    x = torch.linspace(-6, 6, 1001)
    assert torch.allclose(activation(name)(x), ACT2FN[name](x), rtol=0, atol=1e-6)


def test_padding_is_skipped_and_left_zero(checkpoints, batch):
    """The dense layers run on real tokens only: padded positions come out as zeros, and a
    batch without a mask computes what an all-ones mask does."""
    model = bertconv.load(checkpoints["pretraining"])
    with torch.no_grad():
        out = model(**batch)
        pad = ~batch["attention_mask"].bool()
        assert all((h[pad] == 0).all() for h in out.hidden_states[1:])
        assert (out.prediction_logits[pad] == 0).all()
        ones = torch.ones_like(batch["attention_mask"])
        a = model(batch["input_ids"], None, batch["token_type_ids"]).last_hidden_state
        b = model(batch["input_ids"], ones, batch["token_type_ids"]).last_hidden_state
    assert torch.equal(a, b)  # a mask hiding nothing is no mask: the same path, the same values


def test_a_mask_hiding_nothing_packs_nothing_and_gives_sdpa_no_mask():
    from bertconv.model import Padding

    whole = Padding(torch.ones(2, 5, dtype=torch.long), torch.Size((2, 5)))
    assert whole.real is None and whole.key_mask is None
    padded = Padding(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]), torch.Size((2, 5)))
    assert padded.real.tolist() == [0, 1, 2, 3, 4, 5, 6] and padded.key_mask.shape == (2, 1, 1, 5)


def sequence_by_sequence(q, k, v, offsets, offsets_k, longest, longest_k):
    """What FlashAttention's variable-length kernel computes, written plainly (for the CPU)."""
    out = torch.empty_like(q)
    for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        each = [t[start:end].transpose(0, 1) for t in (q, k, v)]  # (heads, length, head_dim)
        out[start:end] = torch.nn.functional.scaled_dot_product_attention(*each).transpose(0, 1)
    return out


@pytest.mark.parametrize(
    "capability, head_dim, dtype, packed",
    [
        ((9, 0), 64, torch.bfloat16, True),  # an H100
        ((8, 0), 64, torch.float16, True),  # an A100
        ((7, 5), 64, torch.bfloat16, False),  # a T4: no FlashAttention
        ((9, 0), 64, torch.float32, False),  # float32 keeps the exact path
        ((9, 0), 12, torch.bfloat16, False),  # a head size the kernel does not take
    ],
)
def test_the_packed_path_is_taken_only_where_flashattention_runs(
    capability, head_dim, dtype, packed, monkeypatch
):
    from bertconv import packed as packing

    config = bertconv.BertConfig(**{**TINY, "hidden_size": head_dim * 2, "num_attention_heads": 2})
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(packing, "varlen_kernel", lambda: object())
    assert (packing.why_not(config, torch.device("cuda", 0), dtype) is None) is packed


@pytest.mark.parametrize(
    "settings, reason",
    [
        ({}, "the model is on cpu, not a CUDA GPU"),
        ({"position_embedding_type": "relative_key"}, "'relative_key' adds to the scores"),
    ],
)
def test_the_packed_path_is_refused_saying_why(settings, reason):
    from bertconv import packed as packing
    from bertconv.errors import UsageError

    model = bertconv.BertModel(bertconv.BertConfig(**{**TINY, **settings}))
    with pytest.raises(UsageError, match=reason):
        packing.enable(model)


@pytest.mark.parametrize("masked", [True, False])
def test_attention_on_the_packed_tokens_computes_what_the_padded_one_does(
    masked, reference, batch, monkeypatch
):
    """The GPU's path (attention sequence by sequence in the packing, no padding made) against
    the padded path, with the kernel's arithmetic written plainly so that it runs here."""
    from bertconv import model as models
    from bertconv import packed as packing

    config = bertconv.BertConfig(**TINY)
    model = models.BertModel(config).eval()
    inputs = batch if masked else {k: v for k, v in batch.items() if k != "attention_mask"}
    with torch.no_grad():
        padded = model(**inputs)
        monkeypatch.setattr(packing, "why_not", lambda *_: None)
        monkeypatch.setattr(packing, "varlen_kernel", lambda: sequence_by_sequence)
        packing.enable(model)
        assert type(model.encoder.layer[0].attention.self) is packing.PackedSelfAttention
        packed = model(**inputs)
    real = batch["attention_mask"].bool() if masked else torch.ones_like(batch["input_ids"]).bool()
    for a, b in zip(padded.hidden_states, packed.hidden_states, strict=True):
        assert (a[real] - b[real]).abs().max() < 1e-5


@pytest.mark.parametrize("name", list(bertconv.catalog.of("bert").classes))
def test_each_class_has_a_pooler_where_transformers_class_does(name):
    import transformers

    config = BertConfig(**TINY)
    theirs = getattr(transformers, name)(transformers.BertConfig(**TINY))
    theirs = theirs if name == "BertModel" else theirs.bert
    ours = bertconv.heads.CLASSES[name](config)
    assert (ours.pooler is None) is (theirs.pooler is None)


@pytest.mark.parametrize("relative", [False, True])
def test_attention_is_the_papers_arithmetic(relative):
    """softmax(q k^T / sqrt(head_dim) + bias) v, padded keys left out, written out plainly."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g) for _ in range(3))  # (B, heads, T, head_dim)
    key_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]).bool()[:, None, None, :]
    bias = torch.randn(2, 3, 5, 5, generator=g) if relative else None
    scores = q @ k.transpose(-1, -2) / 2 + (0 if bias is None else bias)
    expected = scores.masked_fill(~key_mask, float("-inf")).softmax(-1) @ v
    got = bertconv.model.attention(q, k, v, key_mask, bias)
    assert (got - expected).abs().max() <= FLOAT32_MAX_ABS
