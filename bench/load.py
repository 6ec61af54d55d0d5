"""Target 2: `bertconv.load(converted_dir)` at most 0.5x the time of
`transformers.BertModel.from_pretrained` on the same checkpoint, in-process and whole-process."""

import sys
import time

from common import alternate, checkpoint, converted, median, run, table

RATIO, REPS = 0.5, 7


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> str:
    import bertconv
    from transformers import BertModel
    from transformers.utils import logging

    logging.disable_progress_bar()
    rows = []
    for shape in ("base", "large"):
        official, ours = checkpoint(shape), converted(shape)
        # a warm-up of each: first calls pay one-off costs (imports inside the libraries)
        bertconv.load(ours), BertModel.from_pretrained(official)
        inproc = alternate(
            {
                "bertconv": lambda: timed(lambda: bertconv.load(ours)),
                "transformers": lambda: timed(lambda: BertModel.from_pretrained(official)),
            },
            REPS,
        )
        whole = alternate(
            {
                "bertconv": lambda: run(
                    [sys.executable, "-c", f"import bertconv; bertconv.load('{ours}')"]
                )[0],
                "transformers": lambda: run(
                    [
                        sys.executable,
                        "-c",
                        f"from transformers import BertModel; BertModel.from_pretrained('{official}')",
                    ]
                )[0],
            },
            REPS,
        )
        for label, results in (("in-process", inproc), ("whole process", whole)):
            a, b = median(results["bertconv"]), median(results["transformers"])
            rows.append([
                f"bert-{shape}, {label}", f"{a:.3f} s", f"{b:.3f} s", f"{a / b:.2f}x", "yes" if a <= RATIO * b else "NO"
            ])  # fmt: skip
    header = ["load", "bertconv.load", "BertModel.from_pretrained", "ratio (<= 0.5x)", "met"]
    return f"## Load (median of {REPS}, alternating)\n\n" + table(header, rows)


if __name__ == "__main__":
    print(main())
