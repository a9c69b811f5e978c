#!/usr/bin/python3
"""Translation speed: tgrad against the PyTorch reference (tools/reference/translate_reference.py).

Usage (from the source tree, after building tgrad with SentencePiece; the machine otherwise idle):

    /usr/bin/python3 tools/bench/bench_translate.py [--tgrad build/tools/tgrad] [--rounds 7]
        [--steps 40] [--train train.tsv --valid valid.tsv --test test.tsv --spm spm.model]
        [--checkpoint CK.ckpt] [--sacrebleu-path DIR] [--workdir DIR] [--json out.json]

Training speed (skipped with --no-train): --rounds rounds, each running, in alternating order
(tgrad first in even rounds, last in odd ones, the reference settings reversed likewise):
  - `tgrad train --pairs TRAIN --valid V --spm M --steps S --eval-every S+1 --threads N`
    (every other option at its --pairs default; the environment without OMP_NUM_THREADS,
    OPENBLAS_NUM_THREADS, OMP_WAIT_POLICY, OPENBLAS_CORETYPE, plus any --tgrad-env VAR=VALUE);
    tokens/s from its summary line;
  - `translate_reference.py --train TRAIN --valid V --test V --spm M --steps S --eval-every 0
    --decode none --threads A` for each setting AxB of --ref-settings (default 1x1,1x2,2x2):
    A torch threads (torch.set_num_threads(A), OMP_NUM_THREADS=A), B OpenBLAS threads
    (OPENBLAS_NUM_THREADS=B: Debian's torch calls OpenBLAS, whose pthreads ignore
    torch.set_num_threads), OMP_WAIT_POLICY=PASSIVE when A > 1, OPENBLAS_CORETYPE removed
    (the settings of tools/bench/bench_torch.py); tokens/s from its JSON summary.
  Both count tokens/s the same way: real target tokens (labels that are not padding, EOS
  included) per second of training steps; tgrad's evaluation after its last step and the
  data loading are excluded. V is the first --valid-lines (20) pairs of --valid (the
  validation set does not change the training steps; a small one keeps tgrad's final
  evaluation short).
  Printed: per setting the median and min-max tokens/s over the rounds, the median process
  wall time and peak RSS (wait4's ru_maxrss), and the ratio tgrad / fastest reference
  setting (by median).

Decoding speed (skipped with --no-decode), on --checkpoint CK (a `tgrad train --pairs`
checkpoint; without it, the checkpoint of the last training round: undertrained, its timings
say little): --decode-rounds rounds (default 1) of
  - `tgrad translate --checkpoint CK --eval TEST --beam 5` and `--beam 1` (greedy);
  - the reference's greedy decoding of TEST with the same weights: `tgrad export` of CK loaded
    by `translate_reference.py --load` (if the export fails, or with --ref-weights
    checkpoint, the reference loads CK itself: checkpoints and exports use the same parameter
    names), at the fastest reference setting
    of the training rounds (with --no-train the largest of --ref-settings); --ref-beam also
    times the reference's beam search (slow).
  Printed: decoding seconds (tgrad's own 'sentences N, X s' line; the reference's time of its
  translate() call; model loading excluded in both), process wall time and peak RSS,
  BLEU/chrF, and how many hypotheses of tgrad greedy and reference greedy are identical
  (equal weights and decoding rules: all of them, up to float rounding near ties).

Quality (only with --quality SEEDS, e.g. 0,1; long: full training runs): per seed
`tgrad train --pairs TRAIN --valid VALID --spm M --seed S` (every other option at its
default, --quality-steps to change the steps), `tgrad translate --eval TEST` greedy and beam,
and `translate_reference.py` with the same files and seed (the same job; thread setting
--quality-ref-setting, 1x2); test BLEU and chrF of each and the means over the seeds.

Also printed: the CPU model (lscpu), the thread settings, and at the end one JSON line with
every measurement (also written to --json FILE).

Tiny smoke test (seconds): --rounds 2 --steps 3 --model-args "--layers 1 --decoder-layers 1
--d-model 32 --heads 2 --d-ff 64" with small TSVs. --model-args are given to both programs
(they share the names --layers, --decoder-layers, --d-model, --heads, --d-ff, --dropout,
--batch-tokens, --seed); --max-len sets tgrad's --seq-len and the reference's --max-len.

Exit status: 0; 1 when a run fails (its stderr is shown).
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(HERE, "..", "reference", "translate_reference.py")


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


class RunError(Exception):
    pass


def run(cmd, env=None):
    """(stdout, stderr, wall seconds) of cmd; RunError if it fails. The process's peak RSS
    (wait4's ru_maxrss) is in the module's last_rss_mb."""
    global last_rss_mb
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        so = fo.read().decode("utf-8", "replace")
        se = fe.read().decode("utf-8", "replace")
    last_rss_mb = ru.ru_maxrss / 1024.0
    if p.returncode != 0:
        raise RunError(f"{' '.join(shlex.quote(c) for c in cmd)}: exit {p.returncode}\n"
                       f"{se.strip()[-2000:]}")
    return so, se, wall


last_rss_mb = None


def last_json(text):
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RunError("no JSON summary in the reference's output")


def summary(vals):
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "values": vals}


def sacrebleu_check(a, hyp_path, tgrad_out):
    """sacreBLEU's own BLEU and chrF lines for tgrad's hypotheses of --test, and whether
    tgrad's printed lines are the same strings (None without --sacrebleu-path)."""
    if not a.sacrebleu_path:
        return None
    sys.path.insert(0, os.path.join(HERE, "..", "reference"))
    import translate_reference
    BLEU, CHRF = translate_reference.import_sacrebleu(a.sacrebleu_path)
    with open(a.test, encoding="utf-8") as f:
        refs = [line.rstrip("\n").rstrip("\r").split("\t")[1] for line in f]
    with open(hyp_path, encoding="utf-8") as f:
        hyps = [line.rstrip("\n") for line in f]
    if len(hyps) != len(refs):
        raise RunError(f"{hyp_path}: {len(hyps)} hypotheses for {len(refs)} references")
    lines = [str(BLEU().corpus_score(hyps, [refs])), str(CHRF().corpus_score(hyps, [refs]))]
    same = all(any(ln.strip() == t.strip() or t.strip().endswith(ln.strip())
                   for t in tgrad_out.splitlines()) for ln in lines)
    print(f"  sacreBLEU on tgrad's {os.path.basename(hyp_path)}: {lines[0]} | {lines[1]} | "
          f"tgrad printed {'the same lines' if same else 'DIFFERENT lines'}", flush=True)
    return {"lines": lines, "same": same}


def quality(a, wd, margs, tg_env, ref_env):
    """Per seed: `tgrad train --pairs` at its defaults (full --valid, evaluation every 250
    steps as by default), `tgrad translate --eval TEST` greedy and beam, and the reference's
    same job; test BLEU/chrF of each and their means over the seeds."""
    seeds = [int(x) for x in a.quality.split(",") if x]
    rs = tuple(int(x) for x in a.quality_ref_setting.split("x"))
    steps = ["--steps", str(a.quality_steps)] if a.quality_steps else []
    mlen = ["--max-len", str(a.max_len)] if a.max_len else []
    rows = {}
    print(f"\nquality: seeds {seeds}, {a.quality_steps or 'default'} steps")
    for seed in seeds:
        ck = os.path.join(wd, f"quality_seed{seed}.ckpt")
        so, se, wall = run([a.tgrad, "train", "--pairs", a.train, "--valid", a.valid, "--spm",
                            a.spm, "--seed", str(seed), "--threads", str(a.tgrad_threads),
                            "--checkpoint", ck, "--force", "--quiet"] + steps + margs +
                           (["--seq-len", str(a.max_len)] if a.max_len else []), tg_env)
        tok = re.findall(r"([0-9.]+) tokens/s", so + se)
        row = {"train_wall": wall, "tokens_per_s": float(tok[-1]) if tok else None,
               "peak_rss_mb": last_rss_mb}
        for beam in (1, a.beam):
            name = "greedy" if beam == 1 else f"beam{beam}"
            so, se, w = run([a.tgrad, "translate", "--checkpoint", ck, "--eval", a.test,
                             "--beam", str(beam), "--threads", str(a.tgrad_threads), "--out",
                             os.path.join(wd, f"quality_seed{seed}.tgrad.{name}.txt"),
                             "--force"], tg_env)
            b = re.search(r"BLEU = ([0-9.]+)", so + se)
            c = re.search(r"chrF2 = ([0-9.]+)", so + se)
            row[name] = {"bleu": float(b.group(1)) if b else None,
                         "chrf": float(c.group(1)) if c else None, "wall": w}
            hyp = os.path.join(wd, f"quality_seed{seed}.tgrad.{name}.txt")
            row[name]["sacrebleu"] = sacrebleu_check(a, hyp, so + se)
        rows[f"tgrad-seed{seed}"] = row
        cmd = [a.python, REF, "--train", a.train, "--valid", a.valid, "--test", a.test,
               "--spm", a.spm, "--seed", str(seed), "--threads", str(rs[0]), "--beam",
               str(a.beam), "--out-prefix", os.path.join(wd, f"quality_seed{seed}.reference")]
        if a.sacrebleu_path:
            cmd += ["--sacrebleu-path", a.sacrebleu_path]
        so, se, wall = run(cmd + steps + margs + mlen, ref_env(rs))
        j = last_json(so)
        row = {"train_wall": wall, "tokens_per_s": j["tokens_per_s"],
               "peak_rss_mb": j["peak_rss_mb"]}
        for name, t in j["test"].items():
            row[name] = {"bleu": t["bleu"], "chrf": t["chrf"], "wall": t["seconds"]}
        rows[f"reference-seed{seed}"] = row
        for who in ("tgrad", "reference"):
            r = rows[f"{who}-seed{seed}"]
            print(f"seed {seed} {who:9s} greedy BLEU {r['greedy']['bleu']:6.2f} chrF2 "
                  f"{r['greedy']['chrf']:6.2f}  beam{a.beam} BLEU "
                  f"{r[f'beam{a.beam}']['bleu']:6.2f} chrF2 {r[f'beam{a.beam}']['chrf']:6.2f}"
                  f"  process {r['train_wall']:.0f} s, {r['tokens_per_s']:.0f} tokens/s, "
                  f"peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    mean = {}
    for who in ("tgrad", "reference"):
        for name in ("greedy", f"beam{a.beam}"):
            for m in ("bleu", "chrf"):
                mean[f"{who}.{name}.{m}"] = statistics.mean(
                    rows[f"{who}-seed{s}"][name][m] for s in seeds)
    for name in ("greedy", f"beam{a.beam}"):
        print(f"mean over seeds, {name}: tgrad BLEU {mean[f'tgrad.{name}.bleu']:.2f} chrF2 "
              f"{mean[f'tgrad.{name}.chrf']:.2f}; reference BLEU "
              f"{mean[f'reference.{name}.bleu']:.2f} chrF2 {mean[f'reference.{name}.chrf']:.2f}")
    return {"seeds": seeds, "runs": rows, "mean": mean}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tgrad", default="build/tools/tgrad", help="tgrad binary")
    ap.add_argument("--python", default="/usr/bin/python3", help="python for the reference")
    ap.add_argument("--train", default="/work/data/train.tsv")
    ap.add_argument("--valid", default="/work/data/valid.tsv")
    ap.add_argument("--test", default="/work/data/test.tsv")
    ap.add_argument("--spm", default="/work/data/spm8k.model")
    ap.add_argument("--sacrebleu-path", default=os.environ.get("SACREBLEU_PATH"),
                    help="sacreBLEU source tree for the reference's decoding scores")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--valid-lines", type=int, default=20,
                    help="validation pairs of the training runs (20)")
    ap.add_argument("--tgrad-threads", type=int, default=os.cpu_count())
    ap.add_argument("--tgrad-env", action="append", default=[], metavar="VAR=VALUE",
                    help="environment of the tgrad runs (repeatable), e.g. "
                         "OMP_WAIT_POLICY=PASSIVE")
    ap.add_argument("--ref-settings", default="1x1,1x2,2x2",
                    help="reference settings AxB: A torch threads, B OpenBLAS threads "
                         "(1x1,1x2,2x2)")
    ap.add_argument("--model-args", default="", help="options given to both programs")
    ap.add_argument("--max-len", type=int, help="tgrad --seq-len / reference --max-len")
    ap.add_argument("--no-train", action="store_true", help="skip the training rounds")
    ap.add_argument("--no-decode", action="store_true", help="skip the decoding comparison")
    ap.add_argument("--checkpoint", help="tgrad --pairs checkpoint to decode with")
    ap.add_argument("--decode-rounds", type=int, default=1)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--ref-beam", action="store_true", help="also time the reference's beam")
    ap.add_argument("--ref-weights", choices=["export", "checkpoint"], default="export",
                    help="the reference loads `tgrad export` of the checkpoint (falling back "
                         "to the checkpoint if the export fails) or the checkpoint (export)")
    ap.add_argument("--workdir", default="/tmp/bench_translate")
    ap.add_argument("--json", help="also write the JSON summary here")
    ap.add_argument("--quality", metavar="SEEDS",
                    help="also the quality comparison: full training runs with these seeds "
                         "(e.g. 0,1), test BLEU/chrF greedy and beam")
    ap.add_argument("--quality-steps", type=int, help="steps of the quality runs (tgrad's "
                    "default, 1000)")
    ap.add_argument("--quality-ref-setting", default="1x2",
                    help="reference threads of the quality runs, AxB (1x2)")
    a = ap.parse_args(argv)
    try:
        ref_settings = [tuple(int(x) for x in t.split("x")) for t in a.ref_settings.split(",")
                        if t]
        if any(len(t) != 2 or min(t) < 1 for t in ref_settings) or not ref_settings:
            raise ValueError
    except ValueError:
        ap.error("--ref-settings: a comma-separated list of AxB, e.g. 1x1,2x2")
    margs = shlex.split(a.model_args)
    os.makedirs(a.workdir, exist_ok=True)
    wd = a.workdir
    cpu = cpu_model()
    print(f"CPU: {cpu}; {os.cpu_count()} CPUs; tgrad --threads {a.tgrad_threads}; reference "
          f"settings (torch x OpenBLAS threads) "
          f"{', '.join(f'{x}x{y}' for x, y in ref_settings)}")
    out = {"cpu": cpu, "cpus": os.cpu_count(), "steps": a.steps, "rounds": a.rounds,
           "tgrad_threads": a.tgrad_threads, "model_args": a.model_args, "train": {},
           "decode": {}}
    base_env = dict(os.environ)
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY",
              "OPENBLAS_CORETYPE"):
        base_env.pop(v, None)
    tg_env = dict(base_env)
    for kv in a.tgrad_env:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            ap.error(f"--tgrad-env {kv!r}: expected VAR=VALUE")
        tg_env[k] = v
    out["tgrad_env"] = a.tgrad_env

    def ref_env(setting):
        env = dict(base_env)
        env["OMP_NUM_THREADS"], env["OPENBLAS_NUM_THREADS"] = map(str, setting)
        if setting[0] > 1:
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        return env

    ck_last = os.path.join(wd, "tgrad_bench.ckpt")
    try:
        if not a.no_train:
            valid = os.path.join(wd, "valid_small.tsv")
            with open(a.valid, encoding="utf-8") as f, open(valid, "w", encoding="utf-8") as g:
                for k, line in enumerate(f):
                    if k >= a.valid_lines:
                        break
                    g.write(line)
            tg_cmd = [a.tgrad, "train", "--pairs", a.train, "--valid", valid, "--spm", a.spm,
                      "--steps", str(a.steps), "--eval-every", str(a.steps + 1), "--threads",
                      str(a.tgrad_threads), "--checkpoint", ck_last, "--force", "--quiet"]
            tg_cmd += margs + (["--seq-len", str(a.max_len)] if a.max_len else [])

            def ref_cmd(t):
                c = [a.python, REF, "--train", a.train, "--valid", valid, "--test", valid,
                     "--spm", a.spm, "--steps", str(a.steps), "--eval-every", "0", "--decode",
                     "none", "--threads", str(t)]
                return c + margs + (["--max-len", str(a.max_len)] if a.max_len else [])

            names = {f"reference-{x}x{y}": (x, y) for x, y in ref_settings}
            settings = ["tgrad"] + list(names)
            res = {s: {"tok": [], "wall": [], "rss": []} for s in settings}
            for r in range(a.rounds):
                order = settings if r % 2 == 0 else settings[::-1]
                for s in order:
                    if s == "tgrad":
                        so, se, wall = run(tg_cmd, tg_env)
                        m = re.findall(r"([0-9.]+) tokens/s", so + se)
                        if not m:
                            raise RunError(f"no tokens/s in tgrad's output:\n{so}{se}")
                        tok = float(m[-1])
                    else:
                        so, se, wall = run(ref_cmd(names[s][0]), ref_env(names[s]))
                        tok = last_json(so)["tokens_per_s"]
                    res[s]["tok"].append(tok)
                    res[s]["wall"].append(wall)
                    res[s]["rss"].append(last_rss_mb)
                    print(f"round {r + 1}/{a.rounds}  {s:14s} {tok:9.0f} tokens/s  "
                          f"(process {wall:.1f} s, peak RSS {last_rss_mb:.0f} MB)", flush=True)
            print(f"\ntraining, {a.steps} steps, {a.rounds} rounds (tokens/s: real target "
                  f"tokens per second of training steps)")
            print(f"{'setting':16s} {'median':>9s} {'min':>9s} {'max':>9s} {'wall s':>8s} "
                  f"{'RSS MB':>7s}")
            for s in settings:
                st = summary(res[s]["tok"])
                st["wall_median"] = statistics.median(res[s]["wall"])
                st["peak_rss_mb_median"] = statistics.median(res[s]["rss"])
                out["train"][s] = st
                print(f"{s:16s} {st['median']:9.0f} {st['min']:9.0f} {st['max']:9.0f} "
                      f"{st['wall_median']:8.1f} {st['peak_rss_mb_median']:7.0f}")
            best = max(settings[1:], key=lambda s: out["train"][s]["median"])
            ratio = out["train"]["tgrad"]["median"] / out["train"][best]["median"]
            out["train"]["best_reference"] = best
            out["train"]["ratio"] = ratio
            print(f"tgrad / fastest reference ({best}): {ratio:.2f}x")

        if not a.no_decode:
            ck = a.checkpoint or ck_last
            if not os.path.exists(ck):
                raise RunError(f"{ck}: no checkpoint to decode with (give --checkpoint)")
            if not a.checkpoint:
                print(f"\nnote: decoding with {ck}, the last training round's "
                      f"{a.steps}-step model; give --checkpoint for meaningful timings")
            export = os.path.join(wd, "bench_export.safetensors")
            if a.ref_weights == "export":
                p = subprocess.run([a.tgrad, "export", "--checkpoint", ck, "--out", export,
                                    "--force"], capture_output=True, text=True)
            if a.ref_weights == "checkpoint":
                weights, how = ck, "the checkpoint itself (--ref-weights checkpoint)"
            elif p.returncode == 0 and os.path.exists(export):
                weights, how = export, "tgrad export"
            else:
                weights, how = ck, (f"the checkpoint itself (tgrad export failed: exit "
                                    f"{p.returncode} {p.stderr.strip()[:200]})")
            rs = (ref_settings[[f"reference-{x}x{y}" for x, y in ref_settings]
                               .index(out["train"]["best_reference"])]
                  if out["train"] else max(ref_settings))
            print(f"\ndecoding {a.test} with {ck}; reference weights from {how}, setting "
                  f"{rs[0]}x{rs[1]}")
            dec = {"checkpoint": ck, "reference_weights": how,
                   "reference_setting": f"{rs[0]}x{rs[1]}"}
            times = {}
            for r in range(a.decode_rounds):
                for beam in (a.beam, 1):
                    name = "tgrad-greedy" if beam == 1 else f"tgrad-beam{beam}"
                    hyp = os.path.join(wd, f"{name}.txt")
                    so, se, wall = run([a.tgrad, "translate", "--checkpoint", ck, "--eval",
                                        a.test, "--beam", str(beam), "--threads",
                                        str(a.tgrad_threads), "--out", hyp, "--force"],
                                       tg_env)
                    m = re.search(r"sentences (\d+), ([0-9.]+) s", so + se)
                    bleu = re.search(r"BLEU = ([0-9.]+)", so + se)
                    chrf = re.search(r"chrF2 = ([0-9.]+)", so + se)
                    times.setdefault(name, {"seconds": [], "wall": [], "rss": []})
                    times[name]["seconds"].append(float(m.group(2)) if m else wall)
                    times[name]["wall"].append(wall)
                    times[name]["rss"].append(last_rss_mb)
                    times[name]["bleu"] = float(bleu.group(1)) if bleu else None
                    times[name]["chrf"] = float(chrf.group(1)) if chrf else None
                ref_modes = ["greedy"] + (["beam"] if a.ref_beam else [])
                for mode in ref_modes:
                    name = "reference-greedy" if mode == "greedy" else f"reference-beam{a.beam}"
                    env = ref_env(rs)
                    cmd = [a.python, REF, "--load", weights, "--test", a.test, "--spm", a.spm,
                           "--decode", mode, "--beam", str(a.beam), "--threads", str(rs[0]),
                           "--out-prefix", os.path.join(wd, "reference")]
                    if a.sacrebleu_path:
                        cmd += ["--sacrebleu-path", a.sacrebleu_path]
                    so, se, wall = run(cmd, env)
                    j = next(iter(last_json(so)["test"].values()))
                    times.setdefault(name, {"seconds": [], "wall": [], "rss": []})
                    times[name]["seconds"].append(j["seconds"])
                    times[name]["wall"].append(wall)
                    times[name]["rss"].append(last_rss_mb)
                    times[name]["bleu"], times[name]["chrf"] = j["bleu"], j["chrf"]
            print(f"{'decoder':20s} {'seconds':>8s} {'wall s':>8s} {'BLEU':>6s} {'chrF2':>6s} "
                  f"{'RSS MB':>7s}")
            for name, t in times.items():
                t["seconds_median"] = statistics.median(t["seconds"])
                t["wall_median"] = statistics.median(t["wall"])
                t["peak_rss_mb_median"] = statistics.median(t["rss"])
                print(f"{name:20s} {t['seconds_median']:8.2f} {t['wall_median']:8.2f} "
                      f"{t['bleu'] if t['bleu'] is not None else float('nan'):6.2f} "
                      f"{t['chrf'] if t['chrf'] is not None else float('nan'):6.2f} "
                      f"{t['peak_rss_mb_median']:7.0f}")
            dec.update(times)
            with open(os.path.join(wd, "tgrad-greedy.txt"), encoding="utf-8") as f:
                tg = f.read().splitlines()
            with open(os.path.join(wd, "reference.greedy.txt"), encoding="utf-8") as f:
                rf = f.read().splitlines()
            same = sum(x == y for x, y in zip(tg, rf))
            dec["greedy_identical"] = same
            dec["sentences"] = len(rf)
            tb = times[f"tgrad-beam{a.beam}"]["seconds_median"]
            rg = times["reference-greedy"]["seconds_median"]
            dec["ratio_reference_greedy_over_tgrad_beam"] = rg / tb if tb > 0 else None
            print(f"greedy hypotheses identical (tgrad / reference): {same} of {len(rf)}")
            if same < 0.9 * len(rf):
                print("WARNING: most greedy hypotheses differ: the reference does not decode "
                      "with the same model (a wrong export config?); try --ref-weights "
                      "checkpoint")
            print(f"reference greedy / tgrad beam {a.beam} decoding time: "
                  f"{rg / tb if tb > 0 else float('inf'):.2f}x")
            out["decode"] = dec
        if a.quality:
            out["quality"] = quality(a, wd, margs, tg_env, ref_env)
    except (RunError, OSError) as e:
        print(f"bench_translate: {e}", file=sys.stderr)
        return 1
    line = json.dumps(out)
    if a.json:
        with open(a.json, "w") as f:
            f.write(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
