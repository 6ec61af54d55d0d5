"""Target 5: `bertconv verify` on a bert-base-shaped checkpoint in under 20 s, whole process,
on the CPU (float32; the checkpoint has both pre-training heads, so every row is compared)."""

import sys

from common import BIN, checkpoint, median, run, table

LIMIT, REPS = 20.0, 3


def main() -> str:
    path = checkpoint("base", heads=True)
    times = [
        run([str(BIN / "bertconv"), "verify", str(path), "--device", "cpu"])[0] for _ in range(REPS)
    ]
    seconds = median(times)
    rows = [
        [
            "bert-base with heads, float32, CPU",
            f"{seconds:.1f} s",
            f"< {LIMIT:.0f} s",
            "yes" if seconds < LIMIT else "NO",
        ]
    ]
    return f"## Verify (whole process, median of {REPS})\n\n" + table(
        ["verify", "time", "target", "met"], rows
    )


if __name__ == "__main__":
    print(main(), file=sys.stdout)
