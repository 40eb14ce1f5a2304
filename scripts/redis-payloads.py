#!/usr/bin/env python3
"""RESTOREs Redis's own DUMP payloads into lattice-server and compares with redis-server.

    scripts/redis-payloads.py --lattice-port P1 --redis-port P2 [--src DIR]

Both servers must be running (empty databases; keys are flushed). Three checks, each
printing one line per payload and a total:
  1. keys of every encoding redis-server writes are made on redis-server, DUMPed, RESTOREd
     into Lattice, and read back on both (XINFO STREAM FULL for the stream, without the
     clock-dependent seen times);
  2. the keys of the RDB files of Redis's test suite (DIR/tests/assets/*.rdb, DIR being the
     Redis source as scripts/compat.sh unpacks it) are cut into payloads carrying the file's
     RDB version and RESTOREd into both servers: same reply and same read back;
  3. the payloads of DIR/tests/integration/corrupt-dump.tcl, resealed with a right checksum
     (Redis's suite turns the check off for them), go to Lattice, which must answer each and
     stay up.
"""
import argparse, glob, os, re, sys
from collections import Counter

import socket
class R:
    def __init__(s, port):
        s.s = socket.create_connection(('127.0.0.1', port)); s.f = s.s.makefile('rb')
    def cmd(s, *args):
        out = b'*%d\r\n' % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b'$%d\r\n%s\r\n' % (len(a), a)
        s.s.sendall(out); return s.read()
    def read(s):
        line = s.f.readline()[:-2]; t = line[:1]; rest = line[1:]
        if t == b'+': return rest.decode()
        if t == b'-': return Exception(rest.decode())
        if t == b':': return int(rest)
        if t == b'$':
            n = int(rest)
            if n < 0: return None
            d = s.f.read(n + 2)[:-2]; return d
        if t == b'*':
            n = int(rest)
            if n < 0: return None
            return [s.read() for _ in range(n)]
        raise Exception('bad ' + repr(line))

def crc64(data):
    poly = int('{:064b}'.format(0xad93d23594c935a9)[::-1], 2)
    crc = 0
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
    return crc

import sys
def split(data):
    assert data[:5] == b'REDIS'; ver = int(data[5:9]); i = 9
    def ln():
        nonlocal i
        b = data[i]; i += 1; k = b >> 6
        if k == 0: return b & 0x3f, False
        if k == 1: v = ((b & 0x3f) << 8) | data[i]; i += 1; return v, False
        if k == 2:
            n = 4 if b == 0x80 else 8; v = int.from_bytes(data[i:i+n], 'big'); i += n; return v, False
        return b & 0x3f, True
    def string():
        nonlocal i
        v, enc = ln()
        if not enc: s = data[i:i+v]; i += v; return s
        if v == 0: i += 1
        elif v == 1: i += 2
        elif v == 2: i += 4
        elif v == 3: c, _ = ln(); l, _ = ln(); i += c
        return None
    out = []
    while True:
        op = data[i]; i += 1
        if op == 0xff: break
        if op == 0xfa: string(); string(); continue
        if op == 0xfe: ln(); continue
        if op == 0xfb: ln(); ln(); continue
        if op == 0xfd: i += 4; continue
        if op == 0xfc: i += 8; continue
        if op == 0xf8: ln(); continue
        if op == 0xf9: i += 1; continue
        key = string(); start = i
        if op in (0, 9, 10, 11, 12, 13, 16, 17): string()
        elif op in (1, 2):
            n, _ = ln()
            for _ in range(n): string()
        elif op == 3:
            n, _ = ln()
            for _ in range(n):
                string(); b = data[i]; i += 1
                if b < 253: i += b
        elif op == 5:
            n, _ = ln()
            for _ in range(n): string(); i += 8
        elif op == 4:
            n, _ = ln()
            for _ in range(n): string(); string()
        elif op == 14:
            n, _ = ln()
            for _ in range(n): string()
        else: raise Exception('type %d' % op)
        body = bytes([op]) + data[start:i] + ver.to_bytes(2, 'little')
        out.append((key, body + crc64(body).to_bytes(8, 'little')))
    return ver, out


def view(r, k, full_stream=True):
    t = r.cmd('type', k)
    if t == 'string': return r.cmd('get', k)
    if t == 'list': return r.cmd('lrange', k, 0, -1)
    if t == 'hash': return sorted(r.cmd('hgetall', k))
    if t == 'set': return sorted(r.cmd('smembers', k))
    if t == 'zset': return r.cmd('zrange', k, 0, -1, 'withscores')
    if t == 'stream':
        x = r.cmd('xinfo', 'stream', k, 'full')
        d = dict(zip(x[::2], x[1::2]))
        gs = []
        for g in d[b'groups']:
            g = dict(zip(g[::2], g[1::2]))
            g[b'consumers'] = [(c[c.index(b'name') + 1], c[c.index(b'pel-count') + 1]) for c in g[b'consumers']]
            g[b'pending'] = [[p[0], p[1], p[3]] for p in g[b'pending']]
            gs.append(g)
        d[b'groups'] = gs
        return (t, d)
    return t

