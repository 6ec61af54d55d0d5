"""BERT's family written from scratch as the papers and their reference code define each type
(tests/test_family_own.py), in the styles public repositories use, each with a one-bug variant:

- `TorchRoberta`: RoBERTa on nn.TransformerEncoder (a fused in_proj_weight, GELU, post-LN), its
  positions counted from pad_token_id + 1 by a module of its own, and no token type table
  (fairseq's RoBERTa has none). `TorchRobertaNoPadOffset` counts them from 1.
- `FusedRoberta`: fused q/k/v, a mask object of its own, one token type row, positions counted
  over `ids != pad` from pad + 1. `FixedScaleRoberta` scales scores by a fixed 0.125.
- `MaskedLMDistilBert`: DistilBERT for masked LM under transformers' own DistilBERT names (no
  token types, its config.json's own fields). `DistilBertFixedEps` writes eps 1e-5 in.
- `TinyDistil`: a DistilBERT encoder under names of its own.
- `DistilBertClassifier`: DistilBERT for sequence classification under transformers' names
  (pre_classifier, ReLU, classifier). `DistilBertGeluClassifier` takes GELU for the ReLU.
- `ElectraDiscriminator`: ELECTRA's encoder under names of its own, its discriminator head
  (dense, GELU, one logit per token). `ElectraRelu` computes that head with ReLU.
- `HFRoberta`, `HFRobertaForMaskedLM`, `HFElectraForPreTraining`: under transformers' own
  names (official_names.py's encoder), verified with no table; `HFBert`: RoBERTa's names,
  positions counted from 0.
- `CopiedRobertaClassifier`: RoBERTa's embeddings copied from transformers (id buffers,
  `create_position_ids_from_input_ids`, `position_ids` taken), its classification head.
- `TimeMajorBert`: BERT reading `[T, B]` ids and a `key_padding_mask`, nn.Transformer's way.
  `TimeMajorBertEps` writes the embeddings' eps 1e-5 in.
"""

import math

import torch
import torch.nn.functional as F
from official_names import Embeddings as BertEmbeddings
from official_names import Encoder
from torch import nn


class RobertaPositions(nn.Module):
    """Positions as fairseq counts them: real tokens from padding_idx + 1, pads at padding_idx."""

    def __init__(self, max_positions, dim, padding_idx, offset=None):
        super().__init__()
        self.padding_idx = padding_idx
        self.offset = padding_idx if offset is None else offset
        self.table = nn.Embedding(max_positions, dim, padding_idx=padding_idx)

    def forward(self, ids):
        real = ids.ne(self.padding_idx).long()
        return self.table(torch.cumsum(real, dim=1) * real + self.offset)


