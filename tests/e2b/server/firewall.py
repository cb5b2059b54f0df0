# The local E2B server's egress firewall for one sandbox, enforcing its network.allowOut and
# denyOut the way E2B documents them (https://e2b.dev/docs/network/internet-access):
#   - allowOut holds IP addresses, CIDR ranges and domain names ("*.example.com" for the
#     subdomains); denyOut holds addresses and ranges only; allow beats deny; what neither
#     names is allowed.
#   - A domain is matched on TCP port 80 by the HTTP Host header and on 443 by the TLS SNI;
#     every other port, and a request naming no listed domain, is matched by address only.
#   - When allowOut names a domain, the default nameserver 8.8.8.8 is allowed: the sandbox
#     resolves names itself.
#   - A refused connection was accepted first (E2B's firewall must see the head before it
#     decides); it is then closed without a byte reaching anyone.
#
# The server routes every TCP connection of the sandbox to port 15001 on the sandbox's loopback
# and its DNS queries for 8.8.8.8 to 15053 (iptables REDIRECT in the sandbox's network
# namespace); this process listens there, in that namespace, and connects upstream from the
# host's. Tests must reach nothing but this machine: the only destinations are the test routes
# the config names ("ADDRESS:PORT" -> "127.0.0.1:PORT"), and the only names that resolve are
# the config's; every other allowed destination is refused with a line in the server's log.
#
#   python3 firewall.py NETNS_PATH CONFIG_JSON
# CONFIG_JSON: {"allowOut": [...], "denyOut": [...], "names": {NAME: ADDRESS},
#               "routes": {"ADDRESS:PORT": "127.0.0.1:PORT"}}
# Prints "ready" once it listens; ends when its stdin closes (the server is gone).
import asyncio
import ctypes
import ipaddress
import json
import os
import socket
import struct
import sys

CLONE_NEWNET = 0x40000000
SO_ORIGINAL_DST = 80
TCP_PORT, DNS_PORT = 15001, 15053
HEAD_LIMIT = 16384


def log(*args):
    sys.stderr.write('firewall: ' + ' '.join(str(a) for a in args) + '\n')
    sys.stderr.flush()


def in_namespace(path, make):
    """Runs make() in the network namespace at `path`, then returns to this one."""
    libc = ctypes.CDLL(None, use_errno=True)
    here = os.open('/proc/self/ns/net', os.O_RDONLY)
    there = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(there, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), 'setns into the sandbox')
        try:
            return make()
        finally:
            if libc.setns(here, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), 'setns back')
    finally:
        os.close(here)
        os.close(there)


class Rules:
    def __init__(self, config):
        self.allow_nets, self.allow_names, self.deny_nets = [], [], []
        for entry in config.get('allowOut', []):
            try:
                self.allow_nets.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                self.allow_names.append(entry.lower().rstrip('.'))
        for entry in config.get('denyOut', []):
            self.deny_nets.append(ipaddress.ip_network(entry, strict=False))
        self.names = {k.lower(): v for k, v in config.get('names', {}).items()}
        self.routes = config.get('routes', {})

    def name_allowed(self, host):
        host = host.lower().rstrip('.')
        for pattern in self.allow_names:
            if pattern.startswith('*.'):
                if host.endswith(pattern[1:]) and len(host) > len(pattern) - 1:
                    return True
            elif host == pattern:
                return True
        return False

    def decide(self, address, port, name):
        ip = ipaddress.ip_address(address)
        if any(ip in net for net in self.allow_nets):
            return True, 'allowed by address'
        if name is not None and port in (80, 443) and self.name_allowed(name):
            return True, f'allowed by name {name}'
        if any(ip in net for net in self.deny_nets):
            return False, 'denied' + (f' (name {name} not listed)' if name else '')
        return True, 'not denied'


def http_host(head):
    """The Host header of an HTTP request head, without its port; None when there is none."""
    for line in head.split(b'\r\n')[1:]:
        if not line:
            break
        key, _, value = line.partition(b':')
        if key.strip().lower() == b'host':
            host = value.strip().decode('latin-1')
            if host.startswith('['):
                return host[1:host.find(']')]
            return host.rsplit(':', 1)[0] if host.count(':') == 1 else host
    return None


