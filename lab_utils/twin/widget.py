"""Change the cluster, commit a prediction, re-run a real step: a small control over ``emulate``.

    ex = ClusterExplorer(fn, world_size, *args, scale=..., measure=...)   # fn as for emulate
    ex.show()                 # in a notebook: the controls, a prediction box, the timeline
    ex.run(120, preset="DGX H100", nodes=2, inter="10GbE")                  # the same in code

The controls: the kind of node (a preset of ``calc.hardware.CLUSTER_SPECS``), nodes (the GPUs
per node follow: one rank per GPU), the link between nodes (the preset's, or one of
``calc.hardware.LINKS`` at the preset's latency), and the learner's prediction of the emulated
time in ms. "Commit and run" locks the prediction, runs ``fn`` on real ranks on that emulated
cluster, then shows the prediction beside the emulated time (``measure(em)``, default the
makespan) and redraws the per-rank timeline. Every run needs a new prediction: none is revealed
before one is committed. Runs are kept in ``ex.history``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from lab_utils.calc import hardware
from lab_utils.calc._check import parse_number
from lab_utils.exercises.predict import off_by
from lab_utils.twin.emulate import emulate
from lab_utils.twin.result import Emulation
from lab_utils.twin.topology import Cluster, Link

AS_PRESET = "as the preset"
NETWORKS = ("IB-NDR", "IB-HDR", "100GbE", "25GbE", "10GbE", "1GbE")  # calc.hardware.LINKS keys


@dataclass
class Reveal:
    """One committed prediction and what the emulated cluster answered."""

    cluster: Cluster
    predicted_ms: float
    emulated_ms: float
    em: Emulation

    @property
    def verdict(self) -> str:
        return off_by(self.predicted_ms, self.emulated_ms)

    def row(self) -> dict:
        return {
            "cluster": self.cluster.name,
            "between nodes": self.cluster.inter.name,
            "your prediction (ms)": self.predicted_ms,
            "emulated (ms)": self.emulated_ms,
            "verdict": self.verdict,
        }


class ClusterExplorer:
    """Re-runs ``fn(ctx, *args)`` on ``world_size`` ranks of the cluster the learner picks;
    ``history`` keeps every Reveal."""

    def __init__(
        self,
        fn: Callable,
        world_size: int,
        *args: Any,
        scale: Any = None,
        measure: Callable[[Emulation], float] | None = None,
        preset: str = "DGX H100",
    ) -> None:
        self.fn, self.world_size, self.args, self.scale = fn, world_size, args, scale
        self.measure = measure or (lambda em: em.makespan)
        self.preset, self._ui = preset, None
        self.history: list[Reveal] = []

    def node_counts(self) -> list[int]:
        """Node counts that hold the ranks exactly (one rank per GPU)."""
        return [n for n in range(1, self.world_size + 1) if self.world_size % n == 0]

    def cluster(self, preset: str | None = None, nodes: int = 1, inter: str = AS_PRESET) -> Cluster:
        """``nodes`` nodes of ``preset`` holding the ranks; ``inter`` replaces the link between
        nodes by a ``calc.hardware.LINKS`` entry (the preset's latency kept)."""
        preset = preset or self.preset
        if nodes not in self.node_counts():
            raise ValueError(
                f"nodes={nodes} does not divide the {self.world_size} ranks; "
                f"choose one of {self.node_counts()}"
            )
        c = Cluster.preset(preset, nodes=nodes, gpus_per_node=self.world_size // nodes)
        if inter == AS_PRESET:
            return c
        if inter not in hardware.LINKS:
            raise ValueError(
                f"inter={inter!r} is not a link of calc.hardware.LINKS; choose one "
                f"of {', '.join(NETWORKS)}"
            )
        return c.with_(inter=Link(inter, c.inter.latency_s, hardware.LINKS[inter].bytes_per_s))

    def run(
        self, prediction_ms: Any, preset: str | None = None, nodes: int = 1, inter: str = AS_PRESET
    ) -> Reveal:
        """Commit ``prediction_ms`` (a number, or text like "120"), run on the chosen cluster,
        keep and return the reveal (shown in the widget when it is displayed)."""
        if isinstance(prediction_ms, str):
            prediction_ms = parse_number(prediction_ms)
        if not isinstance(prediction_ms, (int, float)) or prediction_ms != prediction_ms:
            raise ValueError(
                f"prediction_ms must be a number of milliseconds, got {prediction_ms!r}"
            )
        cluster = self.cluster(preset, nodes, inter)
        em = emulate(self.fn, self.world_size, cluster, *self.args, scale=self.scale, quiet=True)
        out = Reveal(cluster, float(prediction_ms), 1e3 * self.measure(em), em)
        self.history.append(out)
        if self._ui is not None:
            self._draw(out)
        return out

    def _draw(self, out: Reveal) -> None:
        from IPython.display import display

        from lab_utils.twin.trace import figure
        from lab_utils.viz import show_table

        with self._ui["out"]:
            self._ui["out"].clear_output(wait=True)
            show_table(
                [r.row() for r in self.history],
                title="your predictions, then the EMULATED time",
                fmt={"your prediction (ms)": "{:.3g}", "emulated (ms)": "{:.3g}"},
            )
            display(
                figure(
                    out.em,
                    title=f"{out.cluster.name}, {out.cluster.inter.name} "
                    "between nodes: EMULATED timeline",
                )
            )

    def show(self) -> Any:
        """Display the controls (a notebook); returns the widget box."""
        import ipywidgets as w
        from IPython.display import display

        ui = dict(
            preset=w.Dropdown(
                description="node", options=list(hardware.CLUSTER_SPECS), value=self.preset
            ),
            nodes=w.Dropdown(description="nodes", options=self.node_counts(), value=1),
            inter=w.Dropdown(description="between", options=[AS_PRESET, *NETWORKS]),
            guess=w.Text(description="predict (ms)", placeholder="emulated ms"),
            go=w.Button(description="Commit and run", button_style="primary"),
            note=w.HTML(),
            out=w.Output(),
        )

        def click(_: Any) -> None:
            if not ui["guess"].value.strip():
                ui["note"].value = "<i>type your prediction first: it is revealed after</i>"
                return
            ui["go"].disabled, ui["note"].value = True, "<i>running on real ranks...</i>"
            try:
                self.run(
                    ui["guess"].value, ui["preset"].value, ui["nodes"].value, ui["inter"].value
                )
                ui["note"].value, ui["guess"].value = "", ""  # the next run: a new prediction
            except ValueError as exc:
                ui["note"].value = f"<b>{exc}</b>"
            finally:
                ui["go"].disabled = False

        ui["go"].on_click(click)
        self._ui = ui
        box = w.VBox(
            [
                w.HBox([ui["preset"], ui["nodes"], ui["inter"]]),
                w.HBox([ui["guess"], ui["go"], ui["note"]]),
                ui["out"],
            ]
        )
        display(box)
        return box
