"""The two training stages, the evaluation step after them, and the plot stage's loaders:
everything the chapters call.

Each training runs in its own process (one CT_MODE per kernel) and leaves behind, per run, a JSON
log and the model's weights; a second heavy training never inherits the first one's fragmented
accelerator memory. The evaluation step then reads both stages' weights and writes each stage's
per-model evaluation, the paired evaluation (the paper's protocol, seed by seed) and the search
under the microscope.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from cfbook.atomic import atomic_torch_save, atomic_write_text
from cfbook.book.evaluation import EVALUATION_FORMAT, EVALUATION_VERSION, evaluate
from cfbook.book.microscope import MICROSCOPE_FORMAT, look_closely
from cfbook.book.profiles import Profile, check_mode
from cfbook.data import DeviceLoader, MNISTData, display_path, find_data_dir, load_mnist
from cfbook.device import describe_device, free_cached_memory
from cfbook.evaluation.protocol import paper_evaluate
from cfbook.models import build_model
from cfbook.training import counterfactual_training, distributed
from cfbook.training.checkpoint import prepare_checkpoint_dir
from cfbook.training.log import TrainingLog, load_log, save_log

__all__ = [
    "TRAINING_MODES",
    "evaluation_outputs",
    "evaluation_path",
    "load_comparison_runs",
    "load_evaluation",
    "load_evaluations",
    "load_microscope",
    "load_paired_evaluation",
    "microscope_path",
    "missing_weights",
    "paired_evaluation_path",
    "run_evaluation_step",
    "log_path",
    "profile_data",
    "profile_dir",
    "run_training_stage",
    "stage_outputs",
    "weights_path",
    "stage_checkpoint_dir",
]

TRAINING_MODES = ("full", "vanilla")


def profile_dir(data_dir: str | Path | None, profile_name: str) -> Path:
    """Folder holding one profile's logs, evaluations and executed stage notebooks."""
    root = Path(data_dir) if data_dir is not None else find_data_dir()
    return root / profile_name


def _training_mode(mode: str) -> str:
    if check_mode(mode) not in TRAINING_MODES:
        raise ValueError(f"only {' and '.join(TRAINING_MODES)} stages write logs, not {mode!r}")
    return mode


def _run_suffix(run: int) -> str:
    return "" if run == 1 else f"-run{run}"


def log_path(data_dir: str | Path | None, profile_name: str, mode: str, run: int = 1) -> Path:
    """Where run ``run`` (1-based) of the training stage ``mode`` saves its log."""
    return profile_dir(data_dir, profile_name) / f"{_training_mode(mode)}{_run_suffix(run)}.json"


def weights_path(data_dir: str | Path | None, profile_name: str, mode: str, run: int = 1) -> Path:
    """Where run ``run`` saves its trained weights (git-ignored; ``weights_only``-loadable)."""
    return log_path(data_dir, profile_name, mode, run).with_suffix(".pt")


def evaluation_path(data_dir: str | Path | None, profile_name: str, mode: str) -> Path:
    """Where the stage ``mode`` saves the evaluation of all its runs."""
    return profile_dir(data_dir, profile_name) / f"{_training_mode(mode)}-evaluation.json"


def paired_evaluation_path(data_dir: str | Path | None, profile_name: str) -> Path:
    """Where the paper-protocol comparison of both stages' runs, seed by seed, is saved."""
    return profile_dir(data_dir, profile_name) / "paired-evaluation.json"


def stage_outputs(data_dir: str | Path | None, profile: Profile, mode: str) -> list[Path]:
    """Every file a finished training stage leaves in git: its runs' logs."""
    return [log_path(data_dir, profile.name, mode, run) for run in range(1, profile.runs + 1)]


def evaluation_outputs(data_dir: str | Path | None, profile: Profile) -> list[Path]:
    """Every file the evaluation step leaves in git: each stage's evaluation, the paired
    evaluation and the search under the microscope."""
    return [
        *(evaluation_path(data_dir, profile.name, mode) for mode in TRAINING_MODES),
        paired_evaluation_path(data_dir, profile.name),
        microscope_path(data_dir, profile.name),
    ]


