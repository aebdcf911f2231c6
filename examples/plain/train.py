#!/usr/bin/python3
"""A PyTorch trainer of the most common shape, that knows nothing of spotd.

    CKPT_DIR=DIR train.py STEPS
    CKPT_DIR=DIR torchrun --nproc_per_node 2 --redirects 9:0 --tee 9:0 train.py STEPS

It reads only CKPT_DIR, SAVE_EVERY (default 100), CKPT_LAYOUT, STEP_FILE,
STEP_MS (a pause after each step, default 0: the model stands for a slower
one in demos and tests) and the torchrun variables (RANK, WORLD_SIZE,
LOCAL_RANK...).  Every SAVE_EVERY steps global rank 0 saves model,
optimizer, step and RNG states with torch.save, as

    CKPT_LAYOUT=files    (default)  CKPT_DIR/ckpt-00000150.pt
    CKPT_LAYOUT=folders             CKPT_DIR/checkpoint-150/model.pt, then
                                    trainer_state.json (Hugging Face's shape)
    CKPT_LAYOUT=lightning           CKPT_DIR/epoch=0-step=150.ckpt
    CKPT_LAYOUT=dcp                 CKPT_DIR/step-150/__0_0.distcp, then
                                    .metadata (torchtitan's and DCP's shape)
    CKPT_LAYOUT=last                CKPT_DIR/last.pt, rewritten in place at
                                    each save (Lightning's save_last), and
                                    the step into CKPT_DIR/STEP_FILE if set

files and lightning written under a temporary name and renamed into place,
folders and dcp with their last file written last.  At start it
resumes from the newest checkpoint in CKPT_DIR.  On SIGTERM it saves at the
next step and exits 75.  The last line is "done STEPS sha256 HEX": the model
after STEPS steps, the same bit for bit whether the run was interrupted or not.

Under spotd, with no change and no wrapper (each checkpoint it writes is
uploaded; at a notice it is sent SIGTERM, and the one it saves before it
exits is the last generation):

    spotd run --job J --store URL --method dir --ckpt-dir DIR --saved-when exit -- \\
        env CKPT_DIR=DIR train.py STEPS
"""

import glob
import hashlib
import json
import os
import re
import signal
import sys
import time

EXIT_PREEMPTED = 75
SEED = 1234
N_SAMPLES, D_IN, D_HIDDEN, D_OUT, BATCH = 4096, 32, 64, 8, 64

stop_asked = False


def on_term(signum, frame):
    global stop_asked
    stop_asked = True


def torch_load(path):
    import torch
    return torch.load(path, map_location="cpu")


def newest(ckpt_dir, layout):
    """The path and step of the newest checkpoint in ckpt_dir, or None."""
    best = None
    for path in glob.glob(os.path.join(ckpt_dir, "*")):
        name = os.path.basename(path)
        if layout == "folders":
            m = re.fullmatch(r"checkpoint-(\d+)", name)
            ok = m and os.path.exists(os.path.join(path, "trainer_state.json"))
            path = os.path.join(path, "model.pt")
        elif layout == "dcp":
            m = re.fullmatch(r"step-(\d+)", name)
            ok = m and os.path.exists(os.path.join(path, ".metadata"))
            path = os.path.join(path, "__0_0.distcp")
        elif layout == "last":
            # One file: its step is inside it.
            if name == "last.pt":
                return (path, torch_load(path)["step"])
            continue
        elif layout == "lightning":
            m = re.fullmatch(r"epoch=\d+-step=(\d+)\.ckpt", name)
            ok = m
        else:
            m = re.fullmatch(r"ckpt-(\d+)\.pt", name)
            ok = m
        if ok and (best is None or int(m.group(1)) > best[1]):
            best = (path, int(m.group(1)))
    return best


