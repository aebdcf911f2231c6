"""resume_trainer.py: the trainer tests/bench/resume.sh times to its first step.

    resume_trainer.py IMPORT_S [DIR]

Sleeps IMPORT_S seconds first, what `import torch` costs a real trainer,
then opens libckpt, waits for the restore (ck.resume_wait(): at once
without --early-start), reads every byte of its resume folder (DIR when
given: the baseline's, which runs without spotd) and prints
"first_step EPOCH_MS BYTES" before its first step.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../lib/python"))
import libckpt  # noqa: E402


def main():
    time.sleep(float(sys.argv[1]))
    ck = libckpt.open()
    ck.resume_wait()
    d = sys.argv[2] if len(sys.argv) > 2 else ck.resume_dir
    n = 0
    for base, _, files in os.walk(d or "/nonexistent"):
        for name in files:
            with open(os.path.join(base, name), "rb") as f:
                while True:
                    b = f.read(8 << 20)
                    if not b:
                        break
                    n += len(b)
    print("first_step %d %d" % (time.time() * 1000, n), flush=True)
    ck.close()


if __name__ == "__main__":
    main()
