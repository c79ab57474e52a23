"""The learned scorer's classifier: a small network over sentence vectors, and how it is
trained (numpy only; :mod:`.learned` decides what it is trained on and how it is used).

:func:`train_network` is the one the dialog uses: one ReLU layer of :data:`UNITS` under a
softmax, cross-entropy with L2 (:data:`NET_L2`), :data:`EPOCHS` passes of Adam over shuffled
batches from a seeded He initialisation, so the same data give the same weights. Until stop 29
it was a softmax regression straight on the vector (convex, Nesterov steps), which placed
fewer callers' turns (see :data:`UNITS`). The vectors are centred on the training mean and
divided by their overall standard deviation (e5's cosines are compressed into ~0.75-1.0:
centring spreads them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["SoftmaxModel", "train_network"]

# The network (train_network): one ReLU layer of UNITS between the vector and the softmax,
# L2 NET_L2, EPOCHS passes of Adam (step ADAM_LR) over shuffled batches of BATCH rows.
# 5-fold cross-validation over the callers' turns, the scorer's own top-1: Mandarin in-scope
# turns 81.9 % with softmax regression, 84.5 % with 512 units (l2 1e-4), 85.0 % with 1024
# (1e-3), off-topic turns 81.6 / 82.6 / 82.8 % (300 full-batch steps: ~40 s per language on
# 2 cores); in batches, 20 / 40 / 60 passes gave 82.8 / 84.9 / 85.4 % and 84.5 / 83.4 /
# 81.8 %, in ~1 / 2 / 5 s; English 84.7 % and 84.5 % with softmax regression, 87.0-87.4 % and
# 83.7-84.9 % with the network.
UNITS = 1024
NET_L2 = 1e-3
EPOCHS = 40
BATCH = 256
ADAM_LR = 1e-3


@dataclass(frozen=True, slots=True)
class SoftmaxModel:
    """A trained classifier over unit-length sentence vectors: the centred, scaled vector,
    through one ReLU layer when :attr:`hidden` is set, then a softmax layer."""

    labels: tuple[str, ...]
    """Class names: entry ids, then :data:`OUT_OF_SCOPE` / :data:`SOCIAL` when trained."""
    mean: NDArray[Any]
    """Training mean subtracted from a vector before scaling."""
    scale: float
    """Global standard deviation the centred vector is divided by."""
    weights: NDArray[Any]
    """(inputs, classes): inputs are the vector's dims, or the hidden units."""
    bias: NDArray[Any]
    """(classes,)."""
    hidden: NDArray[Any] | None = None
    """(dim, units) of the ReLU layer; None: softmax regression on the vector itself."""
    hidden_bias: NDArray[Any] | None = None
    """(units,)."""

    def proba(self, vector: NDArray[Any]) -> NDArray[Any]:
        """Class probabilities of one vector, in :attr:`labels` order."""
        x = (vector - self.mean) / self.scale
        if self.hidden is not None and self.hidden_bias is not None:
            x = np.maximum(x @ self.hidden + self.hidden_bias, 0.0)
        z = x @ self.weights + self.bias
        e = np.exp(z - z.max())
        out: NDArray[Any] = e / e.sum()
        return out

    def prob_of(self, vector: NDArray[Any]) -> dict[str, float]:
        """Class probabilities of one vector by label."""
        return dict(zip(self.labels, self.proba(vector).tolist(), strict=True))


def _standardise(x: NDArray[Any]) -> tuple[NDArray[Any], NDArray[Any], float]:
    """(centred and scaled rows, mean, scale) of ``x``."""
    mean = x.mean(axis=0)
    xc = x - mean
    scale = float(xc.std()) or 1.0
    return xc / scale, mean, scale


def _softmax_rows(z: NDArray[Any]) -> NDArray[Any]:
    p: NDArray[Any] = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return p


def train_network(
    x: NDArray[Any],
    y: NDArray[Any],
    labels: Sequence[str],
    *,
    units: int = UNITS,
    l2: float = NET_L2,
    epochs: int = EPOCHS,
    seed: int = 0,
) -> SoftmaxModel:
    """One ReLU layer of ``units`` under a softmax: fit ``x`` (rows, dim) to the target
    distributions ``y`` (rows, classes) by Adam on shuffled batches of :data:`BATCH` rows,
    ``epochs`` passes, with L2 on the weights, from a seeded He initialisation (the same data
    give the same model)."""
    xc, mean, scale = _standardise(np.asarray(x, dtype=np.float32))
    y = np.asarray(y, dtype=np.float32)
    n, dim = xc.shape
    rng = np.random.default_rng(seed)
    params = {
        "w1": (rng.normal(size=(dim, units)) * np.sqrt(2.0 / dim)).astype(np.float32),
        "b1": np.zeros(units, np.float32),
        "w2": (rng.normal(size=(units, y.shape[1])) * np.sqrt(1.0 / units)).astype(np.float32),
        "b2": np.zeros(y.shape[1], np.float32),
    }
    first = {k: np.zeros_like(v) for k, v in params.items()}
    second = {k: np.zeros_like(v) for k, v in params.items()}
    t = 0
    for _ in range(epochs):
        order = rng.permutation(n)
        for start in range(0, n, BATCH):
            rows = order[start : start + BATCH]
            xb, t = xc[rows], t + 1
            h = xb @ params["w1"] + params["b1"]
            a = np.maximum(h, 0.0)
            g = (_softmax_rows(a @ params["w2"] + params["b2"]) - y[rows]) / len(rows)
            ga = g @ params["w2"].T
            ga[h <= 0] = 0.0
            grads = {
                "w1": xb.T @ ga + l2 * params["w1"],
                "b1": ga.sum(axis=0),
                "w2": a.T @ g + l2 * params["w2"],
                "b2": g.sum(axis=0),
            }
            for k, grad in grads.items():
                first[k] = 0.9 * first[k] + 0.1 * grad
                second[k] = 0.999 * second[k] + 0.001 * grad * grad
                step = (first[k] / (1 - 0.9**t)) / (np.sqrt(second[k] / (1 - 0.999**t)) + 1e-8)
                params[k] -= ADAM_LR * step
    return SoftmaxModel(
        tuple(labels),
        mean.astype(np.float32),
        scale,
        params["w2"],
        params["b2"],
        params["w1"],
        params["b1"],
    )
