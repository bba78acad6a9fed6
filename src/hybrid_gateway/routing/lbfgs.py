"""Limited-memory BFGS in numpy: fits the logistic model when it has too many weights for Newton.

The n-gram part of the classifier has ``2**bits`` weights (a quarter of a million), so the
Hessian that ``training._newton`` inverts for the 395 dense weights is out of reach; L-BFGS needs
only the loss and its gradient (two sparse products per step).  The loss is convex, so a plain
backtracking (Armijo) line search is enough.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
Objective = Callable[[F64], tuple[float, F64]]


def minimise(
    objective: Objective, start: F64, *, iterations: int = 200, memory: int = 10, tol: float = 1e-6
) -> F64:
    """The minimiser of a smooth convex ``objective`` (value and gradient) near ``start``."""
    x = start.copy()
    value, grad = objective(x)
    steps: list[tuple[F64, F64, float]] = []  # (s, y, 1 / y.s), newest last
    scale0 = max(float(np.abs(grad).max()), 1e-12)
    for _ in range(iterations):
        direction = -_two_loop(grad, steps)
        slope = float(grad @ direction)
        if slope >= 0:  # not a descent direction (numerical noise): restart from the gradient
            steps.clear()
            direction, slope = -grad, -float(grad @ grad)
        t = 1.0 if steps else min(1.0, 1.0 / scale0)
        for _ in range(30):
            candidate = x + t * direction
            new_value, new_grad = objective(candidate)
            if new_value <= value + 1e-4 * t * slope:
                break
            t *= 0.5
        else:
            return x
        s, y = candidate - x, new_grad - grad
        sy = float(s @ y)
        if sy > 1e-12:
            steps.append((s, y, 1.0 / sy))
            if len(steps) > memory:
                steps.pop(0)
        x, value, grad = candidate, new_value, new_grad
        if float(np.abs(grad).max()) <= tol * scale0:
            break
    return x


def _two_loop(grad: F64, steps: list[tuple[F64, F64, float]]) -> F64:
    """The L-BFGS approximation of ``H^-1 @ grad``."""
    q = grad.copy()
    alphas: list[float] = []
    for s, y, rho in reversed(steps):
        a = rho * float(s @ q)
        alphas.append(a)
        q -= a * y
    if steps:
        s, y, _ = steps[-1]
        q *= float(s @ y) / float(y @ y)
    for (s, y, rho), a in zip(steps, reversed(alphas), strict=True):
        b = rho * float(y @ q)
        q += (a - b) * s
    return q
