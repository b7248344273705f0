"""Tooling around the course: the pre-flight check (doctor), notebook housekeeping (nbtools,
nbaudit, giveaways, answer_leaks), the static site, the size budgets' measure (size), and the
JupyterLab the browser tests drive (jupyter_server) with the server extension ``make lab`` enables
(jupyter_nodelay)."""
