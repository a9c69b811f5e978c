#!/usr/bin/python3
"""tgrad against PyTorch on the module and training workloads of `tgrad bench`, interleaved
sample by sample; prints one table of speedups (PyTorch time / tgrad time, > 1: tgrad faster).

    /usr/bin/python3 tools/bench/bench_torch.py [--build build] [--threads 2] [--samples 7]
        [--only sdpa,mha,encoder,train] [--precision f32|bf16] [--markdown]
        [--markdown-file FILE] [--quiet-wait S] [--retakes N] [--nice N] [--samples-log FILE]

Needs Debian's python3-torch (1.13) with OpenBLAS (tools/bootstrap.sh --bench installs both) and
a build of tgrad (meson builds build/tools/libtgbench.so next to build/libtgrad.so); not used by
the tests or CI.

Workloads (the exact graphs of tools/bench/bench_work.c, see bench_work.h):
  sdpa (64, 5, 64)   q, k, v of shape (batch x heads 64, T 5, d_k 64), no mask
  mha (B, T)         self-attention, d_model 512, 8 heads, at (8, 128) and (64, 5)
  encoder (B, T)     nn.TransformerEncoderLayer(512, 8, 2048, dropout=0, batch_first=True)
                     (post-norm, ReLU) at (8, 128) and (64, 5)
  each forward ("fwd") and forward + mean + backward ("fwd+bwd", gradients of the parameters
  and of the input);
  train              one step of `tgrad train --text`'s default model (tools/reference/train_reference.py's
                     LM: 2 pre-norm layers, d_model 128, 4 heads, d_ff 512, learned positions,
                     causal, vocabulary 86, batch 32, seq 64): zero grads, forward,
                     cross-entropy, backward, clip at 1.0, AdamW (lr 3e-3, weight decay 0.01);
                     a fixed random batch (data loading is not timed on either side).

Precision (--precision). f32 (the default): both sides in f32. bf16: tgrad's graphs are built
with tg_graph_opts.precision = TG_PRECISION_BF16 (bf16 operands, f32 accumulation in the matrix
products); PyTorch runs the forward pass, and the loss of fwd+bwd and train, under
torch.autocast("cpu", dtype=torch.bfloat16), backward and AdamW outside it with f32 parameters
and gradients (PyTorch's autocast recipe). 1.13's fused fast path of nn.MultiheadAttention
and nn.TransformerEncoderLayer fails under CPU autocast ("expected scalar type BFloat16 but
found Float": it only checks CUDA autocast), so with bf16 their forward runs in training mode,
which with dropout 0 computes the same through the autocast-aware ops. The output then says
how fast a 1024^3 matmul is in f32 and under autocast in each worker, and how many of each
workload's matrix-product ops ATen received with bf16 operands (TorchDispatchMode).

How it runs. tgrad runs in this process through ctypes (libtgbench.so, which calls the shared
libtgrad.so; this process never imports torch). PyTorch runs in one worker process per
setting, because its settings are environment variables read when torch and its OpenMP and
BLAS runtimes load, and because in one process the two libraries would share libgomp (torch's
set_num_threads and OMP_WAIT_POLICY would also apply to tgrad's regions). Each worker builds
the same workload once and answers "run one sample" requests; for every sample this script
times tgrad, then each PyTorch setting in turn. Each sample repeats the workload enough times
to last ~20 ms (--target-ms).

A sample must have the CPUs to itself: tgrad's OpenMP team and OpenBLAS's threads spin while
they wait, so a 2-thread sample loses far more than the time another thread takes from one of
its cores. Before each sample the script waits until the other processes of the run are idle
(no thread of theirs ran during two 5 ms polls: OpenBLAS's idle threads spin for 2^28 TSC
cycles, ~0.1 s at 2.6 GHz, after every call) and, up to --quiet-wait seconds, until the
machine's other processes leave the CPUs idle, then runs the workload once untimed (the timed
side's threads awake and placed when the clock starts). After it, the CPU time of every thread
(/proc/PID/task/TID/schedstat) and of the machine (the root cgroup's CPU usage) say whether
the timed process waited for a CPU while another process ran; such a sample is retaken (up
to --retakes times), a row that had to keep one is marked '*', and the counts are printed at
the end (--samples-log FILE has every sample's figures). --nice N (root) runs the timed
process at niceness N during its samples (and, where the kernel groups sessions for
scheduling, /proc/PID/autogroup, its session at N), for a machine others keep busy; it is
off by default, since it takes the CPUs from them. docs/performance.md has the measurements
behind this.

PyTorch settings, the fastest (lowest median) reported per workload and thread count N:
  1xN  torch.set_num_threads(1) (OMP_NUM_THREADS=1), OPENBLAS_NUM_THREADS=N;
  NxN  torch.set_num_threads(N), OPENBLAS_NUM_THREADS=N, OMP_WAIT_POLICY=PASSIVE
(one setting, 1x1, when N = 1). OPENBLAS_CORETYPE is removed from the workers' environment so
OpenBLAS picks its best kernels (this machine's environment sets it to Haswell). Debian's torch
links libblas.so.3, which the alternatives system points at OpenBLAS when
libopenblas0-pthread is installed (`tools/bootstrap.sh --bench` installs it with python3-torch),
and at the reference (netlib) BLAS otherwise. The header says which library each worker has
mapped (/proc/self/maps) and, for OpenBLAS, its core; an f32 run refuses to compare against the
reference BLAS (26-62x slower than OpenBLAS here: the ratios would measure the BLAS, not tgrad)
and exits 1 saying how to install OpenBLAS. f32 forward passes
run under torch.inference_mode() in eval mode, so nn.MultiheadAttention and
nn.TransformerEncoderLayer take their fused "fast path"; backward passes in training mode
with zero_grad(set_to_none=True).
"""
import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GROUPS = ("sdpa", "mha", "encoder", "train")


