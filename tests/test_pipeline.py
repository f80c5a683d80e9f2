"""The book pipeline: stages, chapter list, log reuse, failures, and the smoke build end to end."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import sys
from pathlib import Path

import nbformat
import papermill
import pytest
import torch
import yaml
from conftest import REPO, SmokeBook

from cfbook.book.evaluation import decode_images
from cfbook.book.pipeline import (
    DEMO_TAG,
    TRAINING_CHAPTER,
    _evaluate,
    _reuse_reason,
    _stale_evaluations,
    _starts_this_python,
    find_project_dir,
    kernel_name,
    stage_notebook_path,
)
from cfbook.book.profiles import MODEL_NAMES, get_profile
from cfbook.book.scaling import REPO as SCALING_REPO
from cfbook.book.site.build import PLOTLY_JS
from cfbook.book.site.quarto import find_quarto, quarto_version
from cfbook.book.stages import (
    TRAINING_MODES,
    evaluation_outputs,
    evaluation_path,
    load_comparison_runs,
    load_evaluation,
    load_microscope,
    log_path,
    run_training_stage,
    stage_checkpoint_dir,
    stage_outputs,
    weights_path,
)
from cfbook.book.toc import CONFIG_FILE, HOME_PAGE, read_book
from cfbook.commands.pipeline import main
from cfbook.data import load_mnist
from cfbook.models import build_model
from cfbook.training.log import EpochRecord, TrainingLog, load_log, save_log

SMOKE = get_profile("smoke")


def _run(args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(args)
    return code, out.getvalue()


# --- the chapter list: _quarto.yml, book/ and the pipeline agree ---------------------------------


def test_quarto_yml_is_a_book_that_renders_executed_notebooks_offline() -> None:
    config = yaml.safe_load((REPO / CONFIG_FILE).read_text(encoding="utf-8"))
    project = config["project"]
    assert project["type"] == "book"
    assert project["output-dir"] == "_site"
    # plotly.min.js comes from the pre-render script (git-ignored), served from the site root.
    assert (REPO / project["pre-render"]).is_file() and (REPO / project["post-render"]).is_file()
    assert f"/{PLOTLY_JS}" in project["resources"]
    assert config["execute"]["enabled"] is False
    html = config["format"]["html"]
    # KaTeX from the site itself (the pre-render step copies it into katex/), no CDN; the pages
    # in book/ find it one level up.
    assert html["html-math-method"] == {"method": "katex", "url": "katex/"}
    assert "/katex/**" in project["resources"]
    chapters = yaml.safe_load((REPO / "book" / "_metadata.yml").read_text(encoding="utf-8"))
    assert chapters["format"]["html"]["html-math-method"]["url"] == "../katex/"
    assert any(PLOTLY_JS in item["text"] for item in html["include-in-header"])
    themes = [REPO / t for t in html["theme"] if t.endswith(".scss")]
    assert any("$web-font-path: false" in t.read_text() for t in themes)  # no Google Fonts
    assert config["book"]["chapters"][0] == HOME_PAGE.as_posix()


def test_quarto_chapters_and_book_files_agree() -> None:
    chapters = read_book(REPO).chapters
    notebooks = {p.relative_to(REPO) for p in (REPO / "book").glob("*.ipynb")}
    assert set(chapters) == {HOME_PAGE} | notebooks  # every notebook of book/ is a chapter
    assert TRAINING_CHAPTER in [c.name for c in chapters]


@pytest.mark.parametrize("chapter", read_book(REPO).chapters, ids=lambda c: c.as_posix())
def test_every_chapter_takes_the_pipelines_parameters(chapter: Path) -> None:
    params = papermill.inspect_notebook(str(REPO / chapter))
    assert {"CT_MODE", "profile"} <= set(params) <= {"CT_MODE", "profile", "data_dir"}
    assert all(p["default"] == "None" for p in params.values())


# --- dependencies: environment.yml and pyproject.toml name the same packages ----------------------

# conda's quarto is the CLI itself; PyPI's quarto-cli (the `quarto` extra) downloads it.
_CONDA_TO_PIP = {"pytorch": "torch", "quarto": "quarto-cli"}
# The interpreter and the installer.
_CONDA_ONLY = {"python", "pip"}


def _name(spec: str) -> str:
    name = re.split(r"[\s<>=!~;\[]", spec.strip(), maxsplit=1)[0]
    name = name.split("::")[-1].lower().replace("_", "-")  # conda channel prefix, PEP 503
    return _CONDA_TO_PIP.get(name, name)


def test_environment_yml_and_pyproject_name_the_same_dependencies() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    env = yaml.safe_load((REPO / "environment.yml").read_text(encoding="utf-8"))
    conda: set[str] = set()
    for dep in env["dependencies"]:
        specs = dep["pip"] if isinstance(dep, dict) else [dep]
        # pip-only extras count; "-e ." (the project itself) and paths do not.
        conda |= {_name(s) for s in specs if not s.startswith(("-", ".", "/"))}
    conda -= _CONDA_ONLY
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = [*project["dependencies"]]
    for name, extra in project.get("optional-dependencies", {}).items():
        if name == "peers":  # the peers benchmark's library, not part of the book's environment
            continue
        specs += [s for s in extra if not s.startswith("cfbook[")]  # extras naming extras
    pip = {_name(s) for s in specs}
    assert conda == pip, f"only in environment.yml: {conda - pip}; only in pyproject: {pip - conda}"
    # torch and torchvision: the same range in both, the one the tests run (the compiled search
    # step uses torch settings private to torch), with an upper bound.
    bounds = {_name(s): s for s in project["dependencies"] if _name(s) in ("torch", "torchvision")}
    for dep in env["dependencies"]:
        if isinstance(dep, str) and _name(dep) in bounds:
            pinned = re.sub(r"^[\w-]+", "", dep)
            assert bounds[_name(dep)].endswith(pinned) and ",<" in pinned, dep
    assert set(bounds) == {"torch", "torchvision"}


# --- stages (the functions the chapters call) ----------------------------------------------------


def test_outside_a_book_the_package_finds_its_own_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no _quarto.yml above: fall back to the package's repository
    assert find_project_dir() == REPO
    assert SCALING_REPO == REPO


def test_log_and_notebook_paths(tmp_path: Path) -> None:
    assert log_path(tmp_path, "cpu", "full") == tmp_path / "cpu" / "full.json"
    assert log_path(tmp_path, "cpu", "vanilla") == tmp_path / "cpu" / "vanilla.json"
    assert stage_notebook_path(tmp_path, "cpu", "full") == tmp_path / "cpu" / "training-full.ipynb"
    with pytest.raises(ValueError, match="full and vanilla"):
        log_path(tmp_path, "cpu", "plot")
    with pytest.raises(ValueError, match="valid modes"):
        log_path(tmp_path, "cpu", "fast")


def test_plot_mode_trains_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_training_stage("plot", SMOKE, device="cpu", data_dir=tmp_path) is None
    assert "skipping" in capsys.readouterr().out
    assert not any(tmp_path.iterdir())


def test_missing_logs_say_which_command_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert load_comparison_runs(SMOKE, data_dir=tmp_path) is None
    out = capsys.readouterr().out
    assert f"{tmp_path.name}/smoke/full.json" in out  # relative: no machine paths in the book
    assert (
        f"python -m cfbook.commands.pipeline --profile smoke --stages-only --data-dir {tmp_path}"
        in out
    )


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_profile_model_can_be_built(name: str) -> None:
    import torch

    from cfbook.models import INPUT_SHAPES

    model = build_model(name)
    assert model(torch.zeros(2, *INPUT_SHAPES[name])).shape == (2, 10)


def test_unknown_model_is_an_error() -> None:
    with pytest.raises(ValueError, match="resnet18, mlp"):
        build_model("vgg")


def _log(config: dict) -> TrainingLog:
    record = EpochRecord(1, 0.5, 0.5, 1.0, None, None, None, 0.1, 1.0, 0.0)
    return TrainingLog([record], {"profile": "smoke", "config": config})


def test_reuse_needs_every_log_of_the_same_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = stage_outputs(tmp_path, SMOKE, "full")
    assert [p.name for p in outputs] == ["full.json", "full-run2.json"]
    assert _reuse_reason(outputs, SMOKE) is None  # missing
    save_log(_log(SMOKE.config()), outputs[0])
    assert _reuse_reason(outputs, SMOKE) is None  # one run missing
    save_log(_log(SMOKE.config()), outputs[1])
    assert "reusing" in _reuse_reason(outputs, SMOKE)
    other = {**SMOKE.config(), "nepochs": 99}
    save_log(_log(other), outputs[1])
    assert _reuse_reason(outputs, SMOKE) is None
    assert "another 'smoke' configuration" in capsys.readouterr().out
    outputs[0].write_text("{not json")
    assert _reuse_reason(outputs, SMOKE) is None
    assert "corrupt" in capsys.readouterr().out


def test_evaluations_are_current_only_if_they_come_from_this_configuration(tmp_path: Path) -> None:
    outputs = evaluation_outputs(tmp_path, SMOKE)
    names = [p.name for p in outputs]
    assert names == [
        "full-evaluation.json",
        "vanilla-evaluation.json",
        "paired-evaluation.json",
        "microscope.json",
    ]
    config = SMOKE.evaluation_config()
    for path in outputs[:-1]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"meta": {"config": config}}))
    assert _stale_evaluations(tmp_path, SMOKE) == outputs[-1:]  # the microscope is missing
    outputs[-1].write_text(json.dumps({"meta": {"config": config}}))
    assert _stale_evaluations(tmp_path, SMOKE) == []
    other = {**config, "paired": {**config["paired"], "rounds": 99}}
    outputs[2].write_text(json.dumps({"meta": {"config": other}}))
    assert _stale_evaluations(tmp_path, SMOKE) == [outputs[2]]
    outputs[1].write_text("{not json")
    assert _stale_evaluations(tmp_path, SMOKE) == outputs[1:3]


def test_without_weights_stale_evaluations_are_kept_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fresh clone has the logs and evaluations but not the weights: the evaluation step keeps
    files made with other settings and says so, rather than failing the book."""
    outputs = evaluation_outputs(tmp_path, SMOKE)
    outputs[0].parent.mkdir(parents=True)
    for path in outputs:
        path.write_text(json.dumps({"meta": {"config": {"an older": "configuration"}}}))
    _evaluate(SMOKE, data_dir=tmp_path, force=False, retrained=False)
    out = capsys.readouterr().out
    assert "keeping full-evaluation.json, vanilla-evaluation.json" in out and "--force" in out
    # With the stages trained again, the step must run (and here fails: there is nothing to
    # evaluate), never keep what the new weights would change.
    with pytest.raises(FileNotFoundError, match="needs the weights and logs"):
        _evaluate(SMOKE, data_dir=tmp_path, force=False, retrained=True)


