#!/usr/bin/env python3
"""A stand-in OTLP/HTTP backend for kprof push's transport tests, on
loopback: prints its port on stdout, then answers by the first path
segment (the scenario), and exits when its standard input closes.

Every export is checked first (Content-Type, User-Agent, gzip when
Content-Encoding says so, the body's bytes as tests/unit/test_push_transport.c
makes them); a failed check is a 400 saying why. Scenarios:
  ok            200, empty reply
  retry-NAME    503 with Retry-After: 1 the first time, then 200
  unavailable   503 always, no Retry-After
  bad           400, text body
  status        400, a google.rpc.Status protobuf (code 3)
  partial       200, a partial success (2 profiles rejected)
  slow          200 after 2 s
  redirect      301 to /ok/v1development/profiles
GET /count/SCENARIO answers how many exports that scenario received.
"""
import gzip
import http.server
import os
import sys
import threading
import time

from otlp_send import varint  # the same encoding as the Collector tests' sender

counts = {}
lock = threading.Lock()


def field_bytes(num, data):
    return varint(num << 3 | 2) + varint(len(data)) + data


def check_body(body):
    if len(body) < 4:
        return "body shorter than 4 bytes"
    n = int.from_bytes(body[:4], "big")
    if n != len(body):
        return "body length %d, its prefix says %d" % (len(body), n)
    want = bytes((i * 31 + 7) & 0xFF for i in range(4, n))
    if body[4:] != want:
        return "body bytes differ from the pattern"
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body=b"", ctype="application/x-protobuf", headers=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        parts = self.path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "count":
            with lock:
                n = counts.get(parts[1], 0)
            self.answer(200, str(n).encode(), "text/plain")
        else:
            self.answer(404, b"no such page", "text/plain")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        scenario = self.path.strip("/").split("/")[0]
        with lock:
            counts[scenario] = counts.get(scenario, 0) + 1
            nth = counts[scenario]
        problem = None
        if self.headers.get("Content-Type") != "application/x-protobuf":
            problem = "Content-Type is %r" % self.headers.get("Content-Type")
        elif not self.headers.get("User-Agent", "").startswith("kprof/"):
            problem = "User-Agent is %r" % self.headers.get("User-Agent")
        elif self.headers.get("X-Test-Gzip") == "1" and self.headers.get("Content-Encoding") != "gzip":
            problem = "no Content-Encoding: gzip"
        elif self.headers.get("Expect"):
            problem = "an Expect header"
        if not problem and self.headers.get("Content-Encoding") == "gzip":
            try:
                body = gzip.decompress(body)
            except Exception as e:
                problem = "the gzip body does not decompress: %s" % e
        if not problem:
            problem = check_body(body)
        if problem:
            self.answer(400, ("check failed: " + problem).encode(), "text/plain")
            return
        if scenario == "ok":
            self.answer(200)
        elif scenario.startswith("retry-"):
            if nth == 1:
                self.answer(503, b"try later", "text/plain", [("Retry-After", "1")])
            else:
                self.answer(200)
        elif scenario == "unavailable":
            self.answer(503, b"down for maintenance", "text/plain")
        elif scenario == "bad":
            self.answer(400, b"profile has no samples\n", "text/plain; charset=utf-8")
        elif scenario == "status":
            status = b"\x08\x03" + field_bytes(2, b"invalid profile")
            self.answer(400, status)
        elif scenario == "partial":
            partial = b"\x08\x02" + field_bytes(2, b"2 profiles had no samples")
            self.answer(200, field_bytes(1, partial))
        elif scenario == "slow":
            time.sleep(2)
            self.answer(200)
        elif scenario == "redirect":
            self.answer(301, b"", "text/plain", [("Location", "/ok/v1development/profiles")])
        else:
            self.answer(404, b"no such scenario", "text/plain")


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)

    def watch_stdin():
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=watch_stdin, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
