#!/usr/bin/python3
"""Time one PyTorch training step, to compare with `fedrt bench train`.

A step is what fedrt's TrainStep does: forward, softmax cross-entropy,
backward and an SGD update with momentum 0.9, weight decay 5e-4, lr 0.05, for
a model spec like fedrt's: `mlp:784-300-100-10` (Linear + ReLU, last layer
without ReLU) or `cnn:28x28x1-c8k5-p2-c16k5-p2-d128-10` (c<filters>k<kernel>:
Conv2d with "same" zero padding + ReLU; p<window>: MaxPool2d; d<units>:
Linear + ReLU; then a Linear to the classes), on batches prepared before timing (random bytes normalised like
Fashion-MNIST, a pool of distinct batches the steps cycle through). Gradients
are released between steps (zero_grad(set_to_none=True)); fedrt overwrites
them in place.

Threads: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS are set to --threads before
torch loads, then torch.set_num_threads(--threads). Debian's torch runs its
Linear layers through the system BLAS (OpenBLAS), which chooses its kernels
by CPU model; like the `fedrt` tool, this script sets
OPENBLAS_CORETYPE=Haswell on an AVX2 + FMA CPU unless the variable is set, so
both sides run the same kernels. The output names the kernels in use.

Python-only benchmark tool: needs Debian's python3-torch, which is not a
dependency of fedrt. Run it with the system interpreter:

Usage: /usr/bin/python3 runtime/bench/torch_step.py [--threads 1] [--batch 64]
           [--model mlp:784-300-100-10 | cnn:...] [--steps 300] [--warmup 20] [--json]
Expected output (numbers depend on the machine):
  torch  mlp:784-300-100-10 batch 64 threads 1: p50 2.345 ms  p10 ...  p90 ...
         mean ...  cpu ... ms/step  (300 steps; torch 1.13.0a0, OpenBLAS Haswell kernels)
"""

import argparse
import ctypes
import json
import os
import sys
import time


def cpu_has_avx2_fma():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line.split()
                    return "avx2" in flags and "fma" in flags
    except OSError:
        pass
    return False


def openblas_kernels():
    """The kernels each OpenBLAS copy in this process chose ("" if none)."""
    names = []
    for lib in ("libblas.so.3", "libopenblas.so.0"):
        try:
            handle = ctypes.CDLL(lib, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        except OSError:
            continue
        if hasattr(handle, "openblas_get_corename"):
            handle.openblas_get_corename.restype = ctypes.c_char_p
            name = handle.openblas_get_corename().decode()
            if name not in names:
                names.append(name)
    return ",".join(names)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def build_model(torch, family, parts):
    """The layers of a fedrt model spec, and the shape of one example."""
    nn = torch.nn
    layers = []
    if family == "mlp":
        dims = [int(d) for d in parts]
        for i in range(len(dims) - 1):
            layers.append(nn.Linear(dims[i], dims[i + 1]))
            if i + 2 < len(dims):
                layers.append(nn.ReLU())
        return nn.Sequential(*layers), (dims[0],)
    h, w, c = (int(d) for d in parts[0].split("x"))
    shape = (c, h, w)
    features = None  # inputs of the next dense layer, once flat
    for part in parts[1:-1]:
        if part[0] == "c":
            filters, kernel = (int(d) for d in part[1:].split("k"))
            layers += [nn.Conv2d(c, filters, kernel, padding=kernel // 2), nn.ReLU()]
            c = filters
        elif part[0] == "p":
            window = int(part[1:])
            layers.append(nn.MaxPool2d(window))
            h, w = h // window, w // window
        elif part[0] == "d":
            if features is None:
                layers.append(nn.Flatten())
                features = c * h * w
            layers += [nn.Linear(features, int(part[1:])), nn.ReLU()]
            features = int(part[1:])
        else:
            sys.exit("torch_step.py: unknown layer '%s'" % part)
    if features is None:
        layers.append(nn.Flatten())
        features = c * h * w
    layers.append(nn.Linear(features, int(parts[-1])))
    return nn.Sequential(*layers), shape


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="mlp:784-300-100-10")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--pool", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    family, _, body = args.model.partition(":")
    parts = body.split("-")
    if family not in ("mlp", "cnn") or len(parts) < 2:
        sys.exit("torch_step.py: expected an mlp: or cnn: spec, got '%s'" % args.model)

    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    if "OPENBLAS_CORETYPE" not in os.environ and cpu_has_avx2_fma():
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model, input_shape = build_model(torch, family, parts)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    loss_fn = torch.nn.CrossEntropyLoss()

    generator = torch.Generator().manual_seed(1)
    pixels = torch.randint(0, 256, (args.pool, args.batch) + input_shape, generator=generator, dtype=torch.uint8)
    inputs = ((pixels.float() * (1.0 / 255.0)) - 0.2860) / 0.3530
    classes = int(parts[-1])
    labels = (torch.arange(args.pool * args.batch) % classes).reshape(args.pool, args.batch)

    seconds, cpu = [], 0.0
    for s in range(args.warmup + args.steps):
        k = s % args.pool
        cpu_start = time.process_time()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs[k]), labels[k])
        loss.backward()
        optimizer.step()
        loss.item()  # fedrt's step returns the loss too
        elapsed = time.perf_counter() - start
        cpu_used = time.process_time() - cpu_start
        if s >= args.warmup:
            seconds.append(elapsed)
            cpu += cpu_used

    n = len(seconds)
    kernels = openblas_kernels()
    result = {
        "impl": "torch", "model": args.model, "batch": args.batch, "threads": torch.get_num_threads(),
        "steps": n, "p10_ms": 1e3 * percentile(seconds, 0.1), "p50_ms": 1e3 * percentile(seconds, 0.5),
        "p90_ms": 1e3 * percentile(seconds, 0.9), "mean_ms": 1e3 * sum(seconds) / n,
        "cpu_ms_per_step": 1e3 * cpu / n, "torch": torch.__version__, "openblas_kernels": kernels,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print("torch  %s batch %d threads %d: p50 %.3f ms  p10 %.3f  p90 %.3f  mean %.3f  cpu %.3f ms/step  "
              "(%d steps; torch %s, OpenBLAS %s kernels)" % (
                  args.model, args.batch, result["threads"], result["p50_ms"], result["p10_ms"], result["p90_ms"],
                  result["mean_ms"], result["cpu_ms_per_step"], n, torch.__version__, kernels or "no"))


if __name__ == "__main__":
    main()
