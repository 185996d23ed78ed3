# Preflight reachability client (launcher/preflight/checks.py client_argv), standard library
# only: python3 -c <this> MARK '[[src_ip, dst_ip, port, timeout_s], ...]'.  Prints
# {"dst_ip:port": null (connected) or the reason} as JSON.
import json, socket, sys, threading, time
jobs, out = json.loads(sys.argv[2]), {}
def one(src, dst, port, timeout):
    key = "%s:%d" % (dst, port)
    for attempt in (0, 1):
        s = socket.socket()
        s.settimeout(timeout)
        try:
            s.bind((src, 0))
        except OSError as e:
            out[key] = "cannot bind source address %s: %s" % (src, e.strerror or e)
            s.close()
            return
        try:
            s.connect((dst, port))
            out[key] = None
            return
        except socket.timeout:
            out[key] = "timed out after %gs" % timeout
        except OSError as e:
            out[key] = (e.strerror or str(e)).lower()
        finally:
            s.close()
        if attempt == 0 and "refused" in (out[key] or ""):
            time.sleep(0.5)
            continue
        return
threads = [threading.Thread(target=one, args=tuple(j)) for j in jobs]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(out, sort_keys=True))
