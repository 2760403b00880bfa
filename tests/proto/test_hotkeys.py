"""Hot keys in DRAM: a key set thousands of times while others are
set once shows up in `stats hotkeys`, moves into the DRAM hot pool
(hotkey_promotions), keeps its value through promotion and demotion, and
goes back to PMEM when it cools. tiercache only."""

import time

import pytest

pytestmark = pytest.mark.tiercache_only

HOT_OPTS = ("-o", "hot_pool_size=1m,hot_write_rate=50,hotkey_window=1,"
            "hotkey_sample=1")
# The hot set is rebuilt by the maintenance thread's tick (1 s) from rates
# measured over real time: whether a given burst of writes finds the key
# hot depends on when the ticks ran. So each step below writes bursts
# until the state it checks is reached (bounded), and asserts on every
# way what holds in every schedule: the value is the last one written,
# keys written once are never hot, counters add up.
DEADLINE = 60  # seconds any wait below may take


class HotWriter:
    """Writes bursts of sets to the key "hot", remembering the last
    value."""

    def __init__(self, mc):
        self.mc = mc
        self.n = 0
        self.last = None

    def burst(self, count=500):
        values = [b"v%d" % (self.n + i) for i in range(count)]
        self.n += count
        pipelined_sets(self.mc, b"hot", values)
        self.last = values[-1]
        assert self.mc.get_value("hot") == self.last

    def until(self, what, pred):
        """Bursts until pred() is true (its value returned), at most
        DEADLINE seconds."""
        end = time.monotonic() + DEADLINE
        while True:
            self.burst()
            got = pred()
            if got:
                return got
            assert time.monotonic() < end, f"waited {DEADLINE} s for {what}"


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


def check_cold_not_in_dram(rows):
    for (by, _), row in rows.items():
        if row["key"].startswith("cold-"):
            assert row["in_dram"] == "no", row


def test_hot_key_promoted_and_demoted(spawn, connect):
    srv = spawn(*HOT_OPTS)
    mc = connect(srv)
    for i in range(20):
        mc.set(f"cold-{i}", f"once-{i}")
    hot = HotWriter(mc)

    # write the hot key until a maintenance step has seen it and a later
    # write has moved it into DRAM
    def in_dram():
        st = mc.stats()
        # only "hot" is ever written often enough
        assert int(st["hotkey_current"]) in (0, 1), st["hotkey_current"]
        if int(st["hotkey_promotions"]) >= 1 and \
                int(st["hotkey_current"]) == 1:
            return st
        return None

    st = hot.until("a promotion of the hot key into DRAM", in_dram)
    assert int(st["hot_pool_bytes"]) > 0
    assert int(st["hot_pool_limit"]) == 1 << 20

    # a burst the key spends in DRAM saves PMEM bytes; the value is always
    # the last one written
    saved = int(st["hotkey_pmem_bytes_saved"])
    hot.until("a burst written in DRAM (hotkey_pmem_bytes_saved grows)",
              lambda: int(mc.stats()["hotkey_pmem_bytes_saved"]) > saved)
    for i in range(20):
        assert mc.get_value(f"cold-{i}") == f"once-{i}".encode()

    # stats hotkeys: the hot key leads the write view, in DRAM, at a rate
    # above the threshold while it is being written; a cold key is never in
    # DRAM
    def hot_leads():
        rows = hotkeys(mc)
        check_cold_not_in_dram(rows)
        top = rows.get(("write", 1))
        if top and top["key"] == "hot" and top["in_dram"] == "yes" and \
                float(top["write_rate"]) > 50:
            return rows
        return None

    hot.until("stats hotkeys to list the hot key first, in DRAM", hot_leads)

    # reads show up in the read view
    end = time.monotonic() + DEADLINE
    while True:
        for _ in range(300):
            assert mc.get_value("cold-3") == b"once-3"
        rows = hotkeys(mc)
        check_cold_not_in_dram(rows)
        if any(r["key"] == "cold-3" for (by, _), r in rows.items()
               if by == "read"):
            break
        assert time.monotonic() < end, "reads never listed"
        time.sleep(0.2)

    # no more writes: it cools below half the rate and goes back to PMEM
    end = time.monotonic() + DEADLINE
    while int(mc.stats()["hotkey_current"]) != 0:
        assert time.monotonic() < end, "never demoted"
        assert mc.get_value("hot") == hot.last
        time.sleep(0.2)
    st = mc.stats()
    assert int(st["hotkey_demotions"]) >= 1
    # every promotion of the one hot key was undone by a demotion
    assert int(st["hotkey_demotions"]) == int(st["hotkey_promotions"]), st
    assert int(st["curr_items"]) == 21
    assert mc.get_value("hot") == hot.last


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
