"""Shared figure sizing: what fits a notebook's output area at 1280 x 800 (issue 8).

JupyterLab's output area is about 850 px wide at 1280 px with the file browser open; a wider
figure is cut off on the right (its legend first).
"""
FIGURE_WIDTH = 840
