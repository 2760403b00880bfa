"""The experiment-only ablation switches: tiercached accepts
-o ablate_meta_in_pmem / ablate_init_in_lock, reports them in `stats
settings`, stays correct with them on, and refuses a bad value with exit 64
and one line."""

import pytest

from conftest import SLAB_OPTS

pytestmark = pytest.mark.tiercache_only

SWITCHES = ("ablate_meta_in_pmem", "ablate_init_in_lock")


def test_switches_off_by_default(mc):
    st = mc.stats("settings")
    for name in SWITCHES:
        assert st.get("tc_" + name) == "no", (name, st.get("tc_" + name))


@pytest.mark.parametrize("opts", [
    "ablate_meta_in_pmem",
    "ablate_init_in_lock=1",
    "ablate_meta_in_pmem=yes,ablate_init_in_lock=on",
])
def test_switches_reported_and_correct(spawn, connect, opts):
    srv = spawn("-o", opts)
    mc = connect(srv)
    st = mc.stats("settings")
    for name in SWITCHES:
        want = "yes" if name in opts else "no"
        assert st.get("tc_" + name) == want, (opts, name, st)
    # set, overwrite, delete and read back 300 keys of 100-byte values
    for i in range(300):
        mc.set(f"k{i}", b"%03d" % i + b"v" * 97)
    for i in range(0, 300, 3):
        mc.set(f"k{i}", b"new%03d" % i)
    for i in range(1, 300, 3):
        mc.cmd(b"delete k%d\r\n" % i, b"DELETED\r\n")
    for i in range(300):
        got = mc.get_value(f"k{i}")
        if i % 3 == 0:
            assert got == b"new%03d" % i, (opts, i, got)
        elif i % 3 == 1:
            assert got is None, (opts, i, got)
        else:
            assert got == b"%03d" % i + b"v" * 97, (opts, i, got)


def test_switches_survive_eviction(spawn, connect):
    """A full 8 MiB cache with both switches on keeps evicting and answering
    (the header chunks of each page are never handed out)."""
    srv = spawn("-o", "ablate_meta_in_pmem,ablate_init_in_lock", mem=8)
    mc = connect(srv)
    val = b"x" * 1000
    for i in range(12000):  # about 12 MB through an 8 MiB cache
        mc.set(f"e{i}", val)
    st = mc.stats()
    assert int(st["evictions"]) > 0, st
    assert mc.get_value("e11999") == val
    mc.check_alive()


@pytest.mark.parametrize("name", SWITCHES)
def test_bad_value_exits_64_one_line(run_server, name):
    rc, err = run_server(["-o", f"{name}=maybe"])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 64, f"exit {rc}; stderr {err!r}"
    assert len(lines) == 1, f"stderr is not one line: {err!r}"
    assert name in lines[0], f"stderr does not name {name}: {err!r}"


def test_meta_in_pmem_hot_spot_in_stats_hotspot(spawn, connect):
    """With page info in PMEM, `stats hotspot` shows DIMM 0 hot (page
    starts are 1 MiB aligned, DIMM = 4 KiB stripe % 4) and names the hottest
    block page_meta; without it the DIMMs stay even."""
    skews = {}
    for opts in ("hotspot_dimms=4,ablate_meta_in_pmem",
                 "hotspot_dimms=4"):
        # the page starts of slab pages: the slabs only (a packed segment
        # writes no page info)
        srv = spawn("-o", opts, *SLAB_OPTS)
        mc = connect(srv)
        for i in range(3000):
            mc.set(f"h{i}", b"v" * 100)
        st = mc.stats("hotspot")
        skews[opts] = float(st["hotspot_skew"])
        top = st["hotspot_top_0"]
        if "ablate" in opts:
            assert "what=page_meta" in top, st
            d0 = int(st["hotspot_dimm_0_bytes"])
            for d in (1, 2, 3):
                assert d0 > int(st[f"hotspot_dimm_{d}_bytes"]), st
        else:
            assert "page_meta" not in " ".join(st.values()), st
    assert skews["hotspot_dimms=4,ablate_meta_in_pmem"] > 1.3, skews
    assert skews["hotspot_dimms=4"] < 1.3, skews
