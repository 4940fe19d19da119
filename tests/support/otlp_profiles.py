#!/usr/bin/env python3
"""Reads what a real OpenTelemetry Collector received as OTLP profiles.

The Collector of kprof's tests (tests/support/otelcol.sh) writes every
export it receives through the contrib `file` exporter: one line of OTLP/JSON
per export, a ProfilesData (opentelemetry-proto v1development, as pdata
0.161.0 marshals it):

    {"resourceProfiles": [{"resource": {"attributes": [KeyValue...]},
                           "scopeProfiles": [{"scope": {...},
                                              "profiles": [Profile...]}]}],
     "dictionary": {"mappingTable": [...], "locationTable": [...],
                    "functionTable": [...], "linkTable": [...],
                    "stringTable": [...], "attributeTable": [...],
                    "stackTable": [...]}}

Field names are lowerCamelCase; a field at its zero value is left out (so
index 0 is "absent"); 64-bit integers are JSON strings, 32-bit ones numbers.
Every table's entry 0 is the zero value. A Stack's locationIndices are leaf
first (profiles.proto: "The first location is the leaf frame"), and a
Location's lines are innermost (inlined) first: this module turns both
around, so that every stack it returns is root first.

Strict: an index out of its table, an entry 0 that is not the zero value, a
sample with neither values nor timestamps (or with both, of different
lengths), a key twice in one attribute list, is an error (OtlpError) naming
the export (line), the profile and the index.

As a module:
    import otlp_profiles
    exports = otlp_profiles.read_file(path)       # one dict per export, resolved
    for s in otlp_profiles.samples(exports): ...  # flat samples, see sample_record
    otlp_profiles.folded(exports, "cpu")          # {"root;...;leaf": total}

From the shell:
    otlp_profiles.py summary FILE                 # JSON, one entry per export
    otlp_profiles.py folded FILE --type cpu       # root;...;leaf VALUE
    otlp_profiles.py samples FILE                 # JSON lines, one flat sample a line
Python 3 standard library only.
"""

import argparse
import base64
import json
import sys

FRAME_TYPE_KEY = "profile.frame.type"


class OtlpError(ValueError):
    """The file is not what a Collector writes for valid OTLP profiles."""


