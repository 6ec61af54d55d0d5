"""bertconv's model computes ModernBERT and NomicBERT (issue 47, the model's part): rotary
positions and a local window as terms of the one attention, a gated feed-forward, LayerNorms
before each sublayer with a final one, no biases, as facts of its config. Held here to
transformers' ModernBertModel and NomicBertModel on the same weights (every parameter moved
off its initialisation), every layer within 1e-5 on the real tokens, over 20 positions (three
windows of 6), padded on the right and on the left. The weights are placed by hand here: the
tables that place them (mappings/) are the issue's next part."""

import pytest
import torch
from test_modern_ports import batches, moved, real_tokens_differ, tiny_modernbert, tiny_nomic

from bertconv.config import BertConfig
from bertconv.model import BertModel

transformers = pytest.importorskip("transformers")
TOLERANCE = 1e-5


def ours_for_modernbert(theirs) -> BertModel:
    c = theirs.config
    config = BertConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads, intermediate_size=c.intermediate_size,
        hidden_act=c.hidden_activation, layer_norm_eps=c.norm_eps,
        max_position_embeddings=c.max_position_embeddings, token_types=False,
        rotary_theta=c.rope_parameters["full_attention"]["rope_theta"],
        local_rotary_theta=c.rope_parameters["sliding_attention"]["rope_theta"],
        local_attention=c.local_attention, global_attn_every_n_layers=c.global_attn_every_n_layers,
        rotary_positions=True, gated=True, norm_first=True, linear_bias=False, norm_bias=False,
    )  # fmt: skip
    model = BertModel(config, pooler=False).eval()
    t = theirs.state_dict()
    state = {
        "embeddings.word_embeddings.weight": t["embeddings.tok_embeddings.weight"],
        "embeddings.LayerNorm.gamma": t["embeddings.norm.weight"],
        "encoder.final_norm.gamma": t["final_norm.weight"],
    }
    for i in range(c.num_hidden_layers):
        mine, hf = f"encoder.layer.{i}.", f"layers.{i}."
        q, k, v = t[hf + "attn.Wqkv.weight"].chunk(3)
        state |= {mine + f"attention.W{n}.weight": w for n, w in zip("qkv", (q, k, v), strict=True)}
        state[mine + "attention_output.weight"] = t[hf + "attn.Wo.weight"]
        if i:
            state[mine + "attention_norm.gamma"] = t[hf + "attn_norm.weight"]
        state[mine + "mlp_norm.gamma"] = t[hf + "mlp_norm.weight"]
        activated, gate = t[hf + "mlp.Wi.weight"].chunk(2)
        state[mine + "intermediate.dense.weight"] = activated
        state[mine + "intermediate.up.weight"] = gate
        state[mine + "output.weight"] = t[hf + "mlp.Wo.weight"]
    model.load_state_dict(state, strict=True)
    return model


def ours_for_nomic(theirs) -> BertModel:
    c = theirs.config
    config = BertConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads, intermediate_size=c.intermediate_size,
        hidden_act=c.hidden_act, layer_norm_eps=c.layer_norm_eps,
        max_position_embeddings=c.max_position_embeddings, type_vocab_size=c.type_vocab_size,
        rotary_theta=c.rope_parameters["rope_theta"], rotary_positions=True, gated=True,
        linear_bias=False,
    )  # fmt: skip
    model = BertModel(config, pooler=False).eval()
    t = theirs.state_dict()
    state = {
        "embeddings.word_embeddings.weight": t["embeddings.word_embeddings.weight"],
        "embeddings.token_type_embeddings.weight": t["embeddings.token_type_embeddings.weight"],
        "embeddings.LayerNorm.gamma": t["embeddings.LayerNorm.weight"],
        "embeddings.LayerNorm.beta": t["embeddings.LayerNorm.bias"],
    }
    for i in range(c.num_hidden_layers):
        mine, hf = f"encoder.layer.{i}.", f"layers.{i}."
        for n in "qkv":
            state[mine + f"attention.self.W{n}.weight"] = t[hf + f"self_attn.{n}_proj.weight"]
        state[mine + "attention.output.dense.weight"] = t[hf + "self_attn.o_proj.weight"]
        state[mine + "intermediate.dense.weight"] = t[hf + "mlp.gate_proj.weight"]
        state[mine + "intermediate.up.weight"] = t[hf + "mlp.up_proj.weight"]
        state[mine + "output.dense.weight"] = t[hf + "mlp.down_proj.weight"]
        for norm, name in (("attention.output", "post_attention"), ("output", "post_mlp")):
            state[mine + f"{norm}.LayerNorm.gamma"] = t[hf + f"{name}_layernorm.weight"]
            state[mine + f"{norm}.LayerNorm.beta"] = t[hf + f"{name}_layernorm.bias"]
    model.load_state_dict(state, strict=True)
    return model


def every_layer_differs(ours, theirs, ids, mask, **extra) -> list[float]:
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask, output_hidden_states=True, **extra)
        got = ours(ids, mask, extra.get("token_type_ids"))
    pairs = list(zip(got.hidden_states[:-1], expected.hidden_states[:-1], strict=True))
    pairs.append((got.last_hidden_state, expected.last_hidden_state))
    return [real_tokens_differ(a, b, mask) for a, b in pairs]


def test_bertconvs_model_computes_modernbert():
    torch.manual_seed(0)
    theirs = tiny_modernbert()
    ours = ours_for_modernbert(theirs)
    assert [layer.attention.reach for layer in ours.encoder.layer] == [None, 3, 3, None]
    for ids, mask in batches(theirs.config.vocab_size, 20):
        differs = every_layer_differs(ours, theirs, ids, mask)
        assert max(differs) < TOLERANCE, differs


def test_bertconvs_model_computes_nomicbert():
    torch.manual_seed(0)
    theirs = tiny_nomic()
    ours = ours_for_nomic(theirs)
    types = torch.zeros(2, 20, dtype=torch.long)
    types[:, 10:] = 1
    for ids, mask in batches(theirs.config.vocab_size, 20):
        differs = every_layer_differs(ours, theirs, ids, mask, token_type_ids=types)
        assert max(differs) < TOLERANCE, differs


def test_the_window_and_the_bases_are_what_the_parity_rests_on():
    """The comparison can fail: the same model with no window in its local layers, or one base
    for every layer, differs from transformers'."""
    torch.manual_seed(0)
    theirs = tiny_modernbert()
    ids, mask = batches(theirs.config.vocab_size, 20)[0]
    for change in ("reach", "theta"):
        ours = ours_for_modernbert(theirs)
        for layer in ours.encoder.layer[1:3]:
            attention = layer.attention
            setattr(attention, change, None if change == "reach" else ours.config.rotary_theta)
        assert max(every_layer_differs(ours, theirs, ids, mask)) > 1e-3


def test_moved_keeps_no_parameter_at_its_initialisation():
    """The weights the parity is shown on: none left as initialised (a LayerNorm's ones would
    hide a gamma mapped to the wrong tensor)."""
    model = moved(transformers.ModernBertModel(tiny_modernbert().config))
    for p in model.parameters():
        assert not torch.equal(p, torch.ones_like(p)) and not torch.equal(p, torch.zeros_like(p))
