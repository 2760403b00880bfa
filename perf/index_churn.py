#!/usr/bin/python3
"""Index overflow under key churn at a steady item count (bounded).

Starts a tiercached (127.0.0.1, a free port from PORT_BASE, -t 2 -m MEM_MB,
a pool file in /dev/shm, extra TC_ARGS), sends SETS pipelined
"set ... noreply" of unique keys with VALUE-byte values in batches of 500
(each batch ends with an "mn" round trip), and after every STEP sets
prints curr_items, tc_index_overflow_buckets, hash_bytes and hash bytes
per item. Stops the server by its PID. Usage:

    perf/index_churn.py [build/release/tiercached]
    env: MEM_MB [64] VALUE [1000] SETS [1000000] STEP [250000]
         TC_ARGS ["-o packed_item_max=1024"] PORT_BASE [22800]
"""
import os
import shlex
import socket
import subprocess
import sys
import time

binary = sys.argv[1] if len(sys.argv) > 1 else "build/release/tiercached"
mem = int(os.environ.get("MEM_MB", "64"))
value = int(os.environ.get("VALUE", "1000"))
sets = int(os.environ.get("SETS", "1000000"))
step = int(os.environ.get("STEP", "250000"))
tc_args = shlex.split(os.environ.get("TC_ARGS", "-o packed_item_max=1024"))
port_base = int(os.environ.get("PORT_BASE", "22800"))


def free_port():
    for p in range(port_base, port_base + 100):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
                return p
            except OSError:
                continue
    sys.exit("no free port in %d..%d" % (port_base, port_base + 99))


def recv_until(sock, end):
    buf = b""
    deadline = time.time() + 60
    while not buf.endswith(end):
        if time.time() > deadline:
            sys.exit("no reply from the server")
        chunk = sock.recv(65536)
        if not chunk:
            sys.exit("server closed the connection")
        buf += chunk
    return buf


def stats(sock):
    sock.sendall(b"stats\r\n")
    out = {}
    for line in recv_until(sock, b"END\r\n").decode().splitlines():
        f = line.split()
        if len(f) == 3 and f[0] == "STAT":
            out[f[1]] = f[2]
    return out


port = free_port()
pool = "/dev/shm/tiercache-churn-%d.pool" % os.getpid()
cmd = [binary, "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-t", "2",
       "-m", str(mem), "-e", pool] + tc_args
if os.geteuid() == 0:
    cmd += ["-u", "root"]
srv = subprocess.Popen(cmd)
try:
    sock = None
    for _ in range(100):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=60)
            break
        except OSError:
            time.sleep(0.1)
    if sock is None:
        sys.exit("server did not start")
    payload = b"x" * value
    print("| sets | turnovers | curr_items | overflow buckets | hash_bytes "
          "| hash B/item |")
    print("| --- | --- | --- | --- | --- | --- |")
    sent = 0
    while sent < sets:
        n = min(500, sets - sent)
        batch = b"".join(b"set k:%012x 0 0 %d noreply\r\n%s\r\n"
                         % (sent + i, value, payload) for i in range(n))
        sock.sendall(batch + b"mn\r\n")
        recv_until(sock, b"MN\r\n")
        sent += n
        if sent % step == 0 or sent == sets:
            st = stats(sock)
            items = int(st["curr_items"])
            hb = int(st["hash_bytes"])
            print("| %d | %.1f | %d | %s | %d | %.1f |"
                  % (sent, sent / max(items, 1), items,
                     st["tc_index_overflow_buckets"], hb, hb / max(items, 1)),
                  flush=True)
finally:
    srv.terminate()
    try:
        srv.wait(timeout=30)
    except subprocess.TimeoutExpired:
        srv.kill()
    try:
        os.unlink(pool)
    except OSError:
        pass