def main():
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.stderr.write("usage: train.py STEPS\n")
        return 2
    steps = int(sys.argv[1])
    ckpt_dir = os.environ.get("CKPT_DIR", "checkpoints")
    every = int(os.environ.get("SAVE_EVERY", "100"))
    layout = os.environ.get("CKPT_LAYOUT", "files")
    step_file = os.environ.get("STEP_FILE")
    pause = int(os.environ.get("STEP_MS", "0")) / 1000.0
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    signal.signal(signal.SIGTERM, on_term)
    if world > 1:
        import datetime
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    os.makedirs(ckpt_dir, exist_ok=True)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    g = torch.Generator().manual_seed(SEED)
    x_all = torch.randn(N_SAMPLES, D_IN, generator=g)
    w_true = torch.randn(D_IN, D_OUT, generator=g) / D_IN ** 0.5
    y_all = torch.tanh(x_all @ w_true) + 0.05 * torch.randn(N_SAMPLES, D_OUT, generator=g)
    batches = torch.Generator().manual_seed(SEED + 1 + rank)
    torch.manual_seed(SEED)
    model = nn.Sequential(nn.Linear(D_IN, D_HIDDEN), nn.ReLU(), nn.Dropout(0.1),
                          nn.Linear(D_HIDDEN, D_HIDDEN), nn.ReLU(),
                          nn.Linear(D_HIDDEN, D_OUT))
    torch.manual_seed(SEED + rank)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    # Rank 0 writes the checkpoint, with every rank's batch order; every
    # rank resumes from it.
    step = 0
    found = newest(ckpt_dir, layout)
    if found:
        state = torch_load(found[0])
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"][rank])
        batches.set_state(state["batches_rng"][rank])
        step = state["step"] + 1
        print("resumed at step %d from %s" % (step, found[0]), flush=True)

    def gather(t):
        if world == 1:
            return [t]
        out = [None] * world
        dist.all_gather_object(out, t)
        return out

    def save(done_step):
        """Called on every rank; rank 0 writes."""
        rngs, orders = gather(torch.get_rng_state()), gather(batches.get_state())
        if rank != 0:
            return
        state = {"step": done_step, "model": model.state_dict(),
                 "optimizer": opt.state_dict(), "rng": rngs, "batches_rng": orders}
        if layout in ("folders", "dcp"):
            name, data, last = (("checkpoint-%d", "model.pt", "trainer_state.json")
                                if layout == "folders" else
                                ("step-%d", "__0_0.distcp", ".metadata"))
            final = os.path.join(ckpt_dir, name % done_step)
            os.makedirs(final, exist_ok=True)
            torch.save(state, os.path.join(final, data))
            with open(os.path.join(final, last), "w") as f:
                json.dump({"global_step": done_step}, f)
            return
        if layout == "last":
            # In place, as Lightning writes last.ckpt: no rename.
            torch.save(state, os.path.join(ckpt_dir, "last.pt"))
            if step_file:
                with open(os.path.join(ckpt_dir, step_file), "w") as f:
                    f.write("%d\n" % done_step)
            return
        if layout == "lightning":
            final = os.path.join(ckpt_dir, "epoch=0-step=%d.ckpt" % done_step)
        else:
            final = os.path.join(ckpt_dir, "ckpt-%08d.pt" % done_step)
        with open(final + ".tmp", "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(final + ".tmp", final)

    net = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel
        net = DistributedDataParallel(model)
    loss_fn = nn.MSELoss()
    if rank == 0:
        print("training from step %d" % step, flush=True)
    flag = torch.zeros(1, dtype=torch.int32)
    for step in range(step, steps):
        stop = stop_asked
        if world > 1:
            flag[0] = int(stop)
            dist.all_reduce(flag)
            stop = int(flag[0]) > 0
        if stop:
            if step > 0:
                save(step - 1)
            print("stopped at step %d" % step, flush=True)
            return EXIT_PREEMPTED
        i = torch.randint(0, N_SAMPLES, (BATCH,), generator=batches)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x_all[i]), y_all[i])
        loss.backward()
        opt.step()
        if (step + 1) % every == 0:
            save(step)
        if pause:
            time.sleep(pause)

    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().contiguous().numpy().tobytes())
    if rank == 0:
        print("done %d sha256 %s" % (steps, h.hexdigest()), flush=True)
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
