"""Write-hotspot tracking over the protocol: -o hotspot_* and pm_*_ns
options, "stats hotspot", "hotspot dump [PATH]" and "hotspot reset"
(doc/hotspots.md, "Finding write hot spots"). tiercache only."""

import os
import re
import tempfile

import pytest

from conftest import SLAB_OPTS, Conn

pytestmark = pytest.mark.tiercache_only

HOTSPOT_OFF = (b"SERVER_ERROR write-hotspot tracking is off (start with -o "
               b"hotspot_dimms=N)\r\n")


def stats_group(c, group):
    c.send(b"stats " + group + b"\r\n")
    body = c.read_until(b"END\r\n")
    assert body.endswith(b"END\r\n"), body
    out = {}
    for line in body.decode().split("\r\n")[:-2]:
        parts = line.split(" ", 2)
        assert parts[0] == "STAT", line
        out[parts[1]] = parts[2]
    return out


def set_items(c, n, vlen=100, prefix=b"key"):
    val = b"v" * vlen
    for i in range(n):
        c.send(b"set %s%d 0 0 %d\r\n%s\r\n" % (prefix, i, vlen, val))
        c.expect(b"STORED\r\n")


def parse_csv(text):
    lines = text.strip("\n").split("\n")
    head = lines[0]
    assert head.startswith("# tiercache-hotspot v1 "), head
    meta = dict(kv.split("=", 1) for kv in head.split()[3:])
    assert lines[1] == "kind,index,bytes,writes,what"
    dimms, blocks = {}, {}
    for row in lines[2:]:
        kind, idx, nbytes, writes, what = row.split(",")
        if kind == "dimm":
            assert what == ""
            dimms[int(idx)] = (int(nbytes), int(writes))
        else:
            assert kind == "block", row
            assert what in ("region_meta", "item_header", "item_value",
                            "page_meta", "mixed", "unknown"), row
            blocks[int(idx)] = (int(nbytes), int(writes), what)
    return meta, dimms, blocks


def test_off_by_default(server):
    c = Conn(server.host, server.port)
    assert stats_group(c, b"hotspot") == {"hotspot_enabled": "0"}
    c.send(b"hotspot dump\r\n")
    c.expect(HOTSPOT_OFF)
    c.send(b"hotspot dump /tmp/never-written.csv\r\n")
    c.expect(HOTSPOT_OFF)
    c.send(b"hotspot reset\r\n")
    c.expect(HOTSPOT_OFF)
    c.send(b"hotspot\r\n")
    c.expect(b"ERROR\r\n")
    c.send(b"hotspot bogus\r\n")
    c.expect(b"CLIENT_ERROR usage: hotspot dump [path] | hotspot reset\r\n")
    settings = stats_group(c, b"settings")
    assert settings["tc_hotspot_dimms"] == "0"
    assert settings["tc_pm_write_ns"] == "0"


