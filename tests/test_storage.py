"""storage.py and writing.py, the torch-free layer under conversion: files it writes are read
back by safetensors' own loader, and it streams: peak memory stays near one tensor, not the file."""

import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertconv import storage, writing
from hostile import hostile


def test_written_files_read_back_with_safetensors_and_keep_the_page_offset(tmp_path):
    g = torch.Generator().manual_seed(0)
    original = {
        "a": torch.randn(300, 7, generator=g),
        "b": torch.randint(0, 9, (5,), generator=g),
        "c": torch.randn(4, 3, generator=g).to(torch.bfloat16),
    }
    save_file(original, tmp_path / "in.safetensors")
    stored, _ = storage.read_header(tmp_path / "in.safetensors")
    renamed = {"x." + k: v for k, v in stored.items()}
    renamed["joined"] = storage.join_rows([stored["a"], stored["a"]])
    renamed["transposed"] = storage.transpose(stored["a"])
    renamed["ids"] = storage.arange(6, (1, 6))
    writing.write_safetensors(tmp_path / "out.safetensors", renamed, {"format": "pt", "k": "v"})
    back = load_file(tmp_path / "out.safetensors")
    assert all(torch.equal(back["x." + k], v) for k, v in original.items())
    assert torch.equal(back["joined"], torch.cat([original["a"], original["a"]]))
    assert torch.equal(back["transposed"], original["a"].T)
    assert torch.equal(back["ids"], torch.arange(6)[None])
    source_start = min(t.start for t in stored.values())
    written, meta = storage.read_header(tmp_path / "out.safetensors")
    assert meta == {"format": "pt", "k": "v"}
    assert min(t.start for t in written.values()) % 4096 == source_start % 4096


@pytest.fixture
def kernel_copies(monkeypatch):
    """Every copy the kernel is asked for: (thread, source offset, output position, bytes)."""
    calls, real = [], os.copy_file_range

    def spy(src, dst, count, offset, position):
        calls.append((threading.get_ident(), offset, position, count))
        return real(src, dst, count, offset, position)

    monkeypatch.setattr(os, "copy_file_range", spy)
    return calls


def copied(tmp_path, values: int):
    """A safetensors file of `values` float32s, written again by bertconv behind a few bytes
    of its own (so that the copy starts off any boundary): the original and the copy."""
    g = torch.Generator().manual_seed(0)
    original = {"a": torch.randn(values, generator=g), "b": torch.randn(3, generator=g)}
    save_file(original, tmp_path / "in.safetensors")
    stored, _ = storage.read_header(tmp_path / "in.safetensors")
    writing.write_safetensors(
        tmp_path / "out.safetensors", {"ids": storage.arange(5, (5,)), **stored}, {}
    )
    return original, load_file(tmp_path / "out.safetensors")


@pytest.mark.parametrize("values", [1, 5000, 200_000])
def test_a_copy_is_exact_and_every_step_after_the_first_starts_on_64k(
    values, tmp_path, kernel_copies
):
    original, back = copied(tmp_path, values)
    assert all(torch.equal(back[k], v) for k, v in original.items())
    positions = [position for _, _, position, _ in kernel_copies]
    assert all(p % writing.ALIGN == 0 for p in positions[1:]), positions


