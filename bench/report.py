#!/usr/bin/env python3
"""Helpers of bench/run.sh.

  report.py fio-json NAME FILE     fio --output-format=json -> one RESULT line
  report.py table RAW META         RESULT lines (RAW) + key=value lines (META) -> markdown
"""

import json
import sys


def fio_json(name, path):
    with open(path) as f:
        text = f.read()
    # fio may print warnings before the JSON document.
    doc = json.loads(text[text.index("{"):])
    job = doc["jobs"][0]
    side = job["read"] if job["read"]["io_bytes"] > 0 else job["write"]
    lat = side.get("clat_ns", {}).get("percentile", {})
    p50 = lat.get("50.000000", 0) / 1e3
    p99 = lat.get("99.000000", 0) / 1e3
    secs = side["runtime"] / 1e3
    print(
        f"RESULT fio {name} ops={side['iops']:.0f} mbps={side['bw_bytes'] / 1e6:.1f} "
        f"n={side['total_ios']} secs={secs:.2f} p50us={p50:.0f} p99us={p99:.0f}"
    )


def parse(raw):
    """{(tool, a, b[, c]): {field: value}} from RESULT lines."""
    out = {}
    for line in open(raw):
        if not line.startswith("RESULT "):
            continue
        parts = line.split()[1:]
        keys = tuple(p for p in parts if "=" not in p)
        vals = dict(p.split("=", 1) for p in parts if "=" in p)
        out[keys] = vals
    return out


def num(r, field):
    try:
        return float(r[field])
    except (KeyError, TypeError, ValueError):
        return None


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.2f}×"


def fmt(v, unit):
    if v is None:
        return "–"
    if unit == "IOPS" or unit == "ops/s":
        return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def table(raw, meta_path):
    r = parse(raw)
    meta = {}
    for line in open(meta_path):
        if "=" in line:
            k, v = line.rstrip("\n").split("=", 1)
            meta[k] = v
    L = []
    L.append(f"# Cairn benchmark ({meta.get('mode', '?')} run)")
    L.append("")
    for k in ("date", "commit", "cpu", "cores", "ram", "fs", "workdir", "load_before", "load_after",
              "duration"):
        if k in meta:
            L.append(f"- **{k}**: {meta[k]}")
    L.append("")
    L.append("## A. Chunk store (uring backend) vs fio, same ext4 file, queue depth 32")
    L.append("")
    L.append("| workload | unit | fio, same durability | Cairn datapathd (TCP chunk protocol) | ratio | "
             "Cairn in-process ChunkStore | ratio | fio, no sync (device ceiling) |")
    L.append("|---|---|---|---|---|---|---|---|")
    rows = [
        ("4 KiB random read", "IOPS", "ops", "randread4k", "randread4k", None),
        ("4 KiB random write, durable", "IOPS", "ops", "randwrite4k_dsync", "randwrite4k", "randwrite4k_nosync"),
        ("1 MiB sequential write, durable", "MB/s", "mbps", "seqwrite1m_dsync", "seqwrite1m", "seqwrite1m_nosync"),
        ("1 MiB sequential read", "MB/s", "mbps", "seqread1m", "seqread1m", None),
    ]
    for label, unit, field, fio_name, cairn_name, ceil_name in rows:
        f = num(r.get(("fio", fio_name), {}), field)
        s = num(r.get(("service", cairn_name), {}), field)
        l = num(r.get(("local", cairn_name), {}), field)
        c = num(r.get(("fio", ceil_name), {}), field) if ceil_name else None
        L.append(f"| {label} | {unit} | {fmt(f, unit)} | {fmt(s, unit)} | {ratio(s, f)} | {fmt(l, unit)} | "
                 f"{ratio(l, f)} | {fmt(c, unit) if ceil_name else '(same as left)'} |")
    L.append("")
    L.append("Latency p50 / p99 (µs):")
    L.append("")
    L.append("| workload | fio | Cairn datapathd | Cairn in-process (per batch of 32) |")
    L.append("|---|---|---|---|")
    for label, unit, field, fio_name, cairn_name, _ in rows:
        def lat(k):
            x = r.get(k)
            return f"{x['p50us']} / {x['p99us']}" if x else "–"
        L.append(f"| {label} | {lat(('fio', fio_name))} | {lat(('service', cairn_name))} | "
                 f"{lat(('local', cairn_name))} |")
    L.append("")
    L.append(f"## B. S3: Cairn vs Garage, same client ({meta.get('s3_client', 'boto3')})")
    L.append("")
    garage = meta.get("garage", "")
    if garage != "ok":
        L.append(f"garage: unavailable ({garage})")
        L.append("")
    L.append("| workload | Cairn MB/s | Cairn ops/s | Garage MB/s | Garage ops/s | Cairn/Garage | "
             "Cairn p50/p99 ms | Garage p50/p99 ms | errors C/G |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    for size in ("4KiB", "1MiB", "16MiB"):
        for op in ("put", "get"):
            c = r.get(("s3", "cairn", op, size), {})
            g = r.get(("s3", "garage", op, size), {})
            field = "ops" if size == "4KiB" else "mbps"
            cl = f"{c['p50ms']} / {c['p99ms']}" if c else "–"
            gl = f"{g['p50ms']} / {g['p99ms']}" if g else "–"
            L.append(
                f"| {op.upper()} {size} | {fmt(num(c, 'mbps'), 'MB/s')} | {fmt(num(c, 'ops'), 'ops/s')} | "
                f"{fmt(num(g, 'mbps'), 'MB/s')} | {fmt(num(g, 'ops'), 'ops/s')} | "
                f"{ratio(num(c, field), num(g, field))} | {cl} | {gl} | "
                f"{c.get('errors', '–')}/{g.get('errors', '–')} |"
            )
    L.append("")
    L.append("Ratios: A = Cairn / fio (IOPS or MB/s); B = Cairn / Garage (ops/s for 4 KiB, MB/s otherwise). "
             "MB = 10^6 bytes.")
    print("\n".join(L))


if __name__ == "__main__":
    if sys.argv[1] == "fio-json":
        fio_json(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "table":
        table(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
