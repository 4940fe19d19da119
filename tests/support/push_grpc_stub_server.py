#!/usr/bin/env python3
"""A stand-in OTLP/gRPC backend for kprof push's transport tests: h2c
(HTTP/2 with prior knowledge) on loopback, with python3-h2 (exit status 77
when it is missing). Prints its port, answers by the first path segment
(the endpoint's prefix), exits when its standard input closes.

Every export is checked first (content-type, te, grpc-timeout, the 5-byte
prefix, gzip when flagged, the body's bytes as the C test makes them); a
failed check is INVALID_ARGUMENT saying why. Scenarios:
  ok          a partial success (2 rejected), grpc-status 0 in trailers
  unavail     trailers-only UNAVAILABLE with a RetryInfo of 2.5 s
  invalid     INVALID_ARGUMENT, grpc-message "bad%20profile%0A"
  notrailers  a message and no grpc-status
"""
import base64
import gzip
import os
import socket
import sys
import threading

try:
    import h2.config
    import h2.connection
    import h2.events
except ImportError:
    print("python3-h2 is not installed", file=sys.stderr)
    sys.exit(77)


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if not n:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def field_bytes(num, data):
    return varint(num << 3 | 2) + varint(len(data)) + data


def check(headers, data):
    h = dict(headers)
    if h.get(b"content-type") != b"application/grpc":
        return "content-type %r" % h.get(b"content-type")
    if h.get(b"te") != b"trailers":
        return "no te: trailers"
    if not h.get(b"grpc-timeout", b"").endswith(b"m"):
        return "no grpc-timeout in ms"
    if len(data) < 5:
        return "shorter than the 5-byte prefix"
    flag, n, msg = data[0], int.from_bytes(data[1:5], "big"), data[5:]
    if n != len(msg):
        return "length prefix %d, message %d" % (n, len(msg))
    if flag == 1:
        if h.get(b"grpc-encoding") != b"gzip":
            return "compressed flag without grpc-encoding"
        msg = gzip.decompress(msg)
    want = bytes((i * 31 + 7) & 0xFF for i in range(4, len(msg)))
    if int.from_bytes(msg[:4], "big") != len(msg) or msg[4:] != want:
        return "message bytes differ from the pattern"
    return None


def answer(conn, sid, scenario, problem):
    base = [(":status", "200"), ("content-type", "application/grpc")]
    if problem:
        words = ("check failed: " + problem).replace(" ", "%20")
        conn.send_headers(sid, base + [("grpc-status", "3"), ("grpc-message", words)], end_stream=True)
    elif scenario == "ok":
        reply = field_bytes(1, b"\x08\x02" + field_bytes(2, b"2 had no samples"))
        conn.send_headers(sid, base)
        conn.send_data(sid, b"\x00" + len(reply).to_bytes(4, "big") + reply)
        conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)
    elif scenario == "unavail":
        retry_info = field_bytes(1, b"\x08\x02\x10" + varint(500000000))
        any_ = field_bytes(1, b"type.googleapis.com/google.rpc.RetryInfo") + field_bytes(2, retry_info)
        status = b"\x08\x0e" + field_bytes(2, b"busy") + field_bytes(3, any_)
        details = base64.b64encode(status).decode().rstrip("=")
        conn.send_headers(
            sid, base + [("grpc-status", "14"), ("grpc-status-details-bin", details)], end_stream=True
        )
    elif scenario == "invalid":
        conn.send_headers(sid, base)
        conn.send_headers(sid, [("grpc-status", "3"), ("grpc-message", "bad%20profile%0A")], end_stream=True)
    elif scenario == "notrailers":
        conn.send_headers(sid, base)
        conn.send_data(sid, b"\x00\x00\x00\x00\x00", end_stream=True)
    else:
        conn.send_headers(sid, [(":status", "404")], end_stream=True)


def serve(sock):
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    streams = {}
    while True:
        data = sock.recv(65536)
        if not data:
            return
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.RequestReceived):
                streams[ev.stream_id] = [ev.headers, b""]
            elif isinstance(ev, h2.events.DataReceived):
                streams[ev.stream_id][1] += ev.data
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                headers, body = streams.pop(ev.stream_id)
                scenario = dict(headers)[b":path"].decode().strip("/").split("/")[0]
                answer(conn, ev.stream_id, scenario, check(headers, body))
        out = conn.data_to_send()
        if out:
            sock.sendall(out)


def main():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(5)
    print(s.getsockname()[1], flush=True)

    def watch_stdin():
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=watch_stdin, daemon=True).start()
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


if __name__ == "__main__":
    main()
