"""Target 2: `bertconv.load(converted_dir)` at most 0.5x the time of
`transformers.BertModel.from_pretrained` on the same checkpoint, in-process and whole-process.

Since issue 26 `load` reads the weights into memory by default (the model keeps them whatever
later happens to the file); `load(..., mmap=True)` maps them, as it did before. Both are
measured, against from_pretrained."""

import sys
import time

from common import alternate, checkpoint, converted, median, run, table

RATIO, REPS = 0.5, 7


def timed(fn, *args, **kwargs) -> float:
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def python(code: str) -> float:
    return run([sys.executable, "-c", code])[0]


def rows_for(shape: str) -> list[list]:
    from transformers import BertModel

    import bertconv

    official, ours = checkpoint(shape), converted(shape)
    # first calls pay one-off costs (imports inside the libraries): warm both up
    bertconv.load(ours)
    BertModel.from_pretrained(official)
    in_process = {
        "read": lambda: timed(bertconv.load, ours),
        "mapped": lambda: timed(bertconv.load, ours, mmap=True),
        "transformers": lambda: timed(BertModel.from_pretrained, official),
    }
    whole = {
        "read": lambda: python(f"import bertconv; bertconv.load('{ours}')"),
        "mapped": lambda: python(f"import bertconv; bertconv.load('{ours}', mmap=True)"),
        "transformers": lambda: python(
            f"from transformers import BertModel; BertModel.from_pretrained('{official}')"
        ),
    }
    rows = []
    for label, cases in (("in-process", in_process), ("whole process", whole)):
        results = alternate(cases, REPS)
        theirs = median(results["transformers"])
        for kind in ("read", "mapped"):
            a = median(results[kind])
            met = "yes" if a <= RATIO * theirs else "NO"
            name = "bertconv.load" if kind == "read" else "bertconv.load(mmap=True)"
            row = [f"bert-{shape}, {label}", name, f"{a:.3f} s", f"{theirs:.3f} s"]
            rows.append([*row, f"{a / theirs:.2f}x", met])
    return rows


def main() -> str:
    from transformers.utils import logging

    logging.disable_progress_bar()
    rows = rows_for("base") + rows_for("large")
    header = ["load", "bertconv", "time", "BertModel.from_pretrained", "ratio (<= 0.5x)", "met"]
    return (
        f"## Load (median of {REPS}, alternating)\n\n"
        "`bertconv.load` reads the weights into memory (the default since issue 26);\n"
        "`mmap=True` maps them from the file.\n\n" + table(header, rows)
    )


if __name__ == "__main__":
    print(main())
