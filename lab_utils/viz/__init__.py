"""Figures and widgets: thin views over ``lab_utils.calc`` (ipywidgets + plotly).

Figures (static, return ``plotly.graph_objects.Figure``):
    gantt_figure              per-rank timeline, ideal (calc.schedule) or measured   (lab 07)
    collective_state_figure   what every rank holds before / after a collective     (lab 03)
    memory_timeline_figure    memory of training steps, event by event (measured)   (lab 01)
    layout_matrix.layout_matrix_figure  the layout-equivalence matrix's verdicts      (lab 14)
    scaling_plots.strong_scaling_figure  step time vs N with Amdahl fits            (lab 10)
    scaling_plots.matmul_rate_figure    one core's matmul FLOP/s by size            (lab 10)
    resume_plots.resume_figure          losses around a resume from a checkpoint    (lab 11)

Explorers (``ipywidgets.VBox`` subclasses; display them, or drive them with ``.set(...)``):
    memory_explorer()      MemoryExplorer       memory per GPU, DDP vs ZeRO-1/2/3   (labs 01, 05,
    08)
    bubble_explorer()      BubbleExplorer       pipeline schedule + bubble          (lab 07)
    collective_explorer()  CollectiveExplorer   bytes, alpha-beta time, busbw       (lab 03)
    amdahl_explorer()      AmdahlExplorer       Amdahl / Gustafson speedup          (lab 10)
    planner_widget()       PlannerWidget        ranked DP x TP x PP layouts         (labs 08, 12)
    training_cost_explorer()  TrainingCostExplorer  days, GPU-hours, cost to train  (labs 10, 12)

Checks: ``checked(fig)`` refuses a figure whose axis would run far beyond its data (a log axis
reads an annotation's y as log10: 80 means 10^80); every builder and explorer here calls it.

Tables: ``show_table(rows, title=...)`` prints every lab's results the same way (HTML/text).

Each explorer has pure ``validate(values)``, ``figure_spec(state)`` and ``summary_html(state)``
functions (testable without a browser); bad input shows ``.error_message`` in the widget.
Number boxes hand their text to Python, where the calculators' checks (``calc._check``) parse
and judge it: "2.5" in a whole-number box shows the error box instead of becoming 25.
"""

from lab_utils.viz._base import Explorer, apply_spec, to_figure
from lab_utils.viz.amdahl_explorer import AmdahlExplorer, amdahl_explorer
from lab_utils.viz.axis_check import axis_problems, checked
from lab_utils.viz.bubble_explorer import BubbleExplorer, bubble_explorer
from lab_utils.viz.collective_explorer import CollectiveExplorer, collective_explorer
from lab_utils.viz.gantt import (
    KIND_COLORS,
    collective_state_figure,
    gantt_figure,
    gantt_spec,
    kind_of,
)
from lab_utils.viz.memory_explorer import MemoryExplorer, memory_explorer
from lab_utils.viz.memory_timeline import memory_timeline_figure
from lab_utils.viz.planner_widget import PlannerWidget, planner_widget
from lab_utils.viz.table import Table, show_table
from lab_utils.viz.training_cost import TrainingCostExplorer, training_cost_explorer

__all__ = [
    "gantt_figure",
    "gantt_spec",
    "collective_state_figure",
    "KIND_COLORS",
    "kind_of",
    "Explorer",
    "apply_spec",
    "to_figure",
    "axis_problems",
    "checked",
    "MemoryExplorer",
    "memory_explorer",
    "memory_timeline_figure",
    "BubbleExplorer",
    "bubble_explorer",
    "CollectiveExplorer",
    "collective_explorer",
    "AmdahlExplorer",
    "amdahl_explorer",
    "PlannerWidget",
    "planner_widget",
    "Table",
    "show_table",
    "TrainingCostExplorer",
    "training_cost_explorer",
]