# --- command line ---------------------------------------------------------------------------------


def test_kernel_check_recognises_this_interpreter() -> None:
    assert _starts_this_python(sys.executable)
    sibling = Path(sys.executable).with_name(f"python{sys.version_info[0]}")
    assert _starts_this_python(str(sibling)) == sibling.exists()  # same venv, other link name
    assert _starts_this_python("python")  # jupyter_client swaps it for sys.executable
    assert not _starts_this_python("/opt/some/other/python3")


def test_a_shadowed_python3_kernel_gets_a_cfbook_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shadow = tmp_path / "shadow" / "kernels" / "python3"
    shadow.mkdir(parents=True)
    argv = ["/opt/other/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (shadow / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "other"}))
    prefix = tmp_path / "prefix"
    monkeypatch.setenv("JUPYTER_PATH", f"{tmp_path / 'shadow'}:{prefix / 'share' / 'jupyter'}")
    monkeypatch.setattr(sys, "prefix", str(prefix))  # install here, not into the real venv
    assert kernel_name() == "cfbook"
    spec = json.loads((prefix / "share/jupyter/kernels/cfbook/kernel.json").read_text())
    assert spec["argv"][0] == sys.executable
    assert kernel_name() == "cfbook"  # found again, not reinstalled


def test_unknown_profile_on_the_command_line_lists_the_valid_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--profile", "huge"])
    assert info.value.code == 2
    assert "cpu" in capsys.readouterr().err


def test_missing_chapter_files_are_reported(tmp_path: Path) -> None:
    shutil.copyfile(REPO / CONFIG_FILE, tmp_path / CONFIG_FILE)
    (tmp_path / "book").mkdir()
    code, out = _run(["--profile", "smoke", "--project-dir", str(tmp_path), "--no-site"])
    assert code == 2
    assert "missing" in out and "index.ipynb" in out


def _stub_book(project: Path, training_source: str, demo_source: str | None = None) -> None:
    """A project whose training chapter runs ``training_source``, after a demonstration cell
    ``demo_source`` if given (other chapters never run)."""
    shutil.copyfile(REPO / CONFIG_FILE, project / CONFIG_FILE)
    for chapter in read_book(project).chapters:
        nb = nbformat.v4.new_notebook()
        nb.metadata.kernelspec = {"name": "python3", "language": "python", "display_name": "Py"}
        training = chapter.name == TRAINING_CHAPTER
        nb.cells = [
            nbformat.v4.new_code_cell("CT_MODE = None", metadata={"tags": ["parameters"]}),
            *(
                [nbformat.v4.new_code_cell(demo_source, metadata={"tags": [DEMO_TAG]})]
                if training and demo_source is not None
                else []
            ),
            nbformat.v4.new_code_cell(training_source if training else ""),
        ]
        (project / chapter).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, project / chapter)


