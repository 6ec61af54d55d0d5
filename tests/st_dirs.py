"""Tiny sentence-transformers directories, as sentence-transformers itself writes them: a
one-layer BERT with its tokenizer (`encoder`, a fixture in conftest.py), wrapped with Pooling,
an optional Dense and Normalize. A TEST UTILITY."""

import warnings
from pathlib import Path

import torch

# The tokenizer's words: verify's texts (bertconv/sentence.py) read as words, not [UNK].
SPOKEN = (
    "a b man is eating food paris the capital of france and its museums are open on sundays "
    "ok quick brown fox jumps over lazy dog while cat sleeps warm mat sentence embeddings "
    "pooled from every token encoder reads no further"
)
WORDS = SPOKEN.split()


def encoder(root: Path) -> Path:
    """A tiny BERT (16 features, 24 positions) and its tokenizer, saved by transformers."""
    import transformers
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    torch.manual_seed(0)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate([*specials, *dict.fromkeys(WORDS), ",", "."])}
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=20,
                                     max_position_embeddings=24)  # fmt: skip
    transformers.BertModel(config).save_pretrained(root)
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Strip()  # case kept: lower-casing is the directory's
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]", model_max_length=20,
    )  # fmt: skip
    fast.save_pretrained(root)
    return root


def written(encoder: Path, out: Path, modes, dense=None, normalize=True, width=8, **kwargs) -> Path:
    """A directory sentence-transformers writes: the encoder, Pooling (`modes`: one or a
    tuple, concatenated), Dense to `width` features (`dense`: its activation), Normalize;
    `include`: Pooling's include_prompt; the rest for SentenceTransformer (prompts,
    default_prompt_name)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.base.modules import Dense as STDense
        from sentence_transformers.base.modules import Normalize as STNormalize
        from sentence_transformers.base.modules import Transformer
        from sentence_transformers.sentence_transformer.modules import Pooling as STPooling

        torch.manual_seed(0)  # Dense's weights
        include = kwargs.pop("include", True)
        modules = [Transformer(str(encoder)), STPooling(16, modes, include_prompt=include)]
        if dense is not None:
            pooled = 16 * (len(modes) if isinstance(modes, tuple) else 1)
            modules.append(STDense(pooled, width, activation_function=dense))
        modules += [STNormalize()] if normalize else []
        SentenceTransformer(modules=modules, **kwargs).save(str(out))
    return out
