#!/usr/bin/env python3
"""Sends crafted frames into a router, in order, and records what comes out.

Run inside the hosts' network namespace, which holds both veth ends that
face the router (no addresses: its kernel answers nothing). Input: lines
"in HEX MS" (send on the inside port) or "out HEX MS" (send on the outside
port), MS milliseconds after the frame before (and its 10 ms). Output: one line "ifname HEX" per frame the router sent out of
either port, after the last frame and a quiet period.
"""
import socket
import sys
import threading
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


def main():
    inside, outside, path = sys.argv[1], sys.argv[2], sys.argv[3]
    frames = []
    with open(path) as f:
        for line in f:
            side, hexs, delay_ms = line.split()
            frames.append(
                (inside if side == "in" else outside, bytes.fromhex(hexs), int(delay_ms))
            )
    seen = []
    lock = threading.Lock()
    stop = threading.Event()
    socks = {}
    for ifname in (inside, outside):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((ifname, 0))
        s.settimeout(0.05)
        socks[ifname] = s

    def capture(ifname):
        s = socks[ifname]
        while not stop.is_set():
            try:
                data, addr = s.recvfrom(65535)
            except socket.timeout:
                continue
            if addr[2] == PACKET_OUTGOING:
                continue
            with lock:
                seen.append((ifname, data))

    threads = [threading.Thread(target=capture, args=(i,)) for i in socks]
    for t in threads:
        t.start()
    time.sleep(0.2)
    for ifname, frame, delay_ms in frames:
        time.sleep(delay_ms / 1000)
        socks[ifname].send(frame)
        # The router's softirq takes each in turn; a pause keeps the order.
        time.sleep(0.01)
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join()
    for ifname, data in seen:
        print(ifname, data.hex())


if __name__ == "__main__":
    main()
