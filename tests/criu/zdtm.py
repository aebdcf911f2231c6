"""zdtm.py: a Python process for the criu method's tests.

    python3 zdtm.py STEPS

Keeps its state in Python objects (a dict, a list, a generator, a random
number generator) and prints "done STEPS hash H" at the end, H the same for
every run that was not damaged.  ZDTM_STEP_US (default 2000) paces it.
With ZDTM_CRASH_AT=N and ZDTM_CRASH_FLAG=FILE it exits 3 at step N, once:
it creates FILE then, and does not crash while FILE exists.  With
ZDTM_CRASH_AFTER=FILE2 too, it waits at step N until FILE2 exists (the test
makes it once a dump was committed), so that a loaded machine cannot have
it crash before there is anything to restart from."""
import hashlib
import os
import random
import sys
import time


def counter():
    n = 0
    while True:
        n += 1
        yield n


def main():
    steps = int(sys.argv[1])
    pause = int(os.environ.get("ZDTM_STEP_US", "2000")) / 1e6
    rng = random.Random(1234)
    table, trail, gen = {}, [], counter()
    h = hashlib.sha256()
    print("zdtm.py: pid %d" % os.getpid(), flush=True)
    crash_at = int(os.environ.get("ZDTM_CRASH_AT", "-1"))
    flag = os.environ.get("ZDTM_CRASH_FLAG", "")
    after = os.environ.get("ZDTM_CRASH_AFTER", "")
    for s in range(steps):
        if s == crash_at and after:
            for _ in range(60000):
                if os.path.exists(after):
                    break
                time.sleep(0.001)
        if s == crash_at and flag and not os.path.exists(flag):
            open(flag, "w").close()
            print("crashing at step %d" % s, flush=True)
            sys.exit(3)
        k = rng.randrange(1 << 16)
        table[k] = table.get(k, 0) + s
        trail.append(next(gen))
        if len(trail) > 1000:
            trail = trail[-500:]
        h.update(b"%d:%d:%d;" % (k, table[k], trail[-1]))
        if s % 500 == 0:
            print("step %d" % s, flush=True)
        time.sleep(pause)
    if trail[-1] != steps:
        sys.exit("zdtm.py: the generator lost count: %d" % trail[-1])
    h.update(repr(sorted(table.items())).encode())
    print("done %d hash %s" % (steps, h.hexdigest()[:16]), flush=True)


main()
