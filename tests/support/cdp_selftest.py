"""Self-check for cdp.py: drives a local page with every API call and checks cleanup.

Run: python3 tests/support/cdp_selftest.py   -> prints "cdp selftest: ok", exit 0.
"""
import os, shutil, signal, subprocess, sys, tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdp import Browser, CDPError, ElementNotFound, JSError  # noqa: E402

PAGE = """<!doctype html><html><head><style>
  body { margin: 0; } canvas { display: block; background: #eee; }
  #tall { height: 2000px; }
</style></head><body>
<canvas id="c" width="400" height="300"></canvas>
<input id="t" type="text">
<div id="tall"></div>
<script>
  window.rec = [];
  const c = document.getElementById('c');
  for (const type of ['mousedown', 'mousemove', 'mouseup'])
    c.addEventListener(type, e => rec.push({type, x: e.offsetX, y: e.offsetY,
                                            shift: e.shiftKey, buttons: e.buttons}));
  document.addEventListener('keydown', e => rec.push({type: 'keydown', key: e.key,
                                                      code: e.code, keyCode: e.keyCode}));
  console.error('selftest console error', 42);
  setTimeout(() => { const d = document.createElement('div'); d.id = 'ready';
                     document.body.appendChild(d); }, 200);
</script></body></html>"""


def chromium_pids(profile_dir):
    """PIDs whose command line mentions our --user-data-dir (psutil-free /proc scan)."""
    needle, pids = f"--user-data-dir={profile_dir}".encode(), []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if needle in f.read():
                    pids.append(int(d))
        except OSError:
            pass
    return [p for p in pids if p != os.getpid()]


def events(page, clear=True):
    return page.eval("(() => { const r = rec; if (%s) rec = []; return r; })()"
                     % ("true" if clear else "false"))


def main():
    tmp = tempfile.mkdtemp(prefix="cdp-selftest-")
    try:
        run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("cdp selftest: ok")


def run(tmp):
    html, png = os.path.join(tmp, "page.html"), os.path.join(tmp, "shot.png")
    with open(html, "w") as f:
        f.write(PAGE)
    with Browser(width=1000, height=700) as b:
        profile, page = b.profile_dir, b.page
        assert chromium_pids(profile), "chromium should be running inside the with block"
        page.goto("file://" + html, timeout=30)
        assert page.eval("1 + 2") == 3
        assert page.eval("Promise.resolve({a: [1, 'x']})") == {"a": [1, "x"]}
        assert page.eval("[innerWidth, innerHeight]") == [1000, 700]
        assert page.wait_for("document.querySelector('#ready') !== null", timeout=10)
        try:
            page.eval("(() => { throw new Error('boom-123'); })()")
            raise AssertionError("eval of a throwing expression did not raise")
        except JSError as e:
            assert "boom-123" in str(e), e

        r = page.rect("#c")
        assert (r["x"], r["y"], r["width"], r["height"]) == (0, 0, 400, 300), r
        try:
            page.rect("#nope")
            raise AssertionError("rect of a missing element did not raise")
        except ElementNotFound:
            pass

        page.drag(10, 10, 110, 60, steps=10)
        ev = events(page)
        downs = [e for e in ev if e["type"] == "mousedown"]
        ups = [e for e in ev if e["type"] == "mouseup"]
        moves = [e for e in ev if e["type"] == "mousemove" and e["buttons"] == 1]
        assert [(e["x"], e["y"]) for e in downs] == [(10, 10)], ev
        assert [(e["x"], e["y"]) for e in ups] == [(110, 60)], ev
        assert len(moves) >= 10 and (moves[-1]["x"], moves[-1]["y"]) == (110, 60), ev
        assert not any(e["shift"] for e in ev), ev

        page.drag(20, 20, 50, 40, steps=3, modifiers=8)  # 8 = Shift
        ev = events(page)
        assert ev and all(e["shift"] for e in ev), ev

        page.click(200, 150, modifiers=8)
        ev = events(page)
        assert [(e["type"], e["x"], e["y"], e["shift"]) for e in ev
                if e["type"] != "mousemove"] == [("mousedown", 200, 150, True),
                                                ("mouseup", 200, 150, True)], ev

        page.mouse_move(300, 100)
        page.mouse_down(300, 100)
        page.mouse_move(310, 120)
        page.mouse_up(310, 120)
        ev = events(page)
        assert [(e["type"], e["x"], e["y"]) for e in ev][-3:] == [
            ("mousedown", 300, 100), ("mousemove", 310, 120), ("mouseup", 310, 120)], ev

        t = page.rect("#t")
        page.click(t["x"] + 5, t["y"] + t["height"] / 2)
        assert page.eval("document.activeElement.id") == "t"
        page.type_text("abc")
        page.key("d")
        page.key("7")
        page.key("Backspace")
        page.key("Escape")
        page.key("Enter")
        assert page.eval("document.getElementById('t').value") == "abcd"
        keys = [(e["key"], e["code"], e["keyCode"]) for e in events(page) if e["type"] == "keydown"]
        assert keys == [("d", "KeyD", 68), ("7", "Digit7", 55), ("Backspace", "Backspace", 8),
                        ("Escape", "Escape", 27), ("Enter", "Enter", 13)], keys

        page.eval("setTimeout(() => { throw new Error('uncaught-456'); }, 0)")
        page.wait_for("new Promise(r => setTimeout(() => r(true), 50))")
        b.wait(lambda: any("uncaught-456" in e for e in page.errors), 10, "uncaught error")
        assert any("selftest console error 42" in e for e in page.errors), page.errors
        assert not any("boom-123" in e for e in page.errors), page.errors

        page.screenshot(png)
        with open(png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", "screenshot is not a PNG"
        page.screenshot(png, full_page=True)
        with open(png, "rb") as f:
            head = f.read(24)
        assert head[:8] == b"\x89PNG\r\n\x1a\n", "full-page screenshot is not a PNG"
        assert int.from_bytes(head[20:24], "big") > 2000, "full page should be > 2000px tall"
    assert not chromium_pids(profile), f"chromium left behind: {chromium_pids(profile)}"
    assert not os.path.exists(profile), "profile dir not removed"

    # An exception inside the with block still closes the browser.
    try:
        with Browser() as b:
            profile = b.profile_dir
            b.page.goto("file:///definitely/missing.html", timeout=10)
        raise AssertionError("navigation to a missing file did not raise")
    except CDPError as e:
        assert "ERR_FILE_NOT_FOUND" in str(e), e
    assert not chromium_pids(profile) and not os.path.exists(profile)

    # SIGTERM to the test process still kills the browser and removes the profile.
    child = subprocess.Popen([sys.executable, "-B", "-c", (
        "import sys, time; sys.path.insert(0, %r); from cdp import Browser\n"
        "b = Browser(); print(b.profile_dir, flush=True); time.sleep(60)")
        % os.path.dirname(os.path.abspath(__file__))], stdout=subprocess.PIPE, text=True)
    try:
        profile = child.stdout.readline().strip()
        assert profile and chromium_pids(profile), "child browser did not start"
        child.send_signal(signal.SIGTERM)
        assert child.wait(20) == -signal.SIGTERM, child.returncode
    finally:
        child.stdout.close()
        if child.poll() is None:
            child.kill()
            child.wait()
    assert not chromium_pids(profile), f"chromium left behind after SIGTERM: {profile}"
    assert not os.path.exists(profile), "profile dir not removed after SIGTERM"


if __name__ == "__main__":
    main()
