"""bertconv: official pretrained BERT weights in from-scratch BERT code, with proof of parity.

Importing the package is cheap: torch is imported on first use of the model or of `load`."""

__version__ = "0.1.0"

_LAZY = {
    "BertConfig": "bertconv.config",
    "load": "bertconv.api",
    "inspect": "bertconv.api",
    "BertconvError": "bertconv.errors",
}


# The model's classes (heads.CLASSES), named here so that listing them imports no torch.
CLASSES = (
    "BertModel",
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertForNextSentencePrediction",
    "BertForSequenceClassification",
    "BertForMultipleChoice",
    "BertForTokenClassification",
    "BertForQuestionAnswering",
    "FirstTokenClassification",
    "PreClassifierClassification",
    "DiscriminatorModel",
    "ModernBertForMaskedLM",
    "ModernBertForSequenceClassification",
    "ModernBertForTokenClassification",
    "ModernBertForQuestionAnswering",
    "ModernBertForMultipleChoice",
)


def __getattr__(name: str):
    import importlib

    if name == "__all__":
        return sorted([*_LAZY, *CLASSES])
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in CLASSES:
        return importlib.import_module("bertconv.heads").CLASSES[name]
    raise AttributeError(f"module 'bertconv' has no attribute {name!r}")
