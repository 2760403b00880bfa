"""The Prometheus memcached exporter's parsing contract, held to tiercached's
"stats", "stats slabs", "stats items" and "stats settings" replies beside
Debian's memcached's after the same requests.

The exporter (prometheus/memcached_exporter, pkg/exporter; not in Debian)
reads these fields; its rules, restated here from what its collector does:
  - every reply line is "STAT name value", and the reply ends with END;
  - a field it reads is parsed as a float (Go's ParseFloat); a field that is
    absent is skipped, one that is present and does not parse marks the
    scrape failed (memcached_up 0);
  - except: "cmd_set", "cas_misses", "cas_hits", "cas_badval" must be in
    "stats" (the set count is cmd_set less the three), and "cmd_set",
    "cas_hits", "cas_badval" in each class of "stats slabs";
  - "rusage_user" and "rusage_system" are seconds.microseconds (split at
    the one dot, both halves numbers);
  - "stats settings": "maxconns" a number; when "lru_crawler" is "yes",
    "lru_crawler" and "lru_maintainer_thread" are "yes" or "no" and
    "lru_crawler_sleep", "lru_crawler_tocrawl", "hot_lru_pct",
    "warm_lru_pct", "hot_max_factor", "warm_max_factor" numbers;
  - extstore fields are read only when "extstore_limit_maxbytes" is there.
Each field is checked by name below (STATS, SLABS, ITEMS, SETTINGS)."""

import os
import re
import socket
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import (IS_MEMCACHED, MEM_MIB, SLAB_OPTS,  # noqa: E402
                      flash_file, start_server)
from test_diff import MEMCACHED, start_memcached  # noqa: E402

TIMEOUT = 10.0

# "stats" fields the exporter reads (besides "version", a label)
STATS_REQUIRED = ["cmd_set", "cas_misses", "cas_hits", "cas_badval"]
STATS_NUMERIC = [
    "get_hits", "get_misses", "delete_hits", "delete_misses", "incr_hits",
    "incr_misses", "decr_hits", "decr_misses", "cas_hits", "cas_misses",
    "touch_hits", "touch_misses", "uptime", "time", "cas_badval",
    "cmd_flush", "cmd_set", "bytes", "limit_maxbytes", "curr_items",
    "total_items", "bytes_read", "bytes_written", "curr_connections",
    "total_connections", "rejected_connections", "conn_yields",
    "listen_disabled_num", "evictions", "reclaimed", "store_too_large",
    "store_no_memory", "lru_crawler_starts", "direct_reclaims",
    "crawler_items_checked", "crawler_reclaimed", "moves_to_cold",
    "moves_to_warm", "moves_within_lru", "total_malloced", "accepting_conns"]
STATS_TIMEVAL = ["rusage_user", "rusage_system"]
# memcached's segmented-LRU and crawler figures: tiercache has no
# HOT/WARM/COLD queues to move items between and no crawler pass to count;
# the exporter skips a field that is absent
STATS_ABSENT_OK = {
    "lru_crawler_starts", "direct_reclaims", "crawler_items_checked",
    "crawler_reclaimed", "moves_to_cold", "moves_to_warm",
    "moves_within_lru"}

# "stats slabs", per class ("STAT <class>:<field> <value>")
SLABS_REQUIRED = ["cmd_set", "cas_hits", "cas_badval"]
SLABS_NUMERIC = [
    "get_hits", "delete_hits", "incr_hits", "decr_hits", "cas_hits",
    "touch_hits", "cas_badval", "cmd_set", "chunk_size", "chunks_per_page",
    "total_pages", "total_chunks", "used_chunks", "free_chunks",
    "free_chunks_end", "mem_requested"]

