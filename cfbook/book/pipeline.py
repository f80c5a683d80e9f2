"""Build the whole book: both trainings in fresh kernels, the evaluation step, every chapter in
plot mode, the website. Its command line is ``python -m cfbook.commands.pipeline``.

Each training stage is the training chapter run by papermill with the parameter CT_MODE=full or
CT_MODE=vanilla, without its demonstration cells (tagged ``demo``: the small trainings that show
the API, which only the plot-mode chapter runs); papermill starts a new kernel per notebook, so
the second training never shares a process (or an accelerator memory pool) with the first. A
stage's progress lines stream to the terminal, and it saves a checkpoint every epoch, so running
the same command again after an interruption resumes the stage. Logs already present for the
profile are reused, like Quarto's freeze, unless ``--force``, which also discards the
checkpoints. The evaluation step then evaluates both stages' weights (each stage's evaluation,
the paired evaluation, the microscope); its files are reused when they were made from the same
configuration and no stage was trained again. The chapters then run in plot mode, which they
read from $CT_MODE and $CFBOOK_PROFILE, so the executed chapters stay free of injected cells.
The site is built with Quarto when it is on PATH, else with nbconvert.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import nbformat
import papermill

from cfbook.atomic import atomic_write_text
from cfbook.book.profiles import Profile
from cfbook.book.site.build import build_site
from cfbook.book.stages import (
    TRAINING_MODES,
    evaluation_outputs,
    missing_weights,
    profile_dir,
    run_evaluation_step,
    stage_checkpoint_dir,
    stage_outputs,
)
from cfbook.book.toc import CONFIG_FILE, read_book
from cfbook.data import find_data_dir
from cfbook.device import detect_device
from cfbook.errors import SetupError
from cfbook.progress import format_duration
from cfbook.training.distributed import THREADS_ENV
from cfbook.training.log import load_log

__all__ = [
    "DEMO_TAG",
    "TRAINING_CHAPTER",
    "StageFailed",
    "find_project_dir",
    "kernel_name",
    "run_pipeline",
    "stage_notebook_path",
    "without_demo_cells",
]

TRAINING_CHAPTER = "training.ipynb"
DEMO_TAG = "demo"  # cells of the training chapter that a training stage does not run
KERNEL_NAME = "cfbook"
INDENT = " " * 7  # stage output lines up under the "[k/n] stage" line


class StageFailed(RuntimeError):
    """A stage's notebook raised; the message names the stage and its executed notebook."""

    def __init__(self, stage: str, notebook: Path, reason: str):
        super().__init__(f"stage '{stage}' failed: {reason}\n  executed notebook: {notebook}")
        self.stage = stage
        self.notebook = notebook


def find_project_dir(start: str | Path | None = None) -> Path:
    """The folder holding ``_quarto.yml``: walk up from ``start`` (cwd), else this repository."""
    start = Path(start or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder
    repo = Path(__file__).resolve().parents[2]
    if (repo / CONFIG_FILE).is_file():
        return repo
    raise FileNotFoundError(f"no {CONFIG_FILE} above {start}: pass --project-dir")


def stage_notebook_path(data_dir: str | Path | None, profile_name: str, mode: str) -> Path:
    """Where the executed notebook of training stage ``mode`` is kept, beside its log."""
    return profile_dir(data_dir, profile_name) / f"training-{mode}.ipynb"


def _starts_this_python(argv0: str) -> bool:
    # jupyter_client itself swaps a bare "python"/"python3"/"python3.X" for sys.executable.
    bare = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info[:2])}
    if argv0 in bare:
        return True
    exe, here = Path(argv0).absolute(), Path(sys.executable).absolute()
    # bin/python and bin/python3 of one venv are the same interpreter (links to one file).
    return exe == here or (exe.parent == here.parent and exe.exists() and exe.samefile(here))