def stage_checkpoint_dir(
    data_dir: str | Path | None, profile_name: str, mode: str, run: int = 1
) -> Path:
    """Where run ``run`` of training stage ``mode`` keeps its per-epoch checkpoint (git-ignored),
    so that running the stage again after an interruption resumes instead of starting over; a
    finished run's checkpoint makes the rerun skip straight to the next run."""
    return profile_dir(data_dir, profile_name) / "checkpoints" / f"{mode}{_run_suffix(run)}"


def profile_data(
    profile: Profile, *, device: str | torch.device, data_dir: str | Path | None = None
) -> tuple[MNISTData, DeviceLoader]:
    """The profile's MNIST subset and its first run's shuffling loader: what the stages train
    on, and what the chapter "MNIST and the ResNet" shows. Under DDP the profile's batch is the
    global one, split over the processes."""
    data = load_mnist(profile.n, device=device, seed=profile.seed, root=data_dir)
    shard = distributed.loader_shard(profile.batch_size)
    return data, data.loader(shuffle=True, seed=profile.seed, **shard)


def _train_run(
    mode: str,
    profile: Profile,
    data: MNISTData,
    run: int,
    device: torch.device,
    root: Path,
    training: dict[str, Any],
) -> tuple[torch.nn.Module, TrainingLog]:
    """Train run ``run`` and save its log and weights. The model is built right after seeding
    with the run's seed, so the full and the vanilla stage start from identical weights and see
    the same mini-batch order."""
    seed = profile.run_seeds()[run - 1]
    data = data.for_model(profile.model)  # the ResNet takes images as they are
    loader = data.loader(shuffle=True, seed=seed, **distributed.loader_shard(profile.batch_size))
    torch.manual_seed(seed)
    model = build_model(profile.model)
    optimizer = torch.optim.Adam(model.parameters(), lr=profile.lr)
    checkpoint_dir = stage_checkpoint_dir(root, profile.name, mode, run)
    if distributed.is_main():
        prepare_checkpoint_dir(checkpoint_dir, profile.config())
    distributed.barrier()  # no process looks for a checkpoint before a stale one is gone
    model, log = counterfactual_training(
        profile.objective(mode),
        model,
        profile.search(),
        loader,
        optimizer,
        device=device,
        nepochs=profile.nepochs,
        domain=data.domain,
        burnin=profile.burnin,
        nce=profile.nce,
        accuracy_every=profile.accuracy_every,
        val_loader=data.val_loader(),
        checkpoint_dir=checkpoint_dir,
        mature=profile.mature,
        **training,
    )
    log.meta.update(
        profile=profile.name,
        config=profile.config(),
        run=run,
        seed=seed,
        data_source=data.source,
        device_name=describe_device(device),
        threads=torch.get_num_threads(),
    )
    if distributed.is_main():
        path = log_path(root, profile.name, mode, run)
        save_log(log, path)
        atomic_torch_save(model.state_dict(), weights_path(root, profile.name, mode, run))
        print(
            f"Saved the {mode} log of run {run}/{profile.runs} ({len(log)} epochs) and its "
            f"weights to {display_path(path, root)}"
        )
    return model, log


def run_training_stage(
    mode: str,
    profile: Profile,
    *,
    device: str | torch.device,
    data_dir: str | Path | None = None,
    **training: Any,
) -> TrainingLog | None:
    """Train the objective selected by ``mode`` once per run of the profile and save each run's
    log and weights; any other mode trains nothing. Returns the first run's log.

    ``training`` goes on to ``counterfactual_training`` (e.g. ``accumulate``, ``profile_epoch``).
    Torch's CPU threads follow $CFBOOK_THREADS, else this process's share of the cores. Under DDP
    every process trains and only rank 0 saves.
    """
    if check_mode(mode) not in TRAINING_MODES:
        print(f"CT_MODE={mode}: skipping the training stages (profile {profile.name}).")
        return None
    distributed.configure_threads()
    device = torch.device(device)
    root = Path(data_dir) if data_dir is not None else find_data_dir()
    data, _ = profile_data(profile, device=device, data_dir=root)
    log = None
    for run in range(1, profile.runs + 1):
        _, trained = _train_run(mode, profile, data, run, device, root, training)
        log = log or trained
    del data
    free_cached_memory(device)  # hand the accelerator's cached blocks back before the exit
    return log


