"""Target 4: forward throughput against transformers' BertModel (sdpa) on the same weights.

CPU (issue 46): fp32, bert-base, padded batches of 8 and 32 x 128 tokens: at least 1.3x; 32 x 128
unpadded: at least 1.0x.
GPU (where there is one): bf16, 64 x 512, padded (lengths 256-512): at least 1.3x, and model FLOP
utilisation against the GPU's bf16 peak as measured here with a large matrix product of at least
50%; the same batch unpadded (every row 512): at least 1.05x. Both models return the last layer and
the pooled output (no list of every layer's hidden states). On the GPU, bertconv's model is
measured twice: as it is, and with the packed attention (bertconv.packed, opt-in) where it can
run there; bench/packed.py measures that path's parity.
"""

import argparse
import copy
import os
import time

import torch
from common import alternate, checkpoint, converted, median, table

REPS = {"cpu": 5, "cuda": 20}
MFU = 0.5  # of the GPU's measured bf16 rate, on the padded batch


def batch(
    size: int, length: int, device: str, padded: bool = True, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Random ids, every row but the first padded to a random length of at least half (or,
    unpadded, every row whole)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(length // 2, length + 1, (size,), generator=g)
    lengths[0] = length
    if not padded:
        lengths[:] = length
    inputs = {
        "input_ids": torch.randint(0, 30522, (size, length), generator=g),
        "attention_mask": (torch.arange(length) < lengths[:, None]).long(),
        "token_type_ids": (torch.arange(length) >= length // 2)
        .long()
        .expand(size, -1)
        .contiguous(),
    }
    return {k: v.to(device) for k, v in inputs.items()}


def seconds(model, inputs: dict, device: str) -> float:
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        model(**inputs)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1000
    start = time.perf_counter()
    model(**inputs)
    return time.perf_counter() - start


def models(device: str, dtype: torch.dtype):
    from transformers import BertModel

    import bertconv

    ours = bertconv.load(converted("base")).to(device=device, dtype=dtype)
    theirs = BertModel.from_pretrained(checkpoint("base"), attn_implementation="sdpa", dtype=dtype)
    return ours, theirs.to(device).eval()


def with_packed(model) -> tuple[dict, str]:
    """bertconv's model by the name of its path: as it is, and with the packed attention where
    that runs here; else a line saying why it was not measured."""
    from bertconv import BertconvError, packed

    try:
        return {"": model, "packed attention": packed.enable(copy.deepcopy(model))}, ""
    except BertconvError as e:
        return {"": model}, f"\n\nNot measured: {e}."


def flops(inputs: dict, h: int = 768, i: int = 3072, layers: int = 12) -> float:
    """The matrix-multiply FLOPs the batch needs: projections and feed-forward for its real
    tokens, attention over each padded row. Both models are credited the same work."""
    b, t = inputs["input_ids"].shape
    real = int(inputs["attention_mask"].sum())
    return layers * (real * 2 * (4 * h * h + 2 * h * i) + b * 4 * t * t * h)


def bf16_peak() -> float:
    """The GPU's bf16 matrix-multiply rate, measured: FLOP/s of an 8192^3 product."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return 2 * 8192**3 / median(times)


def rows(ours: dict, theirs, shape: tuple, device: str, peak: float | None) -> list[list]:
    """A row for each of `ours` (bertconv's model, by the name of its path) against `theirs`,
    all measured alternating on one batch of `shape`."""
    b, t, padded, target = shape
    inputs = batch(b, t, device, padded)
    mine = inputs | {"output_hidden_states": False}  # as transformers' default returns
    cases = {path: lambda m=model: seconds(m, mine, device) for path, model in ours.items()}
    cases["theirs"] = lambda: seconds(theirs, inputs, device)
    for case in cases.values():  # warm-up
        case()
    results = alternate(cases, REPS[device])
    theirs_s = median(results.pop("theirs"))
    kind = "" if padded else ", unpadded"
    table_rows = []
    for path, times in results.items():
        a = median(times)
        cells = [f"{b} x {t}{kind}{path and f' ({path})'}", f"{b * t / a:,.0f}"]
        cells += [f"{b * t / theirs_s:,.0f}", f"{theirs_s / a:.2f}x (>= {target}x)"]
        met = theirs_s / a >= target
        if peak:
            mfu = flops(inputs) / a / peak
            cells.append(f"{mfu:.0%} of {peak / 1e12:.0f} TFLOP/s")
            met = met and (mfu >= MFU or not padded)
        table_rows.append(cells + ["yes" if met else "NO"])
    return table_rows


def main(device: str = "cpu") -> str:
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    # (batch, tokens, padded, the speed-up to reach)
    shapes = (
        [(8, 128, True, 1.3), (32, 128, True, 1.3), (32, 128, False, 1.0)]
        if device == "cpu"
        else [(64, 512, True, 1.3), (64, 512, False, 1.05)]
    )
    torch.set_num_threads(os.cpu_count())
    model, theirs = models(device, dtype)
    ours, note = with_packed(model) if device == "cuda" else ({"": model}, "")
    peak = bf16_peak() if device == "cuda" else None
    with torch.inference_mode():
        measured = [r for shape in shapes for r in rows(ours, theirs, shape, device, peak)]
    header = ["batch", "bertconv tokens/s", "transformers tokens/s", "speed-up"]
    header += ["MFU"] if peak else []
    kind = str(dtype).removeprefix("torch.")
    title = f"## Forward, {device}, {kind} (median of {REPS[device]}, alternating)"
    return f"{title}\n\n" + table(header + ["met"], measured) + note + ceiling(shapes, device)


def ceiling(shapes: list, device: str) -> str:
    """What skipping the padding can give at most: the share of real tokens, each batch's."""
    shares = [
        f"{b} x {t}: {batch(b, t, device)['attention_mask'].float().mean():.1%} real tokens, "
        f"{1 / batch(b, t, device)['attention_mask'].float().mean():.2f}x"
        for b, t, padded, _ in shapes
        if padded
    ]
    return (
        "\n\nOn a padded batch, bertconv's model computes the dense layers (nearly all the "
        "arithmetic) on the real tokens only; the most that can give, with every matrix "
        f"product as fast as transformers' own, is the inverse of their share: {'; '.join(shares)}."
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    print(main(parser.parse_args().device))
