"""The zoo's ModernBERT and NomicBERT ports (tests/zoo/modern_ports.py) compute what transformers
computes on the same weights: every parameter moved off its initialisation, sequences longer
than ModernBERT's local window, padded on the right and on the left. They are the ports
bertconv's verify must pass (issue 47); a port wrong here would make a right verdict look
wrong."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "zoo"))
import modern_ports  # noqa: E402

transformers = pytest.importorskip("transformers")
TOLERANCE = 1e-5


def moved(model: torch.nn.Module) -> torch.nn.Module:
    """Every parameter drawn anew (seeded): norms around 1, the rest around 0."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1.0 + 0.3 * noise if "norm" in name.lower() else 0.2 * noise)
    return model.eval()


def batches(vocab: int, length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(ids, mask): one row whole and one short, padded on the right, then on the left."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (2, length), generator=g)
    right = torch.ones(2, length, dtype=torch.long)
    right[1, length - 7 :] = 0
    return [(ids, right), (ids, right.flip(1))]


def tiny_modernbert():
    """A ModernBertModel of four layers (global, local, local, global), a window of 6."""
    config = transformers.ModernBertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=24, local_attention=6, global_attn_every_n_layers=3,
        max_position_embeddings=64, pad_token_id=0,
    )  # fmt: skip
    return moved(transformers.ModernBertModel(config))


def real_tokens_differ(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor) -> float:
    keep = mask.bool()
    return (ours[keep] - theirs[keep]).abs().max().item()


@pytest.mark.parametrize(
    "load",
    [modern_ports.modernbert_from_transformers, modern_ports.modernbert_complex_from_transformers],
)
def test_each_modernbert_port_computes_transformers_modernbert(load):
    theirs = tiny_modernbert()
    port = load(theirs)
    assert [b.window for b in getattr(port, "blocks", [])] in ([], [None, 3, 3, None])
    for ids, mask in batches(theirs.config.vocab_size, 20):  # 20 positions: over three windows of 6
        with torch.no_grad():
            expected = theirs(input_ids=ids, attention_mask=mask).last_hidden_state
            got = port(ids, mask)
        assert real_tokens_differ(got, expected, mask) < TOLERANCE


def tiny_nomic():
    config = transformers.NomicBertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
        intermediate_size=24, max_position_embeddings=64, type_vocab_size=2,
    )  # fmt: skip
    return moved(transformers.NomicBertModel(config))


def test_the_nomic_port_computes_transformers_nomicbert_under_the_hubs_names():
    torch.manual_seed(0)
    theirs = tiny_nomic()
    port = modern_ports.nomic_from_transformers(theirs)
    assert "encoder.layers.0.mlp.fc12.weight" in port.state_dict()  # the gate, as on the Hub
    types = torch.zeros(2, 20, dtype=torch.long)
    types[:, 10:] = 1
    for ids, mask in batches(theirs.config.vocab_size, 20):
        with torch.no_grad():
            expected = theirs(input_ids=ids, attention_mask=mask, token_type_ids=types)
            got = port(ids, mask, types)
        assert real_tokens_differ(got, expected.last_hidden_state, mask) < TOLERANCE


def test_a_port_with_a_mistake_is_told_apart_by_these_checks():
    """The comparison can fail: the global base used in the local layers moves the output."""
    theirs = tiny_modernbert()
    port = modern_ports.modernbert_from_transformers(theirs)
    cos, sin = port.blocks[0].cos, port.blocks[0].sin  # the global base's tables
    for block in port.blocks[1:3]:
        block.cos, block.sin = cos, sin
    ids, mask = batches(theirs.config.vocab_size, 20)[0]
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask).last_hidden_state
        assert real_tokens_differ(port(ids, mask), expected, mask) > 1e-3


@pytest.mark.parametrize("mistake", modern_ports.MODERNBERT_MISTAKES)
def test_each_modernbert_mistake_of_the_zoo_moves_the_output(mistake):
    """Each mistaken port differs from transformers on the real tokens, well beyond the
    tolerance: the zoo's mistakes are mistakes on these sizes (a window over 20 positions, the
    global and local bases apart), for verify to find and name."""
    torch.manual_seed(0)
    theirs = tiny_modernbert()
    port = modern_ports.modernbert_mistaken(theirs, mistake)
    for ids, mask in batches(theirs.config.vocab_size, 20):
        with torch.no_grad():
            expected = theirs(input_ids=ids, attention_mask=mask).last_hidden_state
            assert real_tokens_differ(port(ids, mask), expected, mask) > 1e-3


@pytest.mark.parametrize("mistake", modern_ports.NOMIC_MISTAKES)
def test_each_nomic_mistake_of_the_zoo_moves_the_output(mistake):
    torch.manual_seed(0)
    theirs = tiny_nomic()
    port = modern_ports.nomic_mistaken(theirs, mistake)
    ids, mask = batches(theirs.config.vocab_size, 20)[0]
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask).last_hidden_state
        assert real_tokens_differ(port(ids, mask), expected, mask) > 1e-3
