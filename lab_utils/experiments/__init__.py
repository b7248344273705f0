"""What each lab launches: the rank workers, their set-up and measurements (one module per lab).

A technique (``lab_utils.parallel``) holds the idea and its communication; an experiment builds a
model, runs the technique (and its naive and PyTorch counterparts), measures it with
``lab_utils.measure`` and returns small dataclasses the notebook prints and plots.
"""
