"""early_start_trainer.py: a trainer for spotd's --early-start (t-early-start.sh).

    early_start_trainer.py MODE STEPS MIB

Its state is MIB MiB of random bytes (state.bin) and their SHA-256
(state.sha) with its step (step.txt), written when spotd asks.  At start
it looks at SPOT_RESUME_DIR at once and says whether the folder is there
("at start: absent" or "present"), then:

    wait   waits in resume_wait(), then loads the folder
    peek   watches the folder without waiting, loads it the moment it
           appears, and only then waits

Loading checks state.bin against state.sha: "resumed STEP whole" or
"resumed STEP in part"; "restore failed" (exit 3) when resume_wait() says
the restore failed; "fresh" without a folder.  Then it trains until STEPS,
10 ms a step, and prints "done STEP".
"""
import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../lib/python"))
import libckpt  # noqa: E402


def load(d):
    try:
        with open(os.path.join(d, "state.bin"), "rb") as f:
            h = hashlib.sha256(f.read()).hexdigest()
        with open(os.path.join(d, "state.sha")) as f:
            want = f.read().strip()
        with open(os.path.join(d, "step.txt")) as f:
            step = int(f.read())
    except (OSError, ValueError):
        return None, False
    return step, h == want


def save(d, step, mib):
    data = os.urandom(mib << 20)
    with open(os.path.join(d, "state.bin"), "wb") as f:
        f.write(data)
    with open(os.path.join(d, "state.sha"), "w") as f:
        f.write(hashlib.sha256(data).hexdigest())
    with open(os.path.join(d, "step.txt"), "w") as f:
        f.write(str(step))


def main():
    mode, steps, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ck = libckpt.open()
    step = 0
    rd = ck.resume_dir
    if rd:
        print("at start: %s" % ("present" if os.path.exists(rd) else "absent"), flush=True)
        if mode == "peek":
            end = time.monotonic() + 120
            while not os.path.exists(rd) and time.monotonic() < end:
                time.sleep(0.001)
            got, whole = load(rd)
            print("peek: appeared %s" % ("whole" if whole else "in part"), flush=True)
        try:
            ck.resume_wait()
        except libckpt.CkptError as e:
            if e.code == libckpt.E_RESTORE:
                print("restore failed", flush=True)
                sys.exit(3)
            raise
        got, whole = load(rd)
        print("resumed %s %s" % (got, "whole" if whole else "in part"), flush=True)
        step = (got if got is not None else ck.resume_step) + 1
    else:
        print("fresh", flush=True)
    while step < steps:
        a = ck.step(step)
        if a == libckpt.SAVE:
            try:
                save(ck.save_dir, step, mib)
                ck.saved(step)
            except OSError as e:
                ck.failed(str(e))
        elif a == libckpt.STOP:
            print("stopped at %d" % step, flush=True)
            return
        time.sleep(0.01)
        step += 1
    print("done %d" % step, flush=True)


if __name__ == "__main__":
    main()
