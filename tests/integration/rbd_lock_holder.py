#!/usr/bin/python3
"""Another Ceph client that takes an RBD image's exclusive lock on purpose
and keeps it, as `rbd-nbd --exclusive` or tcmu-runner's rbd handler do,
for rbd-fencing.sh (Debian's python3-rbd, hence /usr/bin/python3).

  rbd_lock_holder.py CONF POOL IMAGE READY_FILE

Takes the lock (librbd's rbd_lock_acquire: a lock taken this way is not
handed over when another client asks for it), then creates READY_FILE
and holds the lock until SIGTERM or SIGINT, when it releases it and
exits 0. Any failure: one line on stderr, exit 1.
"""
import signal
import sys

import rados
import rbd


def main():
    if len(sys.argv) != 5:
        print("usage: rbd_lock_holder.py CONF POOL IMAGE READY_FILE", file=sys.stderr)
        return 2
    conf, pool, name, ready = sys.argv[1:]
    # Blocked from the start and then waited for: a signal sent at any
    # moment is seen, and the lock is released before exit.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        with rados.Rados(conffile=conf) as cluster, cluster.open_ioctx(pool) as ioctx, \
                rbd.Image(ioctx, name) as image:
            image.lock_acquire(rbd.RBD_LOCK_MODE_EXCLUSIVE)
            with open(ready, "w") as f:
                f.write("holding %s/%s\n" % (pool, name))
            signal.sigwait({signal.SIGTERM, signal.SIGINT})
            image.lock_release()
    except (rados.Error, rbd.Error, OSError) as e:
        print("rbd_lock_holder: %s/%s: %s" % (pool, name, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
