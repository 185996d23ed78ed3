# Preflight's KV-transport probe (launcher/preflight/kvprobe.py), run by a PD unit's own image's
# python3 with the unit's rendered env (UCX_*, MC_*), so it tests the library the engine loads:
#   python3 -c <this> serve BACKEND IP PORT BYTES LIFE_S CLIENTS   (the prefill's host, detached)
#   python3 -c <this> read BACKEND IP PORT SRC_IP TIMEOUT_S        (each decode's host)
# BACKEND: nixl (nixl_agent over UCX) or mooncake (Mooncake's TransferEngine, P2P handshake).
# serve registers BYTES of a known pattern, listens on IP:PORT (the side channel; another port
# of IP when PORT is taken) and hands each client what it needs to read them; read connects
# from SRC_IP, reads the buffer across, checks it, and reports the transport the library picked
# (UCX: its own protocol table for remote reads, UCX_PROTO_INFO) and the bandwidth.  Each prints
# lines "fleet-kv-probe <JSON>": serve {"listening": port} or {"error": ...}; read {"transport",
# "how", "seconds", "bytes"} or {"error": ...}.  What the libraries log goes to a temp file
# (fds 1 and 2): their own error lines of the step that failed are quoted in "error".  The
# functions run alone too (tests load them under another __name__).
import base64, hashlib, json, os, re, socket, sys, tempfile, time

MARK = "fleet-kv-probe "
backend = "nixl"
_log = _out = None


def _flushed():
    """The log's size once every buffer reached it."""
    import ctypes
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.CDLL(None).fflush(None)  # the C libraries' stdio buffers (UCX prints with printf)
    return os.fstat(_log.fileno()).st_size


def captured(since=0):
    """What the libraries logged from byte ``since`` on."""
    end = _flushed()
    # pread: fds 1 and 2 write at the offset they share with _log; reading must not move it.
    return os.pread(_log.fileno(), max(0, end - since), since).decode("utf-8", "replace")


def own_lines(text):
    """The libraries' own complaints: UCX's ERROR/WARN lines (timestamp and source cut), else
    NIXL's or Mooncake's E-lines."""
    ucx = [m.group(1).strip() for m in re.finditer(r"UCX\s+(?:ERROR|WARN)\s+(.*)", text)]
    if ucx:
        return "UCX: " + "; ".join(dict.fromkeys(ucx))
    other = [m.group(1).strip() for m in re.finditer(r"^E\d{4} [\d:.]+\s+\d+ \S+\] (.*)$", text, re.M)]
    return "; ".join(dict.fromkeys(other[:2]))


def say(doc):
    _out.write(MARK + json.dumps(doc, sort_keys=True) + "\n")
    _out.flush()


step = "starting"  # what the probe was doing, for its error line
_since = 0  # the log's size when that step began


def begin(what):
    """A new step: an error in it quotes what the libraries logged from here on (Mooncake logs
    an E-line at every P2P-handshake initialize, "Local segment descriptor not found", which is
    no reason for a later read's failure)."""
    global step, _since
    step, _since = what, (_flushed() if _log is not None else 0)


def fail(err):
    own = own_lines(captured(_since)) or own_lines(captured())
    say({"error": "%s: %s%s" % (step, err, " (%s)" % own if own else "")})
    sys.exit(1)


