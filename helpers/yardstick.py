"""The course's one yardstick for "the same update", in every notebook that compares updates.

Each float32 update is measured by its distance from a float64 reference of the same step,
relative to the reference's size; the run's own rounding is the distance of the float32 run that
computes the reference's maths as written. Another order of sums rounds by another amount, and
one sample can be lucky: rounding ends at twice the run's own, never below FLOOR (what a sum of a
thousand numbers loses); further is another update. The step must move the weights far.
"""

import numpy as np

SLACK = 2
FLOOR = 1000 * 2.0**-23  # float32's epsilon, 1.19e-7, a thousand times: 1.19e-4


def distance(update, exact) -> float:
    """``|update - exact| / |exact|``: arrays, or lists of arrays, flattened alike."""
    ours, theirs = flat(update), flat(exact)
    return float(np.linalg.norm(ours - theirs) / max(np.linalg.norm(theirs), 1e-300))


def flat(arrays) -> np.ndarray:
    if isinstance(arrays, np.ndarray):
        return arrays.astype("float64").ravel()
    return np.concatenate([np.asarray(a, dtype="float64").ravel() for a in arrays])


def allowed(own: float) -> float:
    """How far from float64 rounding reaches, given the run's own rounding."""
    return max(SLACK * own, FLOOR)


def line(name: str, away: float, own: float) -> str:
    """The verdict, worded alike in every notebook (tests read it back), naming a FLOOR verdict."""
    verdict = "rounding, the same update" if away <= allowed(own) else "another update"
    if SLACK * own < away <= FLOOR:  # rounding only by the floor: the line says so
        verdict += f" (by the floor: {away / own:.0f} times the run's own)"
    return (f"{name}: {away:.2e} from float64; this run's own rounding {own:.2e}, so up to "
            f"{allowed(own):.2e} is rounding: {verdict}.")
