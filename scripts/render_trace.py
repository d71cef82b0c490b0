#!/usr/bin/env python3
"""Render flowlane Chrome-trace JSON files as a timeline picture (python3 stdlib only).

    scripts/render_trace.py OUT.svg TRACE.json [TRACE.json ...]
    scripts/render_trace.py --png OUT.png TRACE.json [...]   # SVG rendered by headless Chromium

One panel per trace: a row per track (lane / stream kind), a box per instruction slice
(named, forward passes blue, backward passes orange, others grey), flow arrows for the
cross-stream dependencies. The PNG form writes an HTML page next to the output and
screenshots it with `chromium --headless --no-sandbox --disable-gpu --screenshot`
(Debian: apt-get install chromium).
"""
import html
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROW_H = 26
LABEL_W = 130
PLOT_W = 1100
PANEL_GAP = 40


def load(path):
    with open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    names, slices, flows = {}, [], {}
    for e in events:
        ph = e.get("ph")
        if ph == "M" and e.get("name") == "thread_name":
            names[e["tid"]] = e["args"]["name"]
        elif ph == "X" and e.get("cat") == "instr":
            slices.append(e)
        elif ph in ("s", "f"):
            flows.setdefault(e["id"], {})[ph] = e
    tracks = sorted({s["tid"] for s in slices})
    return names, slices, flows, tracks


def color(name):
    if name.startswith("F"):
        return "#4e79a7"
    if name.startswith("B"):
        return "#f28e2b"
    return "#9c9c9c"


def panel(path, y0):
    names, slices, flows, tracks = load(path)
    if not slices:
        return "", 0
    t0 = min(s["ts"] for s in slices)
    t1 = max(s["ts"] + s["dur"] for s in slices)
    scale = PLOT_W / max(t1 - t0, 1e-9)
    row = {tid: k for k, tid in enumerate(tracks)}
    out = []
    title = os.path.basename(path)
    out.append(f'<text x="8" y="{y0 + 18}" font-size="15" font-weight="bold">{html.escape(title)} '
               f'&#8212; {len(slices)} instructions, {(t1 - t0) / 1000:.1f} ms</text>')
    top = y0 + 30
    for tid, k in row.items():
        y = top + k * ROW_H
        out.append(f'<rect x="{LABEL_W}" y="{y}" width="{PLOT_W}" height="{ROW_H - 4}" fill="#f4f4f4"/>')
        out.append(f'<text x="8" y="{y + 16}" font-size="13">{html.escape(names.get(tid, str(tid)))}</text>')
    for s in slices:
        x = LABEL_W + (s["ts"] - t0) * scale
        w = max(s["dur"] * scale, 1.0)
        y = top + row[s["tid"]] * ROW_H
        out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{ROW_H - 4}" fill="{color(s["name"])}" '
                   f'stroke="white" stroke-width="0.5"><title>{html.escape(s["name"])}</title></rect>')
        if w > 22:
            out.append(f'<text x="{x + w / 2:.1f}" y="{y + 15}" font-size="10" fill="white" '
                       f'text-anchor="middle">{html.escape(s["name"])}</text>')
    for f in flows.values():
        if "s" in f and "f" in f and f["s"]["tid"] in row and f["f"]["tid"] in row:
            x1 = LABEL_W + (f["s"]["ts"] - t0) * scale
            y1 = top + row[f["s"]["tid"]] * ROW_H + ROW_H / 2
            x2 = LABEL_W + (f["f"]["ts"] - t0) * scale
            y2 = top + row[f["f"]["tid"]] * ROW_H + ROW_H / 2
            out.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#333" '
                       f'stroke-width="0.6" opacity="0.55" marker-end="url(#arrow)"/>')
    # time axis
    axis_y = top + len(tracks) * ROW_H + 4
    step = 10 ** len(str(int((t1 - t0) / 1000 / 5))) / 10 * 1000 if t1 > t0 else 1000
    t = 0.0
    while t <= (t1 - t0):
        x = LABEL_W + t * scale
        out.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 5}" stroke="#555"/>')
        out.append(f'<text x="{x:.1f}" y="{axis_y + 17}" font-size="10" text-anchor="middle">{t / 1000:g} ms</text>')
        t += step
    return "\n".join(out), 30 + len(tracks) * ROW_H + 24


def svg(traces):
    parts, y = [], 0
    for path in traces:
        body, h = panel(path, y)
        parts.append(body)
        y += h + PANEL_GAP
    width = LABEL_W + PLOT_W + 20
    legend = (f'<rect x="{LABEL_W}" y="{y - 28}" width="12" height="12" fill="#4e79a7"/>'
              f'<text x="{LABEL_W + 16}" y="{y - 18}" font-size="12">forward</text>'
              f'<rect x="{LABEL_W + 90}" y="{y - 28}" width="12" height="12" fill="#f28e2b"/>'
              f'<text x="{LABEL_W + 106}" y="{y - 18}" font-size="12">backward</text>'
              f'<text x="{LABEL_W + 190}" y="{y - 18}" font-size="12">lines: inferred cross-lane dependencies '
              f'(flow arrows)</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" font-family="DejaVu Sans, sans-serif">'
            '<defs><marker id="arrow" markerWidth="6" markerHeight="6" refX="5" refY="3" orient="auto">'
            '<path d="M0,0 L6,3 L0,6 z" fill="#333"/></marker></defs>'
            f'<rect width="100%" height="100%" fill="white"/>{"".join(parts)}{legend}</svg>'), width, y


def main(argv):
    png = False
    if argv and argv[0] == "--png":
        png = True
        argv = argv[1:]
    if len(argv) < 2:
        print(__doc__)
        return 2
    out, traces = argv[0], argv[1:]
    doc, width, height = svg(traces)
    if not png:
        with open(out, "w") as f:
            f.write(doc)
        return 0
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        print("render_trace: no chromium found (apt-get install chromium); writing SVG instead", file=sys.stderr)
        with open(os.path.splitext(out)[0] + ".svg", "w") as f:
            f.write(doc)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        page = os.path.join(tmp, "trace.html")
        with open(page, "w") as f:
            f.write(f'<!doctype html><html><body style="margin:0">{doc}</body></html>')
        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--window-size={width},{height}", f"--screenshot={os.path.abspath(out)}", "file://" + page]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
