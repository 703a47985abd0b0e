"""How much a camera's picture changed: the measure behind skipping quiet windows (Ray-free).

A window's frames are reduced to coarse grey grids (block means of the luma plane, about
``cell_px`` pixels a side); two grids are compared cell by cell after matching their overall
brightness; a cell *changed* when its grey level moved by more than ``cell_delta`` levels
(0-255) beyond what the brightness match explains. The measure of a window is the largest
fraction of changed cells

* between each of its frames and the reference (the last frame of the camera's last answered
  window): something arrived, left or moved since the answer that stands, and
* between consecutive frames of the window (motion within it),

so a window is quiet only when every frame looks like the answered picture and nothing moved.

What it ignores, by construction:

* sensor noise and compression flicker: a cell is the mean of ~``cell_px``² pixels, so
  per-pixel noise of sigma grey levels moves it by ~sigma/``cell_px`` (8 → 0.5 levels at 16 px),
  far below ``cell_delta``;
* slow or global light changes (a light ramp, auto exposure, a cloud): each grid is scaled by
  the ratio of the two grids' medians before comparing (the median, so a moving object does
  not set the gain);
* changes smaller than about one cell (a leaf, a distant bird, a small shadow edge): they
  change at most a cell or two, below a threshold of a few cells' fraction.

It does not see changes that keep every cell within ``cell_delta`` levels (a dark object on a
dark ground at night), nor changes inside one cell. Costs: one block mean per frame (the grid
is kept, never the frame) and ``grid cells`` comparisons per pair; ~a microsecond per cell.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

#: Default edge of a grid cell, pixels of the held frame (frames are held at the model's size,
#: ~300-600 px a side, so a grid is ~20-40 cells a side).
CELL_PX = 16
#: Default grey-level change (0-255) past which a cell counts as changed.
CELL_DELTA = 12.0
#: Default threshold: fraction of grid cells; 0.01 is ~4 cells of a 15x28 grid (a 448x252 frame).
THRESHOLD = 0.01


@dataclasses.dataclass(frozen=True)
class WindowChange:
    """The change measure of one window.

    Attributes:
        score: ``max(vs_reference, motion)``, a fraction of grid cells in [0, 1].
        vs_reference: largest fraction of cells changed between a frame and the reference grid
            (0.0 without a reference).
        motion: largest fraction of cells changed between consecutive frames of the window.
        frames: frames measured.
    """

    score: float
    vs_reference: float
    motion: float
    frames: int


def luma_grid(luma: np.ndarray, cell_px: int = CELL_PX) -> np.ndarray:
    """Block means of a grey picture.

    Args:
        luma: ``(H, W) uint8`` grey picture (the Y plane of a held YUV 4:2:0 frame is its first
            ``H`` rows).
        cell_px: cell edge, pixels; the picture is cropped to whole cells (at least one).

    Returns:
        ``(H // cell_px, W // cell_px) float32`` grid of mean grey levels (0-255).

    Raises:
        ValueError: ``luma`` is not 2-D or ``cell_px < 1``.
    """
    if luma.ndim != 2 or cell_px < 1:
        raise ValueError("luma must be (H, W) and cell_px >= 1")
    h, w = luma.shape
    cell_px = max(1, min(cell_px, h, w))
    gh, gw = h // cell_px, w // cell_px
    rows = luma[: gh * cell_px, : gw * cell_px].reshape(gh, cell_px, gw * cell_px).sum(axis=1, dtype=np.uint32)
    sums = rows.reshape(gh, gw, cell_px).sum(axis=2)  # two one-axis sums: ~3x faster than one mean over two axes
    grid: np.ndarray = (sums / float(cell_px * cell_px)).astype(np.float32)
    return grid


def changed_fraction(a: np.ndarray, b: np.ndarray, cell_delta: float = CELL_DELTA) -> float:
    """Fraction of cells that changed between two grids of one camera, brightness matched.

    Args:
        a, b: ``(gh, gw) float32`` grids from :func:`luma_grid` (same shape).
        cell_delta: grey levels (0-255) past which a cell counts as changed.

    Returns:
        A fraction in [0, 1]; 1.0 when the shapes differ (the camera's picture size changed).
    """
    if a.shape != b.shape:
        return 1.0
    ma, mb = float(np.median(a)), float(np.median(b))
    gain = mb / ma if ma > 1.0 and mb > 1.0 else 1.0
    diff = np.abs(a * gain - b)
    return float(np.count_nonzero(diff > cell_delta)) / float(diff.size)


def measure_window(
    grids: list[np.ndarray], reference: np.ndarray | None, cell_delta: float = CELL_DELTA
) -> WindowChange:
    """The change measure of a window (see the module docstring).

    Args:
        grids: the window's frames as :func:`luma_grid` grids, in presentation order.
        reference: the grid of the last frame of the camera's last answered window, or None.
        cell_delta: grey levels past which a cell counts as changed.

    Returns:
        The :class:`WindowChange`; a window without frames has score 1.0 (nothing to compare:
        never skipped).
    """
    if not grids:
        return WindowChange(score=1.0, vs_reference=1.0, motion=1.0, frames=0)
    vs_ref = 0.0 if reference is None else max(changed_fraction(reference, g, cell_delta) for g in grids)
    motion = max((changed_fraction(a, b, cell_delta) for a, b in itertools.pairwise(grids)), default=0.0)
    return WindowChange(score=max(vs_ref, motion), vs_reference=vs_ref, motion=motion, frames=len(grids))


def held_luma(held: np.ndarray) -> np.ndarray:
    """The Y plane of a held YUV 4:2:0 frame.

    Args:
        held: ``(H·3/2, W) uint8`` planar YUV 4:2:0 (how the stream reader holds frames).

    Returns:
        ``(H, W) uint8`` view (no copy).
    """
    return held[: held.shape[0] * 2 // 3]


@dataclasses.dataclass(frozen=True)
class SkipDecision:
    """What to do with one window.

    Attributes:
        skip: True: not sent to the model; the answer of window ``since_index`` stands.
        change: the window's measure.
        since_index: index of the last answered window (None before the first answer).
        reason: ``"unchanged"`` (skipped), or why it is sent: ``"first"``, ``"changed"``, ``"max_skip"``.
    """

    skip: bool
    change: WindowChange
    since_index: int | None
    reason: str


class QuietScenePolicy:
    """Per camera: skips windows whose change measure stays under ``threshold``.

    A window is skipped only when an answered window exists, its measure (against the last
    answered window's last frame, and within itself) is under ``threshold``, and less than
    ``max_skip_s`` stream seconds have passed since the end of the last answered window; the
    first window that crosses the threshold is always sent. The reference moves only when a
    window is answered (:meth:`answered`), so a slow drift adds up until it crosses the threshold.
    Holds one grid (``grid cells × 4`` bytes, a few KiB) per camera.

    Args:
        threshold: fraction of grid cells (0-1) under which a window is unchanged.
        max_skip_s: stream seconds after which a window is sent whatever its measure.
        cell_px, cell_delta: see :func:`luma_grid`, :func:`changed_fraction`.

    Raises:
        ValueError: ``threshold`` outside (0, 1] or ``max_skip_s <= 0``.
    """

    def __init__(self, threshold: float, max_skip_s: float, cell_px: int = CELL_PX, cell_delta: float = CELL_DELTA):
        if not 0 < threshold <= 1 or max_skip_s <= 0:
            raise ValueError("need 0 < threshold <= 1 and max_skip_s > 0")
        self.threshold, self.max_skip_s = threshold, max_skip_s
        self.cell_px, self.cell_delta = cell_px, cell_delta
        self.reference: np.ndarray | None = None
        self.answered_index: int | None = None
        self.answered_end_s = 0.0

    def grids(self, lumas: list[np.ndarray]) -> list[np.ndarray]:
        """``(H, W) uint8`` grey frames → their grids."""
        return [luma_grid(y, self.cell_px) for y in lumas]

    def decide(self, index: int, end_s: float, grids: list[np.ndarray]) -> SkipDecision:
        """Decides for window ``index`` ending at ``end_s`` stream seconds, frames as grids."""
        change = measure_window(grids, self.reference, self.cell_delta)
        if self.reference is None or self.answered_index is None:
            return SkipDecision(False, change, self.answered_index, "first")
        if change.score >= self.threshold:
            return SkipDecision(False, change, self.answered_index, "changed")
        if end_s - self.answered_end_s >= self.max_skip_s:
            return SkipDecision(False, change, self.answered_index, "max_skip")
        return SkipDecision(True, change, self.answered_index, "unchanged")

    def answered(self, index: int, end_s: float, last_grid: np.ndarray) -> None:
        """Window ``index`` (ending at ``end_s``) was answered; its last frame becomes the reference."""
        self.reference, self.answered_index, self.answered_end_s = last_grid, index, end_s

    @property
    def held_bytes(self) -> int:
        """Bytes this policy holds (the reference grid)."""
        return 0 if self.reference is None else int(self.reference.nbytes)


def synthetic_scene(
    seconds: float, fps: float, size: tuple[int, int] = (448, 252), noise_sigma: float = 8.0,
    light_ramp: float = 0.0, person_at_s: float | None = None, seed: int = 0,
) -> list[tuple[float, np.ndarray]]:
    """A fixed camera's grey frames: a static textured scene, sensor noise, a light ramp, a person.

    Used by the tests and ``benchmarks.quiet_scenes`` (labels known by construction).

    Args:
        seconds, fps: length and frame rate.
        size: ``(width, height)`` pixels.
        noise_sigma: Gaussian sensor noise per pixel and frame, grey levels.
        light_ramp: relative brightness change over the clip (0.3: 30 % brighter at the end).
        person_at_s: when a person (a dark 24×64-px figure) walks in from the left edge, at
            40 px/s, then stands; None: nobody.
        seed: noise seed.

    Returns:
        ``[(t_s, (H, W) uint8)]`` frames in presentation order.
    """
    rng = np.random.default_rng(seed)
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    base = 110 + 40 * np.sin(xx / 23.0) * np.cos(yy / 17.0) + 30 * (yy / h)  # walls, floor, texture
    out = []
    for i in range(int(seconds * fps)):
        t = i / fps
        img = base * (1 + light_ramp * t / seconds)
        if person_at_s is not None and t >= person_at_s:
            x = min(-24 + 40 * (t - person_at_s), w * 0.4)
            x0, x1 = max(0, int(x)), max(0, int(x) + 24)
            img = img.copy()
            img[h // 2 - 32 : h // 2 + 32, x0:x1] = 35.0
        img = img + rng.normal(0, noise_sigma, img.shape)
        out.append((t, np.clip(img, 0, 255).astype(np.uint8)))
    return out