def tls_sni(data):
    """The server name of a TLS ClientHello record; None when it has none or is cut short."""
    try:
        if data[0] != 0x16 or data[5] != 0x01:
            return None
        at = 9 + 2 + 32  # record header, handshake header, version, random
        at += 1 + data[at]  # session id
        at += 2 + struct.unpack('!H', data[at:at + 2])[0]  # cipher suites
        at += 1 + data[at]  # compression methods
        end = at + 2 + struct.unpack('!H', data[at:at + 2])[0]
        at += 2
        while at + 4 <= end:
            kind, size = struct.unpack('!HH', data[at:at + 4])
            at += 4
            if kind == 0:  # server_name: list length, then (type, length, name)
                name_len = struct.unpack('!H', data[at + 3:at + 5])[0]
                return data[at + 5:at + 5 + name_len].decode('ascii')
            at += size
    except (IndexError, struct.error, UnicodeDecodeError):
        return None
    return None


async def read_head(reader, port):
    """What the client sends first: an HTTP head (port 80) or a TLS ClientHello record (443)."""
    data = b''
    while len(data) < HEAD_LIMIT:
        chunk = await reader.read(HEAD_LIMIT - len(data))
        if not chunk:
            break
        data += chunk
        if port == 80 and b'\r\n\r\n' in data:
            break
        if port == 443 and len(data) >= 5 and len(data) >= 5 + struct.unpack('!H', data[3:5])[0]:
            break
    return data


async def pipe(reader, writer):
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def connection(rules, reader, writer):
    try:
        raw = writer.get_extra_info('socket').getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    except OSError as e:  # not a redirected connection (no NAT entry): nothing to decide on
        log('a connection without a destination:', e)
        writer.close()
        return
    port, packed = struct.unpack('!2xH4s8x', raw)
    address = socket.inet_ntoa(packed)
    first, name = b'', None
    try:
        if port in (80, 443) and rules.allow_names:
            first = await asyncio.wait_for(read_head(reader, port), 10)
            name = http_host(first) if port == 80 else tls_sni(first)
        allowed, why = rules.decide(address, port, name)
        route = rules.routes.get(f'{address}:{port}')
        log(f'{address}:{port}', why)
        if not allowed:
            return
        if route is None:
            log(f'{address}:{port} has no test route: refused (the local server reaches only '
                'this machine)')
            return
        host, up_port = route.rsplit(':', 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(up_port))
        up_writer.write(first)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        up_writer.close()
    except (asyncio.TimeoutError, ConnectionError, OSError) as e:
        log(f'{address}:{port}', e)
    finally:
        writer.close()


class Dns(asyncio.DatagramProtocol):
    """Answers A queries for the config's names; every other name does not exist."""

    def __init__(self, rules):
        self.rules = rules

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        try:
            at, labels = 12, []
            while data[at]:
                labels.append(data[at + 1:at + 1 + data[at]].decode('ascii'))
                at += 1 + data[at]
            question = data[12:at + 5]
            qtype = struct.unpack('!H', data[at + 1:at + 3])[0]
        except (IndexError, struct.error, UnicodeDecodeError):
            return
        address = self.rules.names.get('.'.join(labels).lower())
        answers = b''
        if address and qtype == 1:
            answers = b'\xc0\x0c' + struct.pack('!HHIH', 1, 1, 60, 4) + socket.inet_aton(address)
        rcode = 0 if address else 3  # NXDOMAIN
        flags = 0x8180 | rcode
        header = data[:2] + struct.pack('!HHHHH', flags, 1, 1 if answers else 0, 0, 0)
        self.transport.sendto(header + question + answers, addr)


async def main():
    netns, config = sys.argv[1], json.loads(sys.argv[2])
    rules = Rules(config)

    def listeners():
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind(('127.0.0.1', TCP_PORT))
        tcp.listen(128)
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(('127.0.0.1', DNS_PORT))
        return tcp, udp

    tcp, udp = in_namespace(netns, listeners)
    loop = asyncio.get_running_loop()
    await asyncio.start_server(lambda r, w: connection(rules, r, w), sock=tcp)
    await loop.create_datagram_endpoint(lambda: Dns(rules), sock=udp)
    print('ready', flush=True)
    # The server holds our stdin: when it ends, so do we.
    await loop.run_in_executor(None, sys.stdin.read)


asyncio.run(main())
