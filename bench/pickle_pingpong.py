#!/usr/bin/env python3
"""The comfy-env shape of a memory exchange: a Python server answering pickled requests
over a Unix socket with length-prefixed frames, the way comfy-env's host answers a worker's
request_vram_budget callback. Prints round-trip p50/p99 in microseconds.

    pickle_pingpong.py [--placement same|cross] [--n N]

same: server and client on CPU 0; cross: server on CPU 1, client on CPU 0.
"""
import argparse
import os
import pickle
import socket
import struct
import sys
import tempfile
import time


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def recv_frame(sock):
    (n,) = struct.unpack("<I", recv_exact(sock, 4))
    return pickle.loads(recv_exact(sock, n))


def send_frame(sock, obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(struct.pack("<I", len(data)) + data)


def serve(path, cpu):
    os.sched_setaffinity(0, {cpu})
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    conn, _ = srv.accept()
    try:
        while True:
            req = recv_frame(conn)
            if req.get("method") == "stop":
                break
            # the budget handler's reply shape
            send_frame(conn, {"type": "callback_response", "call_id": req["call_id"], "status": "ok",
                              "result": {"device": "cuda:0", "extra_reserved_vram": 419430400,
                                         "vram_state": "NORMAL_VRAM", "device_free_bytes": 23 << 30}})
    except EOFError:
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--placement", choices=["same", "cross"], default="cross")
    ap.add_argument("--n", type=int, default=20000)
    a = ap.parse_args()
    server_cpu = 0 if a.placement == "same" or os.cpu_count() < 2 else 1
    path = os.path.join(tempfile.mkdtemp(), "pp.sock")
    pid = os.fork()
    if pid == 0:
        serve(path, server_cpu)
        os._exit(0)
    os.sched_setaffinity(0, {0})
    for _ in range(500):
        if os.path.exists(path):
            break
        time.sleep(0.01)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(path)
    req = {"type": "callback", "method": "request_vram_budget", "call_id": 0,
           "model_info": [{"size": 1 << 20, "key": "m", "largest_tensor": 1 << 16}],
           "total_size": 1 << 20, "pin_state": {"pid": os.getpid(), "total_pinned": 0}, "num_streams": 2}
    lat = []
    for i in range(a.n + 1000):
        req["call_id"] = i
        t0 = time.perf_counter_ns()
        send_frame(c, req)
        recv_frame(c)
        if i >= 1000:  # warm-up
            lat.append((time.perf_counter_ns() - t0) / 1000.0)
    send_frame(c, {"method": "stop"})
    os.waitpid(pid, 0)
    lat.sort()
    print(f"python socket+pickle round trip ({a.placement}): n={len(lat)} p50={lat[len(lat) // 2]:.1f} us "
          f"p99={lat[int(len(lat) * 0.99)]:.1f} us")


if __name__ == "__main__":
    sys.exit(main())
