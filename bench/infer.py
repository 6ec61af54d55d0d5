"""Issue 15's target: `bertconv infer` on a bert-base-sized model with official-style names (and
activation modules, its pooler's tanh its own) in under 10 s, whole process; and `verify
--model` of it on a bert-base-shaped checkpoint, for scale."""

import json
import sys

from common import BENCH_DIR, BIN, ROOT, SHAPES, checkpoint, median, run, table

LIMIT, REPS = 10.0, 3
MODEL = f"{ROOT / 'tests' / 'zoo' / 'official_names.py'}:OfficialNamesBert"


def main() -> str:
    config = BENCH_DIR / "bert-base-config.json"
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps(SHAPES["base"]))
    table_file = BENCH_DIR / "official-names.toml"
    infer = [str(BIN / "bertconv"), "infer", MODEL, "--config", str(config)]
    infer_times = [run([*infer, "--out", str(table_file)])[0] for _ in range(REPS)]
    path = checkpoint("base")
    verify = [str(BIN / "bertconv"), "verify", str(path), "--device", "cpu", "--model", MODEL]
    verify_times = [run(verify)[0] for _ in range(REPS)]
    seconds = median(infer_times)
    rows = [
        [
            "infer, bert-base size, official names",
            f"{seconds:.1f} s",
            f"< {LIMIT:.0f} s",
            "yes" if seconds < LIMIT else "NO",
        ],
        ["verify --model, bert-base, CPU", f"{median(verify_times):.1f} s", "-", "-"],
    ]
    return f"## Your own BERT (whole process, median of {REPS})\n\n" + table(
        ["command", "time", "target", "met"], rows
    )


if __name__ == "__main__":
    print(main(), file=sys.stdout)