@pytest.mark.slow
def test_a_failing_stage_names_itself_and_its_notebook(tmp_path: Path) -> None:
    _stub_book(tmp_path, "raise RuntimeError('boom in ' + CT_MODE)")
    data_dir = tmp_path / "data"
    previous = stage_notebook_path(data_dir, "smoke", "full")
    previous.parent.mkdir(parents=True)
    previous.write_text("the previous run's notebook")
    code, out = _run(
        ["--profile", "smoke", "--project-dir", str(tmp_path), "--data-dir", str(data_dir)]
    )
    notebook = previous.with_name("training-full.failed.ipynb")
    assert code == 1
    assert "stage 'training, CT_MODE=full' failed: RuntimeError: boom in full" in out
    assert f"executed notebook: {notebook}" in out
    assert "boom in full" in notebook.read_text()  # the traceback is kept in the notebook
    assert previous.read_text() == "the previous run's notebook"  # nothing lost
    assert not list(previous.parent.glob(".*.running.ipynb"))
    assert "CT_MODE=vanilla" not in out  # the build stopped at the failing stage


@pytest.mark.slow
def test_a_stage_skips_the_chapters_demonstration_cells(tmp_path: Path) -> None:
    _stub_book(tmp_path, "raise RuntimeError('the stage ran')", "raise RuntimeError('a demo ran')")
    data_dir = tmp_path / "data"
    code, out = _run(
        ["--profile", "smoke", "--project-dir", str(tmp_path), "--data-dir", str(data_dir)]
    )
    assert code == 1 and "RuntimeError: the stage ran" in out and "a demo ran" not in out
    assert "a demo ran" in (tmp_path / "book" / TRAINING_CHAPTER).read_text()  # kept for plot


