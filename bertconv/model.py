"""BERT from scratch: the encoder of Devlin et al. (2018), computing what transformers' BertModel
and its task classes (pre-training, masked LM, next sentence, sequence / token classification,
multiple choice, question answering) compute, in one file read top to bottom.

Parameter names follow seed 000 ("Code Review for BERT"): attention projections are `Wq/Wk/Wv`,
LayerNorms hold `gamma/beta`; everything else keeps the names of the original release
(`embeddings.word_embeddings`, `encoder.layer.N.attention.output.dense`, `pooler.dense`, ...).
`mappings/bertconv.toml` relates these names to the official ones.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial

import torch
import torch.nn.functional as F
from torch import nn

from .config import ACTIVATIONS, BertConfig


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function a config's hidden_act names (config.ACTIVATIONS)."""
    function, kwargs = ACTIVATIONS[name]
    return partial(getattr(F, function), **kwargs)


# What the model's layers are built with, by name: tests swap an entry to make the model compute
# something else (verify and its diagnosis must then find it).
ACTIVATION_FNS = {name: activation(name) for name in ACTIVATIONS}


class LayerNorm(nn.Module):
    """Normalise over the hidden features, then scale by gamma and shift by beta."""

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(hidden_size))
        self.beta = nn.Parameter(torch.zeros(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.gamma.shape, self.gamma, self.beta, self.eps)


class Embeddings(nn.Module):
    """Token + position + segment embeddings, summed and normalised."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.relative = config.relative

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        # Summed in transformers' order, so that float rounding matches it too.
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        if not self.relative:  # relative positions are the attention's (the table stays unused)
            x = x + self.position_embeddings(torch.arange(input_ids.shape[1], device=x.device))
        return self.dropout(self.LayerNorm(x))


class Padding:
    """Where the real tokens of a padded (B, T) batch are. Padding carries no information, so
    the dense layers (projections and feed-forward: nearly all the arithmetic) run on the real
    tokens alone, packed into one (N, features) matrix. Attention, which needs each sequence
    whole, spreads them out to (B, T, features) and packs its result again."""

    def __init__(self, attention_mask: torch.Tensor | None, shape: torch.Size, device=None) -> None:
        self.shape = shape  # (B, T)
        self.key_device = device
        self.real = self.key_mask = None
        if attention_mask is not None:
            real = attention_mask.flatten().bool()  # (B * T,)
            self.real = real.nonzero().squeeze(1)  # (N,), into B * T
            # Each position's row among the N real tokens. Unpacking gathers these rows (a
            # gather is much faster than a scatter on a GPU); a padded position reads row N,
            # a row of zeros, or, where any values will do, row 0.
            row = real.cumsum(0) - 1
            self.rows = torch.where(real, row, len(self.real))
            self.any_rows = torch.where(real, row, 0)
            # A key-padding mask, broadcast by SDPA: no (B, heads, T, T) tensor is ever built.
            self.key_mask = attention_mask.bool()[:, None, None, :]

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, F) -> (N, F): the real tokens only."""
        x = x.reshape(-1, x.shape[-1])
        return x if self.real is None else x.index_select(0, self.real)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """(N, F) -> (B, T, F), zeros at the padding."""
        if self.real is not None:
            x = torch.cat([x, x.new_zeros(1, x.shape[-1])]).index_select(0, self.rows)
        return x.view(*self.shape, x.shape[-1])

    def sequences(self) -> tuple[torch.Tensor, int]:
        """Where each sequence starts among the packed tokens, and the longest: (B + 1,) int32
        offsets, as FlashAttention's variable-length kernel takes them. A sequence's tokens are
        side by side in the packing (a row's real tokens, in order)."""
        B, T = self.shape
        if self.real is None:
            lengths = torch.full((B,), T, dtype=torch.int32, device=self.key_device)
        else:
            lengths = self.key_mask.view(B, T).sum(1, dtype=torch.int32)
        offsets = F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
        return offsets, int(lengths.max()) if B else 0

    def spread(self, x: torch.Tensor) -> torch.Tensor:
        """(N, F) -> (B, T, F), anything at the padding: attention's queries, keys and values,
        where the key mask hides padded keys and pack drops what padded queries compute."""
        if self.real is None or len(x) == 0:  # no row 0 in a batch of padding alone
            return self.unpack(x)
        return x.index_select(0, self.any_rows).view(*self.shape, x.shape[-1])


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_mask: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    dropout: float = 0.0,
) -> torch.Tensor:
    """softmax(q k^T / sqrt(head_dim) + bias) v, per head: (B, heads, T, head_dim). key_mask
    (B, 1, 1, T) is True at the real keys; bias, broadcast to (B, heads, T, T), is added to the
    scaled scores (the relative-position term), the padded keys then set to -inf in it."""
    mask = key_mask
    if bias is not None:
        mask = bias if key_mask is None else bias.masked_fill(~key_mask, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product attention: softmax(Q K^T / sqrt(head_dim)) V, per head.

    With relative position embeddings (Shaw et al., 2018; Huang et al., 2020: transformers 4's
    position_embedding_type "relative_key" and "relative_key_query"), each query (and key) also
    meets a learned vector for its distance to the other token, the products added to the
    scores."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.Wq = nn.Linear(config.hidden_size, config.hidden_size)
        self.Wk = nn.Linear(config.hidden_size, config.hidden_size)
        self.Wv = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob
        self.position_embedding_type = config.position_embedding_type
        if config.relative:  # a vector per distance, -(max - 1) .. max - 1
            self.distance_embedding = nn.Embedding(config.relative_distances, self.head_dim)
            self.max_positions = config.max_position_embeddings

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, hidden) -> (B, heads, T, head_dim)"""
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)

    def relative_scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """(B, heads, T, T): q_l . d(l - r), and + k_r . d(l - r) for relative_key_query; scaled
        as the scores are (SDPA scales Q K^T itself, and adds these as they are)."""
        positions = torch.arange(q.shape[2], device=q.device)
        distance = positions[:, None] - positions[None, :]  # (T, T)
        d = self.distance_embedding(distance + self.max_positions - 1).to(q.dtype)  # (T, T, hd)
        scores = torch.einsum("bhld,lrd->bhlr", q, d)
        if self.position_embedding_type == "relative_key_query":
            scores = scores + torch.einsum("bhrd,lrd->bhlr", k, d)
        return scores / math.sqrt(self.head_dim)

    def forward(self, x: torch.Tensor, padding: Padding) -> torch.Tensor:
        if self.packed(x):
            return self.packed_attention(x, padding)
        q, k, v = (self.split_heads(padding.spread(W(x))) for W in (self.Wq, self.Wk, self.Wv))
        bias = self.relative_scores(q, k) if hasattr(self, "distance_embedding") else None
        dropout = self.dropout_p if self.training else 0.0
        out = attention(q, k, v, padding.key_mask, bias, dropout)  # (B, heads, T, head_dim)
        return padding.pack(out.transpose(1, 2).flatten(2))  # the heads side by side again

    def packed(self, x: torch.Tensor) -> bool:
        """Can attention run on the packed tokens themselves? On a GPU, in half precision, for
        absolute positions, in eval mode, where this torch has the variable-length kernel."""
        return (
            x.is_cuda
            and x.dtype in (torch.float16, torch.bfloat16)
            and not self.training
            and not hasattr(self, "distance_embedding")
            and self.head_dim % 8 == 0
            and self.head_dim <= 256  # FlashAttention's head sizes
            and flash_capable(x.device)
            and varlen_kernel() is not None
        )

    def packed_attention(self, x: torch.Tensor, padding: Padding) -> torch.Tensor:
        """Each sequence's tokens attend to each other's, in place in the packing (N, hidden):
        no padding is made, and none attended to. Scaled by 1 / sqrt(head_dim), as above."""
        q, k, v = (
            W(x).view(-1, self.num_heads, self.head_dim) for W in (self.Wq, self.Wk, self.Wv)
        )
        offsets, longest = padding.sequences()
        out = varlen_kernel()(q, k, v, offsets, offsets, longest, longest)  # (N, heads, head_dim)
        return out.reshape(len(x), -1)


@cache
def flash_capable(device: torch.device) -> bool:
    """FlashAttention's kernels run on GPUs of compute capability 8.0 (Ampere) and up; older
    ones (a T4, a V100) keep the padded path."""
    return torch.cuda.get_device_capability(device) >= (8, 0)


@cache
def varlen_kernel():
    """FlashAttention's variable-length kernel (torch >= 2.10), where this torch has it."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


