"""The outputs verify compares, each named by a small type, and how they are read from a forward of
bertconv's model or transformers' (the two take the same arguments). Below both verify and your
own BERT (bertconv.yours), which read the same outputs from a trace.
"""

import inspect
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from .catalog import classes, outputs


@dataclass(frozen=True)
class Output:
    """One compared output: the embeddings, a layer's (`index` from 1), the pooler, or a head's
    row (`kind` its group, `name` the row the catalog gives it: "mlm logits")."""

    kind: str
    index: int | None = None
    name: str | None = None

    def __str__(self) -> str:
        if self.name is not None:
            return self.name
        return self.kind if self.index is None else f"{self.kind} {self.index}"

    @property
    def hidden(self) -> bool:
        """A hidden state (the embeddings', a layer's), read at the real tokens."""
        return self.kind in ("embeddings", "layer")

    @property
    def part(self) -> str:
        """The part of BERT that computes it: embeddings, layers, pooler or heads."""
        if self.kind == "layer":
            return "layers"
        return self.kind if self.kind in ("embeddings", "pooler") else "heads"


EMBEDDINGS, POOLER = Output("embeddings"), Output("pooler")


def layer(index: int) -> Output:
    """Layer `index`'s output, counted from 1 as verify prints it."""
    return Output("layer", index)


@dataclass(frozen=True)
class Head:
    """A head's compared output: its row, transformers' name for it, and whether it is per
    token (else per sequence)."""

    output: Output
    attribute: str
    per_token: bool


def heads(model_class: str, model_type: str = "bert") -> list[Head]:
    """What a class computes beyond the hidden states and the pooler, from the catalog; each row
    is named after the group that computes it ("qa start logits": qa's)."""
    groups = classes(model_type)[model_class]
    return [
        Head(Output(next(g for g in groups if row.startswith(f"{g} ")), name=row), name, token)
        for row, name, token in outputs(model_class, model_type)
    ]


def compared(
    model, batch: dict[str, torch.Tensor], heads: list[Head]
) -> dict[Output, torch.Tensor]:
    """One forward pass: hidden states at real positions, the pooler, and each head's outputs
    (per-token ones at real positions), in float32 on the CPU. For bertconv's model and
    transformers' alike: transformers' task classes do not return the pooler output, so a hook
    on the pooler catches it."""
    from .model import BertModel

    ours = isinstance(model, BertModel)
    base = model if ours else model.base_model  # transformers' task classes hold it inside
    pooled = []
    hook = nullcontext()
    if getattr(base, "pooler", None) is not None:
        hook = base.pooler.register_forward_hook(lambda m, a, out: pooled.append(out))
    with hook, torch.inference_mode():
        # return_dict: a config.json may say false, which would give tuples
        theirs = {} if ours else {"output_hidden_states": True, "return_dict": True}
        if not ours and "token_type_ids" not in inspect.signature(model.forward).parameters:
            batch = {k: v for k, v in batch.items() if k != "token_type_ids"}  # DistilBERT's
        out = model(**batch, **theirs)
    real = batch["attention_mask"].reshape(-1, batch["attention_mask"].shape[-1]).bool()
    named = {EMBEDDINGS: out.hidden_states[0][real]}
    named |= {layer(i): h[real] for i, h in enumerate(out.hidden_states[1:], 1)}
    if pooled:
        named[POOLER] = pooled[0]
    for head in heads:
        value = getattr(out, head.attribute)
        named[head.output] = value[real] if head.per_token else value
    return {k: v.float().cpu() for k, v in named.items()}