def kernel_name() -> str:
    """A kernelspec that runs this interpreter, so chapters import the same cfbook and torch.

    ``python3`` is used when it resolves to this interpreter (the usual venv case); otherwise a
    ``cfbook`` kernelspec pointing at ``sys.executable`` is installed into ``sys.prefix``.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    def runs_here(name: str) -> bool:
        try:
            return _starts_this_python(KernelSpecManager().get_kernel_spec(name).argv[0])
        except NoSuchKernel:
            return False

    for name in ("python3", KERNEL_NAME):
        if runs_here(name):
            return name
    from ipykernel.kernelspec import install

    install(kernel_name=KERNEL_NAME, display_name="Python (cfbook)", prefix=sys.prefix)
    if not runs_here(KERNEL_NAME):
        raise SetupError(
            f"the Jupyter kernel {KERNEL_NAME!r} does not start {sys.executable}; remove the "
            "shadowing kernelspec (`jupyter kernelspec list`) and run the pipeline again"
        )
    print(f"Installed the Jupyter kernel {KERNEL_NAME!r} for {sys.executable}")
    return KERNEL_NAME


@contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Set environment variables for the kernels papermill starts (they inherit os.environ)."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class _Indented:
    """A writable stream that indents every line it passes on to ``stream``."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.line_start = True

    def write(self, text: str) -> int:
        for piece in text.splitlines(keepends=True):
            self.stream.write(INDENT + piece if self.line_start else piece)
            self.line_start = piece.endswith("\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def _execute(
    stage: str,
    source: Path,
    output: Path,
    parameters: dict | None,
    *,
    cwd: Path,
    kernel: str,
    verbose: bool,
    stream: bool = False,
    keep_metadata: tuple[str, ...] = (),
) -> float:
    """Run one notebook in a fresh kernel; return its wall time or raise :class:`StageFailed`.

    ``parameters`` are injected by papermill (a new cell after the ``parameters`` cell). papermill
    rewrites its output file as it goes, so it writes a temporary file beside ``output``, which
    replaces ``output`` only on success: a failed or interrupted run leaves the previous notebook
    intact and keeps its own beside it as ``<name>.failed.ipynb``. With ``stream`` the text the
    notebook prints is copied to the terminal as it comes (a training stage's progress lines).
    """
    output.parent.mkdir(parents=True, exist_ok=True)
    running = output.with_name(f".{output.stem}.running.ipynb")
    start = time.perf_counter()
    echo = (
        {"stdout_file": _Indented(sys.stdout), "stderr_file": _Indented(sys.stderr)}
        if stream
        else {}
    )
    try:
        papermill.execute_notebook(
            str(source),
            str(running),
            parameters=parameters,
            kernel_name=kernel,
            cwd=str(cwd),
            progress_bar=False,
            log_output=verbose and not stream,
            **echo,
            # Quiet the kernel's own log (e.g. its TCP notice); cell errors land in the notebook.
            extra_arguments=[] if verbose else ["--IPKernelApp.log_level=CRITICAL"],
        )
    except BaseException as err:
        failed = output.with_name(f"{output.stem}.failed.ipynb")
        if running.is_file():
            os.replace(running, failed)
        if isinstance(err, papermill.PapermillExecutionError):
            raise StageFailed(stage, failed, f"{err.ename}: {err.evalue}") from err
        if isinstance(err, Exception):  # a dead kernel, a kernel that never started, ...
            raise StageFailed(stage, failed, f"{type(err).__name__}: {err}") from err
        raise  # KeyboardInterrupt and friends: stop, with the old notebook untouched
    _strip_run_metadata(running, keep=keep_metadata)
    os.replace(running, output)
    return time.perf_counter() - start


def _strip_run_metadata(path: Path, keep: tuple[str, ...] = ()) -> None:
    """Drop papermill's paths and timestamps (all but the ``keep`` entries), so re-executed
    notebooks only differ in outputs and hold no machine-specific paths."""
    nb = nbformat.read(path, as_version=4)
    run = nb.metadata.pop("papermill", {})
    if keep:
        nb.metadata["papermill"] = {k: run[k] for k in keep if k in run}
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
    atomic_write_text(path, nbformat.writes(nb))


