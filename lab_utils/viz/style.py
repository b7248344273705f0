"""Shared figure sizing and placement: what fits a notebook's output area at 1280 x 800 and
1920 x 1080 without text over text (issues 8, 37).

JupyterLab's output area is about 850 px wide at 1280 px with the file browser open; a wider
figure is cut off on the right (its legend first). A legend ABOVE the plot, where the title is,
covered the title as soon as its entries wrapped to a second row; below the plot it covered the
axis titles. Beside the plot (plotly reserves the margin it needs) it covers neither.
"""

FIGURE_WIDTH = 840
LEGEND_BESIDE = dict(orientation="v", x=1.02, xanchor="left", y=1.0, yanchor="top")


def titled(fig, title: str, x_title: str, y_title: str, width: int, height: int, **layout):
    """A figure's title, axis titles and size in one call, then checked (``axis_check``): what
    the labs' figure builders (experiments' views) set on every figure."""
    from lab_utils.viz.axis_check import checked

    fig.update_layout(
        title=title, xaxis_title=x_title, yaxis_title=y_title, width=width, height=height, **layout
    )
    return checked(fig)