def missing_weights(data_dir: str | Path | None, profile: Profile) -> list[Path]:
    """The trained weights of both stages' runs that are not there (git keeps only the logs)."""
    return [
        weights_path(data_dir, profile.name, mode, run)
        for mode in TRAINING_MODES
        for run in range(1, profile.runs + 1)
        if not weights_path(data_dir, profile.name, mode, run).is_file()
    ]


def _trained_runs(root: Path, profile: Profile, mode: str) -> bool:
    """Whether every run of ``mode`` has weights and a log of this very profile."""
    for run in range(1, profile.runs + 1):
        log, weights = (
            log_path(root, profile.name, mode, run),
            weights_path(root, profile.name, mode, run),
        )
        if not (log.is_file() and weights.is_file()):
            return False
        if load_log(log).meta.get("config") != profile.config():
            return False
    return True


def _load_run(root: Path, profile: Profile, mode: str, run: int, device: torch.device):
    """The trained model of run ``run`` of stage ``mode``, in eval mode."""
    model = build_model(profile.model).to(device)
    path = weights_path(root, profile.name, mode, run)
    model.load_state_dict(torch.load(path, map_location=device, weights_only=True))
    return model.eval()


def run_evaluation_step(
    profile: Profile, *, device: str | torch.device, data_dir: str | Path | None = None
) -> list[Path]:
    """Evaluate both stages' trained runs of ``profile``: each stage's per-model evaluation
    (accuracy under attack, the gallery), the paper's protocol on both objectives seed by seed
    (CT run k against baseline run k) and run 1's search under the microscope. Returns the files
    written; an error says which stage to train first."""
    root = Path(data_dir) if data_dir is not None else find_data_dir()
    missing = [m for m in TRAINING_MODES if not _trained_runs(root, profile, m)]
    if missing:
        raise FileNotFoundError(
            f"the evaluation of profile {profile.name!r} needs the weights and logs of the "
            f"{' and '.join(missing)} stage(s) in {root / profile.name}: train them first "
            f"(python -m cfbook.commands.pipeline --profile {profile.name} --stages-only)"
        )
    device = torch.device(device)
    data, _ = profile_data(profile, device=device, data_dir=root)
    data = data.for_model(profile.model)
    seeds = profile.run_seeds()
    models = {
        mode: [_load_run(root, profile, mode, run, device) for run in range(1, profile.runs + 1)]
        for mode in TRAINING_MODES
    }
    config = profile.evaluation_config()
    written = []
    for mode in TRAINING_MODES:
        result = evaluate(
            models[mode],
            data.x_val,
            data.y_val,
            config=profile.evaluation,
            protocol=profile.paired,
            domain=(-1.0, 1.0),
        )
        result["meta"] = {
            "profile": profile.name,
            "mode": mode,
            "objective": profile.objective(mode).name,
            "config": config,
            "seeds": seeds,
            "data_source": data.source,
            "device_name": describe_device(device),
        }
        written.append(_write(evaluation_path(root, profile.name, mode), result, root))
    first = {mode: models[mode][0] for mode in TRAINING_MODES}
    microscope = look_closely(first, data.x_val, data.y_val, profile.search())
    microscope["meta"] |= {"profile": profile.name, "config": config, "seed": seeds[0]}
    written.append(_write(microscope_path(root, profile.name), microscope, root, indent=None))
    evaluations = []
    for run, seed in enumerate(seeds, start=1):
        pair = {mode: models[mode][run - 1] for mode in TRAINING_MODES}
        protocol = replace(profile.paired, seed=seed)
        evaluations.append(
            paper_evaluate(pair, data.x_val, data.y_val, protocol, domain=(-1.0, 1.0))
        )
        print(f"Paired evaluation of run {run}/{len(seeds)} done", flush=True)
    paired = {
        "format": "cfbook-paired-evaluation",
        "meta": {"profile": profile.name, "config": config, "seeds": seeds},
        "runs": evaluations,
    }
    written.append(_write(paired_evaluation_path(root, profile.name), paired, root))
    del models, data
    free_cached_memory(device)
    return written


