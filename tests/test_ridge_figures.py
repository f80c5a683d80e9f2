"""The protected-validity-without-the-ridge table, text and figure (``cfbook.book.figures.ridge``)
and the reader of the shipped cells' training logs, on hand-made logs whose statistics are known.
"""

from __future__ import annotations

import json
from pathlib import Path

from cfbook.book.figures.ridge import stability_figure, stability_table, stability_text
from cfbook.paper.merge import read_cell_logs


def cell(valid: list[float], ridge: list[float], lambdas=(1.0, 0.5, 0.0, 0.0)) -> dict:
    log = [
        {"epoch": i + 1, "percent_valid": v, "reg_loss": r}
        for i, (v, r) in enumerate(zip(valid, ridge, strict=True))
    ]
    return {"meta": {"lambdas": list(lambdas)}, "log": log}


def oscillating(last: float, high: float = 0.9, visits: int = 0) -> list[float]:
    """100 epochs alternating 0.2 / ``high`` (population SD 0.35 over the last 50 when high is
    0.9), ``visits`` of the last 50 raised to 0.97, and ``last`` at epoch 100."""
    values = [0.2 if i % 2 else high for i in range(100)]
    for i in range(visits):
        values[50 + 2 * i] = 0.97
    values[-1] = last
    return values


def merged(means: dict[str, tuple[float, float, float]]) -> dict:
    return {
        "data": {
            k: {"validity": {"protected": {"full": [{"mean": m} for m in v]}}}
            for k, v in means.items()
        }
    }


RIDGE_SMALL = [2.0] * 100


def logs():
    configured = {
        "lin_sep": {
            s: cell(oscillating(last), [5.0] * 99 + [top])
            for s, (last, top) in enumerate(((0.6, 20_000.0), (0.5, 80_000.0), (0.2, 30_000.0)))
        },
        "moons": {
            s: cell(oscillating(last, visits=v), [5.0] * 100 if s else [50_000.0] * 100)
            for s, (last, v) in enumerate(((0.6, 0), (0.9, 5), (0.3, 2)))
        },
    }
    main = {
        k: {s: cell([1.0] * 100, RIDGE_SMALL, (1.0, 0.5, 0.01, 0.25)) for s in range(3)}
        for k in ("lin_sep", "moons")
    }
    # Test validity: LS within 0.1 of the last epoch in every seed; Moon not in seed 1 (0.9 vs 0.6).
    results = merged({"lin_sep": (0.62, 0.45, 0.25), "moons": (0.65, 0.6, 0.35)})
    variant = merged({"lin_sep": (1.0, 1.0, 1.0), "moons": (1.0, 1.0, 1.0)})
    return configured, main, results, variant


def test_table_reads_each_seed_from_the_logs_in_the_results_order():
    configured, main, results, variant = logs()
    table = stability_table(
        configured, results, {"the main grid's weights": (main, variant)}
    ).splitlines()
    assert len(table) == 2 + 4
    assert table[2] == (
        "| Linearly separable | 0, 0 | 20,000 / 80,000 / 30,000 | 0.20–0.90 / 0.20–0.90 / "
        "0.20–0.90 | 0.60 / 0.50 / 0.20 | 0.62 / 0.45 / 0.25 (1.00) |"
    )
    assert table[3].startswith("| Linearly separable | 0.01, 0.25 | 2.0 / 2.0 / 2.0 | 1.00–1.00")
    assert table[4].startswith("| Moons | 0, 0 | 50,000 / 5.0 / 5.0 | 0.20–0.90 / 0.20–0.97")
    assert table[4].endswith("| 0.60 / 0.90 / 0.30 | 0.65 / 0.60 / 0.35 (1.00) |")