@pytest.mark.slow
def test_a_stage_that_writes_no_log_fails(tmp_path: Path) -> None:
    _stub_book(tmp_path, "pass")
    code, out = _run(
        ["--profile", "smoke", "--project-dir", str(tmp_path), "--data-dir", str(tmp_path)]
    )
    assert code == 1
    assert "wrote no " in out and str(tmp_path / "smoke" / "full.json") in out


# Prints, as a stage, whether its checkpoint folder survived until the kernel started, then stops.
_CHECKPOINT_PROBE = """
import os, pathlib
folder = pathlib.Path(os.environ["CFBOOK_DATA_DIR"], "smoke", "checkpoints", CT_MODE)
print("checkpoint kept:", (folder / "checkpoint.pt").is_file())
raise RuntimeError("stop here")
"""


@pytest.mark.slow
@pytest.mark.parametrize("force", [False, True])
def test_a_stage_resumes_its_checkpoint_unless_forced(tmp_path: Path, force: bool) -> None:
    _stub_book(tmp_path, _CHECKPOINT_PROBE)
    data_dir = tmp_path / "data"
    checkpoint = stage_checkpoint_dir(data_dir, "smoke", "full") / "checkpoint.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"an interrupted run's state")
    args = ["--profile", "smoke", "--project-dir", str(tmp_path), "--data-dir", str(data_dir)]
    code, out = _run(args + (["--force"] if force else []))
    assert code == 1 and "stop here" in out
    # The stage's printed output reached the terminal, indented under its "[1/n]" line.
    assert f"\n       checkpoint kept: {not force}\n" in out
    assert checkpoint.is_file() == (not force)