def make_keys(r):
    r.cmd('flushall')
    r.cmd('set', 's_raw', 'hello world'); r.cmd('set', 's_int8', '-12'); r.cmd('set', 's_int16', '1000')
    r.cmd('set', 's_int32', '-100000'); r.cmd('set', 's_big', '12345678901234'); r.cmd('set', 's_lzf', 'abcabcabc' * 20)
    r.cmd('rpush', 'l_small', 'a', '1', '-300', 'x' * 70, '123456789012')
    r.cmd('rpush', 'l_big', *[('e%d' % i) * 3 for i in range(300)])
    r.cmd('config', 'set', 'list-max-listpack-size', '4'); r.cmd('rpush', 'l_nodes', *[str(i) for i in range(10)])
    r.cmd('config', 'set', 'list-max-listpack-size', '-2')
    r.cmd('rpush', 'l_plain', 'y' * 20000, 'small')
    r.cmd('hset', 'h_small', 'f1', 'v1', 'n', '7', 'neg', '-5')
    r.cmd('hset', 'h_big', *sum([['f%d' % i, 'v%d' % i] for i in range(600)], []))
    r.cmd('sadd', 'i_set', '3', '-7', '100000', '5'); r.cmd('sadd', 'i_set64', '1', '9999999999')
    r.cmd('sadd', 't_set', 'a', 'b', '3')
    r.cmd('zadd', 'z_small', '1.5', 'a', '-2', 'b', 'inf', 'c', '3', 'd')
    r.cmd('zadd', 'z_big', *sum([[str(i / 3), 'm%d' % i] for i in range(200)], []))
    for i, f in [('1-1', ['f', 'v', 'g', 'w']), ('1-2', ['f', 'v2', 'g', 'w2']), ('2-0', ['other', 'z']), ('3-0', ['f', 'v3', 'g', 'w3'])]:
        r.cmd('xadd', 'x7', i, *f)
    r.cmd('xdel', 'x7', '1-2'); r.cmd('xgroup', 'create', 'x7', 'grp', '0'); r.cmd('xgroup', 'create', 'x7', 'grp2', '$')
    r.cmd('xreadgroup', 'group', 'grp', 'alice', 'count', '2', 'streams', 'x7', '>')
    r.cmd('xreadgroup', 'group', 'grp', 'bob', 'count', '1', 'streams', 'x7', '>')
    r.cmd('xgroup', 'createconsumer', 'x7', 'grp', 'carol')
    return [(k, r.cmd('object', 'encoding', k).decode(), r.cmd('dump', k)) for k in sorted(r.cmd('keys', '*'))]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--lattice-port', type=int, required=True)
    ap.add_argument('--redis-port', type=int, required=True)
    ap.add_argument('--src', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'target', 'redis-src', 'redis'))
    a = ap.parse_args()
    red, lat = R(a.redis_port), R(a.lattice_port)
    lat.cmd('flushall')
    same = 0
    keys = make_keys(red)
    for k, enc, payload in keys:
        res = lat.cmd('restore', k, 0, payload, 'replace')
        ok = not isinstance(res, Exception) and view(red, k) == view(lat, k)
        same += ok
        print('dump %-8s %-10s type %2d: %s' % (k.decode(), enc, payload[0], 'same' if ok else 'DIFFERENT (%s)' % res))
    print('redis-server DUMPs: %d of %d restored and read back the same' % (same, len(keys)))
    red.cmd('flushall'); lat.cmd('flushall')

    same = total = 0
    for f in sorted(glob.glob(os.path.join(a.src, 'tests', 'assets', '*.rdb'))):
        ver, pairs = split(open(f, 'rb').read())
        for k, p in pairs:
            x = red.cmd('restore', 'rdbchk', 0, p, 'replace'); y = lat.cmd('restore', 'rdbchk', 0, p, 'replace')
            vx = None if isinstance(x, Exception) else view(red, 'rdbchk')
            vy = None if isinstance(y, Exception) else view(lat, 'rdbchk')
            ok = str(x) == str(y) and vx == vy
            same += ok; total += 1
            print('rdb %-22s v%-2d type %2d: redis %s / lattice %s: %s' % (os.path.basename(f), ver, p[0], str(x)[:30], str(y)[:30], 'same' if ok else 'DIFFERENT'))
            red.cmd('del', 'rdbchk'); lat.cmd('del', 'rdbchk')
    print('test RDB files: %d of %d keys give the same answer on both' % (same, total))

    src = open(os.path.join(a.src, 'tests', 'integration', 'corrupt-dump.tcl')).read()
    tcl = lambda s: re.sub(rb'\\x([0-9A-Fa-f]{1,2})', lambda m: bytes([int(m.group(1), 16)]), s.encode('latin1'))
    c = Counter()
    for p in [tcl(m) for m in re.findall(r'restore [a-z_0-9]+ 0 "([^"]*)"', src)]:
        q = p[:-8] + crc64(p[:-8]).to_bytes(8, 'little')
        res = lat.cmd('restore', 'key', 0, q, 'replace')
        c[str(res)] += 1
        lat.cmd('del', 'key')
    print('corrupt-dump payloads, resealed: %s; PING after: %s' % (dict(c), lat.cmd('ping')))

main()