class AddNorm(nn.Module):
    """Project back to the hidden size, add the residual, normalise: "Add & Norm"."""

    def __init__(self, in_features: int, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class Attention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = SelfAttention(config)
        self.output = AddNorm(config.hidden_size, config)

    def forward(self, x: torch.Tensor, padding: Padding) -> torch.Tensor:
        return self.output(self.self(x, padding), x)


class Intermediate(nn.Module):
    """The first half of the position-wise feed-forward network, with its activation."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = ACTIVATION_FNS[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))


class Layer(nn.Module):
    """One encoder block: self-attention, then the feed-forward network, each with Add & Norm."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = Attention(config)
        self.intermediate = Intermediate(config)
        self.output = AddNorm(config.intermediate_size, config)

    def forward(self, x: torch.Tensor, padding: Padding) -> torch.Tensor:
        x = self.attention(x, padding)
        return self.output(self.intermediate(x), x)


class Encoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))

    def forward(self, x: torch.Tensor, padding: Padding, every: bool = True) -> list[torch.Tensor]:
        """Every layer's output (B, T, hidden), the embeddings' first; or, where not `every`,
        the last layer's alone (the tokens stay packed till then: nothing is unpacked twice)."""
        hidden_states, h = [x], padding.pack(x)  # h: (N, hidden), the real tokens
        for layer in self.layer:
            h = layer(h, padding)
            if every:
                hidden_states.append(padding.unpack(h))
        return hidden_states if every else [padding.unpack(h)]


class Pooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence representation the sentence-level heads read."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


@dataclass
class BertOutput:
    last_hidden_state: torch.Tensor  # (B, T, hidden); zeros at padded positions
    pooler_output: torch.Tensor | None  # (B, hidden); None for a model without a pooler
    # the embeddings' output, then every layer's (none where output_hidden_states=False)
    hidden_states: tuple[torch.Tensor, ...]


class BertModel(nn.Module):
    """The BERT encoder: embeddings, a stack of layers, and (usually) the pooler."""

    def __init__(self, config: BertConfig, pooler: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.encoder = Encoder(config)
        self.pooler = Pooler(config) if pooler else None

    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        output_hidden_states: bool = True,
    ) -> tuple[BertOutput, Padding]:
        """The encoder's output, and where the real tokens are (for the heads). Every layer's
        hidden state, or (output_hidden_states=False) none but the last, which is faster."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        padding = Padding(attention_mask, input_ids.shape, input_ids.device)
        x = self.embeddings(input_ids, token_type_ids)
        hidden_states = self.encoder(x, padding, every=output_hidden_states)
        last = hidden_states[-1]
        pooled = self.pooler(last) if self.pooler is not None else None
        kept = tuple(hidden_states) if output_hidden_states else ()
        return BertOutput(last, pooled, kept), padding

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        output_hidden_states: bool = True,
    ) -> BertOutput:
        return self.encode(input_ids, attention_mask, token_type_ids, output_hidden_states)[0]


# The heads, and the classes that put one on the encoder, under transformers' names. Each head
# sits beside the encoder, so the encoder's parameter names are the same with any of them.


class PredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACTIVATION_FNS[config.hidden_act]
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.act(self.dense(x)))


class MaskedLMHead(nn.Module):
    """Predict the masked token. The decoder is the word-embedding matrix itself (weight tying),
    so it owns only the output bias."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.transform = PredictionHeadTransform(config)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(self.transform(hidden), word_embeddings, self.bias)  # (..., vocab)


class PreTrainingHeads(nn.Module):
    """`cls`: the masked-LM head, the next-sentence head, or both."""

    def __init__(self, config: BertConfig, mlm: bool = True, nsp: bool = True):
        super().__init__()
        if mlm:
            self.predictions = MaskedLMHead(config)
        if nsp:
            self.seq_relationship = nn.Linear(config.hidden_size, 2)  # IsNext / NotNext


def per_token(head, out: BertOutput, padding: Padding, *args) -> torch.Tensor:
    """A head applied to the real tokens only, zeros at the padding: (B, T, outputs)."""
    return padding.unpack(head(padding.pack(out.last_hidden_state), *args))