# --- the smoke build, end to end (built once per session in conftest) ---------------------------


_DURATION = r"(?:[\d.]+ s|\d+ min \d\d s)"


@pytest.mark.slow
def test_smoke_pipeline_runs_every_stage_in_order(smoke_book: SmokeBook) -> None:
    assert smoke_book.exit_code == 0, smoke_book.output
    chapters = [c.as_posix() for c in read_book(REPO).chapters]
    stages = re.findall(r"^\[\d+/\d+\] (.+)$", smoke_book.output, flags=re.MULTILINE)
    assert stages == [
        "training, CT_MODE=full",
        "training, CT_MODE=vanilla",
        "evaluation",
        *[f"chapter {chapter}, CT_MODE=plot" for chapter in chapters],
        "website",
    ]
    assert (
        len(re.findall(rf"^ {{7}}done in {_DURATION}", smoke_book.output, re.M)) == len(stages) - 1
    )
    built = sorted(
        p.relative_to(smoke_book.build_dir).as_posix()
        for p in smoke_book.build_dir.rglob("*.ipynb")
    )
    assert built == sorted(chapters)  # executed chapters keep their place in the project
    for chapter in chapters:  # plot mode came from the environment: nothing injected, no metadata
        nb = nbformat.read(smoke_book.build_dir / chapter, as_version=4)
        assert "papermill" not in nb.metadata
        assert not [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]


@pytest.mark.slow
def test_smoke_stages_stream_their_progress_and_drop_their_checkpoints(
    smoke_book: SmokeBook,
) -> None:
    for objective in ("FullObjective", "VanillaObjective"):
        lines = re.findall(rf"^ {{7}}{objective}: (.+)$", smoke_book.output, re.M)
        assert len(lines) == SMOKE.nepochs * SMOKE.runs, smoke_book.output
        for i, line in enumerate(lines):
            k = i % SMOKE.nepochs + 1  # every run counts its own epochs
            status = rf"done in {_DURATION}" if k == SMOKE.nepochs else rf"{_DURATION} left"
            assert re.match(rf"epoch {k}/{SMOKE.nepochs}, [\d.]+ s/epoch, {status} \(", line)
    for mode in TRAINING_MODES:  # a finished stage leaves its logs, not its checkpoints
        for run in range(1, SMOKE.runs + 1):
            assert not stage_checkpoint_dir(smoke_book.data_dir, "smoke", mode, run).exists()


@pytest.mark.slow
def test_smoke_site_is_built_with_quarto_when_it_is_on_path(smoke_book: SmokeBook) -> None:
    quarto = find_quarto()
    builder = "nbconvert" if quarto is None else f"Quarto {quarto_version(quarto)}"
    assert re.search(rf"^ {{7}}built with {builder} in {_DURATION} -> ", smoke_book.output, re.M)
    site = smoke_book.site_dir
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
    config = yaml.safe_load((REPO / CONFIG_FILE).read_text(encoding="utf-8"))
    # The API reference: Quarto's appendix (quartodoc writes .qmd pages, which only Quarto renders).
    # Notebook appendices are among the book's notebooks, which both builders render.
    appendices = [Path(a) for a in config["book"]["appendices"] if a.endswith(".qmd")]
    pages_of = [*read_book(REPO).chapters, *(appendices if quarto else [])]
    expected = [c.with_suffix(".html").as_posix() for c in pages_of]
    assert pages == sorted(expected)
    assert [p.relative_to(site).as_posix() for p in site.rglob(PLOTLY_JS)] == [PLOTLY_JS]
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert PLOTLY_JS in text.split("</head>")[0]
        assert not re.search(r"<(script|link)[^>]+(src|href)=\"(https?:)?//", text), page


