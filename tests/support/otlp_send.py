#!/usr/bin/env python3
"""Sends a hand-built minimal OTLP profiles export to a Collector, without kprof.

For the Collector harness's self-test (otelcol_selftest.sh): it proves that
the Collector of tests/support/otelcol.sh takes an
ExportProfilesServiceRequest (opentelemetry-proto v1development) over
OTLP/HTTP, plain or TLS, and that otlp_profiles.py reads back what it wrote.
The protobuf is encoded here by hand, field by field (profiles.proto):

    one resource (service.name = SERVICE), one scope, one profile of
    sample type cpu/nanoseconds (period 10 ms), one sample of 3 x 10 ms with
    the attribute thread.name = "scheduler 1" and the stack main -> work
    (root first; the Stack lists it leaf first), both frames of type "beam"
    in the mapping "beam.smp".

    otlp_send.py post URL [--ca CA.pem] [--service NAME] [--time UNIX_NS]
        POSTs it to URL (http://HOST:PORT/v1development/profiles, or https
        checked against CA.pem); fails unless the answer is 200 with nothing
        rejected
    otlp_send.py tls HOST:PORT --ca CA.pem
        a TLS handshake (ALPN h2, as gRPC clients offer) checked against CA.pem
Python 3 standard library only.
"""

import argparse
import socket
import ssl
import struct
import sys
import time
import urllib.error
import urllib.request

# ---- protobuf wire format -------------------------------------------------


def varint(n):
    if n < 0:
        n += 1 << 64  # int32/int64 negatives: ten bytes, as protobuf does
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def f_varint(field, n):
    return key(field, 0) + varint(n) if n else b""


def f_fixed64(field, n):
    return key(field, 1) + struct.pack("<Q", n) if n else b""


def f_bytes(field, data):
    """A length-delimited field: message, string, bytes; present even empty."""
    if isinstance(data, str):
        data = data.encode()
    return key(field, 2) + varint(len(data)) + data


def f_packed_varint(field, values):
    return f_bytes(field, b"".join(varint(v) for v in values)) if values else b""


def f_packed_fixed64(field, values):
    return f_bytes(field, b"".join(struct.pack("<Q", v) for v in values)) if values else b""


# ---- the request -------------------------------------------------------------

STRINGS = ["", "cpu", "nanoseconds", "main", "work", "profile.frame.type", "beam", "beam.smp",
           "thread.name", "scheduler 1", "kprof_selftest.erl"]


def s(text):
    return STRINGS.index(text)


def any_string(text):  # AnyValue{1 string_value}
    return f_bytes(1, text)


def request(service, time_ns):
    """The ExportProfilesServiceRequest's bytes, and what it holds."""
    period = 10_000_000
    # ProfilesDictionary: entry 0 of every table is the zero value, present
    mappings = [b"", f_varint(4, s("beam.smp"))]  # Mapping{4 filename_strindex}
    functions = [b"",  # Function{1 name_strindex, 3 filename_strindex}
                 f_varint(1, s("main")) + f_varint(3, s("kprof_selftest.erl")),
                 f_varint(1, s("work")) + f_varint(3, s("kprof_selftest.erl"))]
    # Location{1 mapping_index, 3 lines: Line{1 function_index, 2 line}, 4 attribute_indices}
    locations = [b""] + [f_varint(1, 1) + f_bytes(3, f_varint(1, fn) + f_varint(2, line)) +
                         f_packed_varint(4, [1]) for fn, line in ((1, 10), (2, 20))]
    links = [f_bytes(1, bytes(16)) + f_bytes(2, bytes(8))]  # Link{trace_id, span_id}, zero
    # KeyValueAndUnit{1 key_strindex, 2 value}
    attributes = [b"", f_varint(1, s("profile.frame.type")) + f_bytes(2, any_string("beam")),
                  f_varint(1, s("thread.name")) + f_bytes(2, any_string("scheduler 1"))]
    stacks = [b"", f_packed_varint(1, [2, 1])]  # Stack{1 location_indices}: leaf (work) first
    dictionary = (b"".join(f_bytes(1, m) for m in mappings) +
                  b"".join(f_bytes(2, x) for x in locations) +
                  b"".join(f_bytes(3, x) for x in functions) +
                  b"".join(f_bytes(4, x) for x in links) +
                  b"".join(f_bytes(5, x) for x in STRINGS) +
                  b"".join(f_bytes(6, x) for x in attributes) +
                  b"".join(f_bytes(7, x) for x in stacks))
    stamps = [time_ns + 1_000_000, time_ns + 11_000_000, time_ns + 21_000_000]
    # Sample{1 stack_index, 2 attribute_indices, 4 values, 5 timestamps_unix_nano}
    sample = (f_varint(1, 1) + f_packed_varint(2, [2]) + f_packed_varint(4, [period] * 3) +
              f_packed_fixed64(5, stamps))
    value_type = f_varint(1, s("cpu")) + f_varint(2, s("nanoseconds"))  # ValueType
    # Profile{1 sample_type, 2 samples, 3 time_unix_nano, 4 duration_nano, 5 period_type, 6 period}
    profile = (f_bytes(1, value_type) + f_bytes(2, sample) + f_fixed64(3, time_ns) +
               f_varint(4, 1_000_000_000) + f_bytes(5, value_type) + f_varint(6, period))
    # KeyValue{1 key, 2 value}; Resource{1 attributes}
    resource = f_bytes(1, f_bytes(1, "service.name") + f_bytes(2, any_string(service)))
    scope = f_bytes(1, "kprof-selftest") + f_bytes(2, "0")  # InstrumentationScope{1 name, 2 version}
    scope_profiles = f_bytes(1, scope) + f_bytes(2, profile)  # ScopeProfiles
    resource_profiles = f_bytes(1, resource) + f_bytes(2, scope_profiles)  # ResourceProfiles
    return f_bytes(1, resource_profiles) + f_bytes(2, dictionary)


