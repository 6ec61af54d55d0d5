"""The tiny BERT of the tests: its config fields and a vocabulary, in a module of their own so
that scripts outside pytest (tests/fixtures/tf/make_tf_fixtures.py) use the same ones."""

import string

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    type_vocab_size=2,
)
SEED = 0

# Enough word pieces for verify's sentences to tokenize into real ids.
VOCAB = (
    ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    + list(string.ascii_lowercase)
    + [f"##{c}" for c in string.ascii_lowercase]
    + [".", ",", "?", "the", "a", "to", "of", "and", "in", "is", "it", "you", "on", "at"]
    + ["fox", "dog", "bank", "river", "keys", "table", "bread", "town", "put", "went", "my"]
    + ["over", "next", "where", "did", "they", "are", "reads", "sentence", "both", "once"]
    + ["quick", "brown", "lazy", "jumps", "kitchen", "deposit", "bert"]
)
assert len(VOCAB) == TINY["vocab_size"]
