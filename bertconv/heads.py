"""The task heads, and the classes that put one on the encoder (model.BertModel), under
transformers' names: pre-training (masked LM and next sentence), either alone, sequence and token
classification, multiple choice, question answering. Each head sits beside the encoder, so the
encoder's parameter names are the same with any of them. Whether a class has a pooler is an
argument, defaulting to what transformers' BERT class of that name builds; `CLASSES` names them
all.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import BertConfig
from .model import BertModel, BertOutput, LayerNorm, Padding, activation


class PredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = activation(config.hidden_act)
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
        out, padding = self.encoded(input_ids, attention_mask, token_type_ids)
        words = self.embeddings.word_embeddings.weight
        mlm = per_token(self.cls.predictions, out, padding, words)
        nsp = self.cls.seq_relationship(out.pooler_output)
        return BertForPreTrainingOutput(
            **vars(out), prediction_logits=mlm, seq_relationship_logits=nsp
        )


@dataclass
class LogitsOutput(BertOutput):
    # by class: (B, T, vocab), (B, 2), (B, labels), (B, choices), (B, T, labels)
    logits: torch.Tensor


class BertForMaskedLM(BertModel):
    """The masked-LM head alone, as domain-adapted BERTs are saved."""

    def __init__(self, config: BertConfig, pooler: bool = False):
        super().__init__(config, pooler)
        self.cls = PreTrainingHeads(config, nsp=False)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out, padding = self.encoded(input_ids, attention_mask, token_type_ids)
        words = self.embeddings.word_embeddings.weight
        return LogitsOutput(
            **vars(out), logits=per_token(self.cls.predictions, out, padding, words)
        )


class BertForNextSentencePrediction(BertModel):
    def __init__(self, config: BertConfig, pooler: bool = True):
        super().__init__(config, pooler)
        self.cls = PreTrainingHeads(config, mlm=False)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out = self.encoded(input_ids, attention_mask, token_type_ids)[0]
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
        out = self.encoded(input_ids, attention_mask, token_type_ids)[0]
        return LogitsOutput(**vars(out), logits=self.classifier(self.dropout(out.pooler_output)))


class ClassificationHead(nn.Module):
    """RoBERTa's and ELECTRA's: the pooler's arithmetic, act(dense(h_<s>)) (tanh, or the
    config's `classification_activation`), inside the head, then out_proj."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        name = config.classification_activation
        self.activation = torch.tanh if name == "tanh" else activation(name)
        self.dropout = classifier_dropout(config)
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        pooled = self.activation(self.dense(self.dropout(hidden[:, 0])))
        return self.out_proj(self.dropout(pooled))


class FirstTokenClassification(BertModel):
    """A label per sequence, from the first token's hidden state through a head of its own
    (RobertaForSequenceClassification's): no pooler."""

    def __init__(self, config: BertConfig, pooler: bool = False):
        super().__init__(config, pooler)
        self.classifier = ClassificationHead(config)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out = self.encoded(input_ids, attention_mask, token_type_ids)[0]
        return LogitsOutput(**vars(out), logits=self.classifier(out.last_hidden_state))


class PreClassifierClassification(BertModel):
    """DistilBERT's label per sequence: relu(pre_classifier(h_[CLS])) then classifier, the
    config's `classification_activation` in between."""

    def __init__(self, config: BertConfig, pooler: bool = False):
        super().__init__(config, pooler)
        head = ClassificationHead(config)
        self.pre_classifier, self.activation, self.dropout = (
            head.dense,
            head.activation,
            head.dropout,
        )
        self.classifier = head.out_proj

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out = self.encoded(input_ids, attention_mask, token_type_ids)[0]
        pooled = self.activation(self.pre_classifier(out.last_hidden_state[:, 0]))
        return LogitsOutput(**vars(out), logits=self.classifier(self.dropout(pooled)))


class DiscriminatorModel(BertModel):
    """ELECTRA's discriminator (ElectraForPreTraining): a score per token, is it replaced?"""

    def __init__(self, config: BertConfig, pooler: bool = False):
        super().__init__(config, pooler)
        self.discriminator_predictions = DiscriminatorHead(config)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out = self.encoded(input_ids, attention_mask, token_type_ids)[0]
        logits = self.discriminator_predictions(out.last_hidden_state)
        return LogitsOutput(**vars(out), logits=logits)


class DiscriminatorHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = activation(config.hidden_act)
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(self.activation(self.dense(hidden))).squeeze(-1)


def each_choice(*inputs: torch.Tensor | None) -> list[torch.Tensor | None]:
    """(B, choices, T) inputs as (B * choices, T): every choice a sequence of its own."""
    T = inputs[0].shape[-1]
    return [None if x is None else x.reshape(-1, T) for x in inputs]


class BertForMultipleChoice(BertModel):
    """A score per choice: each (question, choice) pair is encoded on its own, and its pooled
    output scored; inputs are (B, choices, T)."""

    def __init__(self, config: BertConfig, pooler: bool = True):
        super().__init__(config, pooler)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, 1)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        B, choices, _ = input_ids.shape
        out = self.encoded(*each_choice(input_ids, attention_mask, token_type_ids))[0]
        scores = self.classifier(self.dropout(out.pooler_output)).view(B, choices)
        return LogitsOutput(**vars(out), logits=scores)