def _reuse_reason(logs: list[Path], profile: Profile) -> str | None:
    """Why a stage's existing run logs can stand in for training it again, or None to retrain."""
    if not all(path.is_file() for path in logs):
        return None
    try:
        configs = [load_log(path).meta.get("config") for path in logs]
    except ValueError as err:
        print(f"{INDENT}{err}; training again")
        return None
    if any(config != profile.config() for config in configs):
        print(f"{INDENT}{logs[0]} was made with another {profile.name!r} configuration; retraining")
        return None
    return f"reusing {logs[0]}; pass --force to retrain"


def without_demo_cells(notebook: Path, folder: Path) -> Path:
    """A copy of ``notebook`` in ``folder`` without the cells tagged ``DEMO_TAG``."""
    nb = nbformat.read(notebook, as_version=4)
    nb.cells = [c for c in nb.cells if DEMO_TAG not in c.metadata.get("tags", [])]
    copy = folder / notebook.name
    nbformat.write(nb, copy)
    return copy


def _train(
    stage: str,
    mode: str,
    profile: Profile,
    source: Path,
    *,
    data_dir: Path,
    force: bool,
    kernel: str,
    verbose: bool,
) -> bool:
    """One training stage: reuse its logs, or train in a fresh kernel, resuming a checkpoint;
    True if it trained."""
    outputs = stage_outputs(data_dir, profile, mode)
    reason = None if force else _reuse_reason(outputs, profile)
    if reason is not None:
        print(f"{INDENT}{reason}", flush=True)
        return False
    checkpoints = [
        stage_checkpoint_dir(data_dir, profile.name, mode, run)
        for run in range(1, profile.runs + 1)
    ]
    if force:
        for folder in checkpoints:
            shutil.rmtree(folder, ignore_errors=True)
    notebook = stage_notebook_path(data_dir, profile.name, mode)
    with tempfile.TemporaryDirectory(prefix="cfbook-stage-") as scratch:
        seconds = _execute(
            stage,
            without_demo_cells(source, Path(scratch)),
            notebook,
            {"CT_MODE": mode, "profile": profile.name},
            cwd=source.parent,  # the chapter's folder, as in plot mode
            kernel=kernel,
            verbose=verbose,
            stream=True,
            keep_metadata=("parameters", "exception", "duration"),
        )
    missing = [p for p in outputs if not p.is_file()]
    if missing:
        raise StageFailed(stage, notebook, f"the notebook finished but wrote no {missing[0]}")
    # The logs are the stage's result; checkpoints only served interruptions.
    for folder in checkpoints:
        shutil.rmtree(folder, ignore_errors=True)
    print(
        f"{INDENT}done in {format_duration(seconds)} -> {outputs[0].parent} (notebook {notebook})",
        flush=True,
    )
    return True


def _stale_evaluations(data_dir: Path, profile: Profile) -> list[Path]:
    """The evaluation step's files that are missing, unreadable or made from another
    configuration."""
    config = profile.evaluation_config()
    stale = []
    for path in evaluation_outputs(data_dir, profile):
        try:
            current = json.loads(path.read_text(encoding="utf-8"))["meta"]["config"] == config
        except (OSError, ValueError, KeyError, TypeError):
            current = False
        if not current:
            stale.append(path)
    return stale


def _evaluate(profile: Profile, *, data_dir: Path, force: bool, retrained: bool) -> None:
    """The evaluation step: reuse its files, or evaluate both stages' weights again. Without
    the weights (a fresh clone: they are not in git), files made with other evaluation settings
    are kept, saying so: there is nothing to evaluate them again with."""
    stale = _stale_evaluations(data_dir, profile)
    folder = profile_dir(data_dir, profile.name)
    if not (force or retrained) and not stale:
        print(f"{INDENT}reusing the evaluations in {folder}", flush=True)
        return
    existing = all(p.is_file() for p in evaluation_outputs(data_dir, profile))
    if not (force or retrained) and existing and missing_weights(data_dir, profile):
        print(
            f"{INDENT}keeping {', '.join(p.name for p in stale)} in {folder}: made with other "
            "evaluation settings, and the trained weights to evaluate again are not here (pass "
            "--force to train the stages and remake them)",
            flush=True,
        )
        return
    start = time.perf_counter()
    written = run_evaluation_step(profile, device=detect_device(verbose=False), data_dir=data_dir)
    print(
        f"{INDENT}done in {format_duration(time.perf_counter() - start)} -> {written[0].parent}",
        flush=True,
    )


