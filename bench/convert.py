"""Target 1 (issue 46): `bertconv convert` (rename-only layouts) as a whole process at most 1.5x
the time of a Python process copying the same file, peak RSS at most 64 MB, for bert-base and
bert-large shapes."""

import os
import shutil

from common import BENCH_DIR, BIN, alternate, checkpoint, median, python_copy, run, table

TIME_RATIO, RSS_MB = 1.5, 64
REPS = {"base": 21, "large": 11}  # bert-base's copy is short: more repetitions steady it


def rows_for(shape: str, floor: float) -> tuple[list[list], str]:
    """The table's rows for one shape, and how far the copy's own time ranged."""
    src = checkpoint(shape)
    copy, out = BENCH_DIR / "cp.safetensors", BENCH_DIR / "convert-out"

    def clean():
        copy.unlink(missing_ok=True)
        shutil.rmtree(out, ignore_errors=True)
        os.sync()  # the last run's writeback would otherwise land on this one

    def convert(layout: str):
        return run([str(BIN / "bertconv"), "convert", str(src), "--to", layout, "--out", str(out)])

    cases = {
        "copy": lambda: python_copy(src / "model.safetensors", copy),
        "bertconv": lambda: convert("bertconv"),
        "minbert": lambda: convert("minbert"),
    }
    results = alternate(cases, REPS[shape], before=clean)
    clean()
    cp_times = [t for t, _ in results["copy"]]
    cp_time = median(cp_times)
    size = (src / "model.safetensors").stat().st_size / 1e6
    rows = []
    for name in ("bertconv", "minbert"):
        seconds = median([t for t, _ in results[name]])
        rss = max(m for _, m in results[name])
        ok = seconds <= TIME_RATIO * cp_time and rss <= RSS_MB
        rows.append([
            f"bert-{shape} ({size:.0f} MB) -> {name}", f"{seconds:.3f} s",
            f"{seconds - floor:.3f} s", f"{cp_time:.3f} s", f"{seconds / cp_time:.2f}x",
            f"{rss:.0f} MB", "yes" if ok else "NO",
        ])  # fmt: skip
    return rows, f"bert-{shape} {min(cp_times):.2f} to {max(cp_times):.2f} s"


def start_up() -> float:
    """What any bertconv command costs before it does anything: Python and typer starting."""
    return median([run([str(BIN / "bertconv"), "layouts"])[0] for _ in range(REPS["base"])])


def main() -> str:
    floor = start_up()
    (base, base_spread), (large, large_spread) = rows_for("base", floor), rows_for("large", floor)
    header = ["conversion", "bertconv", "less start-up", "Python copy", "ratio (<= 1.5x)"]
    header += ["peak RSS (<= 64 MB)", "met"]
    reps = f"median of {REPS['base']} (bert-base) and {REPS['large']} (bert-large)"
    title = f"## Convert (whole process, {reps}, alternating)"
    note = (
        f"Start-up: `bertconv layouts` takes {floor:.3f} s as a whole process (Python, typer "
        "and bertconv's imports, and the exit); every conversion pays it before copying a byte. "
        "`less start-up` is the conversion without it. `Python copy` is a Python process "
        "copying the same file (shutil.copyfile), its start-up included; its time varied in "
        "this run "
        f"({base_spread}; {large_spread}), with the disk's writeback and the host: compare "
        "within one table only."
    )
    return f"{title}\n\n{table(header, base + large)}\n\n{note}"


if __name__ == "__main__":
    print(main())