@pytest.mark.slow
def test_smoke_logs_hold_the_expected_records(smoke_book: SmokeBook) -> None:
    full, vanilla = (load_log(log_path(smoke_book.data_dir, "smoke", m)) for m in TRAINING_MODES)
    epochs = list(range(1, SMOKE.nepochs + 1))
    burnin = round(SMOKE.burnin * SMOKE.nepochs)
    for log in (full, vanilla):
        assert [r.epoch for r in log] == epochs
        assert log.meta["profile"] == "smoke"
        assert log.meta["config"] == SMOKE.config()
        assert log.meta["burnin_epochs"] == burnin
        assert all(r.time_taken > 0 for r in log)
        measured = [r.epoch for r in log if r.acc is not None]
        assert measured == [e for e in epochs if e % SMOKE.accuracy_every == 0]
        assert all((r.acc is None) == (r.acc_val is None) for r in log)
    assert full.meta["objective"] == "FullObjective"
    assert vanilla.meta["objective"] == "VanillaObjective"
    # Counterfactual terms exist only after burn-in, and never for the vanilla baseline.
    assert [r.implaus is not None for r in full] == [e > burnin for e in epochs]
    assert [r.adv_loss is not None for r in full] == [e > burnin for e in epochs]
    assert all(r.implaus is None and r.reg_loss is None for r in vanilla)
    assert all(r.percent_valid is None and r.avg_iter is None for r in vanilla)


@pytest.mark.slow
def test_smoke_stages_keep_every_run_their_weights_and_an_evaluation(
    smoke_book: SmokeBook,
) -> None:
    evaluations = {}
    for mode in TRAINING_MODES:
        seeds = []
        for run in range(1, SMOKE.runs + 1):
            log = load_log(log_path(smoke_book.data_dir, "smoke", mode, run))
            assert log.meta["run"] == run and log.meta["config"] == SMOKE.config()
            seeds.append(log.meta["seed"])
            weights = torch.load(
                weights_path(smoke_book.data_dir, "smoke", mode, run), weights_only=True
            )
            model = build_model(SMOKE.model)
            model.load_state_dict(weights)  # the trained model, ready to re-evaluate
        assert seeds == SMOKE.run_seeds()
        evaluations[mode] = load_evaluation(evaluation_path(smoke_book.data_dir, "smoke", mode))
    full, vanilla = evaluations["full"], evaluations["vanilla"]
    assert full["meta"]["objective"] == "FullObjective" and full["n_models"] == SMOKE.runs
    assert vanilla["meta"]["objective"] == "VanillaObjective"
    # The same held-out digits and targets for both models, in the gallery and in every run.
    for key in ("index", "label", "target", "factual"):
        assert full["gallery"][key] == vanilla["gallery"][key]
    assert full["gallery"]["label"] == list(range(10))
    assert full["gallery"]["search"] == SMOKE.paired.generator(1.0).settings()
    assert full["robustness"]["summary"]["epsilons"] == [0.03]
    assert len(full["robustness"]["per_model"]) == SMOKE.runs
    for result in (full, vanilla):
        assert result["meta"]["config"] == SMOKE.evaluation_config()
    # Small enough to commit: the gallery is hex-encoded 8-bit pixels.
    path = evaluation_path(smoke_book.data_dir, "smoke", "full")
    assert path.stat().st_size < 60_000


@pytest.mark.slow
def test_smoke_stage_notebooks_are_kept_beside_the_logs(smoke_book: SmokeBook) -> None:
    for mode in TRAINING_MODES:
        nb = nbformat.read(stage_notebook_path(smoke_book.data_dir, "smoke", mode), as_version=4)
        assert nb.metadata.papermill.parameters == {"CT_MODE": mode, "profile": "smoke"}
        assert nb.metadata.papermill.exception is None
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
        assert not [o for o in outputs if o.output_type == "error"]
        assert not [
            o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
        ]  # no progress widget frozen at its first state
        text = "".join(o.get("text", "") for o in outputs)
        assert f"Objective: epoch {SMOKE.nepochs}/{SMOKE.nepochs}, " in text
        assert f"Saved the {mode} log" in text
        # A training stage runs only its stage's work: no demonstration cell, no evaluation.
        assert not [c for c in nb.cells if DEMO_TAG in c.metadata.get("tags", [])]
        assert "counterfactual_training(\n    FullObjective()" not in "".join(
            c.source for c in nb.cells
        )
        assert "Saved " not in text.replace(f"Saved the {mode} log", "")