def test_large_ranges_are_copied_in_two_halves_at_once(tmp_path, kernel_copies):
    original, back = copied(tmp_path, writing.PARALLEL // 4 + writing.ALIGN)  # over PARALLEL bytes
    assert all(torch.equal(back[k], v) for k, v in original.items())
    assert len({thread for thread, *_ in kernel_copies}) == 2


def test_a_failure_in_the_copying_thread_is_raised(tmp_path, monkeypatch):
    main, real = threading.get_ident(), os.copy_file_range

    def full_elsewhere(src, dst, count, offset, position):
        if threading.get_ident() != main:
            raise OSError(28, "No space left on device")
        return real(src, dst, count, offset, position)

    monkeypatch.setattr(os, "copy_file_range", full_elsewhere)
    with pytest.raises(OSError, match="No space left"):
        copied(tmp_path, writing.PARALLEL // 4 + writing.ALIGN)


def test_to_torch_maps_the_file_and_writes_stay_private(tmp_path):
    save_file({"w": torch.ones(4, 4)}, tmp_path / "m.safetensors")
    stored, _ = storage.read_header(tmp_path / "m.safetensors")
    weight = storage.to_torch(stored["w"])
    weight.add_(1)
    assert torch.equal(load_file(tmp_path / "m.safetensors")["w"], torch.ones(4, 4))


PEAK = """
import resource, sys
from pathlib import Path
from bertconv import storage, writing
stored, _ = storage.read_header(Path(sys.argv[1]))
tensors = {{"t": {transform}(stored["t"])}}
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
writing.write_safetensors(Path(sys.argv[2]), tensors, {{}})
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


def peak_mb(transform: str, src, dst) -> int:
    code = textwrap.dedent(PEAK.format(transform=transform))
    done = subprocess.run(
        [sys.executable, "-c", code, str(src), str(dst)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_writing_streams_a_tensor_at_a_time(tmp_path):
    """A 128 MB tensor: copied by the kernel with almost no memory, transposed holding it once
    (the target: the largest tensor plus 64 MB)."""
    big = torch.arange(4096 * 8192, dtype=torch.float32).view(4096, 8192)
    save_file({"t": big}, tmp_path / "big.safetensors")
    assert peak_mb("", tmp_path / "big.safetensors", tmp_path / "copy.safetensors") < 16
    assert (
        peak_mb("storage.transpose", tmp_path / "big.safetensors", tmp_path / "t.safetensors")
        < 128 + 64
    )
    assert torch.equal(load_file(tmp_path / "t.safetensors")["t"], big.T)


@pytest.mark.parametrize("shape", [(3, 5), (37, 11), (1000, 7), (9, 1100)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int8])
def test_a_transposed_tensor_is_exact_in_any_shape_and_band(shape, dtype, tmp_path, monkeypatch):
    """Kernels are transposed a band of rows at a time, a few rows at once: shapes that fill
    neither a band nor a tile come out exact, in elements of any width, from a file and from
    memory alike."""
    monkeypatch.setattr(storage, "BAND", 4 * 64)  # a few rows a band, a few columns a block
    g = torch.Generator().manual_seed(0)
    original = (torch.randn(shape, generator=g) * 50).to(dtype)
    save_file({"w": original}, tmp_path / "w.safetensors")
    stored = storage.read_header(tmp_path / "w.safetensors")[0]["w"]
    # a hand-made file may put a tensor at any byte: mapped pages start where they must
    raw = original.view(torch.uint8).numpy().tobytes()
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"x" * 3 + raw + b"yy")
    misaligned = storage.Stored(odd, stored.dtype, shape, 3, 3 + len(raw))
    for source in (stored, misaligned, storage.from_torch(original)):
        back = storage.read_bytes(storage.transpose(source))
        assert torch.equal(
            torch.frombuffer(bytearray(back), dtype=dtype).view(shape[::-1]), original.T
        )


def test_a_source_cut_short_after_its_header_was_read_is_named(tmp_path):
    """A file that no longer holds the bytes its header promised is named, and how many are
    missing (a transposed tensor was once mapped: reading past its end killed the process)."""
    from bertconv.errors import CheckpointError

    save_file({"w": torch.randn(64, 48)}, tmp_path / "w.safetensors")
    stored = storage.read_header(tmp_path / "w.safetensors")[0]["w"]
    with open(hostile(tmp_path / "w.safetensors"), "r+b") as f:
        f.truncate(stored.end - 4)
    with pytest.raises(CheckpointError, match="the source ended 4 bytes early"):
        storage.read_bytes(storage.transpose(stored))


def test_a_copy_from_a_source_cut_short_names_it_and_the_bytes_missing(tmp_path):
    """The kernel's copy (a renaming conversion) says which file ended early, and by how much."""
    from bertconv.errors import CheckpointError

    save_file({"w": torch.randn(64, 48)}, tmp_path / "w.safetensors")
    stored = storage.read_header(tmp_path / "w.safetensors")[0]["w"]
    with open(hostile(tmp_path / "w.safetensors"), "r+b") as f:
        f.truncate(stored.end - 100)
    with pytest.raises(CheckpointError, match="w.safetensors: the source ended 100 bytes early"):
        writing.write_raw(tmp_path / "out.data", [stored])


def test_crc32c_combine_joins_two_checksums_as_the_bytes_joined_would():
    import random

    import google_crc32c

    from bertconv import files

    rng = random.Random(0)
    for _ in range(50):
        a, b = rng.randbytes(rng.randrange(0, 3000)), rng.randbytes(rng.randrange(0, 3000))
        joined = files.crc32c_combine(google_crc32c.value(a), google_crc32c.value(b), len(b))
        assert joined == google_crc32c.value(a + b)


@pytest.mark.parametrize("scanned", [False, True])
def test_a_file_is_checksummed_as_written_whole_and_by_segment(tmp_path, scanned):
    """Blocks (a transposed tensor's, memory's) and ranges copied by the kernel, cut where a
    segment ends; a range's checksum taken from the scan of its source where one ran, read
    otherwise: the same digits as reading the file back."""
    import google_crc32c

    from bertconv import files

    g = torch.Generator().manual_seed(0)
    save_file(
        {"a": torch.randn(300, 7, generator=g), "b": torch.randn(50, generator=g)},
        tmp_path / "in.safetensors",
    )
    stored, _ = storage.read_header(tmp_path / "in.safetensors")
    if scanned:
        files.RANGES.clear()
        assert storage.nonfinite_soon(stored)() == []
        assert files.RANGES  # the scan remembered what it read
    tensors = [storage.arange(6, (6,)), stored["a"], stored["b"], storage.transpose(stored["a"])]
    sizes = [storage.nbytes(t) for t in tensors]
    checksum = writing.Checksum(sizes)
    writing.write_raw(tmp_path / "out", tensors, checksum=checksum)
    data = (tmp_path / "out").read_bytes()
    assert checksum.result() == f"{google_crc32c.value(data):08x}"
    ends = [sum(sizes[: i + 1]) for i in range(len(sizes))]
    pieces = [data[e - s : e] for s, e in zip(sizes, ends, strict=True)]
    assert checksum.segments == [google_crc32c.value(p) for p in pieces]


def test_a_range_remembered_of_a_file_since_changed_is_not_taken(tmp_path):
    from bertconv import files

    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    files.remember_range(path, 0, 100, 1234)
    files.remember_range(path, 0, 0, 0)  # an empty tensor, where the next one starts
    assert files.range_checksum(path, 0, 100) == 1234
    assert files.range_checksum(path, 0, 50) is None  # not the union of ranges remembered
    os.utime(path, ns=(1, 1))  # written since, as far as anyone can tell
    assert files.range_checksum(path, 0, 100) is None