class TorchRoberta(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.pad = config.pad_token_id
        self.embed_tokens = nn.Embedding(config.vocab_size, h, padding_idx=self.pad)
        self.embed_positions = RobertaPositions(
            config.max_position_embeddings, h, self.pad, self._offset()
        )
        self.emb_layer_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        layer = nn.TransformerEncoderLayer(
            h, config.num_attention_heads, config.intermediate_size, dropout=0.0,
            activation="gelu", layer_norm_eps=config.layer_norm_eps, batch_first=True,
        )  # fmt: skip
        self.layers = nn.TransformerEncoder(
            layer, config.num_hidden_layers, enable_nested_tensor=False
        )

    def _offset(self):
        return None

    def forward(self, src_tokens):
        x = self.embed_tokens(src_tokens) + self.embed_positions(src_tokens)
        x = self.emb_layer_norm(x)
        return self.layers(x, src_key_padding_mask=src_tokens.eq(self.pad))


class TorchRobertaNoPadOffset(TorchRoberta):
    """Counts the real tokens from 1: pad_token_id's offset left out."""

    def _offset(self):
        return 0


class AdditiveMask:
    """A mask of its own: 0 where a key is read, a large negative number where it is padding."""

    def __init__(self, keep):
        self.bias = (1.0 - keep[:, None, None, :].float()) * -1e9

    def __call__(self, scores):
        return scores + self.bias


class FusedSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.heads, self.size = config.num_attention_heads, h // config.num_attention_heads
        self.Wqkv = nn.Linear(h, 3 * h)
        self.Wo = nn.Linear(h, h)
        self.norm = nn.LayerNorm(h, eps=config.layer_norm_eps)

    def scale(self):
        return 1 / math.sqrt(self.size)

    def forward(self, x, mask):
        B, T, H = x.shape
        q, k, v = self.Wqkv(x).view(B, T, 3, self.heads, self.size).permute(2, 0, 3, 1, 4)
        weights = mask(q @ k.transpose(-1, -2) * self.scale()).softmax(-1)
        y = (weights @ v).transpose(1, 2).reshape(B, T, H)
        return self.norm(x + self.Wo(y))


class FixedScaleAttention(FusedSelfAttention):
    def scale(self):
        return 0.125  # BERT-base's 1/sqrt(64), written in


class FusedLayer(nn.Module):
    attention = FusedSelfAttention

    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.attn = self.attention(config)
        self.up = nn.Linear(h, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, h)
        self.norm = nn.LayerNorm(h, eps=config.layer_norm_eps)

    def forward(self, x, mask):
        x = self.attn(x, mask)
        return self.norm(x + self.down(F.gelu(self.up(x))))


class FusedRoberta(nn.Module):
    layer = FusedLayer

    def __init__(self, config):
        super().__init__()
        h, self.pad = config.hidden_size, config.pad_token_id
        self.word = nn.Embedding(config.vocab_size, h)
        self.position = nn.Embedding(config.max_position_embeddings, h)
        self.segment = nn.Embedding(config.type_vocab_size, h)
        self.norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(self.layer(config) for _ in range(config.num_hidden_layers))

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        real = input_ids.ne(self.pad).long()
        positions = torch.cumsum(real, 1) * real + self.pad
        types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
        x = self.norm(self.word(input_ids) + self.position(positions) + self.segment(types))
        mask = AdditiveMask(attention_mask)
        for layer in self.layers:
            x = layer(x, mask)
        return x


class FixedScaleLayer(FusedLayer):
    attention = FixedScaleAttention


class FixedScaleRoberta(FusedRoberta):
    layer = FixedScaleLayer


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads, dim = config.n_heads, config.dim
        self.q_lin, self.k_lin = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.v_lin, self.out_lin = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x, mask):
        bs, T, dim = x.shape
        d = dim // self.n_heads

        def shape(t):
            return t.view(bs, T, self.n_heads, d).transpose(1, 2)

        q = shape(self.q_lin(x)) / math.sqrt(d)
        scores = q @ shape(self.k_lin(x)).transpose(2, 3)
        scores = scores.masked_fill(mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
        context = (scores.softmax(-1) @ shape(self.v_lin(x))).transpose(1, 2).reshape(bs, T, dim)
        return self.out_lin(context)


class FFN(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.lin1 = nn.Linear(config.dim, config.hidden_dim)
        self.lin2 = nn.Linear(config.hidden_dim, config.dim)
        self.activation = F.gelu if config.activation == "gelu" else F.relu

    def forward(self, x):
        return self.lin2(self.activation(self.lin1(x)))


class TransformerBlock(nn.Module):
    eps = 1e-12

    def __init__(self, config):
        super().__init__()
        self.attention = MultiHeadSelfAttention(config)
        self.sa_layer_norm = nn.LayerNorm(config.dim, eps=self.eps)
        self.ffn = FFN(config)
        self.output_layer_norm = nn.LayerNorm(config.dim, eps=self.eps)

    def forward(self, x, mask):
        x = self.sa_layer_norm(self.attention(x, mask) + x)
        return self.output_layer_norm(self.ffn(x) + x)


class Transformer(nn.Module):
    block = TransformerBlock

    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList(self.block(config) for _ in range(config.n_layers))

    def forward(self, x, mask):
        for block in self.layer:
            x = block(x, mask)
        return x


class Embeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.dim)
        self.LayerNorm = nn.LayerNorm(config.dim, eps=1e-12)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        return self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings(positions))


class DistilBert(nn.Module):
    def __init__(self, config, transformer_class):
        super().__init__()
        self.embeddings = Embeddings(config)
        self.transformer = transformer_class(config)

    def forward(self, input_ids, attention_mask):
        return self.transformer(self.embeddings(input_ids), attention_mask)


class MaskedLMDistilBert(nn.Module):
    transformer_class = Transformer

    def __init__(self, config):
        super().__init__()
        self.distilbert = DistilBert(config, self.transformer_class)
        self.vocab_transform = nn.Linear(config.dim, config.dim)
        self.vocab_layer_norm = nn.LayerNorm(config.dim, eps=1e-12)
        self.vocab_projector = nn.Linear(config.dim, config.vocab_size)
        self.vocab_projector.weight = self.distilbert.embeddings.word_embeddings.weight

    def forward(self, input_ids, attention_mask):
        hidden = self.distilbert(input_ids, attention_mask)
        x = self.vocab_layer_norm(F.gelu(self.vocab_transform(hidden)))
        return hidden, self.vocab_projector(x)


class FixedEpsBlock(TransformerBlock):
    eps = 1e-5


class FixedEpsTransformer(Transformer):
    block = FixedEpsBlock