def read_varint(data, i):
    n = shift = 0
    while True:
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def rejected(response):
    """ExportProfilesServiceResponse{1 partial_success{1 rejected_profiles,
    2 error_message}}: (rejected, message)."""
    i = 0
    while i < len(response):
        tag, i = read_varint(response, i)
        if tag & 7 != 2:
            return 0, f"unexpected field {tag >> 3} in the response"
        n, i = read_varint(response, i)
        body, i = response[i:i + n], i + n
        if tag >> 3 == 1:
            count, msg, j = 0, "", 0
            while j < len(body):
                t, j = read_varint(body, j)
                if t == 1 << 3:
                    count, j = read_varint(body, j)
                elif t == (2 << 3 | 2):
                    m, j = read_varint(body, j)
                    msg, j = body[j:j + m].decode(errors="replace"), j + m
                else:
                    break
            return count, msg
    return 0, ""


def post(args):
    data = request(args.service, args.time or time.time_ns())
    req = urllib.request.Request(args.url, data=data, method="POST",
                                 headers={"Content-Type": "application/x-protobuf"})
    ctx = ssl.create_default_context(cafile=args.ca) if args.ca else None
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
            status, body = r.status, r.read()
    except urllib.error.HTTPError as e:
        print(f"otlp_send: {args.url}: HTTP {e.code}: {e.read()[:300]!r}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as e:
        print(f"otlp_send: {args.url}: {e}", file=sys.stderr)
        return 1
    count, msg = rejected(body)
    if status != 200 or count:
        print(f"otlp_send: {args.url}: HTTP {status}, {count} profiles rejected: {msg}", file=sys.stderr)
        return 1
    print(f"otlp_send: {args.url}: HTTP {status}, {len(data)} bytes sent")
    return 0


def tls(args):
    host, port = args.address.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=args.ca)
    ctx.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, int(port)), timeout=10) as sock, \
                ctx.wrap_socket(sock, server_hostname=host) as t:
            print(f"otlp_send: {args.address}: {t.version()}, ALPN {t.selected_alpn_protocol()}")
    except (OSError, ssl.SSLError) as e:
        print(f"otlp_send: {args.address}: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("post")
    p.add_argument("url")
    p.add_argument("--ca")
    p.add_argument("--service", default="kprof-selftest")
    p.add_argument("--time", type=int, help="the profile's time_unix_nano (default: now)")
    p = sub.add_parser("tls")
    p.add_argument("address")
    p.add_argument("--ca", required=True)
    args = ap.parse_args(argv)
    return post(args) if args.cmd == "post" else tls(args)


if __name__ == "__main__":
    sys.exit(main())
