"""report.html in a real browser: every image loads, nothing overflows the page, and the page is readable.

Renders the report of two quick experiments in headless Chromium (Debian's ``chromium`` package;
``apt-get install chromium``) with a small script that measures the page after load, and reads the
result back from the dumped DOM. Skipped, saying why, where no Chromium is installed.

Readability, as a browser can measure it:

* no number or word in a table cell is broken across lines (each number, and each word between spaces and
  the characters a line may break after — hyphens, dashes, slashes —, measured as a DOM range, lies on one
  line): "2. 77 1" or "ho ld s" is what a squeezed column looks like;
* at 1280 px, the short cells of the value columns (paper, theory, measured, tolerance, verdict; a single
  value, a mean ± spread, a short bound) are one line each;
* figures are shown at their own aspect: never taller than the report's cap (so a single panel does not
  stretch to a page), never wider than the page, never enlarged beyond their pixels, and at 1280 px not
  shrunk below 0.6 of them (the text inside an image cannot be measured; this bounds how small it gets).
"""

import json
import re
import shutil
import subprocess

import pytest

from embgeo.lab.report import IMAGE_MAX_HEIGHT_PX, write_report
from embgeo.lab.runner import run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

#: Value cells up to this many characters must fit one line (longer ones, e.g. a list of ten numbers or a
#: tolerance in words, may wrap between their items, never inside one).
SHORT_CELL = 32

CHECK = """<script>
window.addEventListener('load', () => {
  const vw = document.documentElement.clientWidth;
  const images = [...document.images];
  const broken = images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt);
  const over = [...document.querySelectorAll('main *')]
    .filter(e => e.getBoundingClientRect().right > vw + 1 && !e.closest('pre, details'))
    .map(e => e.tagName + (e.id ? '#' + e.id : ''));
  // The lines a piece of text occupies: the distinct tops of its range's non-empty boxes.
  const lines = range => new Set([...range.getClientRects()].filter(r => r.width > 0)
    .map(r => Math.round(r.top))).size;
  const split = [], multiline = [];
  for (const td of document.querySelectorAll('main td')) {
    const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      // Numbers whole (with a sign and an exponent: "2.773e-08" must not break after "e-"), and words between
      // spaces and the characters after which a line may break (hyphens, dashes, slashes).
      const numbers = /[-+\u2212±]?\\d+(?:[.,]\\d+)*(?:[eE][-+\u2212]?\\d+)?/g;
      const words = /[^\\s\\-\u2010-\u2015\u2212\\/]+/g;
      for (const re of [numbers, words]) {
        for (const m of node.data.matchAll(re)) {
          const range = document.createRange();
          range.setStart(node, m.index);
          range.setEnd(node, m.index + m[0].length);
          if (lines(range) > 1) split.push(m[0]);
        }
      }
    }
  }
  const VALUE_HEADS = ['paper', 'theory', 'measured', 'tolerance', 'verdict'];
  for (const table of document.querySelectorAll('main table')) {
    const heads = [...table.querySelectorAll('th')].map(th => th.textContent.trim());
    const columns = heads.map((h, i) => VALUE_HEADS.includes(h) ? i : -1).filter(i => i >= 0);
    for (const row of table.querySelectorAll('tr')) {
      for (const i of columns) {
        const td = row.cells[i];
        if (!td || td.tagName !== 'TD') continue;
        const text = td.textContent.trim();
        const range = document.createRange();
        range.selectNodeContents(td);
        if (text && text.length <= SHORT_CELL && lines(range) > 1) multiline.push(text);
      }
    }
  }
  const figures = images.map(i => {
    const r = i.getBoundingClientRect();
    return {alt: i.alt, width: r.width, height: r.height, natural: [i.naturalWidth, i.naturalHeight],
            room: i.parentElement.getBoundingClientRect().width};
  });
  const out = document.createElement('pre');
  out.id = 'embgeo-check';
  out.textContent = JSON.stringify({vw, images: images.length, broken, over: over.slice(0, 5), split, multiline,
                                    figures});
  document.body.appendChild(out);
});
</script>"""


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """Two quick experiments (a second each): a multi-panel and a single-panel figure, long notes."""
    out = tmp_path_factory.mktemp("runs")
    return [run(name, out=out / name) for name in ("ntp-examples", "ntp-overparam")]


def _measure(page, width: int) -> dict:
    """The check script's findings on ``page`` rendered at ``width`` CSS pixels."""
    checked = page.with_name("checked.html")
    script = CHECK.replace("SHORT_CELL", str(SHORT_CELL))
    checked.write_text(page.read_text(encoding="utf-8").replace("</body>", script + "</body>"), encoding="utf-8")
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},900",
                           "--virtual-time-budget=10000", "--dump-dom", checked.as_uri()],
                          capture_output=True, text=True, timeout=180)
    found = re.search(r'<pre id="embgeo-check">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stderr[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">"))


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine (Debian: apt-get install chromium)")
@pytest.mark.parametrize("width", [1280, 800])
def test_report_renders_readably_in_chromium(tmp_path, records, width):
    result = _measure(write_report(records, tmp_path / "report.html"), width)
    assert result["images"] == sum(len(r.figures) for r in records)
    assert result["broken"] == [] and result["over"] == [], result
    assert result["split"] == [], f"words or numbers broken across lines: {result['split']}"
    if width == 1280:  # a narrower page may wrap a short value between its words, never inside a number
        assert result["multiline"] == [], f"short value cells on more than one line: {result['multiline']}"
    for fig in result["figures"]:
        assert fig["height"] <= IMAGE_MAX_HEIGHT_PX + 2, fig  # + the border
        assert fig["width"] <= fig["room"] + 0.5, fig
        assert fig["width"] <= fig["natural"][0] + 2, fig  # never enlarged: a single panel keeps its size
        if width == 1280:
            assert fig["width"] >= 0.6 * fig["natural"][0], fig
