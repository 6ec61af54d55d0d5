"""BERT under transformers' own names, written from scratch: activations as modules
(`intermediate_act_fn`), the pooler's tanh a module of the pooler (`pooler.activation`). Its
names are exactly a shipped layout's (transformers'), so verify --model needs no table."""

import math

import torch
from torch import nn


class Embeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)
        self.register_buffer("position_ids", torch.arange(c.max_position_embeddings)[None])

    def forward(self, input_ids, token_type_ids):
        positions = self.position_ids[:, : input_ids.shape[1]]
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x + self.position_embeddings(positions)))


class SelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.size = c.num_attention_heads, c.hidden_size // c.num_attention_heads
        self.query = nn.Linear(c.hidden_size, c.hidden_size)
        self.key = nn.Linear(c.hidden_size, c.hidden_size)
        self.value = nn.Linear(c.hidden_size, c.hidden_size)

    def scores_shape(self, x):
        return x.view(*x.shape[:2], self.heads, self.size).permute(0, 2, 1, 3)

    def forward(self, x, extended_mask):
        q = self.scores_shape(self.query(x))
        k = self.scores_shape(self.key(x))
        v = self.scores_shape(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.size) + extended_mask
        context = torch.matmul(nn.functional.softmax(scores, dim=-1), v)
        return context.permute(0, 2, 1, 3).reshape(*x.shape)


class Output(nn.Module):
    def __init__(self, size_in, c):
        super().__init__()
        self.dense = nn.Linear(size_in, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, x, residual):
        return self.LayerNorm(self.dense(x) + residual)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self = SelfAttention(c)
        self.output = Output(c.hidden_size, c)

    def forward(self, x, mask):
        return self.output(self.self(x, mask), x)


class Intermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)
        self.intermediate_act_fn = nn.GELU()

    def forward(self, x):
        return self.intermediate_act_fn(self.dense(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = Attention(c)
        self.intermediate = Intermediate(c)
        self.output = Output(c.intermediate_size, c)

    def forward(self, x, mask):
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layer = nn.ModuleList(Layer(c) for _ in range(c.num_hidden_layers))

    def forward(self, x, mask):
        for layer in self.layer:
            x = layer(x, mask)
        return x


class Pooler(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, x):
        return self.activation(self.dense(x[:, 0]))


class OfficialNamesBert(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embeddings = Embeddings(config)
        self.encoder = Encoder(config)
        self.pooler = Pooler(config)

    def forward(self, input_ids, attention_mask, token_type_ids):
        extended = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        x = self.encoder(self.embeddings(input_ids, token_type_ids), extended)
        return x, self.pooler(x)


class SequenceClassifier(nn.Module):
    """transformers' BertForSequenceClassification's names: the encoder under `bert.`, a
    classifier of config.num_labels on the pooled output."""

    def __init__(self, config):
        super().__init__()
        self.bert = OfficialNamesBert(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask, token_type_ids):
        _, pooled = self.bert(input_ids, attention_mask, token_type_ids)
        return self.classifier(self.dropout(pooled))