class DistilBertFixedEps(MaskedLMDistilBert):
    transformer_class = FixedEpsTransformer


class TinyDistil(nn.Module):
    """A DistilBERT encoder under names of its own, reading BERT's names from the config."""

    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.tok = nn.Embedding(config.vocab_size, h)
        self.pos = nn.Embedding(config.max_position_embeddings, h)
        self.ln = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.blocks = nn.ModuleList(FusedLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, input_ids, attention_mask):
        T = input_ids.shape[1]
        x = self.ln(self.tok(input_ids) + self.pos(torch.arange(T)))
        mask = AdditiveMask(attention_mask)
        for block in self.blocks:
            x = block(x, mask)
        return x


class ElectraDiscriminator(nn.Module):
    """ELECTRA's discriminator: BERT's encoder, then dense, GELU, one logit per token."""

    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.tok = nn.Embedding(config.vocab_size, h)
        self.pos = nn.Embedding(config.max_position_embeddings, h)
        self.typ = nn.Embedding(config.type_vocab_size, h)
        self.ln = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.blocks = nn.ModuleList(FusedLayer(config) for _ in range(config.num_hidden_layers))
        self.disc_dense = nn.Linear(h, h)
        self.disc_out = nn.Linear(h, 1)

    def act(self, x):
        return F.gelu(x)

    def forward(self, input_ids, attention_mask, token_type_ids):
        T = input_ids.shape[1]
        x = self.tok(input_ids) + self.pos(torch.arange(T)) + self.typ(token_type_ids)
        x = self.ln(x)
        mask = AdditiveMask(attention_mask)
        for block in self.blocks:
            x = block(x, mask)
        return x, self.disc_out(self.act(self.disc_dense(x))).squeeze(-1)


class ElectraRelu(ElectraDiscriminator):
    def act(self, x):
        return F.relu(x)


class ElectraProbabilities(ElectraDiscriminator):
    """Returns each token's probability of having been replaced: the sigmoid of the logits."""

    def forward(self, input_ids, attention_mask, token_type_ids):
        x, logits = super().forward(input_ids, attention_mask, token_type_ids)
        return x, torch.sigmoid(logits)


class RobertaEmbeddings(BertEmbeddings):
    """transformers' RoBERTa embeddings: the real tokens' positions from pad_token_id + 1."""

    def __init__(self, config, from_pad=True):
        super().__init__(config)
        self.pad, self.from_pad = config.pad_token_id, from_pad

    def forward(self, input_ids, token_type_ids):
        real = input_ids.ne(self.pad).long()
        positions = torch.cumsum(real, 1) * real + self.pad
        if not self.from_pad:  # counted from 0, as BERT counts them
            positions = self.position_ids[:, : input_ids.shape[1]]
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x + self.position_embeddings(positions)))


class HFRoberta(nn.Module):
    """RoBERTa under transformers' own names (RobertaModel's, without its pooler), positions
    counted over the real tokens from pad_token_id + 1."""

    from_pad = True

    def __init__(self, config):
        super().__init__()
        self.embeddings = RobertaEmbeddings(config, self.from_pad)
        self.encoder = Encoder(config)

    def forward(self, input_ids, attention_mask, token_type_ids):
        extended = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        return self.encoder(self.embeddings(input_ids, token_type_ids), extended)


class HFBert(HFRoberta):
    """The same names, positions counted from 0 as BERT counts them."""

    from_pad = False


class TimeMajorBert(nn.Module):
    """BERT reading its ids time-major, `[T, B]`, as nn.MultiheadAttention's convention has it
    (batch_first False), the padding given as `key_padding_mask` (B, T), True at the padding."""

    embeddings_eps = None  # the config's

    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.word = nn.Embedding(config.vocab_size, h)
        self.position = nn.Embedding(config.max_position_embeddings, h)
        self.segment = nn.Embedding(config.type_vocab_size, h)
        self.norm = nn.LayerNorm(h, eps=self.embeddings_eps or config.layer_norm_eps)
        layer = nn.TransformerEncoderLayer(
            h, config.num_attention_heads, config.intermediate_size, dropout=0.0,
            activation="gelu", layer_norm_eps=config.layer_norm_eps,
        )  # fmt: skip
        self.encoder = nn.TransformerEncoder(
            layer, config.num_hidden_layers, enable_nested_tensor=False
        )

    def forward(self, src, segments, key_padding_mask):
        T = src.shape[0]
        x = self.word(src) + self.position(torch.arange(T))[:, None] + self.segment(segments)
        return self.encoder(self.norm(x), src_key_padding_mask=key_padding_mask)


class TimeMajorBertEps(TimeMajorBert):
    embeddings_eps = 1e-5