# "stats items", per class ("STAT items:<class>:<field> <value>")
ITEMS_NUMERIC = [
    "number", "age", "hits_to_hot", "hits_to_warm", "hits_to_cold",
    "hits_to_temp", "crawler_reclaimed", "evicted", "evicted_nonzero",
    "evicted_time", "evicted_unfetched", "expired_unfetched", "outofmemory",
    "reclaimed", "store_too_large", "store_no_memory", "tailrepairs",
    "mem_requested", "moves_to_cold", "moves_to_warm", "moves_within_lru",
    "number_hot", "number_warm", "number_cold", "number_temp", "age_hot",
    "age_warm"]

SETTINGS_NUMERIC = ["maxconns"]
SETTINGS_CRAWLER_BOOL = ["lru_crawler", "lru_maintainer_thread"]
SETTINGS_CRAWLER_NUMERIC = [
    "lru_crawler_sleep", "lru_crawler_tocrawl", "hot_lru_pct",
    "warm_lru_pct", "hot_max_factor", "warm_max_factor"]

# the same requests to both servers before the stats are read: hits and
# misses of every command the exporter counts, in two slab classes
TRAFFIC = [
    b"set a 0 0 1\r\n1\r\n", b"set big 0 0 3000\r\n" + b"x" * 3000 + b"\r\n",
    b"get a\r\n", b"get nope\r\n", b"touch a 100\r\n", b"touch nope 100\r\n",
    b"incr a 1\r\n", b"incr nope 1\r\n", b"decr a 1\r\n", b"decr nope 1\r\n",
    b"cas a 0 0 1 999999\r\n2\r\n", b"cas nope 0 0 1 1\r\n2\r\n",
    # meta ms with I and a CAS older than the item's: stored stale, a CAS
    # hit in the item's class
    b"ms big 3000 I C1\r\n" + b"y" * 3000 + b"\r\n",
    b"delete big\r\n", b"delete nope\r\n"]
# command counters that the same requests must move alike
SAME_COUNTS = [
    "cmd_set", "get_hits", "get_misses", "touch_hits", "touch_misses",
    "incr_hits", "incr_misses", "decr_hits", "decr_misses", "cas_hits",
    "cas_misses", "cas_badval", "delete_hits", "delete_misses", "cmd_flush",
    "curr_items", "total_items"]


def _float(v):
    """Go's ParseFloat on a stats value, near enough: a decimal number."""
    return re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?",
                        v) is not None


def _timeval(v):
    parts = v.split(".")
    return len(parts) == 2 and all(re.fullmatch(r"[0-9]+", p) for p in parts)


class Conn:
    def __init__(self, srv):
        self.sock = socket.create_connection((srv.host, srv.port),
                                             timeout=TIMEOUT)
        self.buf = b""

    def request(self, data, end):
        self.sock.sendall(data)
        deadline = time.monotonic() + TIMEOUT
        while end not in self.buf:
            left = deadline - time.monotonic()
            assert left > 0, f"no reply to {data!r}: {self.buf!r}"
            self.sock.settimeout(left)
            d = self.sock.recv(1 << 20)
            assert d, f"closed after {data!r}"
            self.buf += d
        at = self.buf.index(end) + len(end)
        out, self.buf = self.buf[:at], self.buf[at:]
        return out.decode("latin-1")

    def stats(self, group):
        text = self.request(f"stats {group}".strip().encode() + b"\r\n",
                            b"END\r\n")
        lines = text.split("\r\n")
        assert lines[-2:] == ["END", ""], text[-200:]
        out = {}
        for line in lines[:-2]:
            toks = line.split(" ")
            # the exporter's client splits on spaces: exactly three fields
            assert len(toks) == 3 and toks[0] == "STAT", (group, line)
            assert toks[1] not in out, (group, "twice", toks[1])
            out[toks[1]] = toks[2]
        return out


def _per_class(stats, prefix=""):
    """{class: {field: value}} from "<prefix><class>:<field>" names."""
    out = {}
    for name, v in stats.items():
        m = re.fullmatch(re.escape(prefix) + r"([0-9]+):(\w+)", name)
        if m:
            out.setdefault(int(m[1]), {})[m[2]] = v
    return out


