#!/usr/bin/python3
"""Header notices on an RBD image, as fast as one client makes them, for
rbd.sh: every image-meta change notifies the image's watchers (tgtd's
librbd), which then re-read the header (Debian's python3-rbd, hence
/usr/bin/python3).

  rbd_header_notices.py CONF POOL IMAGE PID [MAX]

Sets the image's metadata key "rbio-test-notice" again and again while
process PID lives, at most MAX times (default 2000), then removes the key
and prints "N header notices". Any failure: one line on stderr, exit 1.
"""
import os
import sys

import rados
import rbd

KEY = "rbio-test-notice"


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main():
    if len(sys.argv) not in (5, 6):
        print("usage: rbd_header_notices.py CONF POOL IMAGE PID [MAX]", file=sys.stderr)
        return 2
    conf, pool, name = sys.argv[1:4]
    try:
        pid = int(sys.argv[4])
        limit = int(sys.argv[5]) if len(sys.argv) == 6 else 2000
    except ValueError:
        print("rbd_header_notices: PID and MAX are numbers", file=sys.stderr)
        return 2
    count = 0
    try:
        with rados.Rados(conffile=conf) as cluster, cluster.open_ioctx(pool) as ioctx, \
                rbd.Image(ioctx, name) as image:
            while count < limit and alive(pid):
                image.metadata_set(KEY, str(count))
                count += 1
            image.metadata_remove(KEY)
    except (rados.Error, rbd.Error, OSError) as e:
        print("rbd_header_notices: %s/%s after %d notices: %s" % (pool, name, count, e), file=sys.stderr)
        return 1
    print("%d header notices" % count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
