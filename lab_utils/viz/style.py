"""Shared figure sizing and placement: what fits a notebook's output area at 1280 x 800 and
1920 x 1080 without text over text (issues 8, 37).

JupyterLab's output area is about 850 px wide at 1280 px with the file browser open; a wider
figure is cut off on the right (its legend first). A legend ABOVE the plot, where the title is,
covered the title as soon as its entries wrapped to a second row; below the plot it covered the
axis titles. Beside the plot (plotly reserves the margin it needs) it covers neither.
"""

FIGURE_WIDTH = 840
LEGEND_BESIDE = dict(orientation="v", x=1.02, xanchor="left", y=1.0, yanchor="top")
