"""The CT paper's published numbers, to set ours beside (CT.jl: ``paper/tables/main.tex``, the
appendix in ``paper/sections/other/main_results.qmd``, validity in ``paper/satml/main.tex``, and
accuracy from the preprint's ``paper/preprint/tables/main_total.tex``, an earlier run)."""

from __future__ import annotations

# Reductions of CT against the baseline, % (+- the bootstrapped SE), and whether the 99 % CI of
# the difference excludes zero: IP and IP* without constraints, cost with the protected features.
MAIN: dict[str, dict[str, tuple[float, float, bool]]] = {
    "lin_sep": {
        "ip": (26.26, 0.67, True),
        "ip_star": (51.28, 2.01, True),
        "cost": (16.41, 0.57, True),
    },
    "circles": {
        "ip": (58.88, 0.37, True),
        "ip_star": (93.84, 6.7, True),
        "cost": (42.99, 0.85, True),
    },
    "moons": {"ip": (19.59, 0.73, True), "ip_star": (8.0, 9.44, False), "cost": (5.16, 1.0, True)},
    "over": {
        "ip": (-1.93, 1.12, False),
        "ip_star": (-27.7, 14.59, False),
        "cost": (40.86, 2.3, True),
    },
    "adult": {
        "ip": (0.19, 1.05, False),
        "ip_star": (34.35, 5.61, True),
        "cost": (4.03, 4.03, False),
    },
    "cali": {
        "ip": (10.65, 1.47, True),
        "ip_star": (63.06, 4.25, True),
        "cost": (44.23, 1.43, True),
    },
    "credit": {
        "ip": (10.14, 1.59, True),
        "ip_star": (50.35, 12.26, True),
        "cost": (-18.17, 4.4, True),
    },
    "gmsc": {
        "ip": (10.65, 2.28, True),
        "ip_star": (24.75, 4.84, True),
        "cost": (66.01, 1.41, True),
    },
    "mnist": {
        "ip": (6.36, 1.7, True),
        "ip_star": (-70.31, 217.6, False),
        "cost": (-35.11, 6.96, True),
    },
}

# Cost reduction without constraints, % (appendix; no SE published there).
COST_UNCONSTRAINED = {
    "lin_sep": -27.11,
    "circles": 40.17,
    "moons": 32.54,
    "over": 12.08,
    "adult": -4.59,
    "cali": -33.04,
    "credit": 27.43,
    "gmsc": -22.4,
    "mnist": -40.71,
}

# Validity (CT, BL), without and with the protected features.
VALIDITY = {
    "lin_sep": {"unconstrained": (1.0, 1.0), "protected": (1.0, 1.0)},
    "circles": {"unconstrained": (1.0, 0.51), "protected": (0.71, 0.48)},
    "moons": {"unconstrained": (1.0, 1.0), "protected": (1.0, 0.98)},
    "over": {"unconstrained": (0.86, 0.98), "protected": (0.34, 0.56)},
    "adult": {"unconstrained": (0.68, 0.99), "protected": (0.7, 0.99)},
    "cali": {"unconstrained": (1.0, 1.0), "protected": (1.0, 1.0)},
    "credit": {"unconstrained": (0.72, 1.0), "protected": (0.74, 1.0)},
    "gmsc": {"unconstrained": (0.94, 1.0), "protected": (0.97, 1.0)},
    "mnist": {"unconstrained": (1.0, 1.0), "protected": (1.0, 1.0)},
}

# Clean and FGSM (eps 0.03) accuracy, (CT, BL), from the preprint's run; ~1.0 on LS, Circ, Moon.
ACCURACY = {
    "adult": {"clean": (0.85, 0.85), "fgsm": (0.83, 0.41)},
    "cali": {"clean": (0.79, 0.85), "fgsm": (0.76, 0.74)},
    "credit": {"clean": (0.71, 0.70), "fgsm": (0.70, 0.52)},
    "gmsc": {"clean": (0.61, 0.75), "fgsm": (0.58, 0.42)},
    "mnist": {"clean": (0.90, 0.92), "fgsm": (0.84, 0.78)},
    "over": {"clean": (0.92, 0.91), "fgsm": (0.91, 0.91)},
}

# Integrated-gradients sensitivity to the protected features, median (CT, BL), from the
# paper's text (its table gives 95 % bootstrap intervals beside them).
IG = {
    "lin_sep": (0.21, 30.69),
    "circles": (6.96, 19.20),
    "moons": (0.54, 0.66),
    "over": (0.59, 24.55),
    "adult": (0.48, 0.74),
    "cali": (0.04, 0.05),
    "credit": (0.00, 0.20),
    "gmsc": (0.71, 0.16),
    "mnist": (0.17, 0.35),
}

# The main table's "Avg." row (``paper/tables/main.tex``): the mean over the nine data sets.
AVERAGE = {"ip": 15.64, "ip_star": 25.29, "cost": 18.49}