def test_text_measures_the_spread_and_names_what_the_logs_show():
    configured, main, results, variant = logs()
    text = stability_text(configured, results, {"the main grid's weights": (main, variant)})
    # The largest ridge terms: 5 (Moon seeds 1, 2) to 80,000; RMS logit sqrt(x / 2).
    assert "reaches 5.0 to 80,000 at its largest" in text
    assert "a root-mean-square target logit of 2 to 200" in text
    assert "with the main grid's weights it stays at or below 2.0" in text
    # Population SD of the last 50 epochs: 0.35 for the plain alternation (LS seed 2); Moon seed 1
    # (five 0.97s, 0.9 at epoch 100): mean 28.55 / 50, E[x^2] 22.6745 / 50, SD 0.357.
    assert "standard deviation of 0.35 to 0.36 per seed without the ridge and 0.00 to 0.00" in text
    assert (
        "On Linearly separable and Moons every seed trained without the ridge moves more than "
        "every seed trained with it. There," in text
    )
    assert "on Linearly separable the last epoch's training-time validity lies within 0.1" in text
    assert "Moons the last" not in text
    assert (
        "Linearly separable (paper 1.00) in 0 / 0 / 0 of the last 50 epochs per seed, at epoch "
        "100 in 0 of 3; Moons (paper 1.00) in 0 / 5 / 2 of the last 50 epochs per seed, at "
        "epoch 100 in 0 of 3." in text
    )
    assert text.endswith("so the cause stays open.")


def test_text_says_so_when_the_logs_do_not_separate_the_two_trainings():
    configured, main, results, variant = logs()
    steady = {k: {s: cell([0.5] * 100, [5.0] * 100) for s in range(3)} for k in configured}
    text = stability_text(steady, results, {"the main grid's weights": (main, variant)})
    assert text.endswith("so they do not explain the difference in protected validity.")
    assert text.count("On every data set the two ranges overlap") == 1
    assert "cause stays open" not in text
    # Unsteady, but no seed's last epoch near its test validity: said, and nothing is tracked.
    far = merged({"lin_sep": (0.0, 0.0, 0.9), "moons": (0.0, 0.0, 0.9)})
    text = stability_text(configured, far, {"the main grid's weights": (main, variant)})
    assert "though on none of them does the last epoch's training-time validity stay" in text
    assert stability_text({}, results, {"the main grid's weights": (main, variant)}) == ""


def test_figure_draws_every_seed_of_both_trainings_once_in_the_legend():
    configured, main, _, _ = logs()
    fig = stability_figure(configured, {"the main grid's weights": (main, None)})
    assert len(fig.data) == 2 * 2 * 3
    assert sum(t.showlegend is True for t in fig.data) == 2
    assert [a.text for a in fig.layout.annotations] == ["Linearly separable", "Moons"]
    assert list(fig.data[0].y) == oscillating(0.6)


def test_read_cell_logs_finds_one_training_by_data_set_and_seed(tmp_path: Path):
    cells = tmp_path / "reproduction" / "cells"
    variant_cells = tmp_path / "reproduction" / "variants" / "v" / "cells"
    for folder, names in (
        (cells, ("lin_sep-full_protected-s0", "lin_sep-full-s0", "adult-full_protected-s12")),
        (variant_cells, ("lin_sep-full_protected-s2",)),
    ):
        folder.mkdir(parents=True)
        for name in names:
            content = {"config": {}, "meta": {"lambdas": [name]}, "log": [{"epoch": 1}]}
            (folder / f"{name}.json").write_text(json.dumps(content))
    found = read_cell_logs(tmp_path, "full_protected")
    assert {k: sorted(v) for k, v in found.items()} == {"adult": [12], "lin_sep": [0]}
    assert found["lin_sep"][0]["meta"]["lambdas"] == ["lin_sep-full_protected-s0"]
    assert list(read_cell_logs(tmp_path, "full")) == ["lin_sep"]
    assert {k: sorted(v) for k, v in read_cell_logs(tmp_path, "full_protected", "v").items()} == {
        "lin_sep": [2]
    }
    assert read_cell_logs(tmp_path, "energy") == {}


