"""The peers benchmark (cfbook against ReLax): it skips with the install line when the peers
extra is absent, each side runs in its own process with the options it names, cfbook's side
searches the problem it is given for exactly the given steps, and the tables put the compiled
executor's later calls against the target and the eager default beside its recorded ratio."""

from __future__ import annotations

import importlib.util
import json
import subprocess

import numpy as np
import pytest
import torch

from benchmarks import peer_side, peers
from benchmarks.common import Context, Skipped, Table, fmt_ratio, fmt_seconds
from benchmarks.config import QUICK
from benchmarks.peer_side import cfbook_side, main
from benchmarks.results import record_block


def _context() -> Context:
    return Context(torch.device("cpu"), True, QUICK)


def test_without_the_peers_extra_the_benchmark_skips_naming_the_install(monkeypatch):
    # Everything present but ReLax itself.
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "relax" else 1
    )
    assert peers.missing_peers() == ["relax"]
    with pytest.raises(Skipped, match=r"pip install -e '\.\[peers\]' \(relax missing\)"):
        peers.run(_context())


def _problem(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "w1": rng.normal(0, 0.05, (32, 784)).astype(np.float32),
        "b1": rng.normal(0, 0.05, 32).astype(np.float32),
        "w2": rng.normal(0, 0.3, (10, 32)).astype(np.float32),
        "b2": rng.normal(0, 0.05, 10).astype(np.float32),
        "x": rng.uniform(-1, 1, (n, 784)).astype(np.float32),
        "target": rng.integers(0, 10, n),
    }


def test_cfbooks_side_takes_every_step_on_every_row():
    result = cfbook_side(_problem(6), 5, 4, repeats=3, budget=0.0, compile=False, threads=1)
    assert result["mean_steps"] == 4.0  # tau = 1.0: no row stops early, as in ReLax
    assert len(result["times"]) >= 2 and result["first"] > 0


def test_relaxs_side_times_a_first_call_and_later_ones():
    pytest.importorskip("relax", reason="needs the peers extra")
    result = peer_side.relax_side(_problem(6), 5, 3, repeats=2, budget=0.0)
    assert result["mean_steps"] == 3.0
    assert len(result["times"]) == 2 and result["first"] > 0


def test_the_compile_flag_reaches_cfbooks_side(tmp_path, monkeypatch, capsys):
    np.savez(tmp_path / "problem.npz", **_problem(6))
    calls = []

    def fake(problem, n, steps, repeats, budget, compile, threads):
        calls.append((problem["x"].shape, n, steps, compile, threads))
        return {"first": 1.0, "times": [0.5, 0.5], "mean_steps": float(steps)}

    monkeypatch.setattr(peer_side, "cfbook_side", fake)
    main(["cfbook", str(tmp_path / "problem.npz"), "--n", "5", "--steps", "2", "--threads", "1"])
    main(["cfbook", str(tmp_path / "problem.npz"), "--n", "5", "--steps", "2", "--compile"])
    assert calls[0] == ((6, 784), 5, 2, False, 1)
    assert calls[1][3] is True
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["mean_steps"] == 2.0


