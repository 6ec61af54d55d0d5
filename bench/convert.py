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


def start_up() -> str:
    """What any bertconv command costs before it does anything: Python and typer starting."""
    seconds = median([run([str(BIN / "bertconv"), "layouts"])[0] for _ in range(REPS)])
    return (
        f"Start-up floor: `bertconv layouts` takes {seconds:.2f} s as a whole process (Python, "
        "typer and bertconv's imports); every conversion pays it before copying a byte. The "
        "disk's writeback makes `cp`'s own time vary between runs here (0.1 to 0.4 s for "
        "bert-base): compare within one table only."
    )


def main() -> str:
    rows = rows_for("base") + rows_for("large")
    header = ["conversion", "bertconv", "cp", "ratio (<= 1.2x)", "peak RSS (<= 64 MB)", "met"]
    title = f"## Convert (whole process, median of {REPS}, alternating)"
    return f"{title}\n\n{table(header, rows)}\n\n{start_up()}"


if __name__ == "__main__":
    print(main())
