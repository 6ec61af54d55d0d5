"""Target 3: `bertconv --help` under 0.25 s as a whole process, without importing torch."""

import subprocess
import sys

from common import BIN, median, run, table

LIMIT = 0.25


def main() -> str:
    subprocess.run([str(BIN / "bertconv"), "--help"], capture_output=True, check=True)  # warm
    times = [run([str(BIN / "bertconv"), "--help"])[0] for _ in range(15)]
    probe = "import sys; from bertconv.cli import app; print('torch' in sys.modules)"
    torch = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True
    ).stdout.strip()
    ok = median(times) < LIMIT and torch == "False"
    rows = [
        [
            "`bertconv --help`",
            f"{median(times):.3f} s",
            f"< {LIMIT} s",
            torch,
            "yes" if ok else "NO",
        ]
    ]
    return "## Start-up\n\n" + table(
        ["command", "median of 15", "target", "imports torch", "met"], rows
    )


if __name__ == "__main__":
    print(main())