# ---- shapes (mirror bench_work.c, including its --tiny shapes) ----------------------------
def shapes(tiny):
    return {
        "D": 16 if tiny else 512, "H": 2 if tiny else 8, "F": 32 if tiny else 2048,
        "sdpa": (2, 3, 4) if tiny else (64, 5, 64),
        "8x128": (2, 6) if tiny else (8, 128),
        "64x5": (2, 3) if tiny else (64, 5),
        "train": dict(B=2, T=8, D=16, H=2, F=32, L=1) if tiny else
                 dict(B=32, T=64, D=128, H=4, F=512, L=2),
    }


# ---- the PyTorch worker -------------------------------------------------------------------
def blas_in_use():
    """(kind, path) of the BLAS this process has mapped, from /proc/self/maps (Debian's torch
    links libblas.so.3, which the alternatives system points at OpenBLAS, BLIS or the
    reference BLAS): kind "OpenBLAS", "BLIS", "reference (netlib)", another library's name, or
    ("none", "-") when no BLAS is loaded."""
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(path)
                if "blas" in base.lower() or base.startswith(("libmkl_rt", "libblis")):
                    real = os.path.realpath(path)
                    if real not in found:
                        found.append(real)
    except OSError:
        return "unknown", "-"
    for real in found:
        low = real.lower()
        if "openblas" in low:
            return "OpenBLAS", real
        if "blis" in low:
            return "BLIS", real
        if "mkl" in low or "atlas" in low:
            return os.path.basename(real), real
    for real in found:  # Debian's reference BLAS: /usr/lib/<triplet>/blas/libblas.so.3
        if os.path.basename(real).startswith("libblas.so"):
            return "reference (netlib)", real
    return ("none", "-") if not found else (os.path.basename(found[0]), found[0])