def test_stats_and_dump_after_sets(spawn):
    # bytes of slab items (header, key, value): the slabs only
    srv = spawn("-o", "hotspot_dimms=4,hotspot_interleave=4096,"
                "hotspot_sample=1", *SLAB_OPTS)
    c = Conn(srv.host, srv.port)
    set_items(c, 200)
    st = stats_group(c, b"hotspot")
    assert st["hotspot_enabled"] == "1"
    assert st["hotspot_dimms"] == "4"
    assert st["hotspot_interleave"] == "4096"
    assert st["hotspot_sample"] == "1"
    sampled = int(st["hotspot_sampled_bytes"])
    # each item: 24-byte header, key, 100 value bytes, written once
    assert sampled >= sum(24 + len(b"key%d" % i) + 100 for i in range(200))
    per_dimm = [int(st[f"hotspot_dimm_{d}_bytes"]) for d in range(4)]
    assert sum(per_dimm) == sampled
    skew = float(st["hotspot_skew"])
    assert abs(skew - max(per_dimm) * 4 / sum(per_dimm)) < 0.01
    tops = [st[k] for k in sorted(st) if k.startswith("hotspot_top_")]
    assert 1 <= len(tops) <= 10
    m = re.fullmatch(r"block=(\d+) bytes=(\d+) writes=(\d+) what=(\w+)",
                     tops[0])
    assert m, tops[0]
    # the items sit past the 2 MiB region header: block 512 on
    assert int(m.group(1)) >= 512
    assert m.group(4) in ("item_header", "item_value", "mixed")

    c.send(b"hotspot dump\r\n")
    body = c.read_until(b"END\r\n", timeout=60).decode()
    assert body.endswith("\r\nEND\r\n")
    text = body[:-len("END\r\n")].replace("\r\n", "\n")
    meta, dimms, blocks = parse_csv(text)
    assert meta["dimms"] == "4" and meta["interleave"] == "4096"
    assert meta["block"] == "4096" and meta["source"] == "tracker"
    assert int(meta["map_bytes"]) == int(st["hotspot_map_bytes"])
    assert sorted(dimms) == [0, 1, 2, 3]
    assert sum(b for b, _ in dimms.values()) == sampled
    assert sum(b for b, _, _ in blocks.values()) == sampled
    # block -> DIMM at 4 KiB interleave: block % 4
    for d in range(4):
        assert dimms[d][0] == sum(b for i, (b, _, _) in blocks.items()
                                  if i % 4 == d)
    top_block = int(m.group(1))
    assert blocks[top_block][0] == int(m.group(2))

    # into a file
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "dump.csv")
        c.send(b"hotspot dump " + path.encode() + b"\r\n")
        c.expect(b"OK\r\n")
        with open(path) as f:
            fmeta, fdimms, fblocks = parse_csv(f.read())
        assert fmeta == meta and fdimms == dimms and fblocks == blocks
        # an existing file is never overwritten
        c.send(b"hotspot dump " + path.encode() + b"\r\n")
        c.expect(b"SERVER_ERROR cannot write " + path.encode()
                 + b": File exists\r\n")
        with open(path) as f:
            assert parse_csv(f.read()) == (meta, dimms, blocks)
        bad = os.path.join(tmp, "no-such-dir", "dump.csv")
        c.send(b"hotspot dump " + bad.encode() + b"\r\n")
        line = c.readline()
        assert line.startswith(b"SERVER_ERROR cannot write " + bad.encode()
                               + b": No such file or directory"), line

    # the first item of a size class formats a page (one byte a chunk);
    # after that an item costs exactly its bytes
    set_items(c, 1, vlen=10, prefix=b"z")
    c.send(b"hotspot reset\r\n")
    c.expect(b"RESET\r\n")
    st = stats_group(c, b"hotspot")
    assert st["hotspot_sampled_bytes"] == "0"
    assert not any(k.startswith("hotspot_top_") for k in st)
    set_items(c, 1, vlen=10, prefix=b"z")
    st = stats_group(c, b"hotspot")
    # header, key and value, then the commit word (8 bytes) stored last,
    # and the replaced copy's commit word's CRC half cleared (4 bytes)
    assert int(st["hotspot_sampled_bytes"]) == 24 + 2 + 10 + 8 + 4


def test_sampling_option(spawn):
    srv = spawn("-o", "hotspot_dimms=2,hotspot_sample=4")
    c = Conn(srv.host, srv.port)
    st = stats_group(c, b"hotspot")
    assert st["hotspot_dimms"] == "2" and st["hotspot_sample"] == "4"
    assert "hotspot_dimm_2_bytes" not in st


def test_latency_options(spawn):
    srv = spawn("-o", "pm_write_ns=200,pm_read_ns=100")
    c = Conn(srv.host, srv.port)
    set_items(c, 20, vlen=1000)
    c.send(b"get key7\r\n")
    c.expect(b"VALUE key7 0 1000\r\n" + b"v" * 1000 + b"\r\nEND\r\n")
    settings = stats_group(c, b"settings")
    assert settings["tc_pm_write_ns"] == "200"
    assert settings["tc_pm_read_ns"] == "100"


@pytest.mark.parametrize("opt,word", [
    ("hotspot_dimms=65", "hotspot_dimms"),
    ("hotspot_dimms=4,hotspot_interleave=100", "hotspot_interleave"),
    ("hotspot_sample=0", "hotspot_sample"),
    ("pm_write_ns=2000000", "pm_write_ns"),
])
def test_bad_options(run_server, opt, word):
    status, err = run_server(["-o", opt])
    assert status != 0
    assert word in err
