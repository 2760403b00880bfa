"""Shared code of tools/tc-hotspot, tools/tc-memtrace and tools/tc-pcm:
the hotspot CSV format (read and write), asking a running tiercached over
its text protocol, the text summary and the PNG charts.

The CSV (doc/hotspots.md, "The dump format"):

    # tiercache-hotspot v1 dimms=4 interleave=4096 block=4096 map_bytes=N source=tracker
    kind,index,bytes,writes,what
    dimm,0,<bytes>,<writes>,
    ...
    block,<block index>,<bytes>,<writes>,<what>

Runs under Debian's /usr/bin/python3 with python3-matplotlib.
"""

import os
import socket

KINDS = ("region_meta", "item_header", "item_value", "page_meta", "mixed",
         "unknown")
PAGE_BYTES = 1 << 20          # tiercache's slab page
REGION_HEADER_BYTES = 2 << 20  # the pool file's header area (region_layout.h)


class Dump:
    """One hotspot report: the layout, per-DIMM and per-block counts."""

    def __init__(self, dimms, interleave, block=4096, map_bytes=0,
                 source="tracker", extra=None):
        self.dimms = int(dimms)
        self.interleave = int(interleave)
        self.block = int(block)
        self.map_bytes = int(map_bytes)
        self.source = source
        self.extra = dict(extra or {})
        self.dimm_bytes = [0] * self.dimms
        self.dimm_writes = [0] * self.dimms
        self.blocks = {}  # index -> [bytes, writes, what]

    def total_bytes(self):
        return sum(self.dimm_bytes)

    def skew(self):
        total = self.total_bytes()
        if total == 0:
            return 0.0
        return max(self.dimm_bytes) * self.dimms / total

    def top(self, k):
        """The k most written blocks: [(index, bytes, writes, what)]."""
        rows = sorted(self.blocks.items(), key=lambda kv: (-kv[1][0], kv[0]))
        return [(i, b, w, what) for i, (b, w, what) in rows[:k] if b > 0]

    def nblocks(self):
        if self.map_bytes:
            return (self.map_bytes + self.block - 1) // self.block
        return max(self.blocks) + 1 if self.blocks else 0


class FormatError(ValueError):
    pass


def parse(text):
    """A Dump from the CSV text (lines ended by \\n or \\r\\n)."""
    lines = [ln.rstrip("\r") for ln in text.splitlines() if ln.strip()]
    if not lines or not lines[0].startswith("# tiercache-hotspot v1"):
        raise FormatError("not a tiercache hotspot dump (no "
                          "'# tiercache-hotspot v1' first line)")
    meta = {}
    for kv in lines[0].split()[3:]:
        if "=" in kv:
            k, v = kv.split("=", 1)
            meta[k] = v
    try:
        d = Dump(meta.pop("dimms"), meta.pop("interleave"),
                 meta.pop("block", 4096), meta.pop("map_bytes", 0),
                 meta.pop("source", "tracker"), meta)
    except KeyError as e:
        raise FormatError(f"dump header lacks {e.args[0]}=")
    if len(lines) < 2 or lines[1] != "kind,index,bytes,writes,what":
        raise FormatError("dump lacks the 'kind,index,bytes,writes,what' "
                          "header line")
    for n, row in enumerate(lines[2:], start=3):
        f = row.split(",")
        if len(f) != 5:
            raise FormatError(f"line {n}: expected 5 fields: {row!r}")
        kind, idx, nbytes, writes, what = f
        idx, nbytes, writes = int(idx), int(nbytes), int(writes)
        if kind == "dimm":
            if not 0 <= idx < d.dimms:
                raise FormatError(f"line {n}: DIMM {idx} out of range")
            d.dimm_bytes[idx] = nbytes
            d.dimm_writes[idx] = writes
        elif kind == "block":
            d.blocks[idx] = [nbytes, writes, what or "unknown"]
        else:
            raise FormatError(f"line {n}: unknown kind {kind!r}")
    return d


