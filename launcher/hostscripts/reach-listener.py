# Preflight reachability listener (launcher/preflight/checks.py listener_argv), standard library
# only: python3 -c <this> MARK '[[ip, port], ...]' LIFE_S.  Binds every ip:port, prints
# {"pid": <detached listener or null>, "errors": {"ip:port": reason}} and serves in the
# background until LIFE_S passed or the SSH session that started it ended.
import json, os, selectors, socket, sys, time
spec, life = json.loads(sys.argv[2]), float(sys.argv[3])
socks, errors = [], {}
for ip, port in spec:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((ip, port))
        s.listen(128)
        socks.append(s)
    except OSError as e:
        errors["%s:%d" % (ip, port)] = e.strerror or str(e)
        s.close()
if not socks:
    print(json.dumps({"pid": None, "errors": errors}))
    sys.exit(0)
def sshd_session():
    # The sshd process of the SSH connection that started us (an ancestor named sshd*): when
    # fleet's connection ends (Ctrl-C included) it exits, and so do we, before `life` is up.
    pid = os.getppid()
    while pid > 1:
        try:
            with open("/proc/%d/stat" % pid) as f:
                stat = f.read()
        except OSError:
            return None
        if stat[stat.index("(") + 1:stat.rindex(")")].startswith("sshd"):
            return pid
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
    return None
def alive(p):
    try:
        os.kill(p, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True
session = sshd_session()
pid = os.fork()
if pid:
    print(json.dumps({"pid": pid, "errors": errors}))
    sys.stdout.flush()
    os._exit(0)
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
sel = selectors.DefaultSelector()
for s in socks:
    sel.register(s, selectors.EVENT_READ, None)
end = time.time() + life
while time.time() < end and (session is None or alive(session)):
    for key, _ in sel.select(max(0.0, min(0.5, end - time.time()))):
        if key.data is None:
            try:
                conn, _ = key.fileobj.accept()
                sel.register(conn, selectors.EVENT_READ, "conn")
            except OSError:
                pass
        else:
            # The client closes first, so TIME_WAIT stays on its side, not on the port the
            # engine binds next.
            sel.unregister(key.fileobj)
            key.fileobj.close()
