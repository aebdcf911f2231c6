"""Two ranks in lockstep, as a collective makes them: step k ends once both
have written SYNC/r<rank>.<k> (a file barrier, the all-reduce).  Each step
computes for STEP_S first; a rank tells libckpt of the step LAG_S after the
barrier (rank 0 at once), so that a query can come between the two ranks'
boundaries, where the rank that holds keeps the other from its next step;
LAG_S "none": no barrier, the ranks train on their own.  It saves the step when told (its save directory gets "state"),
then waits for the stop (exit 75).  Usage: lockstep_trainer.py RANK SYNC
STEP_S LAG_S"""

import os
import sys
import time

import libckpt


def main():
    rank, sync = int(sys.argv[1]), sys.argv[2]
    step_s, alone = float(sys.argv[3]), sys.argv[4] == "none"
    lag_s = 0.0 if alone else float(sys.argv[4])
    other = 1 - rank
    ck = libckpt.open()
    for k in range(100000):
        time.sleep(step_s)
        open(os.path.join(sync, "r%d.%d" % (rank, k)), "w").close()
        while not alone and not os.path.exists(os.path.join(sync, "r%d.%d" % (other, k))):
            time.sleep(0.002)
        time.sleep(lag_s)
        a = ck.step(k)
        if a == libckpt.SAVE:
            with open(os.path.join(ck.save_dir, "state"), "w") as f:
                f.write("step %d\n" % k)
            ck.saved(k)
            print("saved step %d" % k, flush=True)
            end = time.monotonic() + 20
            while ck.step(k) != libckpt.STOP and time.monotonic() < end:
                time.sleep(0.01)
            return 75
        if a == libckpt.STOP:
            return 75
    return 0


if __name__ == "__main__":
    sys.exit(main())