def read(path):
    with open(path) as f:
        return parse(f.read())


def write(d, f):
    """The CSV of Dump d to the text file f."""
    extra = "".join(f" {k}={v}" for k, v in d.extra.items())
    f.write(f"# tiercache-hotspot v1 dimms={d.dimms} "
            f"interleave={d.interleave} block={d.block} "
            f"map_bytes={d.map_bytes} source={d.source}{extra}\n")
    f.write("kind,index,bytes,writes,what\n")
    for i in range(d.dimms):
        f.write(f"dimm,{i},{d.dimm_bytes[i]},{d.dimm_writes[i]},\n")
    for i in sorted(d.blocks):
        b, w, what = d.blocks[i]
        f.write(f"block,{i},{b},{w},{what}\n")


# --- asking a running tiercached -------------------------------------------

def parse_hostport(s):
    host, sep, port = s.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {s!r}")
    return host or "127.0.0.1", int(port)


def ask(hostport, command, timeout=30.0):
    """Send one text command; the reply up to and including its last line
    (END, or a single-line reply)."""
    host, port = parse_hostport(hostport)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(command.encode() + b"\r\n")
        buf = b""
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            buf += chunk
            if buf.endswith(b"END\r\n") or (
                    buf.endswith(b"\r\n") and buf.count(b"\r\n") == 1 and
                    not buf.startswith((b"#", b"STAT"))):
                break
    return buf.decode()


def fetch_dump(hostport):
    """A Dump from a running server's "hotspot dump"."""
    reply = ask(hostport, "hotspot dump")
    if not reply.endswith("END\r\n"):
        raise RuntimeError(f"{hostport}: {reply.strip() or 'no reply'}")
    return parse(reply[:-len("END\r\n")])


def fetch_stats(hostport, group=""):
    reply = ask(hostport, ("stats " + group).strip())
    out = {}
    for line in reply.split("\r\n"):
        p = line.split(" ", 2)
        if len(p) == 3 and p[0] == "STAT":
            out[p[1]] = p[2]
    return out


# --- the report --------------------------------------------------------------

def human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0
    return str(n)


