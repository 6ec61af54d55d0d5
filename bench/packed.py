"""The packed attention's parity on the GPU (bertconv.packed, opt-in until measured here).

bert-base shape, bfloat16, a padded batch of 64 x 512 (lengths 256-512). Each model's error is
measured against transformers in float32 (TF32 off) at every real token, layer by layer, as
`bertconv verify --dtype bfloat16` does: transformers' own error in bfloat16 is the yardstick,
and bertconv's attention, padded and packed, must stay within twice it.
"""

import torch
from common import checkpoint, converted, table
from forward import batch


def states(model, inputs: dict) -> list[torch.Tensor]:
    with torch.inference_mode():
        out = model(**inputs, output_hidden_states=True)
    return [h.float() for h in out.hidden_states]


def main() -> str:
    from transformers import BertModel

    import bertconv
    from bertconv import packed

    title = "## The packed attention, cuda, bfloat16 (64 x 512, padded)"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    inputs = batch(64, 512, "cuda")
    real = inputs["attention_mask"].bool()
    reference = BertModel.from_pretrained(checkpoint("base"), attn_implementation="sdpa")
    expected = states(reference.to("cuda").eval(), inputs)
    theirs = states(reference.to(torch.bfloat16), inputs)
    del reference
    ours = bertconv.load(converted("base")).to("cuda", torch.bfloat16)
    padded = states(ours, inputs)
    try:
        packed.enable(ours)
    except bertconv.BertconvError as e:
        return f"{title}\n\nNot measured: {e}."
    packing = states(ours, inputs)
    rows, ok = [], True
    for i, (e, t, p, k) in enumerate(zip(expected, theirs, padded, packing, strict=True)):
        errors = [(x[real] - e[real]).abs().max().item() for x in (t, p, k)]
        within = max(errors[1:]) <= 2 * errors[0]
        ok &= within
        name = "embeddings" if i == 0 else f"layer {i}"
        cells = [f"{x:.2e}" for x in errors] + [f"{2 * errors[0]:.2e}", "ok" if within else "NO"]
        rows.append([name, *cells])
    header = ["output", "transformers", "bertconv", "bertconv packed", "limit", "ok"]
    verdict = "PASSED" if ok else "FAILED"
    said = "max abs error against transformers in float32, at real tokens"
    return f"{title}\n\n{said}: {verdict}\n\n" + table(header, rows)


if __name__ == "__main__":
    print(main())
