#!/usr/bin/env python3
"""Helpers of bench/run.sh.

  report.py fio-json NAME FILE     fio --output-format=json -> one RESULT line
  report.py table RAW META         RESULT lines (RAW) + key=value lines (META) -> markdown
  report.py cluster-table RAW META the same for bench/cluster.sh
  report.py kv-table RAW META      the same for bench/kv.sh
  report.py s3load LABEL OP SIZE   bench/s3load --json (stdin) -> one RESULT line
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


def s3load_result(label, op, size):
    """One bench/s3load --json run (stdin) as the RESULT line the tables read."""
    lines = [x for x in sys.stdin if x.startswith("{")]
    if not lines:
        sys.exit("s3load printed no result")
    d = json.loads(lines[-1])
    f = d[op]
    load = open("/proc/loadavg").read().split()[0]
    print(f"RESULT s3 {label} {op} {size} ops={f['ops_per_s']:.1f} mbps={f['mb_per_s']:.1f} "
          f"n={f['ops']} secs={d['seconds']:.2f} p50ms={f['p50_ms']:.1f} p99ms={f['p99_ms']:.1f} "
          f"conns={d['connections']} errors={d['errors']} load={load}", flush=True)


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


def read_meta(path):
    """The KEY=VALUE lines the bench scripts write beside their raw results."""
    meta = {}
    for line in open(path):
        if "=" in line:
            k, v = line.rstrip("\n").split("=", 1)
            meta[k] = v
    return meta


def table(raw, meta_path):
    r = parse(raw)
    meta = read_meta(meta_path)
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
    L.append(f"## B. S3: Cairn vs Garage, same client ({meta.get('s3_client', 's3load')})")
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
    L.append("## C. Encryption at rest: its cost")
    L.append("")
    L.append("| workload | sealed (root tenant) MB/s | plaintext tenant MB/s | sealed / plaintext |")
    L.append("|---|---|---|---|")
    for op in ("put", "get"):
        c = num(r.get(("s3", "cairn", op, "16MiB"), {}), "mbps")
        p = num(r.get(("s3", "cairn-plain", op, "16MiB"), {}), "mbps")
        L.append(f"| {op.upper()} 16MiB | {fmt(c, 'MB/s')} | {fmt(p, 'MB/s')} | {ratio(c, p)} |")
    L.append("")
    L.append("| one core, 1 MiB buffers | GB/s | / memcpy |")
    L.append("|---|---|---|")
    for name in ("memcpy", "ring-seal", "ring-open+copy", "aws-lc-rs-seal", "aws-lc-rs-open+copy"):
        x = r.get(("aead", name), {})
        L.append(f"| {name} | {x.get('gbps', '–')} | {x.get('ratio_memcpy', '–')} |")
    L.append("")
    L.append("Ratios: A = Cairn / fio (IOPS or MB/s); B = Cairn / Garage (ops/s for 4 KiB, MB/s otherwise). "
             "MB = 10^6 bytes.")
    print("\n".join(L))


def cluster_table(raw, meta_path):
    r = parse(raw)
    meta = read_meta(meta_path)
    systems = [("cairn", "Cairn"), ("garage", "Garage"), ("ceph", "Ceph")]
    L = [f"# Cairn cluster benchmark ({meta.get('mode', '?')} run)", ""]
    for k in ("date", "commit", "cairn_bin", "cpu", "cores", "ram", "fs", "client", "load_before",
              "load_after", "duration"):
        if k in meta:
            L.append(f"- **{k}**: {meta[k]}")
    for key, name in systems + [("rebuild", "rebuild")]:
        conf = meta.get(key)
        status = meta.get(f"status_{key}", "not run")
        start = meta.get(f"load_start_{key}")
        line = f"- **{name}**: " + (conf + "; " if conf else "") + \
            ("measured" if status == "ok" else f"**{status}**")
        if start:
            line += f"; load average when it started: {start}"
        L.append(line)
    L.append("")
    L.append("| workload | unit | Cairn | Garage | Ceph | Cairn/Garage | Cairn/Ceph | "
             "p50 / p99 ms C · G · Ce | load at end C · G · Ce |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    for size in ("4KiB", "1MiB", "16MiB"):
        for op in ("put", "get"):
            rows = [r.get(("s3", key, op, size), {}) for key, _ in systems]
            field = "ops" if size == "4KiB" else "mbps"
            unit = "ops/s" if size == "4KiB" else "MB/s"
            vals = [num(x, field) for x in rows]
            lat = " · ".join(f"{x['p50ms']}/{x['p99ms']}" if x else "–" for x in rows)
            errs = [int(x.get("errors", 0)) for x in rows if x]
            loads = " · ".join(x.get("load", "–") if x else "–" for x in rows)
            label = f"{op.upper()} {size}" + (f" ({sum(errs)} errors)" if sum(errs) else "")
            L.append(f"| {label} | {unit} | " + " | ".join(fmt(v, unit) for v in vals) +
                     f" | {ratio(vals[0], vals[1])} | {ratio(vals[0], vals[2])} | {lat} | {loads} |")
    fill = r.get(("s3", "cairn-fill", "put", "16MiB"), {})
    rb = r.get(("rebuild", "cairn"), {})
    fd = r.get(("fio", "seqwrite1m_dsync"), {})
    fn = r.get(("fio", "seqwrite1m_nosync"), {})
    # fio reports MB/s (10^6); the rebuild is in MiB/s.
    fd_mib = num(fd, "mbps") * 1e6 / (1 << 20) if fd else None
    fn_mib = num(fn, "mbps") * 1e6 / (1 << 20) if fn else None
    rate = num(rb, "mibps")
    rate_g = num(rb, "mibps_grace")

    def share(x, of):
        return f"{100 * x / of:.1f} %" if x is not None and of else "–"

    if rb or fd:
        done = "" if rb.get("complete", "1") == "1" else " (**did not complete**: rate so far)"
        L.append(f"| Cairn rebuild after a node loss{done}: {rb.get('mib', '–')} MiB in "
                 f"{rb.get('secs', '–')} s (fill: {fill.get('mbps', '–')} MB/s) | MiB/s | "
                 f"{fmt(rate, 'MB/s')} | – | – | {share(rate, fd_mib)} of fio durable write | "
                 f"{share(rate, fn_mib)} of fio no-sync write | – | {rb.get('load', '–')} |")
        L.append(f"| the same, counted from the grace's end ({rb.get('secs_grace', '–')} s) | MiB/s | "
                 f"{fmt(rate_g, 'MB/s')} | – | – | {share(rate_g, fd_mib)} | {share(rate_g, fn_mib)} | "
                 f"– | – |")
        L.append(f"| fio 1 MiB seq. write, O_DIRECT, QD 32, durable (dsync) / no sync | MiB/s | "
                 f"{fmt(fd_mib, 'MB/s')} / {fmt(fn_mib, 'MB/s')} | – | – | – | – | "
                 f"{fd.get('p50us', '–')}/{fd.get('p99us', '–')} µs (dsync) | – |")
    L.append("")
    L.append("Ratios: Cairn / peer (ops/s for 4 KiB, MB/s otherwise; MB = 10^6 bytes). "
             "Rebuild: MiB/s rebuilt (2^20 bytes) and its share of the filesystem's 1 MiB "
             "sequential write bandwidth, measured with fio just before. Load: the 1-minute "
             "load average at the end of each phase (client and servers included).")
    if rb.get("node_mibps"):
        L.append(f"Rebuild: nodes' own last-pass rates {rb['node_mibps']} MiB/s; "
                 f"sum of their rebuilt bytes {rb.get('rebuilt_sum_mib', '–')} MiB; "
                 f"{rb.get('fragments', '–')} fragments of {rb.get('objects', '–')} objects.")
    print("\n".join(L))


def kv_table(raw, meta_path):
    # RESULT kv <mode> <label> ...: keyed by label.
    r = {k[2]: v for k, v in parse(raw).items() if k[0] == "kv" and len(k) >= 3}
    meta = read_meta(meta_path)
    chunks = int(meta.get("chunks", "0"))
    mib = int(meta.get("chunk_mib", "32"))
    tokens = int(meta.get("tokens", "0"))
    ctx_bytes = chunks * mib * (1 << 20)
    prefill = float(meta.get("prefill_toks", "0"))
    L = [f"# Cairn KV-cache tier benchmark ({meta.get('mode', '?')} run)", ""]
    for k in ("date", "commit", "cairn_bin", "cpu", "cores", "ram", "fs", "client", "cairn",
              "cairn_writable_after", "redis", "load_before", "load_after", "duration"):
        if k in meta:
            L.append(f"- **{k}**: {meta[k]}")
    L.append(f"- **context**: {chunks} chunks x {mib} MiB = {ctx_bytes / (1 << 30):.0f} GiB "
             f"= {tokens:,} tokens of Llama-3.1-8B bf16 KV cache (128 KiB/token, 256-token "
             f"chunks), {meta.get('conns', '?')} connections")
    for k in ("rss_cairn_start", "rss_cairn_after_set", "rss_cairn_after_get_cold",
              "rss_cairn_after_get_warm", "rss_cairn_max", "rss_redis"):
        if k in meta:
            L.append(f"- **{k}** (n1 mgmtd, n1 datapathd, n2 mgmtd, n2 datapathd)"
                     if k.startswith("rss_cairn") else f"- **{k}**")
            L[-1] += f": {meta[k]}"
    bad = [(k[len("status_"):], v) for k, v in meta.items() if k.startswith("status_") and v != "ok"]
    for name, v in bad:
        L.append(f"- **{name}**: **{v}**")
    L.append("")

    def g(label):
        return num(r.get(label, {}), "gbps")

    rows = [
        ("Loopback TCP ceiling (kvbench tcp)", "GET", "tcp", "tcp", None),
        ("Loopback TCP ceiling (kvbench tcp --op set)", "SET", "tcp-set", "tcp-set", None),
        ("Cairn, 2 nodes: prefill via node 1 (database 0, durable)", "SET", "cairn-set", "tcp-set", "redis-set"),
        ("Cairn: prefill via node 1 into a write-back pool", "SET", "cairn-set-wb", "tcp-set", "redis-set"),
        ("Cairn: decode via node 2, cold", "GET", "cairn-get-cold", "tcp", "redis-get"),
        ("Cairn: decode via node 2, warm (2nd read)", "GET", "cairn-get-warm", "tcp", "redis-get"),
        ("redis-server (RAM only)", "SET", "redis-set", "tcp-set", None),
        ("redis-server (RAM only)", "GET", "redis-get", "tcp", None),
    ]
    L.append("| system | op | GB/s | p50 / p99 ms per 32 MiB | vs loopback | vs redis-server |")
    L.append("|---|---|---|---|---|---|")
    for name, op, label, lo, rd in rows:
        x = r.get(label, {})
        v = g(label)
        lat = f"{x['p50ms']} / {x['p99ms']}" if x else "–"
        vs_lo = ratio(v, g(lo)) if label != lo else "–"
        vs_rd = ratio(v, g(rd)) if rd else "–"
        L.append(f"| {name} | {op} | {f'{v:.2f}' if v is not None else '–'} | {lat} | "
                 f"{vs_lo} | {vs_rd} |")
    L.append("")
    rec = tokens / prefill if prefill else None
    L.append(f"The turn: loading the context's KV cache ({ctx_bytes / 1e9:.2f} GB) vs recomputing "
             f"its {tokens:,} tokens at {prefill:,.0f} tokens/s "
             f"({'%.2f s' % rec if rec else '–'}); ratio > 1: loading is faster.")
    L.append("")
    L.append("| KV source | load time s | recompute s | recompute / load |")
    L.append("|---|---|---|---|")
    for name, label in (("Cairn GET cold", "cairn-get-cold"), ("Cairn GET warm", "cairn-get-warm"),
                        ("redis-server GET", "redis-get"), ("loopback ceiling", "tcp")):
        v = g(label)
        load = ctx_bytes / (v * 1e9) if v else None
        L.append(f"| {name} | {f'{load:.2f}' if load else '–'} | "
                 f"{f'{rec:.2f}' if rec else '–'} | {ratio(rec, load)} |")
    L.append("")
    L.append(f"GB = 10^9 bytes. Prefill rate: {meta.get('prefill_src', '?')}. Ratios vs "
             "loopback: to `kvbench tcp` for GETs and `kvbench tcp --op set` for SETs.")
    print("\n".join(L))


if __name__ == "__main__":
    if sys.argv[1] == "fio-json":
        fio_json(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "table":
        table(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "cluster-table":
        cluster_table(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "kv-table":
        kv_table(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "s3load":
        s3load_result(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
