#!/usr/bin/python3
"""A small, real PyTorch trainer that uses libckpt (lib/python/libckpt.py).

    train.py STEPS                                   # one process
    torchrun --standalone --nproc_per_node 2 \\
        --redirects 9:0 --tee 9:0 train.py STEPS     # DDP over gloo

An MLP learns a fixed random function of its input; the data, the batches
and the dropout masks all come from seeded generators, and every kernel is
deterministic on one thread, so the model after STEPS steps is the same bit
for bit whether the run was interrupted and resumed or not.  The last line
is "done STEPS sha256 HEX", HEX the SHA-256 of the model's tensors (the other
ranks print "rank R sha256 HEX" on stderr).

Under spotd (SPOT_SOCKET set): it resumes from ck.resume_dir (spotd gives
each local worker a directory of its own, .../w<LOCAL_RANK>, and resume_dir
already names it), saves model, optimizer, step and every RNG state with
torch.save when ck.step() says SAVE, and exits 75 (EX_TEMPFAIL: preempted,
state saved) when it says STOP.  Outside spotd libckpt is inert and it just
trains.  TRAINER_REQUEST_AT=N asks for a checkpoint at step N
(ck.request_save()), as a trainer on its own schedule would.

Under torchrun (WORLD_SIZE > 1) the workers must act at the same step, or
one would wait in an all-reduce for a peer that has left: spotd asks them
all to save at one step, but each learns of it only at its next ck.step().
So the workers agree every step (one small all-reduce) on whether all of
them have a save open, and whether any was told to stop.
"""

import hashlib
import os
import sys

try:
    import libckpt
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "lib", "python"))
    import libckpt

EXIT_PREEMPTED = 75                    # EX_TEMPFAIL: stopped, state saved
CKPT_NAME = "ckpt.pt"
SEED = 1234
N_SAMPLES, D_IN, D_HIDDEN, D_OUT, BATCH = 4096, 32, 64, 8, 64


def log(msg):
    print(msg, flush=True)


def report(call, *args):
    """A report to spotd; if spotd is gone, ck.step() says so next."""
    try:
        call(*args)
    except libckpt.CkptError as e:
        sys.stderr.write("train.py: libckpt: %s\n" % e)


def main():
    if len(sys.argv) != 2 or not sys.argv[1].isdigit() or int(sys.argv[1]) <= 0:
        sys.stderr.write("usage: train.py STEPS\n")
        return 2
    steps = int(sys.argv[1])
    request_at = os.environ.get("TRAINER_REQUEST_AT", "")
    request_at = int(request_at) if request_at.isdigit() else -1

    # Connect before importing torch (2-7 s): a notice that comes during the
    # import still finds the trainer connected; spotd's query waits in the
    # socket until the first ck.step().
    try:
        ck = libckpt.open()
    except libckpt.CkptError as e:
        sys.stderr.write("train.py: libckpt: %s\n" % e)
        return 1

    import torch
    import torch.distributed as dist
    import torch.nn as nn

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if world > 1:
        import datetime
        # A bounded timeout: a peer that vanishes fails us in a minute, not 30.
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    # The data set: the same on every rank; batches differ by rank.
    g = torch.Generator().manual_seed(SEED)
    x_all = torch.randn(N_SAMPLES, D_IN, generator=g)
    w_true = torch.randn(D_IN, D_OUT, generator=g) / D_IN ** 0.5
    y_all = torch.tanh(x_all @ w_true) + 0.05 * torch.randn(N_SAMPLES, D_OUT, generator=g)
    batches = torch.Generator().manual_seed(SEED + 1 + rank)

    torch.manual_seed(SEED)                     # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(D_IN, D_HIDDEN), nn.ReLU(), nn.Dropout(0.1),
                          nn.Linear(D_HIDDEN, D_HIDDEN), nn.ReLU(),
                          nn.Linear(D_HIDDEN, D_OUT))
    torch.manual_seed(SEED + rank)              # dropout masks differ by rank
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    step = 0
    if ck.resume_dir:
        path = os.path.join(ck.resume_dir, CKPT_NAME)
        try:
            state = torch.load(path, map_location="cpu")
        except OSError as e:
            sys.stderr.write("train.py: cannot load '%s': %s\n" % (path, e.strerror))
            return 1
        if state["step"] != ck.resume_step:
            sys.stderr.write("train.py: '%s' holds step %d, spotd says %d\n"
                             % (path, state["step"], ck.resume_step))
            return 1
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        batches.set_state(state["batches_rng"])
        step = ck.resume_step + 1
        log("resumed at step %d from %s" % (step, ck.resume_dir))

    net = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel
        net = DistributedDataParallel(model)
    loss_fn = nn.MSELoss()

    def save(save_dir, done_step):
        """Steps 0..done_step ran; written under a temporary name, fsync'ed,
        renamed, so the directory holds a whole checkpoint or none."""
        state = {"step": done_step, "model": model.state_dict(),
                 "optimizer": opt.state_dict(), "rng": torch.get_rng_state(),
                 "batches_rng": batches.get_state()}
        tmp = os.path.join(save_dir, CKPT_NAME + ".tmp")
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, os.path.join(save_dir, CKPT_NAME))
        fd = os.open(save_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    if rank == 0:
        log("training from step %d" % step)
    save_open = False
    flags = torch.zeros(2, dtype=torch.int32)
    for step in range(step, steps):
        stop = False
        if not save_open:
            try:
                a = ck.step(step)
            except libckpt.CkptError as e:
                # spotd went away: train on without checkpoints.
                sys.stderr.write("train.py: libckpt: %s; no more checkpoints\n" % e)
                ck.close()
                ck = libckpt.Ckpt()           # inert
                a = ck.step(step)
            save_open = a == libckpt.SAVE
            stop = a == libckpt.STOP
        all_save = save_open
        if world > 1:
            flags[0], flags[1] = int(save_open), int(stop)
            dist.all_reduce(flags)
            all_save, stop = int(flags[0]) == world, int(flags[1]) > 0
        if all_save:
            # The state as it is before this step: steps 0..step-1 ran.
            save_open = False
            if step == 0:
                report(ck.failed, "nothing trained yet")
            else:
                try:
                    save(ck.save_dir, step - 1)
                except OSError as e:
                    report(ck.failed, "cannot write '%s': %s" % (ck.save_dir, e.strerror))
                else:
                    report(ck.saved, step - 1)
        if stop:
            if save_open:
                report(ck.failed, "told to stop before every worker could save")
            log("stopped at step %d" % step)
            ck.close()
            if world > 1:
                dist.destroy_process_group()
            return EXIT_PREEMPTED
        if step == request_at and local_rank == 0:
            report(ck.request_save)

        i = torch.randint(0, N_SAMPLES, (BATCH,), generator=batches)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x_all[i]), y_all[i])
        loss.backward()
        opt.step()

    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().contiguous().numpy().tobytes())
    if rank == 0:
        log("done %d sha256 %s" % (steps, h.hexdigest()))
    else:
        print("rank %d sha256 %s" % (rank, h.hexdigest()), file=sys.stderr, flush=True)
    ck.close()
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
