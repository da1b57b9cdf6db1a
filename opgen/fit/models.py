"""Curve forms and the fitter: weighted least squares, linear parameters in closed form, nonlinear ones
over a dense grid and then refined by a shrinking local grid — no starting point anywhere.

Every form here is ``mu = a·u(phi) + b·v(phi)``: two parameters (a, b) that enter linearly, with box
bounds, and at most two nonlinear ones ``phi``. For a given ``phi`` the weighted least-squares problem
in (a, b) is solved exactly (the unconstrained 2×2 solution when it lies inside the box, else the best
point on the box's edges, where the objective is a 1-D quadratic). The sums the solution needs are
matrix products over (rows × points) · (points × grid), so a thousand bootstrap replicates over a
thousand grid points are a handful of BLAS calls.

Weights: ``binomial`` — w = n / (mu (1 − mu)) with mu the current fitted value (iteratively
reweighted; its fixed point solves the binomial likelihood equations), started from the smoothed
observed rate; ``ols`` — w = 1, the reference's unweighted fit.

Forms (C is RL compute; x = log10 C):
  linear_log  R = R_ref + B · (log10 C − log10 C_ref)                (the reference's Eq. 7)
  sigmoid     R = R0 + (A − R0) / (1 + (C_mid / C)^B),  A, R0 in [0, 1], B > 0
  power       R = A − D · C^(−B),                        A in [0, 1], D ≥ 0, B > 0
  exp_loss    f(L) = gamma + alpha · exp(−beta · L)       (across runs: level against pretraining loss)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

LN10 = math.log(10.0)
ZOOM_LEVELS = 12  # local grid spacing halves each level: 1/4096 of a coarse cell at the end
POLISH_LEVELS = 30  # point estimates: 30 more halvings
IRLS_ITERATIONS = 3


@dataclass(frozen=True)
class Design:
    """Where one curve is observed: x (log10 compute, or pretraining loss for exp_loss) per point."""

    x: np.ndarray
    ref: float = 0.0  # log10 C_ref for linear_log

    @property
    def center(self) -> float:
        return float(np.mean(self.x))

    @property
    def span(self) -> float:
        return max(float(np.max(self.x) - np.min(self.x)), 1e-6)

    @property
    def z(self) -> np.ndarray:
        return self.x - self.center


@dataclass(frozen=True)
class Form:
    name: str
    equation: str
    lin_names: tuple[str, str]
    lin_bounds: tuple[tuple[float, float], tuple[float, float]]
    nl_names: tuple[str, ...]
    grid: tuple[int, ...]
    nl_range: Callable[[Design], np.ndarray]  # [d, 2] internal coordinates
    basis: Callable[[Design, np.ndarray], tuple[np.ndarray, np.ndarray]]  # phi [..., d] -> u, v [..., m]
    public: Callable[[Design, np.ndarray, np.ndarray], dict[str, np.ndarray]]
    # public parameter -> (kind, index, internal -> public); only those with a transform of their own
    profiled: dict[str, tuple[str, int, Callable[[Design, np.ndarray], np.ndarray]]] = field(default_factory=dict)

    @property
    def n_params(self) -> int:
        return 2 + len(self.nl_names)

    def mu(self, design: Design, phi: np.ndarray, lin: np.ndarray) -> np.ndarray:
        u, v = self.basis(design, phi)
        return lin[..., 0:1] * u + lin[..., 1:2] * v


def _linear_basis(d: Design, phi: np.ndarray):
    x = d.x - d.ref
    shape = phi.shape[:-1] + x.shape
    return np.ones(shape), np.broadcast_to(x, shape)


def _sigmoid_s(d: Design, phi: np.ndarray) -> np.ndarray:
    mid, logb = phi[..., 0:1], phi[..., 1:2]
    return 0.5 * (1.0 + np.tanh(0.5 * LN10 * (10.0 ** logb) * (d.z - mid)))


def _sigmoid_basis(d: Design, phi: np.ndarray):
    s = _sigmoid_s(d, phi)
    return 1.0 - s, s


def _power_basis(d: Design, phi: np.ndarray):
    b = 10.0 ** phi[..., 0:1]
    v = -(10.0 ** (-b * d.z))
    return np.ones_like(v), v


def _exp_basis(d: Design, phi: np.ndarray):
    v = np.exp(-phi[..., 0:1] * d.z)
    return np.ones_like(v), v


def _ident(_d: Design, v: np.ndarray) -> np.ndarray:
    return v


def _alpha(scaled: np.ndarray, beta: np.ndarray, center: float) -> np.ndarray:
    """alpha of gamma + alpha·exp(−beta·L) from the fit's centred coefficient (inf where it overflows:
    percentiles skip those replicates)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return scaled * np.exp(beta * center)