def test_several_ridged_weightings_are_set_side_by_side_and_pooled_in_the_text():
    configured, main, results, variant = logs()
    # A second weighting with a ridge: steadier than none, less than the main grid's.
    defaults = {
        k: {s: cell([0.8, 1.0] * 50, [9.0] * 100, (1.0, 0.5, 0.1, 0.25)) for s in range(3)}
        for k in ("lin_sep", "moons")
    }
    ridged = {"the main grid's weights": (main, variant), "the defaults": (defaults, variant)}
    table = stability_table(configured, results, ridged).splitlines()
    assert [row.split(" | ")[1] for row in table[2:]] == ["0, 0", "0.01, 0.25", "0.1, 0.25"] * 2
    text = stability_text(configured, results, ridged)
    assert "with the main grid's weights and the defaults it stays at or below 9.0" in text
    assert "per seed without the ridge and 0.00 to 0.10 with it" in text  # SD of 0.8 / 1.0: 0.1
    fig = stability_figure(configured, ridged)
    assert len(fig.data) == 3 * 2 * 3
    legend = [t for t in fig.data if t.showlegend]
    assert [t.name for t in legend][1:] == list(ridged)
    assert len({t.line.color for t in legend}) == 3
    assert stability_text(configured, results, {}) == ""
    # A ridge that leaves Moon as unsteady as none: Moon overlaps, LS alone is read further.
    shaky = {k: {s: cell(oscillating(0.5), [9.0] * 100) for s in range(3)} for k in defaults}
    text = stability_text(configured, results, {"shaky": (shaky, variant)})
    assert "On Linearly separable and Moons every seed" not in text  # both overlap now
    mixed = {"lin_sep": defaults["lin_sep"], "moons": shaky["moons"]}
    text = stability_text(configured, results, {"mixed": (mixed, variant)})
    assert (
        "On Linearly separable every seed trained without the ridge moves more than every seed "
        "trained with it; on Moons (0.35–0.36 without, 0.35–0.35 with) the ranges overlap." in text
    )
    assert "Moons (paper 1.00)" not in text  # the paper's level is read on LS only


def test_read_ridged_takes_each_shipped_ridge_variant_with_its_cells(tmp_path: Path):
    from cfbook.book.figures.ridge import RIDGED_VARIANTS, read_ridged

    main, defaults = RIDGED_VARIANTS.values()
    for variant in (main, defaults):
        folder = tmp_path / "reproduction" / "variants" / variant / "cells"
        folder.mkdir(parents=True)
        content = {"meta": {"lambdas": [variant]}, "log": []}
        (folder / "moons-full_protected-s1.json").write_text(json.dumps(content))
    merged = {main: {"data": {}}, defaults: {"data": {}}, "shuffled": {"data": {}}}
    found = read_ridged(tmp_path, merged)
    assert list(found) == list(RIDGED_VARIANTS)
    logs, results = found["CTExperiments' defaults"]
    assert logs["moons"][1]["meta"]["lambdas"] == [defaults] and results is merged[defaults]
    # Merged but without cells, or with cells but not merged: left out.
    assert list(read_ridged(tmp_path, {main: {"data": {}}})) == ["the main grid's weights"]
    assert read_ridged(tmp_path / "elsewhere", merged) == {}


