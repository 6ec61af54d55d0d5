"""transformers' own ModernBERT classes as a user's model (a port of their code holds their
names): built from config.json, as verify --model and infer build a model."""

import transformers


def masked_lm(config):
    return transformers.ModernBertForMaskedLM(transformers.ModernBertConfig(**dict(config)))


def classifier(config):
    made = transformers.ModernBertConfig(**dict(config))
    return transformers.ModernBertForSequenceClassification(made)
