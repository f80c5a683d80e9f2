"""The chapter "PyTorch on the GPU, in code": every topic it promises is a code cell with output.

Prose alone does not count: for each topic, the code that demonstrates it must sit in a code cell
of book/gpu_code.ipynb, and that cell must have been executed (its output is stored, without an
error), so the rendered page shows what the code printed.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from cfbook.book.toc import read_book

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = Path("book/gpu_code.ipynb")
CHECK_TAG = "nbval-check-output"  # the cell tag that has nbval compare its output
# Topic: code that must appear in an executed code cell of the chapter (each snippet somewhere).
TOPICS = {
    "host-side loading": ("pin_memory", "num_workers", "persistent_workers", "DeviceLoader("),
    "non-blocking copies": ("non_blocking=True",),
    "DataParallel and DDP": (
        "nn.DataParallel(",
        "DistributedDataParallel(",
        "init_distributed(",
        "wrap_model(",
    ),
    "DistributedSampler": ("DistributedSampler(", "num_replicas=2", "set_epoch(", "world_size=2"),
    "cudnn benchmark": ("cudnn.benchmark",),
    "synchronize": ("synchronize(",),
    "memory summary": ("memory_summary(", "free_cached_memory("),
    "allocator settings": (
        "PYTORCH_CUDA_ALLOC_CONF",
        "expandable_segments:True",
        "garbage_collection_threshold:0.8",
    ),
    "mixed precision": (
        "torch.autocast(",
        "GradScaler(",
        "unscale_(",
        "clip_grad_norm_(",
        "scaler.step(",
        "scaler.update()",
    ),
    "profiler": ("torch.profiler", "key_averages()", "export_chrome_trace("),
    "gradient checkpointing": ("checkpoint(", "use_reentrant=False", "torch.allclose"),
    "torch.compile": ("torch.compile(", "compiler_available()"),
}
# Deterministic cells whose output nbval compares: code that must be in one of them.
CHECKED = ("DistributedSampler(", "use_reentrant=False")
# Code that runs only on CUDA: its cell needs a branch for every other device.
CUDA_ONLY = ("memory_summary(", "cudnn.benchmark = True", "device='cuda'")


def read() -> nbformat.NotebookNode:
    return nbformat.read(ROOT / CHAPTER, as_version=4)


def code_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def test_the_chapter_is_in_the_book():
    assert CHAPTER in read_book(ROOT).chapters, f"{CHAPTER} is not listed in _quarto.yml"


@pytest.mark.parametrize("topic", TOPICS)
def test_topic_is_shown_by_an_executed_code_cell(topic):
    cells = code_cells(read())
    for snippet in TOPICS[topic]:
        matches = [cell for cell in cells if snippet in cell.source]
        assert matches, f"{topic}: no code cell of {CHAPTER} contains {snippet!r}"
        for cell in matches:
            assert cell.outputs, (
                f"{topic}: the cell with {snippet!r} has no stored output; execute the chapter "
                "(python -m cfbook.commands.pipeline) before committing"
            )
            assert all(out.output_type != "error" for out in cell.outputs), (
                f"{topic}: the cell with {snippet!r} stored an error"
            )


@pytest.mark.parametrize("snippet", CHECKED)
def test_deterministic_cells_are_checked_by_nbval(snippet):
    matches = [cell for cell in code_cells(read()) if snippet in cell.source]
    assert matches and all(CHECK_TAG in cell.metadata.get("tags", []) for cell in matches), (
        f"the cell with {snippet!r} should be tagged {CHECK_TAG}"
    )


def test_cuda_only_cells_say_so_on_other_devices():
    """A cell whose subject exists only on CUDA prints, elsewhere, that it needs a CUDA GPU: no GPU
    output is invented on a page built without one."""
    for snippet in CUDA_ONLY:
        for cell in (c for c in code_cells(read()) if snippet in c.source):
            assert "needs a CUDA GPU" in cell.source, f"the cell with {snippet!r} does not say so"


def test_the_page_says_where_its_outputs_come_from_and_ends_with_takeaways():
    markdown = [cell.source for cell in read().cells if cell.cell_type == "markdown"]
    assert markdown[0].startswith("# PyTorch on the GPU, in code")
    assert "the outputs on this page come from a cpu" in " ".join(markdown[0].split()).lower()
    assert markdown[-1].startswith("## Takeaways")
    bullets = [line for line in markdown[-1].splitlines() if line.startswith("- ")]
    assert 2 <= len(bullets) <= 3, bullets
