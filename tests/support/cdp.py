"""Tiny Chrome DevTools Protocol (CDP) driver for headless Chromium, stdlib only.

Why pipe mode: with --remote-debugging-pipe Chromium reads CDP commands on its fd 3
and writes replies/events on its fd 4: no websocket client, no TCP port to pick or
discover, nothing other processes can connect to, and Chromium quits when the pipe
closes (so even a SIGKILLed test leaves no browser behind; only the temp dir).
Why NUL framing: in pipe mode each JSON message ends with one b"\\0" (JSON text never
contains a raw NUL byte), which is how the byte stream is split into messages.

    with Browser(width=1400, height=900) as b:
        b.page.goto("file:///tmp/x.html"); print(b.page.eval("1 + 2"))
"""
import atexit, base64, collections, contextlib, fcntl, itertools, json, os, shutil, signal
import subprocess, tempfile, threading, time


class CDPError(RuntimeError):
    """A DevTools command failed, or the browser could not start / went away."""
class CDPTimeout(CDPError, TimeoutError):
    """A wait (command reply, page load, wait_for condition) ran out of time."""
class JSError(CDPError):
    """JavaScript evaluated by Page.eval threw; the message holds the JS error text."""
class ElementNotFound(CDPError, LookupError):
    """Page.rect found no element for the selector."""


_LIVE = set()  # browsers not closed yet: cleaned up on SIGTERM and at interpreter exit
_SIGTERM = {"installed": False, "prev": None}
atexit.register(lambda: [b.close() for b in list(_LIVE)])


def _on_sigterm(signum, frame):
    """Kill our browsers without protocol traffic (we may have interrupted a send), chain on."""
    for b in list(_LIVE):
        b._cleanup(graceful=False)
    prev = _SIGTERM["prev"]
    if callable(prev):
        prev(signum, frame)
    elif prev != signal.SIG_IGN:  # default action: die by SIGTERM as we would have
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _group_alive(pgid):
    """True while a non-zombie process is in process group `pgid` (psutil-free /proc scan)."""
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                state, _ppid, pgrp = f.read().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue
        if pgrp == str(pgid) and state != "Z":
            return True
    return False