def _write(path: Path, result: dict[str, Any], root: Path, indent: int | None = 1) -> Path:
    atomic_write_text(path, json.dumps(result, indent=indent))
    print(f"Saved {display_path(path, root)}", flush=True)
    return path


def microscope_path(data_dir: str | Path | None, profile_name: str) -> Path:
    """Where the evaluation step saves its search under the microscope (run 1's models)."""
    return profile_dir(data_dir, profile_name) / "microscope.json"


def load_microscope(
    profile_name: str, *, data_dir: str | Path | None = None
) -> dict[str, Any] | None:
    """The search under the microscope of ``profile_name``, or None after saying which command
    makes it."""
    path = microscope_path(data_dir, profile_name)
    if _missing([path], profile_name, data_dir):
        return None
    result = json.loads(path.read_text(encoding="utf-8"))
    if result.get("format") != MICROSCOPE_FORMAT:
        raise ValueError(f"{path} is not a cfbook microscope file; run both training stages again")
    return result


def load_paired_evaluation(
    profile_name: str, *, data_dir: str | Path | None = None
) -> dict[str, Any] | None:
    """The paired evaluation of ``profile_name``, or None after saying which command makes it."""
    path = paired_evaluation_path(data_dir, profile_name)
    if _missing([path], profile_name, data_dir):
        return None
    result = json.loads(path.read_text(encoding="utf-8"))
    if result.get("format") != "cfbook-paired-evaluation":
        raise ValueError(f"{path} is not a cfbook paired evaluation")
    return result


def load_evaluation(path: str | Path) -> dict[str, Any]:
    """Read an evaluation file; a damaged one is an error naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"evaluation not found: {path}")
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
        if result.get("format") != EVALUATION_FORMAT:
            raise ValueError("not a cfbook evaluation file")
        if result.get("version") != EVALUATION_VERSION:
            raise ValueError(
                f"evaluation format version {result.get('version')!r}, this cfbook reads "
                f"version {EVALUATION_VERSION}; run the evaluation step again"
            )
        for key in ("robustness", "gallery", "meta"):
            if key not in result:
                raise ValueError(f"missing {key!r}")
    except (ValueError, AttributeError) as err:
        raise ValueError(f"corrupt evaluation file {path}: {err}") from err
    return result


def _missing(paths: list[Path], profile_name: str, data_dir: str | Path | None) -> bool:
    missing = [p for p in paths if not p.is_file()]
    if missing:
        command = f"python -m cfbook.commands.pipeline --profile {profile_name} --stages-only"
        if data_dir is not None and Path(data_dir).resolve() != find_data_dir().resolve():
            command += f" --data-dir {Path(data_dir)}"
        print(
            "Missing file(s): "
            + ", ".join(display_path(p, p.parents[1]) for p in missing)
            + f"\nRun the training stages and the evaluation step first: {command}"
        )
    return bool(missing)


def load_comparison_runs(
    profile: Profile, *, data_dir: str | Path | None = None
) -> tuple[list[TrainingLog], list[TrainingLog]] | None:
    """Every run's log of both stages of ``profile`` (CT first), or ``None`` after saying which
    command makes them."""
    paths = {
        mode: [log_path(data_dir, profile.name, mode, run) for run in range(1, profile.runs + 1)]
        for mode in TRAINING_MODES
    }
    if _missing([p for ps in paths.values() for p in ps], profile.name, data_dir):
        return None
    full, vanilla = ([load_log(p) for p in paths[mode]] for mode in TRAINING_MODES)
    return full, vanilla


def load_evaluations(
    profile_name: str, *, data_dir: str | Path | None = None
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Both stages' evaluations of ``profile_name`` (full first), or ``None`` after saying which
    command makes them."""
    paths = [evaluation_path(data_dir, profile_name, mode) for mode in TRAINING_MODES]
    if _missing(paths, profile_name, data_dir):
        return None
    full, vanilla = (load_evaluation(p) for p in paths)
    return full, vanilla