@dataclass
class BertForPreTrainingOutput(BertOutput):
    prediction_logits: torch.Tensor  # (B, T, vocab): masked language model; zeros at padding
    seq_relationship_logits: torch.Tensor  # (B, 2): next sentence prediction


class BertForPreTraining(BertModel):
    """BERT with its two pre-training heads."""

    def __init__(self, config: BertConfig, pooler: bool = True):
        super().__init__(config, pooler)
        self.cls = PreTrainingHeads(config)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out, padding = self.encode(input_ids, attention_mask, token_type_ids)
        words = self.embeddings.word_embeddings.weight
        mlm = per_token(self.cls.predictions, out, padding, words)
        nsp = self.cls.seq_relationship(out.pooler_output)
        return BertForPreTrainingOutput(
            **vars(out), prediction_logits=mlm, seq_relationship_logits=nsp
        )


@dataclass
class LogitsOutput(BertOutput):
    logits: (
        torch.Tensor
    )  # by class: (B, T, vocab), (B, 2), (B, labels), (B, choices), (B, T, labels)


class BertForMaskedLM(BertModel):
    """The masked-LM head alone, as domain-adapted BERTs are saved."""

    def __init__(self, config: BertConfig, pooler: bool = False):
        super().__init__(config, pooler)
        self.cls = PreTrainingHeads(config, nsp=False)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out, padding = self.encode(input_ids, attention_mask, token_type_ids)
        words = self.embeddings.word_embeddings.weight
        return LogitsOutput(
            **vars(out), logits=per_token(self.cls.predictions, out, padding, words)
        )


class BertForNextSentencePrediction(BertModel):
    def __init__(self, config: BertConfig, pooler: bool = True):
        super().__init__(config, pooler)
        self.cls = PreTrainingHeads(config, mlm=False)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out = self.encode(input_ids, attention_mask, token_type_ids)[0]
        return LogitsOutput(**vars(out), logits=self.cls.seq_relationship(out.pooler_output))


def classifier_dropout(config: BertConfig) -> nn.Dropout:
    p = config.classifier_dropout
    return nn.Dropout(config.hidden_dropout_prob if p is None else p)


class BertForSequenceClassification(BertModel):
    """A label per sequence (num_labels 1: a regression), from the pooled output."""

    def __init__(self, config: BertConfig, pooler: bool = True):
        super().__init__(config, pooler)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out = self.encode(input_ids, attention_mask, token_type_ids)[0]
        return LogitsOutput(**vars(out), logits=self.classifier(self.dropout(out.pooler_output)))


class BertForMultipleChoice(BertModel):
    """A score per choice: each (question, choice) pair is encoded on its own, and its pooled
    output scored; inputs are (B, choices, T)."""

    def __init__(self, config: BertConfig, pooler: bool = True):
        super().__init__(config, pooler)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, 1)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        B, choices, T = input_ids.shape
        # Every choice as a sequence of its own: (B * choices, T), and so the outputs
        flat = [
            None if x is None else x.reshape(B * choices, T)
            for x in (attention_mask, token_type_ids)
        ]
        out = self.encode(input_ids.reshape(B * choices, T), *flat)[0]
        scores = self.classifier(self.dropout(out.pooler_output)).view(B, choices)
        return LogitsOutput(**vars(out), logits=scores)


class BertForTokenClassification(BertModel):
    """A label per token (named entities, say)."""

    def __init__(self, config: BertConfig, pooler: bool = False):
        super().__init__(config, pooler)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out, padding = self.encode(input_ids, attention_mask, token_type_ids)
        logits = per_token(lambda h: self.classifier(self.dropout(h)), out, padding)
        return LogitsOutput(**vars(out), logits=logits)


@dataclass
class QuestionAnsweringOutput(BertOutput):
    start_logits: torch.Tensor  # (B, T): where the answer starts; zeros at padding
    end_logits: torch.Tensor  # (B, T): where it ends


class BertForQuestionAnswering(BertModel):
    """Extractive question answering: a start and an end score for every token."""

    def __init__(self, config: BertConfig, pooler: bool = False):
        super().__init__(config, pooler)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out, padding = self.encode(input_ids, attention_mask, token_type_ids)
        start, end = per_token(self.qa_outputs, out, padding).unbind(-1)
        return QuestionAnsweringOutput(**vars(out), start_logits=start, end_logits=end)
