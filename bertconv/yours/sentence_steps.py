"""Where a model's sentence embedding differs from its directory's, after an encoder that agrees:
the steps of sentence-transformers' pipeline (pooling, Dense, Normalize, the prompt's tokens)
recomputed the ways ports get them wrong, each from the model's own last hidden state; the way
that gives what the model returned is the cause, and that recomputation its proof."""

import math
from dataclasses import replace

from ..outputs import FLOAT32_MAX_ABS, SENTENCE
from ..sentence import ACTIVATIONS, MODES, Dense, Normalize, Pipeline, Pooling, embed
from .diagnose import Diagnosis

SAID = {
    "cls": "CLS (the first token)",
    "mean": "the mean of the real tokens",
    "max": "the maximum of each feature over the tokens",
    "mean_sqrt_len_tokens": "the sum over the square root of the length",
    "weightedmean": "the position-weighted mean",
    "lasttoken": "the last token",
}


def _modes(pooling: Pooling) -> str:
    return " and ".join(SAID[m] for m in pooling.modes)


def deviations(pipeline: Pipeline, prompt_length: int) -> list[tuple[str, str, Pipeline]]:
    """(the step, what the model computes there, the pipeline computing it so): each one step
    otherwise than the directory's."""
    steps, found = pipeline.steps, []
    for i, step in enumerate(steps):
        if isinstance(step, Pooling):
            for mode in MODES:
                if (mode,) != step.modes:
                    other = replace(step, modes=(mode,))
                    said = f"{SAID[mode]} pooled, where the directory pools by {_modes(step)}"
                    found.append(("the pooling", said, _with(pipeline, i, other)))
            if prompt_length:
                said = ("the prompt's tokens left out of the pooling, where the directory pools "
                        "them" if step.include_prompt else "the prompt's tokens pooled, where "
                        "the directory leaves them out")  # fmt: skip
                other = replace(step, include_prompt=not step.include_prompt)
                found.append(("the pooling", said, _with(pipeline, i, other)))
        elif isinstance(step, Dense):
            found.append(("the Dense layer", "the Dense layer skipped", _with(pipeline, i)))
            for name, activation in ACTIVATIONS.items():
                if activation != step.activation:
                    said = f"Dense's activation {name}, where the directory's is {_named(step)}"
                    other = replace(step, activation=activation)
                    found.append(("the Dense layer", said, _with(pipeline, i, other)))
        elif isinstance(step, Normalize):
            said = "no normalization, where the directory normalizes the vector (Normalize)"
            found.append(("the normalization", said, _with(pipeline, i)))
    if not any(isinstance(s, Normalize) for s in steps):
        said = "the vector normalized, where the directory leaves it as it is (no Normalize)"
        found.append(("the normalization", said, replace(pipeline, steps=(*steps, Normalize()))))
    return found


def _named(dense: Dense) -> str:
    return next(n for n, a in ACTIVATIONS.items() if a == dense.activation)


def _with(pipeline: Pipeline, i: int, step=None) -> Pipeline:
    """`pipeline` with its step `i` replaced by `step` (left out where None)."""
    steps = list(pipeline.steps)
    steps[i : i + 1] = [step] if step is not None else []
    return replace(pipeline, steps=tuple(steps))


def diagnosed(pipeline: Pipeline, returned, tokens, mask, prompt_length: int, agrees: float):
    """Why the model's sentence embedding `returned` (B, D) differs from the directory's, where
    its last hidden state `tokens` (B, T, H; zeros at the padding) agrees (`agrees`: its max
    abs difference from transformers'): the deviation that gives what it returned, or the
    padding pooled where the texts without padding alone agree."""
    expected = embed(pipeline, tokens, mask, prompt_length)
    agreeing = [("the last layer's output", agrees)]
    off = _distance(returned, expected)
    if off <= FLOAT32_MAX_ABS:  # its pipeline is the directory's: on other states than these
        return Diagnosis(str(SENTENCE), None, math.nan, agreeing, cause=(
            "the directory's pipeline on your model's own last hidden state gives its sentence "
            f"embedding (max abs {off:.1e}): no step after the encoder differs; the difference "
            "lies before it, in the states of the texts embedded (their tokens as your model "
            "reads them?)"))  # fmt: skip
    for step, said, other in deviations(pipeline, prompt_length):
        try:
            again = embed(other, tokens, mask, prompt_length)
        except RuntimeError:  # a Dense left out of a concatenation's width: not this one
            continue
        if _distance(again, expected) <= FLOAT32_MAX_ABS:
            continue  # computes the directory's own on these texts: it tells nothing apart
        if _distance(returned, again) <= FLOAT32_MAX_ABS:
            found = Diagnosis(str(SENTENCE), step, off, agreeing, said)
            found.confirmed_max_abs = _distance(returned, again)
            return found
    whole = mask.bool().all(dim=1)
    if returned.shape == expected.shape and whole.any() and not whole.all():
        unpadded = _distance(returned[whole], expected[whole])
        if unpadded <= FLOAT32_MAX_ABS:
            return Diagnosis(str(SENTENCE), None, math.nan, agreeing, cause=(
                f"the padding pooled too: on the texts without padding it agrees with the "
                f"directory's (max abs {unpadded:.1e}), on those padded it differs (max abs "
                f"{_distance(returned[~whole], expected[~whole]):.1e}); pool over the real "
                "tokens (the attention mask) only"))  # fmt: skip
    return Diagnosis(str(SENTENCE), None, math.nan, agreeing, cause=(
        f"your last hidden state agrees (max abs {agrees:.1e}), your sentence embedding does "
        f"not (max abs {off:.1e}), and no step after the encoder computed another way "
        "explains it (the pooling's modes, the prompt's tokens, Dense, Normalize)"))  # fmt: skip


def _distance(a, b) -> float:
    if a.shape != b.shape:
        return math.inf
    return (a.float() - b.float()).abs().max().item()