class BertForTokenClassification(BertModel):
    """A label per token (named entities, say)."""

    def __init__(self, config: BertConfig, pooler: bool = False):
        super().__init__(config, pooler)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out, padding = self.encoded(input_ids, attention_mask, token_type_ids)
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
        out, padding = self.encoded(input_ids, attention_mask, token_type_ids)
        start, end = per_token(self.qa_outputs, out, padding).unbind(-1)
        return QuestionAnsweringOutput(**vars(out), start_logits=start, end_logits=end)


class PredictionHead(nn.Module):
    """ModernBERT's head before its decoder and every classifier: norm(act(dense(h))), with
    the model's biases (none) and the config's classification activation (GELU)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        H = config.hidden_size
        self.dense = nn.Linear(H, H, bias=config.linear_bias)
        self.act = activation(config.classification_activation)
        self.norm = LayerNorm(H, config.layer_norm_eps, config.norm_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(self.dense(x)))


class TiedDecoder(nn.Module):
    """A masked LM's decoder that is the word-embedding matrix itself, with a bias of its own."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(x, word_embeddings, self.bias)


def sequence(last: torch.Tensor, attention_mask, pooling: str, first_real: bool = False):
    """ModernBERT's state of a whole sequence (B, hidden): the mean of its real tokens' states
    (classifier_pooling "mean"), or its first token's ("cls": the first real one where
    `first_real`, as its multiple choice reads it)."""
    mask = (
        torch.ones(last.shape[:2], device=last.device) if attention_mask is None else attention_mask
    )
    if pooling == "mean":
        return (last * mask.unsqueeze(-1)).sum(dim=1) / mask.sum(dim=1, keepdim=True)
    first = mask.argmax(dim=-1) if first_real else torch.zeros_like(mask[:, 0], dtype=torch.long)
    return last[torch.arange(len(last), device=last.device), first]


class ModernBertForMaskedLM(BertModel):
    """ModernBERT's masked LM: the prediction head, then the decoder (the word embeddings)."""

    def __init__(self, config: BertConfig, pooler: bool = False):
        super().__init__(config, pooler)
        self.head = PredictionHead(config)
        self.decoder = TiedDecoder(config)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out, padding = self.encoded(input_ids, attention_mask, token_type_ids)
        words = self.embeddings.word_embeddings.weight
        logits = per_token(lambda h: self.decoder(self.head(h), words), out, padding)
        return LogitsOutput(**vars(out), logits=logits)


class ModernClassifier(BertModel):
    """ModernBERT with a classifier after its prediction head (`labels` outputs each)."""

    labels = None  # the config's num_labels

    def __init__(self, config: BertConfig, pooler: bool = False):
        super().__init__(config, pooler)
        self.head = PredictionHead(config)
        self.drop = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, self.labels or config.num_labels)

    def classify(self, h: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.drop(self.head(h)))


class ModernBertForSequenceClassification(ModernClassifier):
    """A label per sequence, its state pooled as config.json's classifier_pooling says."""

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out = self.encoded(input_ids, attention_mask, token_type_ids)[0]
        pooled = sequence(out.last_hidden_state, attention_mask, self.config.classifier_pooling)
        return LogitsOutput(**vars(out), logits=self.classify(pooled))


class ModernBertForTokenClassification(ModernClassifier):
    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out, padding = self.encoded(input_ids, attention_mask, token_type_ids)
        return LogitsOutput(**vars(out), logits=per_token(self.classify, out, padding))


class ModernBertForQuestionAnswering(ModernClassifier):
    labels = 2  # a start and an end score per token

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        out, padding = self.encoded(input_ids, attention_mask, token_type_ids)
        start, end = per_token(self.classify, out, padding).unbind(-1)
        return QuestionAnsweringOutput(**vars(out), start_logits=start, end_logits=end)


class ModernBertForMultipleChoice(ModernClassifier):
    """A score per choice, each (B, choices, T) choice encoded alone and pooled (its first real
    token's state, or the mean of its real tokens')."""

    labels = 1

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        B, choices, _ = input_ids.shape
        ids, mask, types = each_choice(input_ids, attention_mask, token_type_ids)
        out = self.encoded(ids, mask, types)[0]
        pooled = sequence(out.last_hidden_state, mask, self.config.classifier_pooling, True)
        return LogitsOutput(**vars(out), logits=self.classify(pooled).view(B, choices))


# bertconv's classes by name: the catalogs name these as what computes each of transformers'.
CLASSES = {
    cls.__name__: cls
    for cls in (
        BertModel,
        BertForPreTraining,
        BertForMaskedLM,
        BertForNextSentencePrediction,
        BertForSequenceClassification,
        BertForMultipleChoice,
        BertForTokenClassification,
        BertForQuestionAnswering,
        FirstTokenClassification,
        PreClassifierClassification,
        DiscriminatorModel,
        ModernBertForMaskedLM,
        ModernBertForSequenceClassification,
        ModernBertForTokenClassification,
        ModernBertForQuestionAnswering,
        ModernBertForMultipleChoice,
    )
}
