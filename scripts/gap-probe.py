#!/usr/bin/env python3
"""Longest wait for a reply, seen by one client that keeps asking.

Sends PING on one connection, one at a time, for at most SECONDS (or until SIGTERM/SIGINT), and
prints the longest interval between two consecutive replies in milliseconds, with the number of
intervals over 100 ms. A server that stops answering (a long step holding the node) shows up
here even when a benchmark's own latencies are averaged away.

    gap-probe.py PORT SECONDS
"""
import signal
import socket
import sys
import time


def main():
    port, seconds = int(sys.argv[1]), float(sys.argv[2])
    stop = [False]

    def on_signal(*_):
        stop[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    start = last = time.monotonic()
    longest, over_100ms, replies = 0.0, 0, 0
    while not stop[0] and last - start < seconds:
        s.sendall(b"PING\r\n")
        buf = b""
        while not buf.endswith(b"\r\n"):
            chunk = s.recv(64)
            if not chunk:
                raise SystemExit("server closed the probe's connection")
            buf += chunk
        now = time.monotonic()
        gap = now - last
        last = now
        replies += 1
        longest = max(longest, gap)
        if gap >= 0.1:
            over_100ms += 1
        time.sleep(0.001)
    # The sleep between requests is part of every interval: subtract it.
    print(f"longest_gap_ms={max(0.0, longest - 0.001) * 1000:.1f} gaps_over_100ms={over_100ms} replies={replies}")


if __name__ == "__main__":
    main()