class Browser:
    """Headless Chromium driven over --remote-debugging-pipe; use it as a context manager.
    `page`: first page target (Page/Runtime/Log enabled, viewport exactly width x height).
    `version`: product string; `profile_dir`: the fresh --user-data-dir (removed on close)."""

    def __init__(self, width=1280, height=800, executable=None, timeout=30, extra_args=()):
        exe = executable or shutil.which("chromium") or shutil.which("chromium-browser")
        if not exe:
            raise CDPError("chromium not found on PATH "
                           "(apt-get install -y --no-install-recommends chromium)")
        self._tmp = tempfile.mkdtemp(prefix="cdp-")
        self.profile_dir, self._log = (os.path.join(self._tmp, n) for n in ("profile", "log"))
        self._cond = threading.Condition()  # guards replies, page events and _dead
        self._wlock = threading.Lock()      # one writer at a time on the command pipe
        self._ids, self._replies, self._sessions = itertools.count(1), {}, {}
        self.proc, self._reader, self._dead, self._fds = None, None, True, []
        if not _SIGTERM["installed"] and threading.current_thread() is threading.main_thread():
            _SIGTERM.update(installed=True, prev=signal.getsignal(signal.SIGTERM))
            signal.signal(signal.SIGTERM, _on_sigterm)
        _LIVE.add(self)
        try:  # --headless=new: Chromium 112+ (132+ has only this mode); else plain --headless
            for self.headless_flag in ("--headless=new", "--headless"):
                try:
                    self._launch(exe, width, height, list(extra_args), timeout)
                    break
                except CDPError:
                    self._stop_process(graceful=False)
                    if self.headless_flag == "--headless":
                        raise
            self.page = self._attach_first_page(width, height, timeout)
        except BaseException:
            self.close()
            raise

    def _launch(self, exe, width, height, extra, timeout):
        cmd_r, cmd_w = os.pipe()  # we write commands -> Chromium reads them on its fd 3
        msg_r, msg_w = os.pipe()  # Chromium writes on its fd 4 -> we read
        # Park the child's ends at fds >= 10 so the dup2()s below cannot clobber each other.
        c3, c4 = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (cmd_r, msg_w))
        os.close(cmd_r), os.close(msg_w)
        self._fds = [cmd_w, msg_r]

        def child_fds():  # runs in the child between fork and exec; dup2 clears CLOEXEC
            os.dup2(c3, 3), os.dup2(c4, 4)

        args = [exe, self.headless_flag, "--no-sandbox", "--disable-gpu",
                "--remote-debugging-pipe", f"--user-data-dir={self.profile_dir}",
                "--no-first-run", "--no-default-browser-check", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", *extra, "about:blank"]
        try:
            with open(self._log, "ab") as log:
                # close_fds=False: Popen closes unlisted fds *after* preexec_fn, and pass_fds
                # cannot renumber fds.  Everything else we hold is non-inheritable (PEP 446).
                # New session: Chromium and its helpers form one process group to kill.
                self.proc = subprocess.Popen(
                    args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=False,
                    preexec_fn=child_fds, start_new_session=True)
        finally:
            os.close(c3), os.close(c4)
        self._dead = False
        self._reader = threading.Thread(target=self._read_loop, args=(msg_r,), daemon=True)
        self._reader.start()
        self.version = self.send("Browser.getVersion", timeout=timeout)["product"]

    def _read_loop(self, fd):
        """Reader thread: split fd 4 at NULs; replies go to send(), events to their Page
        right away, so events arriving while someone waits for a reply are never lost."""
        parts = []
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            parts.append(chunk)
            if b"\0" in chunk:  # join only when a message is complete (big screenshots)
                *msgs, rest = b"".join(parts).split(b"\0")
                parts = [rest]
                for msg in map(json.loads, msgs):
                    if "id" in msg:
                        with self._cond:
                            self._replies[msg["id"]] = msg
                            self._cond.notify_all()
                    elif msg.get("sessionId") in self._sessions:
                        self._sessions[msg["sessionId"]]._on_event(msg["method"],
                                                                   msg.get("params", {}))
        with self._cond:
            self._dead = True
            self._cond.notify_all()

    def _log_tail(self):
        with contextlib.suppress(OSError), open(self._log, errors="replace") as f:
            return "\n--- chromium log tail ---\n" + "".join(f.readlines()[-15:])
        return ""

    def wait(self, predicate, timeout, what):
        """Block until predicate() is true (re-checked after every incoming message)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                if self._dead:
                    raise CDPError(f"browser exited while waiting for {what}" + self._log_tail())
                if deadline <= time.monotonic():
                    raise CDPTimeout(f"timed out after {timeout:g}s waiting for {what}")
                self._cond.wait(deadline - time.monotonic())

    def send(self, method, params=None, session=None, timeout=30):
        """Send one CDP command (into `session` if given) and return its result dict."""
        mid = next(self._ids)
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = memoryview(json.dumps(msg).encode() + b"\0")
        with self._wlock:
            if self._dead:
                raise CDPError(f"cannot send {method}: browser is not running")
            try:
                while data:
                    data = data[os.write(self._fds[0], data):]
            except OSError as e:
                raise CDPError(f"cannot send {method}: {e}" + self._log_tail()) from None
        self.wait(lambda: mid in self._replies, timeout, f"reply to {method}")
        with self._cond:
            reply = self._replies.pop(mid)
        if "error" in reply:
            err = reply["error"]
            detail = f"{err.get('message')} {err.get('data', '')}".rstrip()
            raise CDPError(f"{method} failed: {detail}")
        return reply.get("result", {})

    def _attach_first_page(self, width, height, timeout):
        deadline = time.monotonic() + timeout
        while True:
            pages = [t for t in self.send("Target.getTargets")["targetInfos"]
                     if t["type"] == "page"]
            if pages or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if not pages:
            raise CDPTimeout(f"no page target appeared within {timeout}s")
        tid = pages[0]["targetId"]
        sid = self.send("Target.attachToTarget", {"targetId": tid, "flatten": True})["sessionId"]
        page = self._sessions[sid] = Page(self, sid, tid)
        for domain in ("Page", "Runtime", "Log"):
            page.send(domain + ".enable")
        # New headless treats --window-size as the *outer* window (the viewport came out
        # 143px shorter), so pin the viewport itself to width x height CSS pixels.
        page.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        return page

    def _stop_process(self, graceful):
        """Stop Chromium and every helper in its process group; close our pipe ends."""
        p = self.proc
        if p is not None:
            if graceful and p.poll() is None and not self._dead:
                with contextlib.suppress(CDPError):
                    self.send("Browser.close", timeout=5)
            alive = lambda: p.poll() is None or _group_alive(p.pid)  # pgid == pid (setsid)
            for sig, secs in ([(0, 5)] if graceful else []) + [(signal.SIGTERM, 3),
                                                               (signal.SIGKILL, 5)]:
                if not alive():
                    break
                with contextlib.suppress(OSError):
                    os.killpg(p.pid, sig)  # sig 0 = only wait for the graceful exit
                end = time.monotonic() + secs
                while alive() and time.monotonic() < end:
                    time.sleep(0.02)
        if self._reader is not None:
            self._reader.join(5)  # sees EOF on fd 4 once Chromium is gone
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.proc, self._reader, self._fds, self._dead = None, None, [], True

    def _cleanup(self, graceful):
        self._stop_process(graceful)
        shutil.rmtree(self._tmp, ignore_errors=True)
        _LIVE.discard(self)

    def close(self):
        """Browser.close, then SIGTERM/SIGKILL any leftovers; remove the temp profile.
        Idempotent; also run by `with`, at interpreter exit and on SIGTERM."""
        self._cleanup(graceful=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# Named keys: windowsVirtualKeyCode (their DOM `code` equals the key name); text if any.
_KEYS = {"Enter": 13, "Escape": 27, "Tab": 9, "Backspace": 8, "Delete": 46, "Home": 36,
         "End": 35, "PageUp": 33, "PageDown": 34, "ArrowLeft": 37, "ArrowUp": 38,
         "ArrowRight": 39, "ArrowDown": 40, "Insert": 45}
_KEY_TEXT = {"Enter": "\r"}


class Page:
    """One attached page target.  `errors`: uncaught exceptions and console.error / Log
    errors seen so far (strings); `events`: the last 2000 (method, params) CDP events."""

    def __init__(self, browser, session_id, target_id):
        self.browser, self.session, self.target_id = browser, session_id, target_id
        self.errors, self.events = [], collections.deque(maxlen=2000)
        self._loads, self._buttons = 0, 0

    def send(self, method, params=None, timeout=30):
        """Send a CDP command within this page's session; returns the result dict."""
        return self.browser.send(method, params, self.session, timeout)

    def _on_event(self, method, p):  # runs on the reader thread
        err, entry = None, p.get("entry", {})
        if method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            err = (d.get("exception") or {}).get("description") or d.get("text", "")
        elif method == "Runtime.consoleAPICalled" and p.get("type") == "error":
            err = "console.error: " + " ".join(
                str(a["value"]) if "value" in a else a.get("description", a.get("type", ""))
                for a in p.get("args", []))
        elif method == "Log.entryAdded" and entry.get("level") == "error":
            err = f"log: {entry.get('text', '')} {entry.get('url', '')}".rstrip()
        with self.browser._cond:
            self.events.append((method, p))
            if err is not None:
                self.errors.append(err)
            if method == "Page.loadEventFired":
                self._loads += 1
            self.browser._cond.notify_all()

    def goto(self, url, timeout=30):
        """Navigate to `url`, wait for Page.loadEventFired; CDPError if navigation fails."""
        deadline = time.monotonic() + timeout
        with self.browser._cond:
            mark = self._loads  # loads are counted, so a very fast load is not missed
        r = self.send("Page.navigate", {"url": url}, timeout)
        if r.get("errorText"):
            raise CDPError(f"navigation to {url} failed: {r['errorText']}")
        self.browser.wait(lambda: self._loads > mark, max(0, deadline - time.monotonic()),
                          f"load event of {url}")

    def eval(self, expression, timeout=30):
        """Evaluate JS (promises awaited), return its JSON value; JSError if it throws."""
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True, "userGesture": True}, timeout)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            text = (d.get("exception") or {}).get("description") or d.get("text", "")
            raise JSError(f"JS error evaluating {expression!r}: {text}")
        return r.get("result", {}).get("value")

    def wait_for(self, expression, timeout=30, interval=0.05):
        """Poll `expression` until truthy and return its value (JS errors count as falsy)."""
        deadline, last = time.monotonic() + timeout, None
        while True:
            try:
                value = self.eval(expression, timeout=max(1, deadline - time.monotonic()))
                if value:
                    return value
            except JSError as e:
                last = e
            if time.monotonic() >= deadline:
                raise CDPTimeout(f"timed out after {timeout:g}s waiting for {expression!r}"
                                 + (f" (last error: {last})" if last else ""))
            time.sleep(interval)

    def _mouse(self, kind, x, y, modifiers, button="left", clicks=1):
        self.send("Input.dispatchMouseEvent", {
            "type": kind, "x": x, "y": y, "button": button, "buttons": self._buttons,
            "clickCount": clicks, "modifiers": modifiers})

    def mouse_move(self, x, y, modifiers=0):
        """Move to viewport CSS pixel (x, y); reports the left button held after mouse_down."""
        self._mouse("mouseMoved", x, y, modifiers, "left" if self._buttons else "none", 0)

    def mouse_down(self, x, y, modifiers=0):
        """Press the left button at (x, y).  modifiers: CDP bitmask (1 Alt, 2 Ctrl, 4 Meta,
        8 Shift), as for all mouse methods."""
        self._buttons = 1
        self._mouse("mousePressed", x, y, modifiers)

    def mouse_up(self, x, y, modifiers=0):
        """Release the left button at (x, y)."""
        self._buttons = 0
        self._mouse("mouseReleased", x, y, modifiers)

    def click(self, x, y, modifiers=0):
        """Move to (x, y), press and release the left button."""
        self.mouse_move(x, y, modifiers)
        self.mouse_down(x, y, modifiers)
        self.mouse_up(x, y, modifiers)

    def drag(self, x0, y0, x1, y1, steps=10, modifiers=0):
        """Press at (x0, y0), move in `steps` equal steps to (x1, y1), release there."""
        self.mouse_move(x0, y0, modifiers)
        self.mouse_down(x0, y0, modifiers)
        steps = max(1, steps)
        for i in range(1, steps + 1):
            self.mouse_move(x0 + (x1 - x0) * i / steps, y0 + (y1 - y0) * i / steps, modifiers)
        self.mouse_up(x1, y1, modifiers)

    def key(self, key, modifiers=0):
        """Press and release one key: a DOM key name ("Enter", "Escape", "ArrowUp", "F2"...)
        or one character ("a", "7", " ", "/"), via keyDown/keyUp with key/code/text."""
        if len(key) == 1:
            up, text = key.upper(), key
            code = ("Space" if key == " " else f"Key{up}" if up.isascii() and up.isalpha()
                    else f"Digit{key}" if key.isascii() and key.isdigit() else "")
            vk = ord(up) if up.isascii() and (up.isalnum() or up == " ") else 0
        else:
            code, vk, text = key, _KEYS.get(key, 0), _KEY_TEXT.get(key, "")
        base = {"key": key, "code": code, "windowsVirtualKeyCode": vk, "modifiers": modifiers}
        self.send("Input.dispatchKeyEvent", dict(base, type="keyDown", text=text,
                                                 unmodifiedText=text)
                  if text else dict(base, type="rawKeyDown"))  # no text: no keypress/input
        self.send("Input.dispatchKeyEvent", dict(base, type="keyUp"))

    def type_text(self, text):
        """Insert `text` into the focused element (Input.insertText, like an IME commit)."""
        self.send("Input.insertText", {"text": text})

    def rect(self, selector):
        """Bounding client rect {x, y, width, height} of the first match, in viewport CSS
        pixels; raises ElementNotFound if nothing matches."""
        r = self.eval("(() => { const e = document.querySelector(%s); if (!e) return null;"
                      " const r = e.getBoundingClientRect();"
                      " return {x: r.x, y: r.y, width: r.width, height: r.height}; })()"
                      % json.dumps(selector))
        if r is None:
            raise ElementNotFound(f"no element matches {selector!r}")
        return r

    def screenshot(self, path, full_page=False, timeout=30):
        """Write a PNG of the viewport (or of the whole page if full_page) to `path`."""
        params = {"format": "png"}
        if full_page:
            m = self.send("Page.getLayoutMetrics")
            size = m.get("cssContentSize") or m["contentSize"]
            params.update(captureBeyondViewport=True, clip={
                "x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        data = base64.b64decode(self.send("Page.captureScreenshot", params, timeout)["data"])
        with open(path, "wb") as f:
            f.write(data)
        return path