def _int(value, where):
    """An integer field: a JSON number (32-bit) or a decimal string (64-bit)."""
    if isinstance(value, bool):
        raise OtlpError(f"{where}: {value!r} is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 10)
        except ValueError:
            pass
    raise OtlpError(f"{where}: {value!r} is not an integer")


def _is_zero(value):
    """The JSON of a message at its zero value: every field absent or empty."""
    if isinstance(value, dict):
        return all(_is_zero(v) for v in value.values())
    if isinstance(value, list):
        return not value
    if isinstance(value, str):
        return value in ("", "0")
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value == 0
    return value is None


class _Export:
    """One line of the file: its dictionary, and lookups that check indices."""

    def __init__(self, data, line):
        if not isinstance(data, dict):
            raise OtlpError(f"line {line}: not a JSON object")
        self.line = line
        self.data = data
        d = data.get("dictionary", {})
        if not isinstance(d, dict):
            raise OtlpError(f"line {line}: dictionary is not an object")
        self.tables = {}
        for name in ("mappingTable", "locationTable", "functionTable", "linkTable",
                     "stringTable", "attributeTable", "stackTable"):
            table = d.get(name, [])
            if not isinstance(table, list):
                raise OtlpError(f"line {line}: dictionary.{name} is not a list")
            if table and not (table[0] == "" if name == "stringTable" else _is_zero(table[0])):
                raise OtlpError(f"line {line}: dictionary.{name}[0] is not the zero value: "
                                f"{json.dumps(table[0])[:200]}")
            self.tables[name] = table

    def entry(self, table, index, where):
        """table[index]; entry 0 too must be present (profiles.proto)."""
        t = self.tables[table]
        i = _int(index, where)
        if not 0 <= i < len(t):
            raise OtlpError(f"line {self.line}: {where}: index {i} out of dictionary.{table} "
                            f"({len(t)} entries)")
        return t[i]

    def string(self, index, where):
        s = self.entry("stringTable", index, where)
        if not isinstance(s, str):
            raise OtlpError(f"line {self.line}: {where}: stringTable entry is not a string")
        return s

    def any_value(self, v, where):
        """An AnyValue as Python: str, int, float, bool, bytes, list or dict."""
        if not isinstance(v, dict):
            raise OtlpError(f"line {self.line}: {where}: AnyValue is not an object")
        if not v:
            return None
        if len(v) != 1:
            raise OtlpError(f"line {self.line}: {where}: AnyValue with {sorted(v)}")
        (kind, x), = v.items()
        if kind == "stringValue":
            return x
        if kind == "stringValueStrindex":
            return self.string(x, f"{where}.stringValueStrindex")
        if kind == "intValue":
            return _int(x, f"line {self.line}: {where}.intValue")
        if kind == "doubleValue":
            return float(x)
        if kind == "boolValue":
            return bool(x)
        if kind == "bytesValue":
            return base64.b64decode(x)
        if kind == "arrayValue":
            return [self.any_value(e, f"{where}[{i}]") for i, e in enumerate(x.get("values", []))]
        if kind == "kvlistValue":
            return self.key_values(x.get("values", []), where)
        raise OtlpError(f"line {self.line}: {where}: unknown AnyValue {kind}")

    def key_values(self, kvs, where):
        """A list of KeyValue (key, or keyStrindex into the string table) as a dict."""
        out = {}
        for i, kv in enumerate(kvs):
            w = f"{where}[{i}]"
            if "key" in kv and "keyStrindex" in kv:
                raise OtlpError(f"line {self.line}: {w}: both key and keyStrindex")
            key = kv["key"] if "key" in kv else self.string(kv.get("keyStrindex", 0), f"{w}.keyStrindex")
            if key in out:
                raise OtlpError(f"line {self.line}: {w}: key {key!r} twice")
            out[key] = self.any_value(kv.get("value", {}), f"{w}.value")
        return out

    def attributes(self, indices, where):
        """attribute_indices into the attribute table as {key: value}."""
        out = {}
        for pos, i in enumerate(indices):
            w = f"{where}.attributeIndices[{pos}] = {i}"
            kvu = self.entry("attributeTable", i, w)
            key = self.string(kvu.get("keyStrindex", 0), f"{w}.keyStrindex")
            if key in out:
                raise OtlpError(f"line {self.line}: {w}: key {key!r} twice")
            out[key] = self.any_value(kvu.get("value", {}), f"{w}.value")
        return out

    def value_type(self, vt, where):
        vt = vt or {}
        return {"type": self.string(vt.get("typeStrindex", 0), f"{where}.typeStrindex"),
                "unit": self.string(vt.get("unitStrindex", 0), f"{where}.unitStrindex")}

    def mapping(self, index, where):
        m = self.entry("mappingTable", index, where)
        return {"filename": self.string(m.get("filenameStrindex", 0), f"{where}.filenameStrindex"),
                "memory_start": _int(m.get("memoryStart", 0), where),
                "memory_limit": _int(m.get("memoryLimit", 0), where),
                "file_offset": _int(m.get("fileOffset", 0), where),
                "attributes": self.attributes(m.get("attributeIndices", []), where)}

    def frames(self, location_index, where):
        """One location as frames, caller (outermost line) first."""
        w = f"{where}.location {location_index}"
        loc = self.entry("locationTable", location_index, w)
        attrs = self.attributes(loc.get("attributeIndices", []), w)
        mapping = self.mapping(loc.get("mappingIndex", 0), f"{w}.mappingIndex")
        lines = loc.get("lines", [])
        base = {"frame_type": attrs.get(FRAME_TYPE_KEY, ""),
                "mapping": mapping["filename"],
                "mapping_attributes": mapping["attributes"],
                "address": _int(loc.get("address", 0), w),
                "location_index": _int(location_index, w),
                "location_attributes": attrs}
        if not lines:
            return [dict(base, function="", system_name="", file="", line=0, column=0)]
        out = []
        for k, ln in reversed(list(enumerate(lines))):
            lw = f"{w}.lines[{k}]"
            fn = self.entry("functionTable", ln.get("functionIndex", 0), f"{lw}.functionIndex")
            out.append(dict(base,
                            function=self.string(fn.get("nameStrindex", 0), f"{lw}.function.nameStrindex"),
                            system_name=self.string(fn.get("systemNameStrindex", 0),
                                                    f"{lw}.function.systemNameStrindex"),
                            file=self.string(fn.get("filenameStrindex", 0), f"{lw}.function.filenameStrindex"),
                            line=_int(ln.get("line", 0), lw),
                            column=_int(ln.get("column", 0), lw)))
        return out

    def stack(self, index, where):
        """The stack of stack_table[index], root first."""
        st = self.entry("stackTable", index, f"{where}.stackIndex")
        frames = []
        for loc in reversed(st.get("locationIndices", [])):
            frames.extend(self.frames(loc, f"{where}.stackIndex {index}"))
        return frames

    def link(self, index, where):
        if _int(index, where) == 0:
            return None
        lk = self.entry("linkTable", index, f"{where}.linkIndex")
        return {"trace_id": base64.b64decode(lk.get("traceId", "")).hex() if "traceId" in lk else "",
                "span_id": base64.b64decode(lk.get("spanId", "")).hex() if "spanId" in lk else ""}

    def profile(self, p, where):
        sample_type = self.value_type(p.get("sampleType"), f"{where}.sampleType")
        samples = []
        for k, s in enumerate(p.get("samples", [])):
            sw = f"{where}.samples[{k}]"
            values = [_int(v, f"line {self.line}: {sw}.values") for v in s.get("values", [])]
            stamps = [_int(t, f"line {self.line}: {sw}.timestampsUnixNano")
                      for t in s.get("timestampsUnixNano", [])]
            if not values and not stamps:
                raise OtlpError(f"line {self.line}: {sw}: neither values nor timestamps")
            if values and stamps and len(values) != len(stamps):
                raise OtlpError(f"line {self.line}: {sw}: {len(values)} values but {len(stamps)} timestamps")
            samples.append({
                "stack": self.stack(s.get("stackIndex", 0), sw),
                "attributes": self.attributes(s.get("attributeIndices", []), sw),
                "link": self.link(s.get("linkIndex", 0), sw),
                "values": values,
                "timestamps_unix_nano": stamps,
                # timestamps alone count 1 each (profiles.proto, Sample)
                "total": sum(values) if values else len(stamps),
            })
        pid = p.get("profileId", "")
        return {
            "sample_type": sample_type,
            "period_type": self.value_type(p.get("periodType"), f"{where}.periodType"),
            "period": _int(p.get("period", 0), f"{where}.period"),
            "time_unix_nano": _int(p.get("timeUnixNano", 0), f"{where}.timeUnixNano"),
            "duration_nano": _int(p.get("durationNano", 0), f"{where}.durationNano"),
            "profile_id": pid,
            "attributes": self.attributes(p.get("attributeIndices", []), where),
            "dropped_attributes_count": _int(p.get("droppedAttributesCount", 0), where),
            "original_payload_format": p.get("originalPayloadFormat", ""),
            "samples": samples,
        }

    def resolve(self):
        resources = []
        for i, rp in enumerate(self.data.get("resourceProfiles", [])):
            rw = f"resourceProfiles[{i}]"
            res = rp.get("resource", {})
            scopes = []
            for j, sp in enumerate(rp.get("scopeProfiles", [])):
                sw = f"{rw}.scopeProfiles[{j}]"
                scope = sp.get("scope", {})
                scopes.append({
                    "name": scope.get("name", ""),
                    "version": scope.get("version", ""),
                    "attributes": self.key_values(scope.get("attributes", []), f"{sw}.scope.attributes"),
                    "schema_url": sp.get("schemaUrl", ""),
                    "profiles": [self.profile(p, f"{sw}.profiles[{k}]")
                                 for k, p in enumerate(sp.get("profiles", []))],
                })
            resources.append({
                "attributes": self.key_values(res.get("attributes", []), f"{rw}.resource.attributes"),
                "schema_url": rp.get("schemaUrl", ""),
                "scopes": scopes,
            })
        return {"line": self.line, "resources": resources}


def resolve(data, line=1):
    """One export (the parsed JSON of a line) with every index resolved."""
    try:
        return _Export(data, line).resolve()
    except (KeyError, TypeError, AttributeError) as e:
        raise OtlpError(f"line {line}: malformed export: {type(e).__name__}: {e}") from e


def read_lines(lines, complete_only=True):
    """Resolved exports of an iterable of JSON lines (empty lines skipped).
    With complete_only, a last line without its newline (an export the
    Collector is still writing) is left out, as otelcol_exports counts."""
    out = []
    for n, text in enumerate(lines, 1):
        if complete_only and not text.endswith("\n"):
            break
        if not text.strip():
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise OtlpError(f"line {n}: not JSON: {e}") from e
        out.append(resolve(data, n))
    return out


def read_file(path, complete_only=True):
    """Resolved exports of the file exporter's FILE, one per line."""
    with open(path, encoding="utf-8") as f:
        return read_lines(f, complete_only)


def samples(exports):
    """Every sample of every export, flat: see sample_record."""
    for e in exports:
        for r in e["resources"]:
            for s in r["scopes"]:
                for p in s["profiles"]:
                    for smp in p["samples"]:
                        yield sample_record(e, r, s, p, smp)


def sample_record(export, resource, scope, profile, sample):
    """A sample with what it belongs to: the keys of summary's profiles and
    of resolved samples together."""
    return {
        "line": export["line"],
        "resource": resource["attributes"],
        "scope": scope["name"],
        "type": profile["sample_type"]["type"],
        "unit": profile["sample_type"]["unit"],
        "time_unix_nano": profile["time_unix_nano"],
        "duration_nano": profile["duration_nano"],
        "profile_attributes": profile["attributes"],
        "attributes": sample["attributes"],
        "stack": sample["stack"],
        "values": sample["values"],
        "timestamps_unix_nano": sample["timestamps_unix_nano"],
        "total": sample["total"],
    }


def frame_name(frame):
    """A frame's name in folded stacks: its function, else its mapping's
    file, else its address."""
    return frame["function"] or frame["mapping"] or f"0x{frame['address']:x}"


def folded(exports, sample_type=None):
    """{"root;...;leaf": total} over every export, for one sample type (all
    when None)."""
    out = {}
    for s in samples(exports):
        if sample_type is not None and s["type"] != sample_type:
            continue
        key = ";".join(frame_name(f) for f in s["stack"])
        out[key] = out.get(key, 0) + s["total"]
    return out


def summary(exports):
    """Per export: its resources' attributes and, per profile, type/unit,
    time range, total value and sample count."""
    out = []
    for e in exports:
        resources = []
        for r in e["resources"]:
            profiles = []
            for s in r["scopes"]:
                for p in s["profiles"]:
                    profiles.append({
                        "scope": s["name"],
                        "type": p["sample_type"]["type"],
                        "unit": p["sample_type"]["unit"],
                        "period_type": p["period_type"],
                        "period": p["period"],
                        "time_unix_nano": p["time_unix_nano"],
                        "duration_nano": p["duration_nano"],
                        "end_unix_nano": p["time_unix_nano"] + p["duration_nano"],
                        "attributes": p["attributes"],
                        "samples": len(p["samples"]),
                        "total": sum(x["total"] for x in p["samples"]),
                    })
            resources.append({"attributes": r["attributes"], "profiles": profiles})
        out.append({"line": e["line"], "resources": resources})
    return out


def _json_default(o):
    if isinstance(o, bytes):
        return base64.b64encode(o).decode()
    raise TypeError(type(o).__name__)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("summary", help="per export: resource attributes, per profile type, time, total")
    p.add_argument("file")
    p = sub.add_parser("folded", help="folded stacks (root;...;leaf VALUE) over every export")
    p.add_argument("file")
    p.add_argument("--type", help="only the profiles of this sample type (e.g. cpu)")
    p = sub.add_parser("samples", help="every sample, resolved, one JSON object a line")
    p.add_argument("file")
    args = ap.parse_args(argv)
    try:
        exports = read_file(args.file)
    except (OSError, OtlpError) as e:
        print(f"otlp_profiles: {args.file}: {e}", file=sys.stderr)
        return 1
    if args.cmd == "summary":
        json.dump(summary(exports), sys.stdout, indent=1, default=_json_default)
        print()
    elif args.cmd == "folded":
        for stack, value in sorted(folded(exports, args.type).items()):
            print(f"{stack} {value}")
    else:
        for s in samples(exports):
            print(json.dumps(s, default=_json_default))
    return 0


if __name__ == "__main__":
    sys.exit(main())