@pytest.fixture(scope="module")
def replies():
    """Each server's four stats replies after TRAFFIC."""
    if IS_MEMCACHED:
        pytest.skip("compares the server under test with memcached")
    if not MEMCACHED.exists():
        pytest.skip(f"{MEMCACHED} not installed (Debian package memcached)")
    mc_srv = start_memcached()
    tc_srv = None
    try:
        # class by class against memcached's slabs: the slabs only
        tc_srv = start_server(SLAB_OPTS, mem=MEM_MIB, threads=2)
        out = {}
        for kind, srv in (("memcached", mc_srv), ("tiercached", tc_srv)):
            c = Conn(srv)
            for req in TRAFFIC:
                c.request(req + b"mn\r\n", b"MN\r\n")
            out[kind] = {g: c.stats(g)
                         for g in ("", "slabs", "items", "settings")}
        yield out
    finally:
        if tc_srv is not None:
            tc_srv.stop()
        if mc_srv.alive():
            mc_srv.proc.terminate()
            mc_srv.proc.wait(10)
        mc_srv.cleanup()


@pytest.mark.parametrize("kind", ["memcached", "tiercached"])
def test_exporter_stats(replies, kind):
    s = replies[kind][""]
    mc = replies["memcached"][""]
    for f in STATS_REQUIRED:
        assert f in s, (kind, f, "required")
    for f in STATS_NUMERIC:
        if f in s:
            assert _float(s[f]), (kind, f, s[f])
        elif f in mc:
            assert kind == "tiercached" and f in STATS_ABSENT_OK, (
                kind, f, "memcached has it, this server does not")
    for f in STATS_TIMEVAL:
        assert f in s and _timeval(s[f]), (kind, f, s.get(f))
    assert s.get("version"), kind
    if "extstore_limit_maxbytes" in s:
        for f, v in s.items():
            if f.startswith("extstore_"):
                assert _float(v), (kind, f, v)


def test_exporter_counts_agree(replies):
    """The same requests move the command counters the exporter reads by
    the same amounts on both servers."""
    mc, tc = replies["memcached"][""], replies["tiercached"][""]
    for f in SAME_COUNTS:
        assert tc[f] == mc[f], (f, "memcached", mc[f], "tiercached", tc[f])
    # the set count the exporter derives: cmd_set - cas_*
    derived = [int(x["cmd_set"]) - sum(int(x[k]) for k in
               ("cas_misses", "cas_hits", "cas_badval")) for x in (mc, tc)]
    assert derived[0] == derived[1] and derived[1] >= 0, derived


@pytest.mark.parametrize("kind", ["memcached", "tiercached"])
def test_exporter_slabs(replies, kind):
    s = replies[kind]["slabs"]
    classes = _per_class(s)
    assert len(classes) >= 2, (kind, "TRAFFIC stores in two classes", s)
    for name, v in s.items():
        if ":" not in name:
            assert name in ("active_slabs", "total_malloced"), (kind, name)
            assert _float(v), (kind, name, v)
    for cls, fields in classes.items():
        for f in SLABS_NUMERIC:
            if f in fields:
                assert _float(fields[f]), (kind, cls, f, fields[f])
    missing = sorted({f for fields in classes.values()
                      for f in SLABS_REQUIRED if f not in fields})
    assert not missing, (kind, missing, "required in every class")


# memcached's per-class command counters ("stats slabs"), in its order
SLABS_COMMANDS = ["get_hits", "cmd_set", "delete_hits", "incr_hits",
                  "decr_hits", "cas_hits", "cas_badval", "touch_hits"]


