"""Target 1: `bertconv convert` (rename-only layouts) as a whole process at most 1.2x the time of
`cp` of the same file, peak RSS at most 64 MB, for bert-base and bert-large shapes."""

import os
import shutil

from common import BENCH_DIR, BIN, alternate, checkpoint, median, run, table

TIME_RATIO, RSS_MB, REPS = 1.2, 64, 11


def rows_for(shape: str) -> list[list]:
    src = checkpoint(shape)
    copy, out = BENCH_DIR / "cp.safetensors", BENCH_DIR / "convert-out"

    def clean():
        copy.unlink(missing_ok=True)
        shutil.rmtree(out, ignore_errors=True)
        os.sync()  # the last run's writeback would otherwise land on this one

    def convert(layout: str):
        return run([str(BIN / "bertconv"), "convert", str(src), "--to", layout, "--out", str(out)])

    cases = {
        "cp": lambda: run(["cp", str(src / "model.safetensors"), str(copy)]),
        "bertconv": lambda: convert("bertconv"),
        "minbert": lambda: convert("minbert"),
    }
    results = alternate(cases, REPS, before=clean)
    clean()
    cp_time = median([t for t, _ in results["cp"]])
    size = (src / "model.safetensors").stat().st_size / 1e6
    rows = []
    for name in ("bertconv", "minbert"):
        seconds = median([t for t, _ in results[name]])
        rss = max(m for _, m in results[name])
        ok = seconds <= TIME_RATIO * cp_time and rss <= RSS_MB
        rows.append([
            f"bert-{shape} ({size:.0f} MB) -> {name}", f"{seconds:.2f} s", f"{cp_time:.2f} s",
            f"{seconds / cp_time:.2f}x", f"{rss:.0f} MB", "yes" if ok else "NO",
        ])  # fmt: skip
    return rows


def main() -> str:
    rows = rows_for("base") + rows_for("large")
    header = ["conversion", "bertconv", "cp", "ratio (<= 1.2x)", "peak RSS (<= 64 MB)", "met"]
    return f"## Convert (whole process, median of {REPS}, alternating)\n\n" + table(header, rows)


if __name__ == "__main__":
    print(main())
