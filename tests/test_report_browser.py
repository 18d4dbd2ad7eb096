"""report.html in a real browser: every image loads and nothing overflows the page.

Renders the report of two quick experiments in headless Chromium (Debian's ``chromium`` package;
``apt-get install chromium``) with a small script that measures the page after load, and reads the
result back from the dumped DOM. Skipped, saying why, where no Chromium is installed.
"""

import json
import re
import shutil
import subprocess

import pytest

from embgeo.lab.report import write_report
from embgeo.lab.runner import run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

CHECK = """<script>
window.addEventListener('load', () => {
  const vw = document.documentElement.clientWidth;
  const images = [...document.images];
  const broken = images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt);
  const over = [...document.querySelectorAll('main *')]
    .filter(e => e.getBoundingClientRect().right > vw + 1 && !e.closest('pre, details'))
    .map(e => e.tagName + (e.id ? '#' + e.id : ''));
  const tiny = images.filter(i => i.getBoundingClientRect().width < 0.6 * Math.min(vw, 1400) - 40).map(i => i.alt);
  const out = document.createElement('pre');
  out.id = 'embgeo-check';
  out.textContent = JSON.stringify({vw, images: images.length, broken, over: over.slice(0, 5), tiny});
  document.body.appendChild(out);
});
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine (Debian: apt-get install chromium)")
@pytest.mark.parametrize("width", [1280, 800])
def test_report_renders_in_chromium(tmp_path, width):
    records = [run(name, out=tmp_path / name) for name in ("ntp-examples", "ntp-overparam")]
    page = write_report(records, tmp_path / "report.html")
    checked = tmp_path / "checked.html"
    checked.write_text(page.read_text(encoding="utf-8").replace("</body>", CHECK + "</body>"), encoding="utf-8")
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},900",
                           "--virtual-time-budget=10000", "--dump-dom", checked.as_uri()],
                          capture_output=True, text=True, timeout=180)
    found = re.search(r'<pre id="embgeo-check">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stderr[-2000:]
    result = json.loads(found.group(1).replace("&quot;", '"'))
    assert result["images"] == sum(len(r.figures) for r in records)
    assert result["broken"] == [] and result["over"] == [] and result["tiny"] == [], result
