"""Hot keys in DRAM (issue 5): a key set thousands of times while others are
set once shows up in `stats hotkeys`, moves into the DRAM hot pool
(hotkey_promotions), keeps its value through promotion and demotion, and
goes back to PMEM when it cools. tiercache only."""

import time

import pytest

pytestmark = pytest.mark.tiercache_only

HOT_OPTS = ("-o", "hot_pool_size=1m,hot_write_rate=50,hotkey_window=1,"
            "hotkey_sample=1")
DEADLINE = 15  # seconds any wait below may take (the tick is 1 s)


def pipelined_sets(mc, key, values):
    """Send one set per value in one write, then read every reply."""
    out = b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(v), v)
                   for v in values)
    mc.send(out)
    for _ in values:
        mc.expect(b"STORED\r\n")


def hotkeys(mc):
    st = mc.stats("hotkeys")
    rows = {}
    for name, val in st.items():
        by, rank, field = name.split(":")
        rows.setdefault((by, int(rank)), {})[field] = val
    return rows


def test_hot_key_promoted_and_demoted(spawn, connect):
    srv = spawn(*HOT_OPTS)
    mc = connect(srv)
    for i in range(20):
        mc.set(f"cold-{i}", f"once-{i}")

    # write the hot key until a maintenance step has seen it and a later
    # write has moved it into DRAM
    n = 0
    end = time.monotonic() + DEADLINE
    while int(mc.stats()["hotkey_promotions"]) < 1:
        assert time.monotonic() < end, "no promotion"
        pipelined_sets(mc, b"hot", [b"v%d" % (n + i) for i in range(500)])
        n += 500
        assert mc.get_value("hot") == b"v%d" % (n - 1)
    st = mc.stats()
    assert int(st["hotkey_current"]) == 1
    assert int(st["hot_pool_bytes"]) > 0
    assert int(st["hot_pool_limit"]) == 1 << 20
    # one more burst in DRAM: bytes saved grow, the value is the last one
    saved = int(st["hotkey_pmem_bytes_saved"])
    pipelined_sets(mc, b"hot", [b"last-%d" % i for i in range(1000)])
    assert mc.get_value("hot") == b"last-999"
    assert int(mc.stats()["hotkey_pmem_bytes_saved"]) > saved
    for i in range(20):
        assert mc.get_value(f"cold-{i}") == f"once-{i}".encode()

    # stats hotkeys: the hot key leads the write view, in DRAM; a cold key
    # is not in DRAM
    end = time.monotonic() + DEADLINE
    rows = hotkeys(mc)
    while ("write", 1) not in rows:
        assert time.monotonic() < end, "stats hotkeys stays empty"
        time.sleep(0.2)
        rows = hotkeys(mc)
    top = rows[("write", 1)]
    assert top["key"] == "hot"
    assert float(top["write_rate"]) > 50
    assert top["in_dram"] == "yes"
    for (by, _), row in rows.items():
        if row["key"].startswith("cold-"):
            assert row["in_dram"] == "no"

    # reads show up in the read view
    for _ in range(300):
        assert mc.get_value("cold-3") == b"once-3"
    end = time.monotonic() + DEADLINE
    while not any(r["key"] == "cold-3" for (by, _), r in hotkeys(mc).items()
                  if by == "read"):
        assert time.monotonic() < end, "reads never listed"
        time.sleep(0.2)

    # no more writes: it cools below half the rate and goes back to PMEM
    end = time.monotonic() + DEADLINE
    while int(mc.stats()["hotkey_current"]) != 0:
        assert time.monotonic() < end, "never demoted"
        assert mc.get_value("hot") == b"last-999"
        time.sleep(0.2)
    st = mc.stats()
    assert int(st["hotkey_demotions"]) >= 1
    assert int(st["curr_items"]) == 21
    assert mc.get_value("hot") == b"last-999"


def test_hot_pool_off(spawn, connect):
    srv = spawn("-o", "hot_pool_size=0")
    mc = connect(srv)
    pipelined_sets(mc, b"k", [b"x"] * 500)
    assert mc.stats("hotkeys") == {}
    st = mc.stats()
    assert st["hotkey_promotions"] == "0"
    assert st["hot_pool_limit"] == "0"
    assert mc.stats("settings")["hot_pool_size"] == "0"


def test_hotkey_settings(spawn, connect, run_server):
    srv = spawn(*HOT_OPTS)
    st = connect(srv).stats("settings")
    assert st["hot_pool_size"] == str(1 << 20)
    assert st["hot_write_rate"] == "50"
    assert st["hotkey_window"] == "1"
    assert st["hotkey_sample"] == "1"
    assert st["hotkey_k"] == "64"
    status, err = run_server(["-o", "hotkey_k=5000"])
    assert status != 0
    assert "hotkey_k" in err
