"""examples/c-trainer against a scripted spotd on a real Unix socket: it
saves when asked, stops (exit 75), resumes from the saved directory on a
"new node", and ends with the same state hash as a run that was never
interrupted.  Prints PASS:/FAIL: lines.  Usage: c_trainer.py TRAINER"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading

import strictjson  # the tests' one strict JSON parser (tests/integration)

FAILED = []


def check(name, ok, why=""):
    print(("PASS: c-trainer: %s" % name) if ok else ("FAIL: c-trainer: %s: %s" % (name, why)),
          flush=True)
    if not ok:
        FAILED.append(name)


def send(conn, **m):
    conn.sendall(json.dumps(dict(v=1, **m)).encode() + b"\n")


def next_msg(f):
    """The next message that is not a progress report (one a second)."""
    while True:
        m = strictjson.loads(f.readline())
        if m.get("type") != "progress":
            return m


def serve(srv, plan, out):
    """One trainer: welcome (resume or not); with plan["save_dir"], ask for
    a checkpoint one step after the trainer's current step, then stop."""
    conn, _ = srv.accept()
    f = conn.makefile("rb")
    try:
        hello = strictjson.loads(f.readline())
        out["hello"] = hello
        send(conn, type="welcome", resume_dir=plan.get("resume_dir"),
             resume_step=plan.get("resume_step"), gen=plan.get("gen"))
        if plan.get("save_dir"):
            send(conn, type="query", id=1)
            m = next_msg(f)
            out["step"] = m
            target = m["step"] + 1
            send(conn, type="checkpoint", id=2, gen=1, step=target, dir=plan["save_dir"],
                 deadline=None)
            out["saved"] = next_msg(f)
            send(conn, type="stop", reason="notice")
        f.read()
    finally:
        conn.close()


def run(trainer, sock, plan, steps):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock)
    srv.listen(1)
    out = {}
    t = threading.Thread(target=serve, args=(srv, plan, out), daemon=True)
    t.start()
    env = dict(os.environ, SPOT_SOCKET=sock, LOCAL_RANK="0")
    p = subprocess.run([trainer, str(steps), "2"], env=env, capture_output=True, text=True,
                       timeout=120)
    t.join(10)
    srv.close()
    os.unlink(sock)
    return p, out


def main():
    trainer = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="spotd-ctrainer.")
    sock = os.path.join(tmp, "ctl.sock")
    steps = 400

    ref = subprocess.run([trainer, str(steps), "2"], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "SPOT_SOCKET"})
    check("an uninterrupted run ends with a hash", ref.returncode == 0 and "hash" in ref.stdout,
          ref.stdout + ref.stderr)

    save_dir = os.path.join(tmp, "ck")
    os.mkdir(save_dir)
    p, out = run(trainer, sock, {"save_dir": save_dir}, steps)
    check("asked to save and stop, it exits 75", p.returncode == 75,
          "exit %d: %s%s" % (p.returncode, p.stdout, p.stderr))
    saved = out.get("saved", {})
    check("it says saved, with the step its files hold",
          saved.get("type") == "saved" and saved.get("id") == 2 and
          saved.get("step") == out["step"]["step"], repr(out))
    check("its files are in the directory spotd gave",
          os.path.getsize(os.path.join(save_dir, "state.bin")) == 2 << 20)
    check("the hello names the local rank", out.get("hello", {}).get("local_rank") == 0,
          repr(out.get("hello")))

    p2, out2 = run(trainer, sock, {"resume_dir": save_dir, "resume_step": saved.get("step"),
                                   "gen": 1}, steps)
    check("the new node resumes where the checkpoint was",
          "resumed at step %d" % (saved.get("step", -2) + 1) in p2.stdout, p2.stdout + p2.stderr)
    check("and ends with the uninterrupted run's hash",
          p2.returncode == 0 and p2.stdout.split()[-1:] == ref.stdout.split()[-1:],
          "%r vs %r" % (p2.stdout, ref.stdout))
    for name in os.listdir(save_dir):
        os.unlink(os.path.join(save_dir, name))
    os.rmdir(save_dir)
    os.rmdir(tmp)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