def worker(aten_threads):
    """Serve requests on stdin: 'build NAME TINY TARGET_S PRECISION' -> 'ok REPS',
    'sample REPS' -> 't SECONDS', 'check' -> 'ok BF16 TOTAL' (matrix products of one run of
    the built workload with bf16 operands, and in all), 'matmul N' -> 'ok F32_S BF16_S' (an
    N x N x N matmul in f32 and under autocast), 'info', 'quit'. Errors -> 'err MESSAGE'."""
    import contextlib

    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.set_num_threads(aten_threads)
    torch.manual_seed(0)
    run = None

    def build(name, tiny, bf16):
        """The workload as a function of no arguments. bf16: forward (and the loss) under
        torch.autocast("cpu", dtype=torch.bfloat16), backward and the optimizer outside it,
        as PyTorch's autocast recipe has it."""
        s = shapes(tiny)
        bwd = name.endswith("-fwdbwd")
        amp = ((lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16
               else contextlib.nullcontext)
        if name.startswith("sdpa"):
            q, k, v = (torch.rand(*s["sdpa"]) * 2 - 1 for _ in range(3))
            for t in (q, k, v):
                t.requires_grad_(bwd)
            sdpa = getattr(F, "_scaled_dot_product_attention", None)

            def attend():
                if sdpa is not None:  # 1.13's op (what nn.MultiheadAttention calls)
                    return sdpa(q, k, v, None, 0.0, False, False)[0]
                scale = 1.0 / q.shape[-1] ** 0.5
                return torch.softmax(q @ k.transpose(-2, -1) * scale, -1) @ v
            if not bwd:
                def fwd():
                    with torch.inference_mode(), amp():
                        attend()
                return fwd

            def fwdbwd():
                for t in (q, k, v):
                    t.grad = None
                with amp():
                    loss = attend().mean()
                loss.backward()
            return fwdbwd
        if name.startswith("mha") or name.startswith("encoder"):
            B, T = s["8x128"] if "8x128" in name else s["64x5"]
            D, H = s["D"], s["H"]
            if name.startswith("mha"):
                m = nn.MultiheadAttention(D, H, dropout=0.0, batch_first=True)
                call = lambda x: m(x, x, x, need_weights=False)[0]  # noqa: E731
            else:
                m = nn.TransformerEncoderLayer(D, H, s["F"], dropout=0.0, batch_first=True)
                call = m
            x = torch.rand(B, T, D) * 2 - 1
            if not bwd:
                # f32: eval mode, the fused "fast path". Under CPU autocast 1.13's fast path
                # fails ("expected scalar type BFloat16 but found Float": it checks only CUDA
                # autocast), so bf16 runs in training mode, which with dropout 0 computes the
                # same forward through the autocast-aware ops.
                m.train(bf16)

                def fwd():
                    with torch.inference_mode(), amp():
                        call(x)
                return fwd
            m.train()
            x.requires_grad_(True)

            def fwdbwd():
                m.zero_grad(set_to_none=True)
                x.grad = None
                with amp():
                    loss = call(x).mean()
                loss.backward()
            return fwdbwd
        if name == "train":
            sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))
            from train_reference import LM
            c, V = s["train"], 86
            model = LM(V, d_model=c["D"], n_heads=c["H"], d_ff=c["F"], n_layers=c["L"],
                       max_seq_len=c["T"])
            model.train()
            opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
            lossf = nn.CrossEntropyLoss()
            x = torch.randint(0, V, (c["B"], c["T"]))
            y = torch.randint(0, V, (c["B"], c["T"]))

            def step():
                opt.zero_grad(set_to_none=True)
                with amp():
                    loss = lossf(model(x).reshape(-1, V), y.reshape(-1))
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
            return step
        raise ValueError(f"unknown workload {name!r}")

    def sample(reps):
        t0 = time.perf_counter()
        for _ in range(reps):
            run()
        return (time.perf_counter() - t0) / reps

    def count_products():
        """(with bf16 operands, all) ATen ops of one run of the workload that multiply
        matrices (mm, bmm, addmm, ..., and fused attention kernels that ATen runs as one op),
        as they reach the kernels after autocast's casts; (-1, -1) without
        TorchDispatchMode."""
        try:
            from torch.utils._python_dispatch import TorchDispatchMode
        except ImportError:
            return -1, -1
        prods = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "linear", "dot",
                 "_addmm_activation", "mkldnn_linear", "_mkldnn_matmul",
                 "_scaled_dot_product_attention", "_scaled_dot_product_attention_forward",
                 "_scaled_dot_product_attention_math", "_native_multi_head_attention",
                 "_transformer_encoder_layer_fwd", "_flash_attention_forward",
                 "_efficient_attention_forward"}
        seen = [0, 0]

        class Count(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func.overloadpacket.__name__ in prods:
                    ts = [a for a in args if isinstance(a, torch.Tensor)]
                    seen[0] += bool(ts) and all(t.dtype == torch.bfloat16 for t in ts[:2])
                    seen[1] += 1
                return func(*args, **(kwargs or {}))
        with Count():
            run()
        return seen[0], seen[1]

    def matmul(n):
        """Seconds (best of 5) of an n x n x n matmul in f32 and under autocast bf16."""
        a, b = torch.rand(n, n), torch.rand(n, n)
        best = [float("inf"), float("inf")]
        for i, ctx in enumerate((contextlib.nullcontext,
                                 lambda: torch.autocast("cpu", dtype=torch.bfloat16))):
            for _ in range(6):
                t0 = time.perf_counter()
                with ctx():
                    a @ b
                best[i] = min(best[i], time.perf_counter() - t0)
        return best

    def reply(s):
        sys.stdout.write(s + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        w = line.split()
        try:
            if not w or w[0] == "quit":
                break
            if w[0] == "info":
                torch.rand(64, 64) @ torch.rand(64, 64)  # the BLAS loaded and in use
                kind, path = blas_in_use()
                blas = f"{kind} BLAS ({path})"
                if kind == "OpenBLAS":
                    try:  # the library torch loaded (already mapped: same handle)
                        ob = ctypes.CDLL(path)
                        ob.openblas_get_corename.restype = ctypes.c_char_p
                        blas = (f"OpenBLAS core {ob.openblas_get_corename().decode()}, "
                                f"{ob.openblas_get_num_threads()} BLAS threads ({path})")
                    except (OSError, AttributeError):
                        pass
                reply(f"ok {kind}\t{path}\ttorch {torch.__version__}, "
                      f"{torch.get_num_threads()} ATen threads, {blas}")
            elif w[0] == "build":
                run = build(w[1], w[2] == "1", w[4] == "bf16")
                run()  # warm-up
                t = sample(1)
                if t < float(w[3]) / 4:
                    t = min(t, sample(1))
                reply(f"ok {max(1, min(100000, round(float(w[3]) / max(t, 1e-7))))}")
            elif w[0] == "sample":
                reply(f"t {sample(int(w[1]))!r}")
            elif w[0] == "check":
                reply("ok %d %d" % count_products())
            elif w[0] == "matmul":
                reply("ok %r %r" % tuple(matmul(int(w[1]))))
            else:
                reply(f"err unknown request {w[0]!r}")
        except Exception as e:  # report, keep serving
            reply(f"err {type(e).__name__}: {e}".replace("\n", " "))


class Torch:
    """One PyTorch worker process with its environment."""

    def __init__(self, label, aten, blas, passive):
        env = dict(os.environ)
        env.pop("OPENBLAS_CORETYPE", None)
        env["OMP_NUM_THREADS"] = str(aten)
        env["OPENBLAS_NUM_THREADS"] = str(blas)
        env.pop("OMP_WAIT_POLICY", None)
        if passive:
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        self.label, self.aten = label, aten
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker",
                                   str(aten)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  env=env, text=True, bufsize=1)
        # 'KIND<TAB>PATH<TAB>description': the BLAS this worker's torch has mapped
        self.blas, self.blas_path, self.info = self.ask("info").split("\t", 2)

    def ask(self, req):
        self.p.stdin.write(req + "\n")
        self.p.stdin.flush()
        r = self.p.stdout.readline().strip()
        if not r.startswith(("ok", "t ")):
            raise RuntimeError(f"PyTorch worker {self.label}: {r or 'died'} (request {req!r})")
        return r.split(" ", 1)[1]

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.close()
        except OSError:
            pass
        self.p.wait()


def settings(n):
    if n == 1:
        return [("1x1", 1, 1, False)]
    return [(f"1x{n}", 1, n, False), (f"{n}x{n}", n, n, True)]


# ---- tgrad through ctypes -----------------------------------------------------------------
class Tgrad:
    def __init__(self, build):
        path = os.path.join(build, "tools", "libtgbench.so")
        if not os.path.exists(path):
            sys.exit(f"bench_torch.py: {path} not found: build tgrad first "
                     f"(meson setup {build} --buildtype=release && ninja -C {build})")
        L = self.lib = ctypes.CDLL(path)
        L.bw_new.restype = ctypes.c_void_p
        L.bw_new.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                             ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        for f in ("bw_sample", "bw_tokens"):
            getattr(L, f).restype = ctypes.c_double
        L.bw_sample.argtypes = [ctypes.c_void_p, ctypes.c_int]
        L.bw_reps.argtypes = [ctypes.c_void_p, ctypes.c_double]
        L.bw_set_threads.argtypes = [ctypes.c_void_p, ctypes.c_int]
        for f in ("bw_tokens", "bw_label", "bw_error", "bw_free"):
            getattr(L, f).argtypes = [ctypes.c_void_p]
        L.bw_label.restype = L.bw_error.restype = ctypes.c_char_p
        L.bw_name.restype = ctypes.c_char_p
        self.names = [L.bw_name(i).decode() for i in range(L.bw_count())]

    def new(self, name, threads, unfused, tiny, precision=0):
        err = ctypes.create_string_buffer(512)
        w = self.lib.bw_new(name.encode(), threads, int(unfused), precision, int(tiny), err,
                            512)
        if not w:
            raise RuntimeError(f"tgrad {name}: {err.value.decode()}")
        return w


# ---- who used the CPUs during a sample -------------------------------------------------------
class Cpu:
    """CPU time in ns, for telling whether a sample had the CPUs to itself: of every thread of a
    process (/proc/PID/task/TID/schedstat: time on a CPU and time runnable but waiting for
    one) and of the whole machine (the root cgroup's CPU usage: cgroup v1 cpuacct.usage or
    v2 cpu.stat usage_usec, in ns or us; else /proc/stat's busy time, in 10 ms ticks)."""

    def __init__(self):
        self.machine_src, self.machine_kind = self._find_machine()
        self.ok = self._schedstat_ok() and self.machine() is not None

    @staticmethod
    def _schedstat_ok():
        try:
            with open(f"/proc/self/task/{threading_ident()}/schedstat") as f:
                return len(f.read().split()) >= 2
        except OSError:
            return False

    @staticmethod
    def _find_machine():
        try:
            with open("/proc/mounts") as f:
                mounts = [line.split() for line in f]
        except OSError:
            mounts = []
        for m in mounts:  # cgroup v1: the cpuacct hierarchy's root
            if len(m) >= 4 and m[2] == "cgroup" and "cpuacct" in m[3].split(","):
                p = os.path.join(m[1], "cpuacct.usage")
                if os.path.exists(p):
                    return p, "ns"
        for m in mounts:  # cgroup v2: the root's cpu.stat
            if len(m) >= 3 and m[2] == "cgroup2":
                p = os.path.join(m[1], "cpu.stat")
                if os.path.exists(p):
                    return p, "usec"
        return "/proc/stat", "ticks"

    def machine(self):
        """CPU time of every process on the machine so far, in ns (None if unreadable)."""
        try:
            with open(self.machine_src) as f:
                if self.machine_kind == "ns":
                    return int(f.read())
                if self.machine_kind == "usec":
                    for line in f:
                        if line.startswith("usage_usec"):
                            return 1000 * int(line.split()[1])
                    return None
                v = [int(x) for x in f.readline().split()[1:]]
                return (v[0] + v[1] + v[2] + v[5] + v[6]) * (10**9 // os.sysconf("SC_CLK_TCK"))
        except (OSError, ValueError, IndexError):
            return None

    @staticmethod
    def threads(pid):
        """{tid: (ns on a CPU, ns waiting for one)} of every thread of process pid."""
        out = {}
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return out
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    run, wait = f.read().split()[:2]
                out[int(tid)] = (int(run), int(wait))
            except (OSError, ValueError):
                pass
        return out


def threading_ident():
    return threading.get_native_id()


class Sampler:
    """Takes the samples of one run, each side in its own process (pids[0] this one: tgrad;
    then the PyTorch workers), so that a sample has the CPUs to itself:

    settle  before a sample, wait until the other processes of this run are idle (none of
            their threads ran during the last two 5 ms polls): OpenBLAS's idle threads spin
            for 2^28 TSC cycles (~0.1 s at 2.6 GHz) after each call and libgomp's for a few
            ms, and a spinning thread takes a core from a 2-thread team. Also wait (up to
            quiet_wait seconds) until other processes on the machine leave the CPUs idle.
    check   after it, a sample is disturbed when the timed process's threads waited for a CPU
            (run-queue time) for more than 5% of the sample: with spin-waiting teams one
            stolen timeslice costs a 2-thread sample far more than its length. A process that
            runs more threads than CPUs by design (PyTorch NxN: N OpenMP threads and N - 1
            OpenBLAS threads, which spin) waits on itself, so for it the other processes (of
            this run or not) must also have run for more than 5% of the sample and at least
            4 ms (the CPU counters lag by up to a scheduler tick, 4 ms at HZ 250). A disturbed
            sample is retaken, up to `retakes` times (then the last one is kept and counted).
    nice    if not None, every thread of the timed process runs at this niceness during its
            samples (and at its own otherwise): -20 leaves other processes ~1% of a CPU the
            timed threads want (CFS weights 88761 : 1024), on a machine others use too.
            Needs the privilege to lower a niceness (root or CAP_SYS_NICE).
    """

    def __init__(self, pids, min_pause, quiet_wait, retakes, nice=None, log=None):
        self.cpu = Cpu()
        self.pids, self.min_pause, self.quiet_wait, self.retakes = pids, min_pause, quiet_wait, retakes
        self.nice, self.log = nice, log
        self.main_tid = threading_ident()  # this thread polls; it never counts as a partner
        self.stats = {}  # side index -> dict(samples, retaken, kept, settle=[s])

    def session_nice(self, value):
        """Where the kernel schedules sessions as groups (sched_autogroup_enabled), a thread's
        niceness only weighs against its own session's threads: set this session's group to
        niceness value (None: back to what it was). The previous value, or None."""
        try:
            with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
                if f.read().strip() != "1":
                    return None
            with open("/proc/self/autogroup") as f:
                old = int(f.read().split()[-1])
            with open("/proc/self/autogroup", "w") as f:
                f.write(str(old if value is None else value))
            return old
        except (OSError, ValueError, IndexError):
            return None

    def renice(self, pid, value):
        """Set every thread of pid to niceness value (None: back to what each had); False if
        not permitted."""
        saved = getattr(self, "_saved", {})
        ok = True
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            tids = []
        for tid in tids:
            try:
                if value is None:
                    os.setpriority(os.PRIO_PROCESS, tid, saved.pop(tid, 0))
                else:
                    saved.setdefault(tid, os.getpriority(os.PRIO_PROCESS, tid))
                    os.setpriority(os.PRIO_PROCESS, tid, value)
            except PermissionError:
                ok = False
            except OSError:  # the thread has exited
                pass
        self._saved = saved
        return ok

    def kept(self):
        """Samples kept although disturbed, so far, all sides."""
        return sum(st["kept"] for st in self.stats.values())

    def _partner_ns(self, timed):
        """CPU ns so far of the threads that must be idle while process `timed` is timed."""
        tot = 0
        for i, pid in enumerate(self.pids):
            if i == timed:
                continue
            for tid, (run, _) in self.cpu.threads(pid).items():
                if tid != self.main_tid:
                    tot += run
        return tot

    def _ours_ns(self):
        return sum(run for pid in self.pids for run, _ in self.cpu.threads(pid).values())

    def settle(self, timed):
        """Wait as the class says; the seconds waited."""
        t0 = time.perf_counter()
        time.sleep(self.min_pause)
        if not self.cpu.ok:
            return time.perf_counter() - t0
        poll, idle = 0.005, 0
        p0, m0, o0 = self._partner_ns(timed), self.cpu.machine(), self._ours_ns()
        while True:
            time.sleep(poll)
            p1, m1, o1 = self._partner_ns(timed), self.cpu.machine(), self._ours_ns()
            partners_idle = p1 - p0 < 0.02 * poll * 1e9
            others_idle = (m1 - m0) - (o1 - o0) < 0.1 * poll * 1e9
            waited = time.perf_counter() - t0
            if partners_idle and (others_idle or waited > self.quiet_wait):
                idle += 1
                if idle == 2:
                    return waited
            else:
                idle = 0
            if waited > max(self.quiet_wait, 2.0) + 1.0:  # a partner that never idles
                return waited
            p0, m0, o0 = p1, m1, o1

    def take(self, timed, fn, warm, what="", oversubscribed=False):
        """One sample of process index `timed`: warm() runs the workload once, untimed, then
        fn() -> seconds per call. `what` names it in the log (one JSON line per attempt);
        `oversubscribed`: the process runs more threads than CPUs (see check above)."""
        st = self.stats.setdefault(timed, dict(samples=0, retaken=0, kept=0, settle=[]))
        st["samples"] += 1
        for attempt in range(self.retakes + 1):
            st["settle"].append(self.settle(timed))
            if not self.cpu.ok:
                warm()
                return fn()
            if self.nice is not None and not self.renice(self.pids[timed], self.nice):
                raise PermissionError(f"--nice {self.nice}: not permitted (root or "
                                      f"CAP_SYS_NICE is needed to lower a niceness)")
            warm()
            own0 = self.cpu.threads(self.pids[timed])
            p0 = self._partner_ns(timed) if self.log else 0
            m0, w0 = self.cpu.machine(), time.perf_counter()
            try:
                t = fn()
            finally:
                if self.nice is not None:
                    self.renice(self.pids[timed], None)
            w1, m1 = time.perf_counter(), self.cpu.machine()
            own1 = self.cpu.threads(self.pids[timed])
            p1 = self._partner_ns(timed) if self.log else 0
            win = w1 - w0
            wait = sum(v[1] - own0.get(tid, (0, 0))[1] for tid, v in own1.items()) / 1e9
            own_run = sum(v[0] - own0.get(tid, (0, 0))[0] for tid, v in own1.items())
            # everything that ran besides the timed process: other processes and this run's
            foreign = ((m1 - m0) - own_run) / 1e9
            disturbed = wait > 0.05 * win and (not oversubscribed or foreign > max(0.05 * win,
                                                                                   0.004))
            if self.log:
                self.log.write(json.dumps(dict(
                    what=what, side=timed, attempt=attempt, s=t, window=win, settle=st["settle"][-1],
                    run=own_run / 1e9, wait=wait, foreign=foreign, partners=(p1 - p0) / 1e9,
                    disturbed=disturbed)) + "\n")
            if not disturbed:
                return t
            if attempt < self.retakes:
                st["retaken"] += 1
        st["kept"] += 1
        return t


# ---- the run ------------------------------------------------------------------------------
def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def fmt(v):
    d = 1 if 1e3 * max(v) >= 100 else 2 if 1e3 * max(v) >= 10 else 3
    return f"{1e3 * statistics.median(v):.{d}f} ({1e3 * min(v):.{d}f}-{1e3 * max(v):.{d}f})"


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"),
                    help="tgrad's meson build directory (default: build)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="measure at 1 and N threads (default: all CPUs)")
    ap.add_argument("--samples", type=int, default=7, help="samples per number (default 7)")
    ap.add_argument("--only", default=",".join(GROUPS),
                    help="comma-separated groups: sdpa, mha, encoder, train (default: all)")
    ap.add_argument("--precision", choices=("f32", "bf16"), default="f32",
                    help="f32 (default), or bf16: tgrad's graphs with bf16 products "
                         "(tg_graph_opts.precision), PyTorch under torch.autocast('cpu', "
                         "dtype=torch.bfloat16)")
    ap.add_argument("--target-ms", type=float, default=20.0,
                    help="repeat each workload to last about this long per sample")
    ap.add_argument("--pause", type=float, default=0.01,
                    help="seconds of pause before each sample, before waiting for the other "
                         "processes to idle (default 0.01)")
    ap.add_argument("--quiet-wait", type=float, default=1.0,
                    help="seconds to wait at most, before each sample, for other processes on "
                         "the machine to leave the CPUs idle (default 1)")
    ap.add_argument("--retakes", type=int, default=3,
                    help="retake a sample disturbed by another process up to this many times "
                         "(default 3; 0: keep every sample)")
    ap.add_argument("--nice", type=int, metavar="N",
                    help="run the timed process at niceness N during its samples (e.g. -20 "
                         "on a machine others use; needs root or CAP_SYS_NICE)")
    ap.add_argument("--samples-log", metavar="FILE",
                    help="write every sample (and retake) as a JSON line to FILE: seconds per "
                         "call, the window, the timed process's CPU and run-queue time, the other "
                         "processes' CPU time (and the part of it this run's other processes "
                         "took), whether it was disturbed")
    ap.add_argument("--unfused", action="store_true", help="tgrad with fused ops off")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    ap.add_argument("--markdown-file", metavar="FILE",
                    help="also write the table as markdown to FILE (one run for both)")
    ap.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # smoke test
    a = ap.parse_args()
    groups = [g for g in a.only.split(",") if g]
    bad = [g for g in groups if g not in GROUPS]
    if bad or a.threads < 1 or a.samples < 1 or a.retakes < 0:
        ap.error(f"bad --only {bad}" if bad else
                 "--threads and --samples must be >= 1, --retakes >= 0")
    bf16 = a.precision == "bf16"
    tg = Tgrad(a.build)
    # the JVP and HVP workloads have no PyTorch twin here (tgrad bench times them)
    names = [n for n in tg.names if n.split("-")[0] in groups
             and not n.endswith(("-jvp", "-hvp"))]
    tcounts = [1] + ([a.threads] if a.threads > 1 else [])
    target = 0.0 if a.tiny else a.target_ms / 1e3

    # one set of PyTorch workers per thread count, kept for every workload
    workers = {n: [Torch(*s) for s in settings(n)] for n in tcounts}
    allw = [w for n in tcounts for w in workers[n]]
    log = open(a.samples_log, "w") if a.samples_log else None
    smp = Sampler([os.getpid()] + [w.p.pid for w in allw], a.pause,
                  0.0 if a.tiny else a.quiet_wait, 0 if a.tiny else a.retakes, a.nice, log)
    print(f"Machine: {cpu_model()}, {os.cpu_count()} CPUs; tgrad: {a.build}/tools/libtgbench.so "
          f"(ctypes, fused ops {'off' if a.unfused else 'on'})")
    for n in tcounts:
        for w in workers[n]:
            print(f"PyTorch {w.label} (ATen threads x BLAS threads): {w.info}")
    ref = [w for w in allw if w.blas.startswith("reference")]
    if ref and not bf16:
        # f32 matrix products go to the BLAS: against the reference one PyTorch runs 26-62x
        # slower than with OpenBLAS, and a ratio would say nothing about tgrad
        for w in allw:
            w.close()
        sys.exit(f"bench_torch.py: PyTorch uses the reference BLAS ({ref[0].blas_path}); "
                 f"an f32 comparison against it would mislead, so none is made. Install "
                 f"OpenBLAS (tools/bootstrap.sh --bench, or apt-get install "
                 f"libopenblas0-pthread), which Debian's alternatives then give torch")
    if bf16:
        print("Precision: bf16: tgrad's graphs with tg_graph_opts.precision = TG_PRECISION_BF16; "
              "PyTorch's forward\n(and loss) under torch.autocast(\"cpu\", dtype=torch.bfloat16), "
              "backward and optimizer outside it")
        for w in allw:
            f32_s, bf_s = (float(x) for x in w.ask("matmul 1024").split())
            print(f"  autocast check, PyTorch {w.label}: a 1024^3 matmul takes {1e3 * f32_s:.2f} "
                  f"ms in f32, {1e3 * bf_s:.2f} ms under autocast ({2 * 1024**3 / f32_s / 1e9:.0f}"
                  f" and {2 * 1024**3 / bf_s / 1e9:.0f} GFLOP/s)")
    print(f"Interleaved sample by sample; median of {a.samples} samples (min-max), ms per call; "
          f"speedup = median over samples of PyTorch time / tgrad time, against the faster "
          f"PyTorch setting{' (--tiny: the numbers mean nothing)' if a.tiny else ''}")
    if smp.cpu.ok:
        print(f"Before each sample: the other processes of this run idle, the machine quiet (up "
              f"to {a.quiet_wait:g} s); a sample\nwhose process waited for a CPU while another "
              f"process ran is retaken (up to {a.retakes} times; CPU time from\n"
              f"/proc/PID/task/*/schedstat and {smp.cpu.machine_src})"
              + (f"; the timed process at niceness {a.nice}" if a.nice is not None else "")
              + "\n")
    else:
        print(f"Before each sample: a pause of {a.pause:g} s (no per-thread CPU accounting on "
              f"this system: samples are not checked)\n")
    hdr = (f"{'workload':<28} {'thr':>3} {'tgrad ms':>24} {'PyTorch ms (setting)':>32} "
           f"{'speedup':>8}")
    if not a.markdown:
        print(hdr)
    rows, checks, marked = [], {}, False
    session_nice = smp.session_nice(a.nice) if a.nice is not None else None
    try:
        for name in names:
            for n in tcounts:
                w = tg.new(name, n, a.unfused, a.tiny, 1 if bf16 else 0)
                label = tg.lib.bw_label(w).decode()
                reps = 1 if a.tiny else tg.lib.bw_reps(w, target)
                preps = [int(t.ask(f"build {name} {int(a.tiny)} {target!r} {a.precision}"))
                         for t in workers[n]]
                if bf16 and name not in checks:
                    checks[name] = [int(x) for x in workers[n][0].ask("check").split()]
                widx = [1 + allw.index(t) for t in workers[n]]
                ttg, tpt = [], [[] for _ in workers[n]]
                kept0 = smp.kept()
                for _ in range(a.samples):
                    t = smp.take(0, lambda: tg.lib.bw_sample(w, reps),
                                 lambda: tg.lib.bw_sample(w, 1), f"{name} {n} tgrad")
                    if t != t:
                        raise RuntimeError(f"tgrad {name}: {tg.lib.bw_error(w).decode()}")
                    ttg.append(t)
                    for i, wk in enumerate(workers[n]):
                        tpt[i].append(smp.take(widx[i],
                                               lambda: float(wk.ask(f"sample {preps[i]}")),
                                               lambda: wk.ask("sample 1"),
                                               f"{name} {n} {wk.label}", wk.aten > 1))
                tokens = tg.lib.bw_tokens(w)
                tg.lib.bw_free(w)
                best = min(range(len(tpt)), key=lambda i: statistics.median(tpt[i]))
                ratio = statistics.median(p / t for p, t in zip(tpt[best], ttg))
                rows.append((label, n, ttg, tpt[best], workers[n][best].label, ratio, tokens))
                # a row with a sample kept although disturbed (--retakes ran out) is marked
                mark = " *" if smp.kept() > kept0 else ""
                marked |= bool(mark)
                if not a.markdown:
                    print(f"{label:<28} {n:>3} {fmt(ttg):>24} "
                          f"{fmt(tpt[best]) + ' (' + workers[n][best].label + ')':>32} "
                          f"{ratio:>7.2f}x{mark}", flush=True)
    finally:
        for wk in allw:
            wk.close()
        if session_nice is not None:
            smp.session_nice(session_nice)
        if log:
            log.close()

    md = markdown(rows, tcounts)
    if a.markdown_file:
        with open(a.markdown_file, "w") as f:
            f.write(md)
    if a.markdown:
        print(md, end="")
        return
    # the table of ratios: one row per workload, one column per thread count
    labels = list(dict.fromkeys(r[0] for r in rows))
    by = {(r[0], r[1]): r for r in rows}
    print("\nSpeedup of tgrad over PyTorch's faster setting (PyTorch time / tgrad time):")
    print(f"{'workload':<28}" + "".join(f" {str(n) + ' thr':>10}" for n in tcounts))
    for lab in labels:
        print(f"{lab:<28}" + "".join(f" {by[(lab, n)][5]:>9.2f}x" for n in tcounts))
    for r in rows:
        if r[0].startswith("train"):
            print(f"training step, {r[1]} thread{'s' if r[1] > 1 else ''}: tgrad "
                  f"{r[6] / statistics.median(r[2]):.0f} tokens/s, PyTorch ({r[4]}) "
                  f"{r[6] / statistics.median(r[3]):.0f} tokens/s")
    if checks:
        print("\nAutocast check (PyTorch 1x1 worker, one run of each workload under "
              "TorchDispatchMode): ATen ops\nthat multiply matrices (mm, bmm, addmm, fused "
              "attention) with bf16 operands, of all such ops")
        for name in names:
            if name in checks:
                b, tot = checks[name]
                print(f"  {name:<24} " + (f"{b} of {tot}" if tot >= 0 else "n/a (no "
                                           "TorchDispatchMode in this torch)"))
    if marked:
        print("\n* a sample of this row was kept although another process disturbed it "
              "(--retakes ran out)")
    if smp.cpu.ok:
        sides = ["tgrad"] + [f"PyTorch {w.label}" for w in allw]
        print("\nSamples retaken because another process ran while the timed one waited for a CPU:")
        for i, side in enumerate(sides):
            st = smp.stats.get(i)
            if st:
                print(f"  {side:<14} {st['retaken']} retaken for {st['samples']} samples, "
                      f"{st['kept']} kept disturbed; waited for the others to idle: median "
                      f"{1e3 * statistics.median(st['settle']):.0f} ms, max "
                      f"{1e3 * max(st['settle']):.0f} ms")


def markdown(rows, tcounts):
    """The table of rows as markdown, with the training steps' tokens/s below it."""
    labels = list(dict.fromkeys(r[0] for r in rows))
    by = {(r[0], r[1]): r for r in rows}
    out = ["| workload | " + " | ".join(f"tgrad ms, {n} thr | PyTorch ms, {n} thr "
                                        f"(setting) | speedup, {n} thr" for n in tcounts) + " |",
           "|---|" + "---|---|---|" * len(tcounts)]
    for lab in labels:
        cells = []
        for n in tcounts:
            r = by[(lab, n)]
            cells += [f"{1e3 * statistics.median(r[2]):.3f}",
                      f"{1e3 * statistics.median(r[3]):.3f} ({r[4]})", f"{r[5]:.2f}x"]
        out.append(f"| {lab} | " + " | ".join(cells) + " |")
    for r in rows:
        if r[0].startswith("train"):
            out.append(f"\nTraining step, {r[1]} thread{'s' if r[1] > 1 else ''}: tgrad "
                       f"{r[6] / statistics.median(r[2]):.0f} tokens/s, PyTorch ({r[4]}) "
                       f"{r[6] / statistics.median(r[3]):.0f} tokens/s")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
