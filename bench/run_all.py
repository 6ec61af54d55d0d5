"""Run every benchmark and write the results, with the machine's details, to docs/.

python bench/run_all.py          # CPU: targets 1-6 -> docs/benchmarks.md
python bench/run_all.py --gpu    # GPU: parity (packed too), forward -> docs/benchmarks-gpu.md
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import convert
import forward
import infer
import load
import packed
import startup
import tf_convert
import verify
from common import BIN, ROOT, checkpoint, machine, mpnet_checkpoint, sentence_checkpoint

METHOD = """Each figure is the median of several repetitions that alternate between bertconv and
its baseline, measured in the same run (this machine drifts by up to ~30% between runs).
Checkpoints have real shapes and random weights, written by transformers
(`bench/common.py`). Whole-process times include Python's start-up and every import."""


def gpu_parity(path: Path, name: str, env: dict | None = None) -> list[str]:
    """`bertconv verify` of `path` on the GPU in float32 and bfloat16, as it printed them."""
    blocks = []
    for dtype in ("float32", "bfloat16"):
        done = subprocess.run(
            [str(BIN / "bertconv"), "verify", str(path), "--device", "cuda", "--dtype", dtype],
            capture_output=True,
            text=True,
            env=env,
        )
        said = done.stdout + done.stderr  # a failure is reported, not lost
        blocks.append(
            f"```\n$ bertconv verify {name} --device cuda --dtype {dtype}\n{said}"
            f"(exit code {done.returncode})\n```"
        )
    return blocks


def absolute_parity() -> str:
    blocks = gpu_parity(checkpoint("base", heads=True), "bert-base")
    return "## Parity on the GPU (bert-base shape with both heads)\n\n" + "\n\n".join(blocks)


def relative_parity() -> str:
    """Relative positions, against transformers 4 (the last series that computes them): laid
    over this environment from BERTCONV_TRANSFORMERS4, a directory holding it."""
    title = "## Parity on the GPU, relative positions (bert-base shape, against transformers 4)"
    overlay = os.environ.get("BERTCONV_TRANSFORMERS4", "")
    if not (Path(overlay) / "transformers").is_dir():
        return f"{title}\n\nNot run: no transformers 4 here (see the Makefile's bench-gpu)."
    env = os.environ | {"PYTHONPATH": overlay}
    blocks = []
    for kind in ("relative_key", "relative_key_query"):
        write = f"import common; common.checkpoint('base', True, {kind!r})"
        subprocess.run([sys.executable, "-c", write], env=env, check=True, capture_output=True)
        path = checkpoint("base", heads=True, positions=kind)
        blocks += gpu_parity(path, f"bert-base-{kind}", env)
    return f"{title}\n\n" + "\n\n".join(blocks)


def mpnet_parity() -> str:
    blocks = gpu_parity(mpnet_checkpoint(), "mpnet-base")
    return "## Parity on the GPU, MPNet (mpnet-base shape, masked LM)\n\n" + "\n\n".join(blocks)


def yours_parity() -> str:
    """A from-scratch MPNet of the zoo (tests/zoo/mpnet_scratch.py, with its masked LM) through
    infer and verify --model on the GPU, and one of its faults, named."""
    title = "## Your own MPNet on the GPU (tests/zoo/mpnet_scratch.py, mpnet-base shape)"
    zoo, path = ROOT / "tests" / "zoo" / "mpnet_scratch.py", mpnet_checkpoint()
    blocks = []
    for model, table, dtype in (
        ("MaskedLM", "MaskedLM", "float32"),
        ("MaskedLM", "MaskedLM", "bfloat16"),
        ("FartherReach", "MPNet", "float32"),  # a fault: FAILED, named
    ):
        written = path.parent / f"mpnet-{table}.toml"
        infer = ["infer", f"{zoo}:{table}", "--config", str(path / "config.json")]
        subprocess.run([str(BIN / "bertconv"), *infer, "--out", str(written)], capture_output=True)
        args = ["verify", str(path), "--model", f"{zoo}:{model}", "--layout", str(written)]
        done = subprocess.run([str(BIN / "bertconv"), *args, "--device", "cuda", "--dtype", dtype],
                              capture_output=True, text=True)  # fmt: skip
        typed = f"bertconv verify mpnet-base --model mpnet_scratch.py:{model} --device cuda"
        said = f"{done.stdout}{done.stderr}(exit code {done.returncode})"
        blocks.append(f"```\n$ {typed} --dtype {dtype}\n{said}\n```")
    return f"{title}\n\n" + "\n\n".join(blocks)


def sentence_parity() -> str:
    """The encoder and the sentence embedding of all-MiniLM-L6-v2's pipeline, against
    sentence-transformers on the GPU."""
    title = "## Parity on the GPU, sentence embeddings (all-MiniLM-L6-v2, its weights drawn anew)"
    path = sentence_checkpoint()
    if path is None:
        return f"{title}\n\nNot run: its files are not here (see the Makefile's gpu-files)."
    return f"{title}\n\n" + "\n\n".join(gpu_parity(path, "all-MiniLM-L6-v2-shape"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.gpu:
        sections = [
            absolute_parity,
            relative_parity,
            mpnet_parity,
            yours_parity,
            sentence_parity,
            packed.main,
            lambda: forward.main("cuda"),
        ]
        out = args.out or ROOT / "docs" / "benchmarks-gpu.md"
        title = "# Benchmarks on the GPU"
    else:
        sections = [
            startup.main,
            convert.main,
            tf_convert.main,
            load.main,
            lambda: forward.main("cpu"),
            verify.main,
            infer.main,
        ]
        out = args.out or ROOT / "docs" / "benchmarks.md"
        title = "# Benchmarks"
    target = "make bench-gpu" if args.gpu else "make bench"
    run = f"Run {time.strftime('%Y-%m-%d')} by `{target}`."
    done = [f"{title}\n\nMachine: {machine()}. {run}\n\n{METHOD}"]
    for section in sections:  # written as each ends: a run cut short keeps what it measured
        done.append(section())
        out.write_text("\n\n".join(done) + "\n")
        print(done[-1], flush=True)


if __name__ == "__main__":
    main()
