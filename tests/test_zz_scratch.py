import json
from tests.test_browser import (jupyter, browser, every_explorer_page, wait_for_first_draw,  # noqa
                                wait_until_every_view_is_live, LATENCY_INPUTS, typed_latency)
SNAP = "sel => { const gd = document.querySelector(sel + ' .js-plotly-plot'); return JSON.stringify({data: gd.data, layout: gd.layout}); }"
BENCH = """async ([sel, a, b, variant]) => {
  const gd = document.querySelector(sel + ' .js-plotly-plot');
  const prep = s => { const f = JSON.parse(s);
     if (variant === 'noauto') for (const k of Object.keys(f.layout)) if (/^[xy]axis/.test(k)) f.layout[k].automargin = false;
     if (variant === 'fixedlegend') f.layout.showlegend = false;
     return f; };
  const A = prep(a), B = prep(b), times = [];
  for (let i = 0; i < 8; i++) { const f = i % 2 ? A : B; const g = JSON.parse(JSON.stringify(f));
     const t = performance.now(); await window.Plotly.react(gd, g.data, g.layout); times.push(performance.now() - t); }
  times.sort((x, y) => x - y); return times[4];
}"""
def test_probe(every_explorer_page):
    page = every_explorer_page
    wait_until_every_view_is_live(page)
    for css, (label, first, second) in LATENCY_INPUTS.items():
        ex = page.locator(css).first
        wait_for_first_draw(page, ex, css)
        box = ex.locator(f".widget-text:has(label:text-is('{label}')) input")
        typed_latency(page, ex, css, box, first); a = page.evaluate(SNAP, css)
        typed_latency(page, ex, css, box, second); b = page.evaluate(SNAP, css)
        res = {v: round(page.evaluate(BENCH, [css, a, b, v]), 1) for v in ("plain", "noauto", "fixedlegend", "plain")}
        print(css, res, len(a))
