#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Plain-PyTorch twin of Mantissa's FP32 engine, for benchmarks and golden references.

It mirrors core/gpt_model.cpp and core/trainer.cpp: same module order (so the same
initial weights from the same seed), same batch sampler (a dedicated generator), same
fused AdamW with decay on 2-D weights, same schedule and clipping. Only text data
(char or byte tokenizer) is supported here.

  reference_gpt.py PROJECT.json [--set key=value ...] [--print-losses]
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

EVAL_SEED_SALT = 0x5EEDE7A1


class Norm(nn.Module):
    def __init__(self, c, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.bias = nn.Parameter(torch.zeros(c)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class Linear(nn.Module):
    def __init__(self, i, o, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(o, i))
        self.bias = nn.Parameter(torch.zeros(o)) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class Attention(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.qkv = Linear(m["n_embd"], 3 * m["n_embd"], m["bias"])
        self.proj = Linear(m["n_embd"], m["n_embd"], m["bias"])
        self.n_head, self.dropout = m["n_head"], m["dropout"]

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, None, self.dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return F.dropout(self.proj(y), self.dropout, self.training)


class Mlp(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.fc1 = Linear(m["n_embd"], 4 * m["n_embd"], m["bias"])
        self.fc2 = Linear(4 * m["n_embd"], m["n_embd"], m["bias"])
        self.dropout = m["dropout"]

    def forward(self, x):
        return F.dropout(self.fc2(F.gelu(self.fc1(x))), self.dropout, self.training)


class Block(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.ln1 = Norm(m["n_embd"], m["bias"])
        self.attn = Attention(m)
        self.ln2 = Norm(m["n_embd"], m["bias"])
        self.mlp = Mlp(m)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    def __init__(self, m, vocab):
        super().__init__()
        self.wte = nn.Parameter(torch.empty(vocab, m["n_embd"]))
        self.wpe = nn.Parameter(torch.empty(m["context_length"], m["n_embd"]))
        self.blocks = nn.ModuleList([Block(m) for _ in range(m["n_layer"])])
        self.ln_f = Norm(m["n_embd"], m["bias"])
        self.dropout = m["dropout"]
        residual_std = 0.02 / math.sqrt(2.0 * m["n_layer"])
        with torch.no_grad():  # same order and rule as GptImpl::reset_parameters
            for name, p in self.named_parameters():
                if ".ln" in name or name.startswith("ln_f"):
                    p.fill_(1.0) if name.endswith("weight") else p.zero_()
                elif name.endswith("proj.weight") or name.endswith("fc2.weight"):
                    p.normal_(0.0, residual_std)
                elif p.dim() == 2:
                    p.normal_(0.0, 0.02)
                else:
                    p.zero_()

    def forward(self, idx):
        T = idx.size(1)
        x = F.embedding(idx, self.wte) + F.embedding(torch.arange(T), self.wpe)
        x = F.dropout(x, self.dropout, self.training)
        for b in self.blocks:
            x = b(x)
        return F.linear(self.ln_f(x), self.wte)


def load_project(path, sets):
    with open(path) as f:
        cfg = json.load(f)
    for s in sets:
        key, raw = s.split("=", 1)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        node = cfg
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    d = cfg["data"]
    if d.get("kind") != "text":
        sys.exit("reference_gpt.py supports data.kind 'text' only")
    if not os.path.isabs(d["path"]) and not any(s.startswith("data.path=") for s in sets):
        d["path"] = os.path.join(os.path.dirname(os.path.abspath(path)), d["path"])
    return cfg


def load_tokens(d):
    raw = open(d["path"], "rb").read()
    if d.get("tokenizer", "char") == "byte":
        ids, vocab = list(raw), 256
    else:
        text = raw.decode("utf-8")
        chars = sorted(set(text))
        index = {c: i for i, c in enumerate(chars)}
        ids, vocab = [index[c] for c in text], len(chars)
    n_train = int(len(ids) * (1.0 - d.get("val_fraction", 0.1)))
    return torch.tensor(ids[:n_train]), torch.tensor(ids[n_train:]), vocab


class Sampler:
    def __init__(self, tokens, B, T, seed):
        self.tokens, self.B, self.T = tokens, B, T
        self.gen = torch.Generator().manual_seed(seed)

    def next(self):
        off = torch.randint(len(self.tokens) - self.T, (self.B,), generator=self.gen)
        x = torch.stack([self.tokens[o:o + self.T] for o in off.tolist()])
        y = torch.stack([self.tokens[o + 1:o + 1 + self.T] for o in off.tolist()])
        return x, y


def lr_at(o, i):
    if i < o["warmup_steps"]:
        return o["learning_rate"] * (i + 1) / (o["warmup_steps"] + 1)
    if i > o["decay_steps"] or o["decay_steps"] == o["warmup_steps"]:
        return o["min_learning_rate"]
    r = (i - o["warmup_steps"]) / (o["decay_steps"] - o["warmup_steps"])
    return o["min_learning_rate"] + 0.5 * (1 + math.cos(math.pi * r)) * (o["learning_rate"] - o["min_learning_rate"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("project")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--print-losses", action="store_true", help="one line per step: step loss grad_norm")
    ap.add_argument("--no-eval", action="store_true")
    ap.add_argument("--autocast", choices=["bf16", "fp16"],
                    help="run forward and backward under torch.autocast('cpu') in this dtype; the loss takes "
                         "FP32 logits, as CUDA autocast's log_softmax does (Mantissa's native executor's twin)")
    args = ap.parse_args()
    cfg = load_project(args.project, args.set)
    m, o, t, e = cfg["model"], cfg["optimizer"], cfg["training"], cfg.get("eval", {})
    m.setdefault("bias", True)
    m.setdefault("dropout", 0.0)
    threads = t.get("threads", 0) or os.cpu_count()
    torch.set_num_threads(threads)
    train, val, vocab = load_tokens(cfg["data"])
    seed = t.get("seed", 1337)
    torch.manual_seed(seed)
    model = Gpt(m, vocab)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["learning_rate"], betas=(o["beta1"], o["beta2"]), eps=o.get("eps", 1e-8), fused=True)
    B, T, steps, accum = t["batch_size"], m["context_length"], t["steps"], t.get("grad_accum", 1)
    sampler = Sampler(train, B, T, seed)
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.autocast)

    def loss_of(x, y):
        if autocast_dtype is None:
            return F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        with torch.autocast("cpu", dtype=autocast_dtype):
            logits = model(x)
        return F.cross_entropy(logits.float().view(-1, vocab), y.view(-1))

    def estimate(split):
        model.eval()
        s = Sampler(split, B, T, seed ^ EVAL_SEED_SALT)
        with torch.no_grad():
            total = sum(loss_of(x, y).item()
                        for x, y in (s.next() for _ in range(e.get("batches", 20))))
        model.train()
        return total / e.get("batches", 20)

    interval = e.get("interval", 250)
    timed_from = min(10, steps // 10) + 1
    timed_ms, timed_n = 0.0, 0
    if interval > 0 and not args.no_eval:
        print(f"eval step 0: val loss {estimate(val):.4f}", flush=True)
    for step in range(steps):
        t0 = time.perf_counter()
        lr = lr_at(o, step)
        for g in opt.param_groups:
            g["lr"] = lr
        loss_sum = 0.0
        for _ in range(accum):
            x, y = sampler.next()
            loss = loss_of(x, y)
            (loss / accum).backward()
            loss_sum += loss.item()
        clip = o.get("grad_clip", 1.0)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip if clip > 0 else float("inf")).item()
        opt.step()
        opt.zero_grad(set_to_none=True)
        ms = (time.perf_counter() - t0) * 1000.0
        if step + 1 >= timed_from:
            timed_ms += ms
            timed_n += 1
        if args.print_losses:
            print(f"{step + 1} {loss_sum / accum:.9g} {norm:.9g}", flush=True)
        done = step + 1
        if not args.no_eval and ((interval > 0 and done % interval == 0) or done == steps):
            print(f"eval step {done}: val loss {estimate(val):.4f}", flush=True)
    print(f"mean step time: {timed_ms / max(timed_n, 1):.3f} ms", flush=True)


if __name__ == "__main__":
    main()