def pattern(n):
    block = hashlib.sha256(b"fleet-kv-probe").digest() * 2048  # 64 KiB
    return (block * (n // len(block) + 1))[:n]


def ctypes_buffer(data_or_size):
    import ctypes
    if isinstance(data_or_size, int):
        buf = ctypes.create_string_buffer(data_or_size)
    else:
        buf = ctypes.create_string_buffer(data_or_size, len(data_or_size))
    return buf, ctypes.addressof(buf)


def ucx_transport(text):
    """(config, how) of UCX's protocol table for remote reads into host memory (the peer's
    lane: its last table), e.g. ("tcp/veth0", "software emulation") or ("rc_mlx5/mlx5_0:1",
    "zero-copy")."""
    found, rows, borders = None, None, 0
    for line in text.splitlines():
        if "remote memory read by ucp_get" in line:
            rows, borders = [], 0
        elif rows is not None and re.search(r"\+-+\+", line):
            borders += 1
            if borders == 3:  # under the title: border, header, border, the rows, border
                if rows:
                    found = (", ".join(dict.fromkeys(r[2] for r in rows)), ", ".join(dict.fromkeys(r[1] for r in rows)))
                rows = None
        elif rows is not None and borders == 2:
            cells = [c.strip() for c in line.split("|")[1:-1]]
            if len(cells) == 3:
                rows.append(cells)
    return found


def serve(ip, port, size, life, clients):
    data = pattern(size)
    buf, addr = ctypes_buffer(data)
    try:
        if backend == "nixl":
            from nixl._api import nixl_agent, nixl_agent_config
            begin("creating NIXL's UCX backend on %s" % ip)
            agent = nixl_agent("fleet-kv-probe-serve", nixl_agent_config(backends=["UCX"]))
            begin("registering %d bytes with NIXL on %s" % (size, ip))
            agent.register_memory(agent.get_reg_descs([(addr, size, 0, "")], "DRAM"))
            offer = {"agent": base64.b64encode(agent.get_agent_metadata()).decode(),
                     "descs": base64.b64encode(agent.get_serialized_descs(
                         agent.get_xfer_descs([(addr, size, 0)], "DRAM"))).decode()}
        else:
            from mooncake.engine import TransferEngine
            engine = TransferEngine()
            begin("starting Mooncake's transfer engine on %s" % ip)
            if engine.initialize(ip, "P2PHANDSHAKE", os.environ.get("MOONCAKE_PROTOCOL", "tcp"),
                                 os.environ.get("MOONCAKE_DEVICE", "")) != 0:
                fail("initialize failed")
            begin("registering %d bytes with Mooncake on %s" % (size, ip))
            if engine.register_memory(addr, size) != 0:
                fail("register_memory failed")
            offer = {"session": "%s:%d" % (ip, engine.get_rpc_port()), "addr": addr}
    except ImportError as e:
        say({"error": "no %s in the image: %s" % (backend, e), "missing": True})
        sys.exit(1)
    except Exception as e:  # the library's own exception, with its log lines
        fail("%s: %s" % (type(e).__name__, e))
    offer.update(bytes=size, sha=hashlib.sha256(data).hexdigest(), ip=ip)
    line = (json.dumps(offer) + "\n").encode()
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((ip, port))
    except OSError:
        s.bind((ip, 0))  # the side channel is held (our own running engine): probe beside it
    s.listen(8)
    s.settimeout(1.0)
    say({"listening": s.getsockname()[1]})
    deadline, done = time.monotonic() + life, 0
    while done < clients and time.monotonic() < deadline:
        try:
            c, _ = s.accept()
        except socket.timeout:
            continue
        with c:
            c.settimeout(max(1.0, deadline - time.monotonic()))
            try:
                c.sendall(line)
                c.makefile("rb").readline()  # the client's "done" (or EOF)
            except OSError:
                pass
        done += 1


def read(ip, port, src, timeout):
    s = socket.socket()
    s.settimeout(timeout)
    try:
        s.bind((src, 0))
        s.connect((ip, port))
        offer = json.loads(s.makefile("rb").readline() or b"null")
    except OSError as e:
        say({"error": "side channel %s:%d (from %s): %s" % (ip, port, src, (e.strerror or str(e)).lower()),
             "side_channel": True})
        sys.exit(1)
    if not isinstance(offer, dict):
        say({"error": "side channel %s:%d: the probe on the prefill host sent nothing" % (ip, port)})
        sys.exit(1)
    size = offer["bytes"]
    buf, addr = ctypes_buffer(size)
    try:
        if backend == "nixl":
            seconds, how, transport = read_nixl(offer, src, addr, size, timeout)
        else:
            seconds, how, transport = read_mooncake(offer, src, addr, size)
    except ImportError as e:
        say({"error": "no %s in the image: %s" % (backend, e), "missing": True})
        sys.exit(1)
    except Exception as e:
        fail("%s: %s" % (type(e).__name__, e))
    if hashlib.sha256(buf.raw).hexdigest() != offer["sha"]:
        say({"error": "%s read from %s: the bytes read differ from the prefill's buffer" % (backend, ip)})
        sys.exit(1)
    s.sendall(b"done\n")
    s.close()
    say({"transport": transport, "how": how, "seconds": seconds, "bytes": size})


def read_nixl(offer, src, addr, size, timeout):
    from nixl._api import nixl_agent, nixl_agent_config
    begin("creating NIXL's UCX backend on %s" % src)
    agent = nixl_agent("fleet-kv-probe-read", nixl_agent_config(backends=["UCX"]))
    agent.register_memory(agent.get_reg_descs([(addr, size, 0, "")], "DRAM"))
    begin("reading %d bytes with NIXL from %s" % (size, offer["ip"]))
    peer = agent.add_remote_agent(base64.b64decode(offer["agent"]))
    remote = agent.deserialize_descs(base64.b64decode(offer["descs"]))
    local = agent.get_xfer_descs([(addr, size, 0)], "DRAM")
    seconds = 0.0
    for _ in range(2):  # the first read also opens the connection; the second is timed
        handle = agent.initialize_xfer("READ", local, remote, peer)
        t0, deadline = time.monotonic(), time.monotonic() + timeout
        state = agent.transfer(handle)
        while state == "PROC" and time.monotonic() < deadline:
            state = agent.check_xfer_state(handle)
        seconds = time.monotonic() - t0
        agent.release_xfer_handle(handle)
        if state != "DONE":
            raise RuntimeError("NIXL READ of %d bytes ended %s after %.1fs" % (size, state, seconds))
    found = ucx_transport(captured())
    return seconds, found[1] if found else "", found[0] if found else "unknown (UCX printed no protocol table)"


def read_mooncake(offer, src, addr, size):
    from mooncake.engine import TransferEngine
    engine = TransferEngine()
    protocol = os.environ.get("MOONCAKE_PROTOCOL", "tcp")
    begin("starting Mooncake's transfer engine on %s" % src)
    if engine.initialize(src, "P2PHANDSHAKE", protocol, os.environ.get("MOONCAKE_DEVICE", "")) != 0:
        raise RuntimeError("initialize failed")
    if engine.register_memory(addr, size) != 0:
        raise RuntimeError("register_memory failed")
    begin("reading %d bytes with Mooncake from %s" % (size, offer["session"]))
    seconds = 0.0
    for _ in range(2):
        t0 = time.monotonic()
        if engine.transfer_sync_read(offer["session"], addr, offer["addr"], size) != 0:
            raise RuntimeError("transfer_sync_read of %d bytes from %s failed" % (size, offer["session"]))
        seconds = time.monotonic() - t0
    return seconds, "", protocol


if __name__ == "__main__":
    role, backend = sys.argv[1], sys.argv[2]
    _log = tempfile.TemporaryFile()
    _out = os.fdopen(os.dup(1), "w")
    os.dup2(_log.fileno(), 1)
    os.dup2(_log.fileno(), 2)
    if role == "read":
        os.environ.setdefault("UCX_PROTO_INFO", "y")  # UCX prints the protocols it picked
    if role == "serve":
        serve(sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]))
    else:
        read(sys.argv[3], int(sys.argv[4]), sys.argv[5], float(sys.argv[6]))