def test_the_edges_of_the_table_and_the_text():
    configured, main, results, variant = logs()
    # LS: every seed ends at 0.1 with a test validity of 0 (exactly the tolerance apart); Moon's
    # seeds visit 0.95 exactly, and seed 1 ends there (epoch 2 and epoch 99 below it).
    configured["lin_sep"] = {s: cell(oscillating(0.1), [5.0] * 100) for s in range(3)}
    at_level = oscillating(0.95, high=0.95)
    at_level[-2] = 0.2  # epoch 99: the last epoch alone is at the level
    configured["moons"][1] = cell(at_level, [5.0] * 100)
    results = merged({"lin_sep": (0.0, 0.0, 0.0), "moons": (0.65, 0.6, 0.35)})
    # Three ridged weightings, the largest ridge term exactly 10.
    third = {k: {s: cell([1.0] * 100, [10.0] * 100) for s in range(3)} for k in main}
    ridged = {"a": (main, variant), "b": (main, variant), "c": (third, variant)}
    text = stability_text(configured, results, ridged)
    assert "; with a, b and c it stays at or below 10. Over the last" in text
    assert "on Linearly separable the last epoch's training-time validity lies within 0.1" in text
    assert (
        "Moons (paper 1.00) in 0 / 25 / 2 of the last 50 epochs per seed, at epoch 100 in 1 of"
        in (text)
    )
    table = stability_table(configured, results, {"a": (main, variant)}).splitlines()
    assert table[:2] == [
        "| data | λ_reg, λ_adv | largest ridge term | training validity, last 50 epochs | "
        "at epoch 100 | test validity (paper) |",
        "|---|---|---|---|---|---|",
    ]
    # A seed without a test-time validity is shown as such; the spread is over the last 50
    # epochs of a longer log (its first 70 epochs, all at 0, are not among them).
    results["data"]["moons"]["validity"]["protected"]["full"][2]["mean"] = None
    main["moons"][0] = cell([0.0] * 70 + [1.0] * 50, RIDGE_SMALL + [2.0] * 20)
    table = stability_table(configured, results, {"a": (main, variant)}).splitlines()
    assert table[4].endswith("| 0.65 / 0.60 / – (1.00) |")
    assert table[5].split(" | ")[3] == "1.00–1.00 / 1.00–1.00 / 1.00–1.00"
    # A data set that a ridged weighting trained but did not merge is left out.
    unmerged = merged({"lin_sep": (1.0, 1.0, 1.0)})
    assert len(stability_table(configured, results, {"a": (main, unmerged)}).splitlines()) == 4


def test_the_text_s_two_ways_of_saying_the_logs_do_not_separate_or_track():
    configured, main, results, variant = logs()
    ridged = {"the main grid's weights": (main, variant)}
    steady = {k: {s: cell([0.5] * 100, [5.0] * 100) for s in range(3)} for k in configured}
    assert (
        "and 0.00 to 0.00 with it. On every data set the two ranges overlap: the logs do not "
        "show a less steady training without the ridge"
    ) in stability_text(steady, results, ridged)
    far = merged({"lin_sep": (0.0, 0.0, 0.9), "moons": (0.0, 0.0, 0.9)})
    assert (
        "where this oscillation stands when it stops, though on none of them does the last "
        "epoch's training-time validity stay within 0.1 of the test-time protected validity in "
        "every seed. Where the paper"
    ) in stability_text(configured, far, ridged)


def test_figure_panels_hold_the_data_sets_every_weighting_trained_each_line_over_its_epochs():
    configured, main, _, _ = logs()
    only_ls = {"lin_sep": main["lin_sep"]}
    fig = stability_figure(configured, {"the main grid's weights": (only_ls, None)})
    assert [a.text for a in fig.layout.annotations] == ["Linearly separable"]
    assert len(fig.data) == 2 * 3
    assert all(list(t.x) == list(range(1, 101)) for t in fig.data)
    assert {t.xaxis for t in fig.data} == {"x"}
    assert fig.layout.yaxis.range == (0, 1.02)
    # Both data sets: side by side, one y range each, shared.
    fig = stability_figure(configured, {"the main grid's weights": (main, None)})
    assert [t.xaxis for t in fig.data[::3]] == ["x", "x", "x2", "x2"]
    assert fig.layout.yaxis2.range == (0, 1.02) and fig.layout.yaxis2.matches == "y"


def test_the_last_epoch_is_read_from_the_logs():
    configured, main, results, variant = logs()
    short = {
        k: {s: dict(c, log=c["log"][:80]) for s, c in v.items()} for k, v in configured.items()
    }
    ridged = {"the main grid's weights": (main, variant)}
    assert "| at epoch 100 |" in stability_table(configured, results, ridged)
    assert "training leaves at epoch 100 depends" in stability_text(configured, results, ridged)
    # Cells trained 80 epochs: said so; logs of different lengths: "the last epoch".
    text = stability_text(short, results, ridged)
    assert "training leaves at epoch 80 depends" in text and "at epoch 80 in 0 of 3" in text
    assert "| at the last epoch |" in stability_table(short, results, ridged)
