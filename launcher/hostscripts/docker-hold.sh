# Hold docker units before their group goes down (launcher/render.py hold_argv):
# sh -c <this> sh NAME...  Once one rank of a multi-node group stops, the others fail (their
# process group is broken) and docker's restart policy brings them back at once -- and a
# `docker stop` that lands during that restart waits for the new process instead of stopping it.
# So every rank of the group gets --restart=no, on every host, before any rank is stopped.
# Never fails: a missing container is simply not held.
docker update --restart=no "$@" >/dev/null 2>&1 || true