def run_pipeline(
    profile: Profile,
    *,
    project_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    build_dir: str | Path | None = None,
    site_dir: str | Path | None = None,
    force: bool = False,
    stages_only: bool = False,
    site: bool = True,
    use_quarto: bool | None = None,
    verbose: bool = False,
    threads: int | None = None,
) -> Path | None:
    """Run the book's stages in order; return the site's index.html (None if no site was built).

    The chapters are the notebooks ``_quarto.yml`` lists, relative to ``project_dir``; each runs
    in its own folder. Executed plot-mode chapters go to the same relative paths under
    ``build_dir`` (default: the project itself, i.e. in place). ``use_quarto`` is passed to
    :func:`cfbook.book.site.build.build_site` (None: Quarto if on PATH).
    ``threads`` sets torch's CPU threads in the training stages (default: one per core).
    """
    t_total = time.perf_counter()
    project_dir = Path(project_dir) if project_dir is not None else find_project_dir()
    book = read_book(project_dir)
    build_dir = Path(build_dir) if build_dir is not None else project_dir
    data_dir = Path(data_dir if data_dir is not None else find_data_dir()).resolve()
    missing = [str(c) for c in book.chapters if not (project_dir / c).is_file()]
    if missing:
        raise FileNotFoundError(
            f"chapters listed in {project_dir / CONFIG_FILE} missing from {project_dir}: "
            + ", ".join(missing)
        )
    training = project_dir / book.chapter(TRAINING_CHAPTER)
    kernel = kernel_name()
    print(
        f"cfbook pipeline: profile {profile.name} ({profile.model}, n={profile.n}, "
        f"{profile.nepochs} epochs), data {data_dir}, kernel {kernel}",
        flush=True,
    )
    n_steps = len(TRAINING_MODES) + 1 + (0 if stages_only else len(book.chapters) + int(site))
    step = 0
    # Kernels inherit these. Plot-mode chapters get their mode and profile only from here: an
    # injected parameters cell would be committed with them and pin the profile for good.
    env = {"CFBOOK_DATA_DIR": str(data_dir), "CFBOOK_PROFILE": profile.name, "CT_MODE": "plot"}
    if threads is not None:
        env[THREADS_ENV] = str(threads)
    with _environment(**env):
        retrained = False
        for mode in TRAINING_MODES:
            step += 1
            stage = f"training, CT_MODE={mode}"
            print(f"[{step}/{n_steps}] {stage}", flush=True)
            retrained |= _train(
                stage,
                mode,
                profile,
                training,
                data_dir=data_dir,
                force=force,
                kernel=kernel,
                verbose=verbose,
            )
        step += 1
        print(f"[{step}/{n_steps}] evaluation", flush=True)
        _evaluate(profile, data_dir=data_dir, force=force, retrained=retrained)
        if stages_only:
            print(
                "Training stages and evaluation done in "
                f"{format_duration(time.perf_counter() - t_total)}"
            )
            return None
        for chapter in book.chapters:
            step += 1
            stage = f"chapter {chapter.as_posix()}, CT_MODE=plot"
            print(f"[{step}/{n_steps}] {stage}", flush=True)
            output = build_dir / chapter
            seconds = _execute(
                stage,
                project_dir / chapter,
                output,
                None,
                cwd=(project_dir / chapter).parent,
                kernel=kernel,
                verbose=verbose,
            )
            print(f"{INDENT}done in {format_duration(seconds)} -> {output}", flush=True)
    index = None
    if site:
        step += 1
        site_dir = Path(site_dir) if site_dir is not None else project_dir / "_site"
        print(f"[{step}/{n_steps}] website", flush=True)
        t_site = time.perf_counter()
        built = build_site(project_dir, site_dir, source_dir=build_dir, use_quarto=use_quarto)
        index = built.index
        print(
            f"{INDENT}built with {built.builder} in "
            f"{format_duration(time.perf_counter() - t_site)} -> {index}",
            flush=True,
        )
    print(f"Book built in {format_duration(time.perf_counter() - t_total)}")
    return index