def _power_d(d: Design, phi: np.ndarray, lin: np.ndarray) -> np.ndarray:
    """D of A − D·C^(−B) from the centred coefficient: inf where it overflows (a steep curve over a
    narrow span; fit.json writes null, the plot says it cannot draw it)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return lin[..., 1] * 10.0 ** (10.0 ** phi[..., 0] * d.center)


TRANSITION = 2 * math.log10(9.0)  # decades a B = 1 sigmoid takes from 10% to 90% of its rise

FORMS: dict[str, Form] = {
    "linear_log": Form(
        "linear_log", "R = R_ref + B * (log10 C - log10 C_ref)", ("R_ref", "B"),
        ((-math.inf, math.inf), (-math.inf, math.inf)), (), (),
        lambda d: np.zeros((0, 2)), _linear_basis,
        lambda d, phi, lin: {"R_ref": lin[..., 0], "B": lin[..., 1]},
    ),
    "sigmoid": Form(
        "sigmoid", "R = R0 + (A - R0) / (1 + (C_mid / C)^B)", ("R0", "A"), ((0.0, 1.0), (0.0, 1.0)),
        ("C_mid", "B"), (40, 28),
        lambda d: np.array([[d.z.min() - 2 * d.span - 0.5, d.z.max() + 2 * d.span + 0.5],
                            [math.log10(TRANSITION / (20 * d.span)), math.log10(TRANSITION * 20 / d.span)]]),
        _sigmoid_basis,
        lambda d, phi, lin: {"A": lin[..., 1], "R0": lin[..., 0], "C_mid": 10.0 ** (phi[..., 0] + d.center),
                             "B": 10.0 ** phi[..., 1]},
        {"A": ("lin", 1, _ident), "R0": ("lin", 0, _ident),
         "C_mid": ("nl", 0, lambda d, v: 10.0 ** (v + d.center)), "B": ("nl", 1, lambda d, v: 10.0 ** v)},
    ),
    "power": Form(
        "power", "R = A - D * C^(-B)", ("A", "D"), ((0.0, 1.0), (0.0, math.inf)), ("B",), (240,),
        lambda d: np.array([[math.log10(0.01 / d.span), math.log10(12.0 / d.span)]]),
        _power_basis,
        lambda d, phi, lin: {"A": lin[..., 0], "D": _power_d(d, phi, lin), "B": 10.0 ** phi[..., 0]},
        {"A": ("lin", 0, _ident), "B": ("nl", 0, lambda d, v: 10.0 ** v)},
    ),
    "exp_loss": Form(
        "exp_loss", "f(L) = gamma + alpha * exp(-beta * L)", ("gamma", "alpha"),
        ((-math.inf, math.inf), (-math.inf, math.inf)), ("beta",), (481,),
        lambda d: np.array([[-60.0 / d.span, 60.0 / d.span]]),
        _exp_basis,
        lambda d, phi, lin: {"alpha": _alpha(lin[..., 1], phi[..., 0], d.center), "beta": phi[..., 0],
                             "gamma": lin[..., 0]},
        {"beta": ("nl", 0, _ident)},
    ),
}

CURVE_FORMS = ("linear_log", "sigmoid", "power")

# A fitted curve's shape over the data's range: its fitted value at the largest x less the one at the
# smallest (every form here is monotone), called flat below FLAT_CHANGE (a tenth of a percentage point
# of accuracy). Accuracy is expected to grow (or stay flat) with RL compute and to fall as
# pretraining loss rises; a fit of the other shape is said so in the warnings (docs/fit.md, "Shapes").
FLAT_CHANGE = 1e-3
SHAPES = ("decaying", "flat", "growing")


def shape(x: np.ndarray, fitted: np.ndarray) -> tuple[str | None, float | None]:
    """``(shape, change)`` of a monotone fitted curve observed at ``x``: ``fitted`` at the largest x
    minus at the smallest; ``(None, None)`` when that change is not a finite number."""
    x, fitted = np.asarray(x, dtype=float), np.asarray(fitted, dtype=float)
    change = float(fitted[int(np.argmax(x))] - fitted[int(np.argmin(x))])
    if not math.isfinite(change):
        return None, None
    if abs(change) < FLAT_CHANGE:
        return "flat", change
    return ("growing" if change > 0 else "decaying"), change


def get_form(name: str) -> Form:
    try:
        return FORMS[name]
    except KeyError:
        raise ValueError(f"unknown form {name!r} (known: {', '.join(CURVE_FORMS)})") from None


# ------------------------------------------------------------------------------------------ solver


def _sums(W: np.ndarray, Y: np.ndarray, U: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, ...]:
    """Weighted normal-equation sums [R, G]; U, V are [G, m] (shared by every row) or [R, G, m]."""
    WY = W * Y
    if U.ndim == 2:
        return (W @ (U * U).T, W @ (U * V).T, W @ (V * V).T, WY @ U.T, WY @ V.T)
    w, wy = W[:, :, None], WY[:, :, None]
    return tuple(np.matmul(a, b)[..., 0] for a, b in ((U * U, w), (U * V, w), (V * V, w), (U, wy), (V, wy)))


def _unbounded(*bounds) -> bool:
    return all(np.all(np.isinf(b)) for b in bounds)


def _box_ls(S, syy, alo, ahi, blo, bhi):
    """argmin over alo<=a<=ahi, blo<=b<=bhi of the quadratic given by the sums; returns a, b, sse."""
    suu, suv, svv, suy, svy = S

    def sse(a, b):
        return syy - 2 * a * suy - 2 * b * svy + a * a * suu + 2 * a * b * suv + b * b * svv

    with np.errstate(all="ignore"):
        det = suu * svv - suv * suv
        ok = det > 1e-12 * np.maximum(suu * svv, 1e-300)
        a0 = (svv * suy - suv * svy) / det
        b0 = (suu * svy - suv * suy) / det
        inside = ok & (a0 >= alo) & (a0 <= ahi) & (b0 >= blo) & (b0 <= bhi)
        best_a = np.where(inside, a0, 0.0)
        best_b = np.where(inside, b0, 0.0)
        best = np.where(inside, sse(best_a, best_b), np.inf)
        cands = []
        for fixed in (alo, ahi):
            a = np.broadcast_to(fixed, best.shape)
            b = np.clip(np.where(svv > 0, (svy - a * suv) / svv, 0.0), blo, bhi)
            cands.append((a, b, np.isfinite(a)))
        for fixed in (blo, bhi):
            b = np.broadcast_to(fixed, best.shape)
            a = np.clip(np.where(suu > 0, (suy - b * suv) / suu, 0.0), alo, ahi)
            cands.append((a, b, np.isfinite(b)))
        if not np.all(inside) and not _unbounded(alo, ahi, blo, bhi):
            for a, b, finite in cands:
                val = np.where(finite & np.isfinite(a) & np.isfinite(b), sse(a, b), np.inf)
                better = val < best
                best = np.where(better, val, best)
                best_a = np.where(better, a, best_a)
                best_b = np.where(better, b, best_b)
        # nothing usable (no data): the box's nearest point to 0
        best_a = np.where(np.isfinite(best_a), best_a, np.clip(0.0, alo, ahi))
        best_b = np.where(np.isfinite(best_b), best_b, np.clip(0.0, blo, bhi))
    return best_a, best_b, best


@dataclass
class Fit:
    """A batch of fits, one per row: phi [R, d], lin [R, 2], chi2 [R], weights [R, m], mu [R, m]."""

    form: Form
    design: Design
    phi: np.ndarray
    lin: np.ndarray
    chi2: np.ndarray
    weights: np.ndarray
    mu: np.ndarray

    def params(self) -> dict[str, np.ndarray]:
        return self.form.public(self.design, self.phi, self.lin)


def _bounds(R: int, form: Form, lin_lo, lin_hi):
    lo = np.array([b[0] for b in form.lin_bounds], dtype=float)[None, :].repeat(R, 0)
    hi = np.array([b[1] for b in form.lin_bounds], dtype=float)[None, :].repeat(R, 0)
    if lin_lo is not None:
        lo = np.asarray(lin_lo, dtype=float)
    if lin_hi is not None:
        hi = np.asarray(lin_hi, dtype=float)
    return lo, hi


def _solve_at(form, design, W, Y, phi, lo, hi):
    """Best (a, b) and sse for candidate phi [G, d] (shared) or [R, K, d] (per row)."""
    U, V = form.basis(design, phi)
    S = _sums(W, Y, U, V)
    syy = (W * Y * Y).sum(1)[:, None]
    return _box_ls(S, syy, lo[:, 0:1], hi[:, 0:1], lo[:, 1:2], hi[:, 1:2])


def _pick(a, b, sse, phi):
    k = np.argmin(sse, axis=1)
    r = np.arange(len(k))
    chosen = phi[k] if phi.ndim == 2 else phi[r, k]
    return chosen, np.stack([a[r, k], b[r, k]], axis=1)


def _zoom(form, design, W, Y, phi, lo, hi, nl_lo, nl_hi, h, levels=None):
    d = phi.shape[1]
    offsets = np.array(list(itertools.product((-1.0, 0.0, 1.0), repeat=d)))  # [K, d]
    lin = None
    for _ in range(levels or ZOOM_LEVELS):
        cand = np.clip(phi[:, None, :] + offsets[None] * h[:, None, :], nl_lo[:, None, :], nl_hi[:, None, :])
        a, b, sse = _solve_at(form, design, W, Y, cand, lo, hi)
        phi, lin = _pick(a, b, sse, cand)
        h = h / 2
    return phi, lin


def _search(form, design, W, Y, lo, hi, nl_lo, nl_hi, start=None):
    """Dense grid over phi (unless ``start``), then the shrinking local grid."""
    R = Y.shape[0]
    d = len(form.nl_names)
    if d == 0:
        a, b, _ = _solve_at(form, design, W, Y, np.zeros((1, 0)), lo, hi)
        return np.zeros((R, 0)), np.stack([a[:, 0], b[:, 0]], axis=1)
    n = np.array(form.grid)
    h = (nl_hi - nl_lo) / (n - 1)
    if start is None:
        unit = np.array(list(itertools.product(*[np.linspace(0.0, 1.0, k) for k in form.grid])))  # [G, d]
        if np.all(nl_lo == nl_lo[0]) and np.all(nl_hi == nl_hi[0]):
            grid = nl_lo[0] + unit * (nl_hi[0] - nl_lo[0])
        else:
            grid = nl_lo[:, None, :] + unit[None] * (nl_hi - nl_lo)[:, None, :]
        a, b, sse = _solve_at(form, design, W, Y, grid, lo, hi)
        start, _ = _pick(a, b, sse, grid)
        return _zoom(form, design, W, Y, start, lo, hi, nl_lo, nl_hi, h)
    # a reweighting step moves the optimum little: search from the last one, within two coarse cells
    return _zoom(form, design, W, Y, start, lo, hi, nl_lo, nl_hi, h)


def fit(form: Form, design: Design, Y: np.ndarray, n_trials: np.ndarray | None = None, *,
        weights: np.ndarray | None = None, nl_lo=None, nl_hi=None, lin_lo=None, lin_hi=None,
        iterations: int | None = None, polish: bool = False) -> Fit:
    """Fit ``form`` to every row of Y [R, m] (rates). With ``n_trials`` [R, m], binomial weights
    (iteratively reweighted); else fixed ``weights`` (default 1: ordinary least squares).
    ``nl_lo/nl_hi`` [R, d] and ``lin_lo/lin_hi`` [R, 2] narrow the ranges per row (equal ends fix a
    parameter, as profiling does)."""
    Y = np.atleast_2d(np.asarray(Y, dtype=float))
    R, m = Y.shape
    lo, hi = _bounds(R, form, lin_lo, lin_hi)
    rng_nl = form.nl_range(design)
    nl_lo = np.asarray(nl_lo, dtype=float) if nl_lo is not None else np.repeat(rng_nl[None, :, 0], R, 0)
    nl_hi = np.asarray(nl_hi, dtype=float) if nl_hi is not None else np.repeat(rng_nl[None, :, 1], R, 0)
    if n_trials is None:
        W = np.ones_like(Y) if weights is None else np.broadcast_to(weights, Y.shape).astype(float)
        iterations = 1
    else:
        N = np.broadcast_to(n_trials, Y.shape).astype(float)
        p = (Y * N + 0.5) / (N + 1.0)
        W = N / (p * (1.0 - p))
        iterations = iterations or IRLS_ITERATIONS
    phi, lin = _search(form, design, W, Y, lo, hi, nl_lo, nl_hi)
    for _ in range(iterations - 1):
        mu = form.mu(design, phi, lin)
        eps = 0.5 / (N + 1.0)
        p = np.clip(mu, eps, 1.0 - eps)
        W = N / (p * (1.0 - p))
        phi, lin = _search(form, design, W, Y, lo, hi, nl_lo, nl_hi, start=phi)
    if polish and phi.shape[1]:
        # point estimates: the same local search carried on far below the bootstrap's resolution
        h = (nl_hi - nl_lo) / (np.array(form.grid) - 1) / 2 ** ZOOM_LEVELS
        phi, lin = _zoom(form, design, W, Y, phi, lo, hi, nl_lo, nl_hi, h, POLISH_LEVELS)
    mu = form.mu(design, phi, lin)
    chi2 = (W * (Y - mu) ** 2).sum(1)
    return Fit(form, design, phi, lin, chi2, W, mu)


def ols_line(design: Design, y: np.ndarray) -> Fit:
    """The unweighted line R_ref + B·(x − ref) computed as the reference analysis computes it
    (``np.linalg.lstsq`` on [1, x − ref]; a curve flat to 1e-9 is B = 0, R_ref = its mean), so its
    numbers are the reference's to the last bit. The same minimum as ``fit(linear_log, ...)``
    (tests/test_fit_models.py ties the two)."""
    y = np.asarray(y, dtype=float)
    x = design.x - design.ref
    if float(y.max() - y.min()) < 1e-9:
        r_ref, b = float(y.mean()), 0.0
    else:
        A = np.vstack([np.ones_like(x), x]).T
        (r_ref, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    form = FORMS["linear_log"]
    phi = np.zeros((1, 0))
    lin = np.array([[float(r_ref), float(b)]])
    mu = form.mu(design, phi, lin)
    W = np.ones((1, len(y)))
    return Fit(form, design, phi, lin, (W * (y[None, :] - mu) ** 2).sum(1), W, mu)


def binomial_loglik(k: np.ndarray, n: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Binomial log-likelihood (without the constant binomial coefficient), mu clipped into (0, 1)."""
    eps = 1e-9
    p = np.clip(mu, eps, 1 - eps)
    return (k * np.log(p) + (n - k) * np.log1p(-p)).sum(-1)


def predict(name: str, params: dict, log10c: np.ndarray, log10_c_ref: float = 0.0) -> np.ndarray:
    """A curve from its public parameters (as fit.json gives them) at log10 compute values."""
    x = np.asarray(log10c, dtype=float)
    p = params
    if name == "linear_log":
        return p["R_ref"] + p["B"] * (x - log10_c_ref)
    if name == "sigmoid":
        s = 0.5 * (1.0 + np.tanh(0.5 * LN10 * p["B"] * (x - math.log10(p["C_mid"]))))
        return p["R0"] + (p["A"] - p["R0"]) * s
    if name == "power":
        if p["D"] <= 0:
            return np.full_like(x, p["A"])
        return p["A"] - np.exp(math.log(p["D"]) - p["B"] * x * LN10)
    raise ValueError(f"unknown form {name!r}")