class DistilBertClassifier(nn.Module):
    """DistilBERT for sequence classification under transformers' names: ReLU(pre_classifier)
    of the first token's state, then the classifier."""

    def act(self, x):
        return F.relu(x)

    def __init__(self, config):
        super().__init__()
        self.distilbert = DistilBert(config, Transformer)
        self.pre_classifier = nn.Linear(config.dim, config.dim)
        self.classifier = nn.Linear(config.dim, config.num_labels)

    def forward(self, input_ids, attention_mask):
        hidden = self.distilbert(input_ids, attention_mask)
        return self.classifier(self.act(self.pre_classifier(hidden[:, 0])))


class DistilBertGeluClassifier(DistilBertClassifier):
    def act(self, x):
        return F.gelu(x)


class LMHead(nn.Module):
    """RoBERTa's lm_head as transformers writes it: dense, GELU, layer_norm, the decoder tied to
    the word embeddings, its bias the head's own `bias` under both names."""

    def __init__(self, config, word_embeddings):
        super().__init__()
        h = config.hidden_size
        self.dense = nn.Linear(h, h)
        self.layer_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(h, config.vocab_size)
        self.decoder.weight = word_embeddings.weight
        self.bias = self.decoder.bias

    def forward(self, x):
        return self.decoder(self.layer_norm(F.gelu(self.dense(x))))


class HFRobertaForMaskedLM(nn.Module):
    """RobertaForMaskedLM under transformers' names: the encoder under `roberta.`."""

    def __init__(self, config):
        super().__init__()
        self.roberta = HFRoberta(config)
        self.lm_head = LMHead(config, self.roberta.embeddings.word_embeddings)

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden = self.roberta(input_ids, attention_mask, token_type_ids)
        return hidden, self.lm_head(hidden)


class DiscriminatorPredictions(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, x):
        return self.dense_prediction(F.gelu(self.dense(x))).squeeze(-1)


class HFElectraForPreTraining(nn.Module):
    """ELECTRA's discriminator under transformers' own names: the encoder under `electra.`."""

    def __init__(self, config):
        super().__init__()
        self.electra = HFBert(config)
        self.discriminator_predictions = DiscriminatorPredictions(config)

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden = self.electra(input_ids, attention_mask, token_type_ids)
        return hidden, self.discriminator_predictions(hidden)


def create_position_ids_from_input_ids(input_ids, padding_idx):
    """transformers' RoBERTa positions, as ports copy them."""
    mask = input_ids.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


class CopiedRobertaEmbeddings(nn.Module):
    """RoBERTa's embeddings as ports copy transformers': buffers of position and token type ids
    (not persistent), padding_idx on the tables."""

    def __init__(self, c):
        super().__init__()
        h, self.padding_idx = c.hidden_size, c.pad_token_id
        self.word_embeddings = nn.Embedding(c.vocab_size, h, padding_idx=self.padding_idx)
        self.position_embeddings = nn.Embedding(
            c.max_position_embeddings, h, padding_idx=self.padding_idx
        )
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, h)
        self.LayerNorm = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)
        ids = torch.zeros((1, c.max_position_embeddings), dtype=torch.long)
        self.register_buffer("token_type_ids", ids, persistent=False)

    def forward(self, input_ids, position_ids=None):
        if position_ids is None:
            position_ids = create_position_ids_from_input_ids(input_ids, self.padding_idx)
        types = self.token_type_ids[:, : input_ids.shape[1]].expand_as(input_ids)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(types)
        return self.dropout(self.LayerNorm(x + self.position_embeddings(position_ids)))


class ClassificationHead(nn.Module):
    """RoBERTa's: dense and tanh on <s>, then out_proj."""

    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)
        self.out_proj = nn.Linear(c.hidden_size, c.num_labels)

    def forward(self, x):
        return self.out_proj(torch.tanh(self.dense(x[:, 0])))


class CopiedRobertaClassifier(nn.Module):
    """Embeddings copied from transformers, blocks of its own, RoBERTa's classification head."""

    def __init__(self, config):
        super().__init__()
        self.embeddings = CopiedRobertaEmbeddings(config)
        self.layers = nn.ModuleList(FusedLayer(config) for _ in range(config.num_hidden_layers))
        self.classifier = ClassificationHead(config)

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        x = self.embeddings(input_ids, position_ids)
        mask = AdditiveMask(
            torch.ones_like(input_ids) if attention_mask is None else attention_mask
        )
        for layer in self.layers:
            x = layer(x, mask)
        return self.classifier(x)


class TorchRobertaEps(TorchRoberta):
    """TorchRoberta writing its LayerNorms' eps 1e-3 in."""

    def __init__(self, config):
        config.layer_norm_eps = 1e-3
        super().__init__(config)
