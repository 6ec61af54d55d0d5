"""bertconv: official pretrained BERT weights in from-scratch BERT code, with proof of parity.

Importing the package is cheap: torch is imported on first use of the model or of `load`."""

__version__ = "0.1.0"

CLASSES = (
    "BertModel",
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertForNextSentencePrediction",
    "BertForSequenceClassification",
    "BertForMultipleChoice",
    "BertForTokenClassification",
    "BertForQuestionAnswering",
)
_LAZY = {
    "BertConfig": "bertconv.config",
    **dict.fromkeys(CLASSES, "bertconv.model"),
    "load": "bertconv.api",
    "inspect": "bertconv.api",
    "BertconvError": "bertconv.errors",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'bertconv' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