def summary(d, top=10, title="tiercache write hot spots"):
    """The text summary: layout, per-DIMM bytes, skew, top blocks."""
    total = d.total_bytes()
    mean = total / d.dimms if d.dimms else 0
    out = [f"{title} (source={d.source})",
           f"layout: {d.dimms} DIMMs, {d.interleave}-byte interleave, "
           f"{d.block}-byte blocks, {d.map_bytes} mapped bytes"
           + (f", sampling 1 in {d.extra['sample']}"
              if d.extra.get("sample", "1") != "1" else ""),
           f"bytes written: {total} ({human(total)})",
           "",
           "DIMM        bytes     writes   share  x mean"]
    for i in range(d.dimms):
        b = d.dimm_bytes[i]
        share = 100.0 * b / total if total else 0.0
        xm = b / mean if mean else 0.0
        out.append(f"{i:4d} {b:12d} {d.dimm_writes[i]:10d} {share:6.1f}% "
                   f"{xm:6.2f}")
    hot = max(range(d.dimms), key=lambda i: d.dimm_bytes[i]) if d.dimms else 0
    out.append(f"skew (max/mean): {d.skew():.3f}  hottest DIMM: {hot}")
    out.append("")
    rows = d.top(top)
    out.append(f"top {len(rows)} blocks:")
    out.append("   block      offset   page  in-page        bytes     "
               "writes  DIMM  what")
    for i, b, w, what in rows:
        off = i * d.block
        dimm = (off // d.interleave) % d.dimms if d.dimms else 0
        data = off - REGION_HEADER_BYTES
        page = str(data // PAGE_BYTES) if data >= 0 else "hdr"
        inpage = (data % PAGE_BYTES) // d.block if data >= 0 else off // d.block
        out.append(f"{i:8d} {off:#11x} {page:>6} {inpage:8d} {b:12d} "
                   f"{w:10d} {dimm:5d}  {what}")
    kinds = {}
    for b, _, what in d.blocks.values():
        kinds[what] = kinds.get(what, 0) + b
    if kinds:
        out.append("")
        out.append("bytes by what the blocks hold:")
        for k in sorted(kinds, key=lambda k: -kinds[k]):
            share = 100.0 * kinds[k] / total if total else 0.0
            out.append(f"  {k:12s} {kinds[k]:12d} {share:6.1f}%")
    return "\n".join(out) + "\n"


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_dimms(d, path, title="bytes written per emulated DIMM",
               values=None, ylabel="bytes written", labels=None):
    """Bar chart of per-DIMM bytes (or of `values`), mean line drawn."""
    plt = _pyplot()
    vals = list(values if values is not None else d.dimm_bytes)
    names = labels or [str(i) for i in range(len(vals))]
    fig, ax = plt.subplots(figsize=(max(4, 0.6 * len(vals) + 2), 3.5),
                           dpi=100)
    mean = sum(vals) / len(vals) if vals else 0
    hot = max(vals) if vals else 0
    colors = ["#d62728" if v == hot and hot > 0 else "#1f77b4" for v in vals]
    ax.bar(names, vals, color=colors)
    if mean:
        ax.axhline(mean, color="gray", linestyle="--", linewidth=1,
                   label=f"mean (skew {hot / mean:.2f})")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_xlabel("DIMM")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def plot_heatmap(d, path, title="bytes written per 4 KiB block"):
    """Blocks as a grid: one row per 1 MiB of the mapping (256 blocks of
    4 KiB), so metadata at a fixed place in every slab page shows as a
    column. Large mappings fold several rows into one (summed)."""
    import numpy as np
    plt = _pyplot()
    per_row = max(1, PAGE_BYTES // d.block)
    nblocks = max(d.nblocks(), 1)
    rows = (nblocks + per_row - 1) // per_row
    fold = max(1, (rows + 511) // 512)
    grid = np.zeros(((rows + fold - 1) // fold, per_row))
    for i, (b, _, _) in d.blocks.items():
        r, c = divmod(i, per_row)
        if r // fold < grid.shape[0]:
            grid[r // fold, c] += b
    fig, ax = plt.subplots(figsize=(8, min(10, 2 + grid.shape[0] * 0.06)),
                           dpi=100)
    shown = np.ma.masked_where(grid <= 0, grid)
    from matplotlib.colors import LogNorm
    vmax = grid.max() if grid.max() > 0 else 1
    im = ax.imshow(shown, aspect="auto", interpolation="nearest",
                   cmap="inferno", norm=LogNorm(vmin=1, vmax=max(vmax, 2)))
    ax.set_facecolor("#e8e8e8")
    ax.set_xlabel(f"block within each 1 MiB ({d.block}-byte blocks)")
    ax.set_ylabel(f"MiB of the mapping" + (f" (x{fold} folded)"
                                           if fold > 1 else ""))
    ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=ax, label="bytes (log)")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def write_report(d, outdir, prefix, top=10, title=None):
    """PNG charts and summary text into outdir; returns (summary, paths)."""
    os.makedirs(outdir, exist_ok=True)
    paths = {
        "dimms": os.path.join(outdir, f"{prefix}-dimms.png"),
        "heatmap": os.path.join(outdir, f"{prefix}-heatmap.png"),
        "summary": os.path.join(outdir, f"{prefix}-summary.txt"),
    }
    text = summary(d, top, title or "tiercache write hot spots")
    with open(paths["summary"], "w") as f:
        f.write(text)
    plot_dimms(d, paths["dimms"],
               title=f"bytes written per emulated DIMM ({d.source})")
    plot_heatmap(d, paths["heatmap"],
                 title=f"bytes written per {d.block}-byte block ({d.source})")
    return text, paths
