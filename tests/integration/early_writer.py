"""A trainer for t-early.sh, on lib/python/libckpt.py: at each save it
writes state.bin (MIB MiB and 1000 bytes, the content a function of the
step) slowly, a MiB at a time, so that spotd stores it while it is being
written; then,
with EARLY_REWRITE=1, it seeks back and rewrites 100 KiB inside the first
chunk, which spotd stored already.  EARLY_DONE=1 calls ck.file_done()
before the rewrite (the worst case: a file said finished, then changed).
EARLY_OPEN=1 keeps the file open until after ck.saved(): spotd learns that
its last piece is written from ck.file_done() alone (and the writer then
gives it 2 s to store that piece before it calls ck.saved()).
Prints "saved STEP SHA256" for each save, the sha256 of state.bin as it
was when ck.saved() was called.

    python3 early_writer.py MIB
"""

import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "lib", "python"))
import libckpt  # noqa: E402

MIB = 1 << 20


def piece(step, i):
    return hashlib.sha256(b"%d.%d" % (step, i)).digest() * (MIB // 32)


def save(ck, path, step, mib):
    h = hashlib.sha256()
    f = open(path, "wb")
    for i in range(mib):
        f.write(piece(step, i))
        f.flush()
        time.sleep(0.01)
    f.write(piece(step, mib)[:1000])
    f.flush()
    if os.environ.get("EARLY_OPEN") != "1":
        f.close()
    if os.environ.get("EARLY_DONE") == "1":
        ck.file_done("state.bin")
        if os.environ.get("EARLY_OPEN") == "1":
            # Time for spotd to store the last chunks that file_done()
            # released, before ck.saved() hands the rest to the save (which
            # stores them too, but not counted early): 2 s for 16 MiB at
            # most, room for a loaded machine.
            time.sleep(2)
    if os.environ.get("EARLY_REWRITE") == "1":
        time.sleep(0.2)                 # long enough for spotd to have stored it
        with open(path, "r+b") as w:
            w.seek(MIB + MIB // 2)
            w.write(b"\x5a" * (100 * 1024))
    with open(path, "rb") as r:
        for b in iter(lambda: r.read(MIB), b""):
            h.update(b)
    print("saved %d %s" % (step, h.hexdigest()), flush=True)
    return f


def main():
    mib = int(sys.argv[1])
    ck = libckpt.open()
    step = ck.resume_step + 1 if ck.resume_dir else 0
    while True:
        a = ck.step(step)
        if a == libckpt.SAVE:
            f = save(ck, os.path.join(ck.save_dir, "state.bin"), step, mib)
            ck.saved(step)
            f.close()
            a = ck.step(step)
        if a == libckpt.STOP:
            print("stopped at step %d" % step, flush=True)
            ck.close()
            return 75
        time.sleep(0.02)
        step += 1


if __name__ == "__main__":
    sys.exit(main())