@pytest.mark.slow
def test_smoke_chapters_hold_the_comparison_figure(smoke_book: SmokeBook) -> None:
    nb = nbformat.read(smoke_book.build_dir / "book" / "what_ct_buys.ipynb", as_version=4)
    figures = {
        c.source.split("#| label: ")[1].split()[0]: o.data["application/vnd.plotly.v1+json"]
        for c in nb.cells
        if c.cell_type == "code" and "#| label: fig-" in c.source
        for o in c.outputs
        if "application/vnd.plotly.v1+json" in o.get("data", {})
    }
    # The seeds' comparison, then the tutorial profile's GPU run (the shipped `tutorial` logs)
    # as the Julia page draws it: time, accuracy and implausibility, stacked.
    assert {"xaxis", "xaxis2", "xaxis3", "xaxis4"} <= set(figures["fig-comparison-seeds"]["layout"])
    seed_page = figures["fig-comparison-seed-page"]["layout"]
    titles = [seed_page[f"yaxis{k}"]["title"]["text"] for k in ("", "2", "3")]
    assert titles == ["seconds", "share", "logits"] and "xaxis4" not in seed_page
    # The main example's gallery: ten digits searched live in the shipped MLPs.
    assert "fig-main-gallery" in figures
    html = next(
        o.data["text/html"]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "application/vnd.plotly.v1+json" in o.get("data", {})
    )
    assert len(html) < 200_000  # plotly.js itself is never inlined into a notebook


@pytest.mark.slow
def test_existing_logs_are_reused_without_force(smoke_book: SmokeBook) -> None:
    paths = [log_path(smoke_book.data_dir, "smoke", m) for m in TRAINING_MODES]
    before = [p.stat().st_mtime_ns for p in paths]
    evaluations = evaluation_outputs(smoke_book.data_dir, SMOKE)
    made = [p.stat().st_mtime_ns for p in evaluations]
    code, out = _run(smoke_book.cli_args("--stages-only"))
    assert code == 0, out
    assert out.count("pass --force to retrain") == 2
    assert "reusing the evaluations" in out
    assert [p.stat().st_mtime_ns for p in paths] == before
    assert [p.stat().st_mtime_ns for p in evaluations] == made


def test_profile_data_is_the_stages_subset_and_loader() -> None:
    from cfbook.book.stages import profile_data

    data, loader = profile_data(SMOKE, device="cpu")
    assert data.x.shape == (SMOKE.n, 784)
    assert loader.batch_size == SMOKE.batch_size and loader.tensors[0] is data.x
    again, _ = profile_data(SMOKE, device="cpu")
    assert torch.equal(again.x, data.x)  # seeded: both stages see the same subset


@pytest.mark.slow
def test_smoke_stages_leave_one_search_under_the_microscope(smoke_book: SmokeBook) -> None:
    result = load_microscope("smoke", data_dir=smoke_book.data_dir)
    assert result is not None and result["meta"]["config"] == SMOKE.evaluation_config()
    data = load_mnist(SMOKE.n, seed=SMOKE.seed, root=smoke_book.data_dir)
    index, tau = result["meta"]["index"], SMOKE.tau
    assert int(data.y_val[index]) == result["meta"]["factual"]
    for search in result["searches"].values():
        path = decode_images(search["path"], (-1.0, 1.0))
        # The first iterate is the held-out digit itself (to the 8-bit quantisation).
        assert (path[0] - data.x_val[index]).abs().max() <= 1 / 255 + 1e-6
        assert len(search["target_prob"]) == SMOKE.maxiter + 1
        assert path.shape[0] == search["counterfactual_at"] + 1
        assert search["valid"] == (search["target_prob"][search["counterfactual_at"]] >= tau)
        assert search["distance"][search["adversarial_at"]] <= result["meta"]["search"]["epsilon"]