@pytest.mark.parametrize(
    ("side", "cache", "library", "flag"),
    [("relax", None, "relax", False), ("eager", None, "cfbook", False)]
    + [("compiled", "/tmp/cache", "cfbook", True)],
)
def test_each_measurement_is_a_process_of_its_own_with_its_options(
    tmp_path, monkeypatch, side, cache, library, flag
):
    seen = {}

    def fake_run(command, **kwargs):
        seen.update(command=command, env=kwargs["env"], cwd=kwargs["cwd"])
        out = json.dumps({"first": 2.0, "times": [0.3, 0.1, 0.2], "mean_steps": 7.0})
        return subprocess.CompletedProcess(command, 0, stdout=f"progress\n{out}\n", stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    result = peers.measure(_context(), side, tmp_path / "p.npz", 100, 7, cache)
    assert result["median"] == 0.2 and result["first"] == 2.0
    assert seen["command"][1:5] == ["-m", "benchmarks.peer_side", library, str(tmp_path / "p.npz")]
    assert seen["command"][5:9] == ["--n", "100", "--steps", "7"]
    assert ("--compile" in seen["command"]) is flag
    assert seen["env"].get("TORCHINDUCTOR_CACHE_DIR") == cache
    assert seen["cwd"] == peers.ROOT


def test_a_side_s_rounds_combine_by_their_medians():
    rounds = [
        {"first": 3.0, "median": 5.0, "mean_steps": 30.0},
        {"first": 1.0, "median": 4.0, "mean_steps": 30.0},
        {"first": 2.0, "median": 9.0, "mean_steps": 30.0},
    ]
    assert peers.combined(rounds) == {"first": 2.0, "median": 5.0, "mean_steps": 30.0}


def _old_record() -> dict:
    """A record of the layout before the rewrite: "cfbook default" followed by its ratio."""
    speed = Table(
        "Milliseconds per search",
        ["N, steps", "ReLax jit(vmap)", "cfbook default", "ratio", "other", "ratio"],
    )
    speed.add("100, 10", fmt_seconds(0.004), fmt_seconds(0.006), fmt_ratio(1.5), "x", "y")
    speed.add("1,000, 10", fmt_seconds(0.02), fmt_seconds(0.03), fmt_ratio(1.25), "x", "y")
    return record_block(Context(torch.device("cpu"), False, QUICK, "old"), "12.", [speed], 1.0)


def test_the_eager_ratio_before_the_rewrite_is_read_and_carried_from_record_to_record():
    assert peers.recorded_before(None) is None
    before = peers.recorded_before(_old_record())
    assert before.title.startswith(peers.BEFORE_TITLE) and "; old)" in before.title
    assert before.columns == ["N, steps", "ReLax jit(vmap)", "cfbook default", "ratio"]
    assert [[c["text"] for c in row] for row in before.rows] == [
        ["100, 10", "4.0 ms", "6.0 ms", "1.50x"],
        ["1,000, 10", "20.0 ms", "30.0 ms", "1.25x"],
    ]
    assert before.rows[1][3] == {"text": "1.25x", "value": 1.25, "unit": "x"}
    # A record made since holds that table: the next run copies it as it is.
    later = record_block(_context(), "12.", [Table("Speed", ["N, steps"]), before], 1.0)
    again = peers.recorded_before(later)
    assert again.record() == before.record()
    assert peers.recorded_before(record_block(_context(), "12.", [Table("x", ["a"])], 1.0)) is None


def test_the_tables_hold_both_executors_the_first_calls_and_the_target(monkeypatch):
    """The run on stand-ins for its measurements (the quick sizes: 100 and 1,000 rows, 10
    steps): later calls and first calls of each side, the recorded eager ratio, the target."""
    times = {  # side -> (first call, later calls) at 100 / 1,000 rows
        "relax": {100: (0.4, 0.004), 1000: (0.5, 0.020)},
        "eager": {100: (0.01, 0.006), 1000: (0.04, 0.030)},
        "compiled": {100: (2.0, 0.003), 1000: (2.5, 0.022)},
        "relax products": {100: (0.1, 0.001), 1000: (0.1, 0.010)},
        "torch products": {100: (0.1, 0.002), 1000: (0.1, 0.015)},
    }
    calls = []

    def fake_measure(ctx, side, problem, n, steps, cache=None):
        calls.append((side, n, steps, cache))
        first, later = times[side][n]
        if side == "compiled" and sum(c[0] == "compiled" and c[1] == n for c in calls) == 1:
            first *= 4  # the cold cache's compile
        return {"first": first, "median": later, "times": [later], "mean_steps": float(steps)}

    monkeypatch.setattr(peers, "missing_peers", lambda: [])
    monkeypatch.setattr(peers, "write_problem", lambda ctx, n, path: None)
    monkeypatch.setattr(peers, "measure", fake_measure)
    monkeypatch.setattr(peers, "benchmark_record", lambda name, kind: _old_record())
    speed, first, products, before, targets = peers.run(_context())

    # Per size: the cold compile first, in a fresh cache folder, then the warm one on it; then
    # the products of each size, as many steps as the longest search.
    searches = [c for c in calls if not c[0].endswith("products")]
    assert [c[0] for c in searches] == ["compiled", "relax", "eager", "compiled"] * 2
    assert [(c[0], c[1], c[2]) for c in calls[len(searches) :]] == [
        ("relax products", 100, 10),
        ("torch products", 100, 10),
        ("relax products", 1000, 10),
        ("torch products", 1000, 10),
    ]
    assert calls[0][3] is not None and calls[3][3] == calls[0][3] and calls[1][3] is None
    text = [[c["text"] for c in row] for row in speed.rows]
    assert text == [
        ["100, 10", "4.0 ms", "6.0 ms", "1.50x", "1.50x", "3.0 ms", "0.75x"],
        ["1,000, 10", "20.0 ms", "30.0 ms", "1.50x", "1.25x", "22.0 ms", "1.10x"],
    ]
    text = [[c["text"] for c in row] for row in first.rows]
    assert text[1] == [
        "1,000, 10",
        "500.0 ms",
        "40.0 ms",
        "0.08x",
        "10.00 s",
        "20x",
        "2.50 s",
        "5.00x",
        "10.0 / 10.0",
    ]
    # The rest of a step: the search's time per step (10 steps) less the products.
    assert [[c["text"] for c in row] for row in products.rows] == [
        ["100", "100 µs", "200 µs", "2.00x", "300 µs", "100 µs"],
        ["1,000", "1.0 ms", "1.5 ms", "1.50x", "1.0 ms", "700 µs"],
    ]
    assert before.title.startswith(peers.BEFORE_TITLE)
    # Only 1,000 rows is a target size; its compiled later calls are 1.10x ReLax's.
    assert [[c["text"] for c in row] for row in targets.rows] == [
        ["compiled, after its first call, <= 1.0x ReLax (1,000, 10 steps)", "1.10x", "NOT met"]
    ]
