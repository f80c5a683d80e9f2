"""Prepared search steps (cfbook.search.prepared): built once, loaded by later searches, the same
bits as the compiled step, and never used where they were not built for."""

from __future__ import annotations

import functools
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import scaled_mlp
from torch import nn

from cfbook import FullObjective, NativeGenerator, counterfactual_training
from cfbook.data import DeviceLoader
from cfbook.search import compiled, onednn, prepared, step

N_FEATURES, N_CLASSES = 12, 4
MUTABILITY = ["both"] * 8 + ["none", "increase", "decrease", "none"]
DOMAIN = (-1.0, 1.0)
small_mlp = functools.partial(scaled_mlp, N_FEATURES, N_CLASSES)
GENERATOR = NativeGenerator(tau=0.6, maxiter=30, compact_every=3, cf_batchsize=29)

pytestmark = pytest.mark.skipif(
    not compiled.compiler_available(), reason="prepared steps need torch 2.8 or later"
)


def factuals(model: nn.Module, n: int = 48, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, N_FEATURES, generator=g) * 2 - 1
    with torch.no_grad():
        pred = model(x).argmax(1)
    return x, (pred + torch.randint(1, N_CLASSES, (n,), generator=g)) % N_CLASSES


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two packages, built once: the same layout with one energy weight and with one per row."""
    path = tmp_path_factory.mktemp("prepared") / "not" / "yet"  # prepare makes the folders
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CFBOOK_PREPARED_DIR", str(path))
        model, (x, _) = small_mlp(seed=5), factuals(small_mlp(seed=5))
        for per_row in (False, True):
            GENERATOR.prepare(
                model, x, domain=DOMAIN, mutability=MUTABILITY, per_row_energy=per_row
            )
    assert len(list(path.glob("*.pt2"))) == 2
    return path


def search(generator: NativeGenerator, model: nn.Module, **kwargs: object):
    x, target = factuals(model)
    return generator.generate(model, x, target, domain=DOMAIN, mutability=MUTABILITY, **kwargs)


def assert_identical(a, b) -> None:
    for name in ("counterfactual", "nascent", "valid", "iterations"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize("per_row", [False, True], ids=["one-weight", "per-row"])
def test_prepared_step_is_the_compiled_step_without_a_compile(folder, monkeypatch, per_row):
    # Another model of the same architecture: a package serves the architecture, not weights.
    model = small_mlp(seed=0)
    energy = {"lambda_energy": torch.linspace(0.0, 2.0, 48)} if per_row else {}
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", prepared.OFF)
    eager = search(GENERATOR, model, **energy)
    built = search(replace(GENERATOR, compile=True), model, **energy)
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", str(folder))
    before = compiled.graphs_compiled()
    auto = search(GENERATOR, model, **energy)  # 48 rows x 30 steps: far below any plan's bar
    assert compiled.graphs_compiled() == before  # nothing compiled: the package ran
    assert_identical(auto, built)
    # ...and the search did take another path than without the package: not the eager bits.
    assert not torch.equal(auto.counterfactual, eager.counterfactual)
    assert auto.valid.any() and not auto.valid.all()


def train(generator: NativeGenerator, checkpoint_dir: Path | None = None, stop_after: int = 0):
    """A small CT run searching 32 counterfactuals in each of 4 epochs (3,840 planned steps, far
    below any plan's bar) under the packages' layout; with ``stop_after``, interrupted there."""
    model = small_mlp(seed=2)
    x, y = factuals(model, n=96, seed=3)

    def stop(record) -> None:
        if record.epoch == stop_after:
            raise RuntimeError("interrupted")

    return counterfactual_training(
        FullObjective(),
        model,
        generator,
        DeviceLoader(x, y, 32, seed=0),
        torch.optim.Adam(model.parameters(), lr=1e-2),
        device="cpu",
        nepochs=4,
        domain=DOMAIN,
        mutability=MUTABILITY,
        nce=32,
        verbose=0,
        checkpoint_dir=checkpoint_dir,
        callback=stop,
    )


def assert_same_run(a, b) -> None:
    for (name, p), q in zip(a[0].state_dict().items(), b[0].state_dict().values(), strict=True):
        assert torch.equal(p, q), name
    for name in ("train_loss", "implaus", "percent_valid", "avg_iter"):
        assert a[1].column(name) == b[1].column(name), name


def test_training_takes_a_prepared_step_and_its_resume_keeps_the_decision(
    folder, monkeypatch, tmp_path
):
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", prepared.OFF)
    eager = train(GENERATOR)
    assert eager[1].meta["search_compile"] == {
        "compile": "auto",
        "compiled": False,
        "planned_steps": 3840,
    }
    built = train(replace(GENERATOR, compile=True))
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", str(folder))
    before = compiled.graphs_compiled()
    auto = train(GENERATOR)
    assert compiled.graphs_compiled() == before  # nothing compiled: the package ran
    assert auto[1].meta["search_compile"] == {
        "compile": "auto",
        "compiled": True,
        "planned_steps": 3840,
        "prepared": True,
    }
    assert_same_run(auto, built)
    assert not torch.equal(auto[0][0].weight, eager[0][0].weight)  # not the eager path
    # Interrupted with the package, resumed without it: the saved decision holds, and
    # compile=True gives the package's bits.
    with pytest.raises(RuntimeError, match="interrupted"):
        train(GENERATOR, tmp_path, stop_after=2)
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", prepared.OFF)
    assert_same_run(train(GENERATOR, tmp_path), auto)


def test_a_run_over_several_processes_leaves_prepared_steps_out(folder, monkeypatch, tmp_path):
    # Its processes may run on machines with different packages, and must all decide alike.
    from cfbook.training import distributed
    from cfbook.training.counterfactuals import plan_epoch_search

    model = small_mlp(seed=2)
    x, y = factuals(model, n=96, seed=3)
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", str(folder))
    plans = {}
    for world in (1, 2):
        monkeypatch.setattr(distributed, "world_size", lambda world=world: world)
        search = plan_epoch_search(
            GENERATOR,
            model,
            x,
            y,
            nce=32,
            search_epochs=4,
            n_batches=3,
            n_classes=N_CLASSES,
            domain=DOMAIN,
            mutability=MUTABILITY,
            mature="neighbour",
            saved_plan=None,
        )
        plans[world] = search.plan
    assert plans[1]["compiled"] and plans[1]["prepared"]
    assert plans[2] == {"compile": "auto", "compiled": False, "planned_steps": 3840}
    # Training searches with one energy weight: a package for per-row weights does not serve.
    only = tmp_path / "per-row"
    only.mkdir()
    key = prepared.layout_key(model, x, True, True, True, True)
    (only / f"{key}.pt2").write_bytes((folder / f"{key}.pt2").read_bytes())
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", str(only))
    monkeypatch.setattr(distributed, "world_size", lambda: 1)
    _, plan = GENERATOR.plan(model, x, 3840 // GENERATOR.maxiter, constraints=search.constraints)
    assert plan == {"compile": "auto", "compiled": False, "planned_steps": 3840}


def test_without_a_package_for_the_layout_auto_stays_eager(folder, monkeypatch):
    model = small_mlp(seed=0)
    x, target = factuals(model)
    for kwargs, generator in [
        ({"domain": DOMAIN}, GENERATOR),  # no mutability: another layout
        # no cost term: another layout again
        ({"domain": DOMAIN, "mutability": MUTABILITY}, replace(GENERATOR, lambda_cost=0.0)),
    ]:
        monkeypatch.setenv("CFBOOK_PREPARED_DIR", str(folder))
        auto = generator.generate(model, x, target, **kwargs)
        monkeypatch.setenv("CFBOOK_PREPARED_DIR", prepared.OFF)
        eager = replace(generator, compile=False).generate(model, x, target, **kwargs)
        assert_identical(auto, eager)
    # compile=False stays eager even with a package.
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", str(folder))
    kept = search(replace(GENERATOR, compile=False), model)
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", prepared.OFF)
    assert_identical(kept, search(GENERATOR, model))


def test_the_key_names_everything_the_package_was_built_for():
    model, x = small_mlp(), torch.zeros(4, N_FEATURES)
    base = prepared.layout_key(model, x, True, True, True, False)
    assert base is not None
    assert base == prepared.layout_key(small_mlp(seed=3), x, True, True, True, False)
    others = {
        prepared.layout_key(model, x, *flags)
        for flags in [
            (False, True, True, False),
            (True, False, True, False),
            (True, True, False, False),
            (True, True, True, True),
        ]
    }
    wider = nn.Sequential(nn.Linear(N_FEATURES, 17), nn.ReLU(), nn.Linear(17, N_CLASSES))
    others.add(prepared.layout_key(wider, x, True, True, True, False))
    unbiased = nn.Sequential(nn.Linear(N_FEATURES, 16, bias=False), nn.ReLU(), small_mlp()[2])
    others.add(prepared.layout_key(unbiased, x, True, True, True, False))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        others.add(prepared.layout_key(model, x, True, True, True, False))
    finally:
        torch.set_num_threads(threads)
    assert base not in others and len(others) == 7
    # Nothing else can be served: a model that is not a plain MLP, another dtype.
    sub = type("MySequential", (nn.Sequential,), {})(*small_mlp())
    assert prepared.layout_key(sub, x, True, True, True, False) is None
    assert prepared.layout_key(model, x.double(), True, True, True, False) is None
    assert prepared.layout_key(small_mlp().double(), x, True, True, True, False) is None


def test_a_broken_package_warns_and_the_search_goes_on(tmp_path, monkeypatch):
    model = small_mlp(seed=0)
    x, target = factuals(model)
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", str(tmp_path))
    key = prepared.layout_key(model, x, True, True, True, False)
    (tmp_path / f"{key}.pt2").write_bytes(b"not a package")
    with pytest.warns(RuntimeWarning, match="could not be loaded"):
        auto = search(GENERATOR, model)
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", prepared.OFF)
    assert_identical(auto, search(GENERATOR, model))


def test_prepare_refuses_what_it_cannot_build(tmp_path, monkeypatch):
    x = torch.zeros(4, N_FEATURES)
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", prepared.OFF)
    with pytest.raises(ValueError, match="prepared steps are off"):
        GENERATOR.prepare(small_mlp(), x)
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", str(tmp_path))
    conv = nn.Sequential(nn.Linear(N_FEATURES, 8), nn.Tanh(), nn.Linear(8, N_CLASSES))
    with pytest.raises(ValueError, match="plain MLP"):
        GENERATOR.prepare(conv, x)
    assert not list(tmp_path.iterdir())


def test_the_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", str(tmp_path))
    assert prepared.prepared_dir() == tmp_path
    monkeypatch.delenv("CFBOOK_PREPARED_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert prepared.prepared_dir() == tmp_path / "cache" / "cfbook" / "prepared"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert prepared.prepared_dir() == tmp_path / "home" / ".cache" / "cfbook" / "prepared"
    monkeypatch.setenv("CFBOOK_PREPARED_DIR", "off")
    assert prepared.prepared_dir() is None and prepared.load("step-x") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monkeypatch.setenv("CFBOOK_PREPARED_DIR", str(tmp_path))
        assert prepared.load("step-absent") is None  # absent: silently none


def test_the_commands_that_make_shipped_results_turn_prepared_steps_off(monkeypatch, tmp_path):
    from cfbook.commands import paper, pipeline
    from cfbook.paper.settings import VARIANTS

    seen: dict[str, Path | None] = {}

    def record(name: str):
        return lambda *args, **kwargs: seen.setdefault(name, prepared.prepared_dir())

    monkeypatch.setenv(prepared.ENV, str(tmp_path))
    monkeypatch.setattr(pipeline, "run_pipeline", record("pipeline"))
    pipeline.main(["--profile", "smoke"])
    monkeypatch.setenv(prepared.ENV, str(tmp_path))
    monkeypatch.setattr(paper, "run_variant", record("paper"))
    assert paper.main(["--variant", next(iter(VARIANTS)), "--out", str(tmp_path)]) == 0
    assert seen == {"pipeline": None, "paper": None}


@pytest.mark.parametrize("module", [step, compiled, onednn], ids=lambda m: m.__name__)
def test_an_edit_to_the_step_s_sources_changes_its_key(module, tmp_path, monkeypatch):
    """A package built before an edit to the step, its tracer or the oneDNN products never
    serves the edited step: the key hashes all three sources."""
    before = prepared._source_hash.__wrapped__()
    edited = tmp_path / "edited.py"
    edited.write_bytes(Path(module.__file__).read_bytes() + b"\n# edited\n")
    monkeypatch.setattr(module, "__file__", str(edited))
    assert prepared._source_hash.__wrapped__() != before
