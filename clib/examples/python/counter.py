#!/usr/bin/env python3
"""Count to N under a shmlock spinlock from Python, through ctypes.

No build step beyond the library (make -C clib): point SHMLOCK_LIB at
libshmlock.so (or install it where ctypes.util.find_library looks) and run,
from the repository's root,

    SHMLOCK_LIB=clib/build/libshmlock.so python3 clib/examples/python/counter.py jobs 1000

It shares the lock and the counter with every other process, in any
language, that counts in the segment.
"""
import ctypes
import ctypes.util
import os
import sys

OWNERDEAD, INCONSISTENT = 1, 2
PIDTID = 0


class ShmlockError(Exception):
    pass


def load():
    path = os.environ.get("SHMLOCK_LIB") or ctypes.util.find_library("shmlock")
    if not path:
        sys.exit("counter.py: libshmlock not found: set SHMLOCK_LIB")
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        sys.exit("counter.py: cannot load libshmlock (make -C clib builds it): %s" % e)
    lib.shmlock_strerror.restype = ctypes.c_char_p
    lib.shmlock_strerror.argtypes = [ctypes.c_int]
    lib.shmlock_open_or_create.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.shmlock_close.argtypes = [ctypes.c_void_p]
    lib.shmlock_spin_named.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
    lib.shmlock_spin_close.argtypes = [ctypes.c_void_p]
    lib.shmlock_data.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
    lib.shmlock_holder_new.restype = ctypes.c_uint64
    for f in ("shmlock_spin_lock", "shmlock_spin_unlock", "shmlock_spin_mark_consistent"):
        getattr(lib, f).argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    return lib


def check(lib, what, rc):
    if rc < 0:
        raise ShmlockError("%s: %s" % (what, lib.shmlock_strerror(rc).decode()))
    return rc


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: counter.py SEGMENT N")
    lib = load()
    seg, lock, region = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    check(lib, "open", lib.shmlock_open_or_create(sys.argv[1].encode(), None, ctypes.byref(seg)))
    check(lib, "spinlock", lib.shmlock_spin_named(seg, b"counter", PIDTID, ctypes.byref(lock)))
    check(lib, "data region", lib.shmlock_data(seg, b"counter", 8, ctypes.byref(region)))
    counter = ctypes.c_uint64.from_address(region.value)  # guarded by the lock

    me = lib.shmlock_holder_new()
    for _ in range(int(sys.argv[2])):
        if check(lib, "lock", lib.shmlock_spin_lock(lock, me)) in (OWNERDEAD, INCONSISTENT):
            lib.shmlock_spin_mark_consistent(lock, me)  # an increment is never half done
        counter.value += 1
        check(lib, "unlock", lib.shmlock_spin_unlock(lock, me))

    check(lib, "lock", lib.shmlock_spin_lock(lock, me))
    print("counter", counter.value)
    check(lib, "unlock", lib.shmlock_spin_unlock(lock, me))
    lib.shmlock_spin_close(lock)
    check(lib, "close", lib.shmlock_close(seg))


if __name__ == "__main__":
    try:
        main()
    except ShmlockError as e:
        sys.exit("counter.py: %s" % e)  # one line, as the C example says it