def test_exporter_slab_counts_agree(replies):
    """TRAFFIC works on a small and a big item, each in a class of its
    own on both servers (class ids and chunk sizes are each server's): the
    per-class command counters, class by class in chunk size order, are
    memcached's, and each sums to the total in "stats"."""
    rows = {}
    for kind in ("memcached", "tiercached"):
        classes = _per_class(replies[kind]["slabs"])
        order = sorted(classes, key=lambda c: int(classes[c]["chunk_size"]))
        names = [n.split(":")[1] for n in replies[kind]["slabs"]
                 if n.startswith(f"{order[0]}:")]
        assert names[-len(SLABS_COMMANDS):] == SLABS_COMMANDS, (kind, names)
        rows[kind] = [[int(classes[c][f]) for f in SLABS_COMMANDS]
                      for c in order]
        total = replies[kind][""]
        for i, f in enumerate(SLABS_COMMANDS):
            assert sum(r[i] for r in rows[kind]) == int(total[f]), (kind, f)
    assert rows["tiercached"] == rows["memcached"], rows


@pytest.mark.parametrize("kind", ["memcached", "tiercached"])
def test_exporter_items(replies, kind):
    s = replies[kind]["items"]
    classes = _per_class(s, "items:")
    assert classes, (kind, s)
    for name in s:
        assert name.startswith("items:"), (kind, name)
    for cls, fields in classes.items():
        assert "number" in fields, (kind, cls)
        for f in ITEMS_NUMERIC:
            if f in fields:
                assert _float(fields[f]), (kind, cls, f, fields[f])


@pytest.mark.parametrize("kind", ["memcached", "tiercached"])
def test_exporter_settings(replies, kind):
    s = replies[kind]["settings"]
    for f in SETTINGS_NUMERIC:
        assert f in s and _float(s[f]), (kind, f, s.get(f))
    assert s.get("lru_crawler") in ("yes", "no"), (kind, s.get("lru_crawler"))
    assert s.get("lru_maintainer_thread") in ("yes", "no"), kind
    if s["lru_crawler"] == "yes":
        for f in SETTINGS_CRAWLER_BOOL:
            assert s.get(f) in ("yes", "no"), (kind, f, s.get(f))
        for f in SETTINGS_CRAWLER_NUMERIC:
            assert f in s and _float(s[f]), (kind, f, s.get(f))


# the exporter's extstore fields, read when extstore_limit_maxbytes is there
EXTSTORE_NUMERIC = [
    "extstore_compact_lost", "extstore_compact_rescues",
    "extstore_compact_skipped", "extstore_page_allocs",
    "extstore_page_evictions", "extstore_page_reclaims",
    "extstore_pages_free", "extstore_pages_used", "extstore_objects_evicted",
    "extstore_objects_read", "extstore_objects_written",
    "extstore_objects_used", "extstore_bytes_evicted",
    "extstore_bytes_written", "extstore_bytes_read", "extstore_bytes_used",
    "extstore_bytes_fragmented", "extstore_limit_maxbytes",
    "extstore_io_queue"]


def test_exporter_flash_tier():
    """With a flash tier, tiercache's NVMe figures reach the exporter under
    memcached's extstore names: extstore_limit_maxbytes is there, and every
    extstore field the exporter reads that is printed is a number."""
    if IS_MEMCACHED:
        pytest.skip("tiercached's flash tier")
    path = flash_file("tc-proto-exporter", ".nvs")
    srv = start_server(["-o", f"ext_path={path}:128m"], mem=MEM_MIB,
                       threads=2)
    try:
        c = Conn(srv)
        c.request(b"set a 0 0 1\r\n1\r\nmn\r\n", b"MN\r\n")
        s = c.stats("")
        assert "extstore_limit_maxbytes" in s, sorted(s)
        assert int(s["extstore_limit_maxbytes"]) == 128 << 20
        printed = [f for f in EXTSTORE_NUMERIC if f in s]
        assert len(printed) >= 10, printed
        for f in printed:
            assert _float(s[f]), (f, s[f])
    finally:
        srv.stop()
        if os.path.exists(path):
            os.unlink(path)
