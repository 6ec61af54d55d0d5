"""Target 2: `bertconv.load(converted_dir)` at most 0.5x the time of
`transformers.BertModel.from_pretrained` on the same checkpoint, in-process and whole-process."""

import sys
import time

from common import alternate, checkpoint, converted, median, run, table

RATIO, REPS = 0.5, 7


def timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
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
        "bertconv": lambda: timed(bertconv.load, ours),
        "transformers": lambda: timed(BertModel.from_pretrained, official),
    }
    whole = {
        "bertconv": lambda: python(f"import bertconv; bertconv.load('{ours}')"),
        "transformers": lambda: python(
            f"from transformers import BertModel; BertModel.from_pretrained('{official}')"
        ),
    }
    rows = []
    for label, cases in (("in-process", in_process), ("whole process", whole)):
        results = alternate(cases, REPS)
        a, b = median(results["bertconv"]), median(results["transformers"])
        met = "yes" if a <= RATIO * b else "NO"
        rows.append([f"bert-{shape}, {label}", f"{a:.3f} s", f"{b:.3f} s", f"{a / b:.2f}x", met])
    return rows


def main() -> str:
    from transformers.utils import logging

    logging.disable_progress_bar()
    rows = rows_for("base") + rows_for("large")
    header = ["load", "bertconv.load", "BertModel.from_pretrained", "ratio (<= 0.5x)", "met"]
    return f"## Load (median of {REPS}, alternating)\n\n" + table(header, rows)


if __name__ == "__main__":
    print(main())
