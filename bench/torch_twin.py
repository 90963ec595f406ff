#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The PyTorch baselines of the GPU benchmark (bench/gpu.py): the same GPT as Mantissa's
(pre-LN, GELU, tied LM head, fused AdamW, clipping at 1.0) trained on random tokens, as an ML
engineer would write it:

  fp32            eager, FP32
  bf16 / fp16     eager under torch.autocast (fp16 with a GradScaler)
  bf16-compile    torch.compile(model) under autocast
  fp8             every Linear and the (tied) LM head through torch._scaled_mm (E4M3 forward,
                  E5M2 gradients, per-tensor current scaling), as Mantissa's fp8-hybrid puts
                  every GEMM but attention's in FP8; the rest under BF16 autocast

Prints "mean step time: X ms" (the mean of the steps after --warmup, as mantissa-train reports
its own) and "peak memory: Y MiB".

  torch_twin.py --mode bf16 --layers 12 --heads 12 --width 768 --context 1024 --batch 16
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

E4M3_MAX, E5M2_MAX = 448.0, 57344.0


def to_fp8(x, dtype, fp8_max):
    amax = x.detach().abs().amax().float().clamp(min=1e-12)
    scale = fp8_max / amax
    return (x.float() * scale).clamp(-fp8_max, fp8_max).to(dtype), scale.reciprocal()


class Fp8Matmul(torch.autograd.Function):
    """y = x W^T with FP8 operands: E4M3 x E4M3 forward, E5M2 x E4M3 backward."""

    @staticmethod
    def forward(ctx, x, w):
        x8, sx = to_fp8(x, torch.float8_e4m3fn, E4M3_MAX)
        w8, sw = to_fp8(w, torch.float8_e4m3fn, E4M3_MAX)
        ctx.save_for_backward(x8, sx, w8, sw)
        return torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16, use_fast_accum=True)

    @staticmethod
    def backward(ctx, dy):
        x8, sx, w8, sw = ctx.saved_tensors
        dy8, sdy = to_fp8(dy, torch.float8_e5m2, E5M2_MAX)
        dx = torch._scaled_mm(dy8, w8.t().contiguous().t(), scale_a=sdy, scale_b=sw, out_dtype=torch.bfloat16)
        dw = torch._scaled_mm(dy8.t().contiguous(), x8.t().contiguous().t(), scale_a=sdy, scale_b=sx,
                              out_dtype=torch.bfloat16)
        return dx, dw


class Linear(nn.Linear):
    fp8 = False

    def forward(self, x):
        if not Linear.fp8:
            return super().forward(x)
        shape = x.shape
        y = Fp8Matmul.apply(x.reshape(-1, shape[-1]), self.weight)
        return (y + self.bias.to(y.dtype)).view(*shape[:-1], -1)


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = Linear(c, 3 * c), Linear(c, c)
        self.fc1, self.fc2 = Linear(c, 4 * c), Linear(4 * c, c)
        self.h = h

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, layers, heads, width, context):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for b in self.blocks:
            x = b(x)
        h = self.ln_f(x)
        if Linear.fp8:
            B, T, C = h.shape
            return Fp8Matmul.apply(h.reshape(-1, C), self.wte.weight).view(B, T, -1)
        return F.linear(h, self.wte.weight)


def write_op_events(profile, path):
    """One line per ATen op and per allocation or free ("[memory]"), as bench/op_events.cpp
    writes Mantissa's: name, thread, start, end (ns), bytes (0 for an op)."""
    with open(path, "w") as out:
        for e in profile.profiler.kineto_results.events():
            name = e.name()
            if e.device_type() == torch.autograd.DeviceType.CPU and (name.startswith("aten::") or name == "[memory]"):
                nbytes = e.nbytes() if name == "[memory]" else 0
                out.write(f"{name}\t{e.start_thread_id()}\t{e.start_ns()}\t{e.end_ns()}\t{nbytes}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["fp32", "bf16", "fp16", "bf16-compile", "fp8"], default="bf16")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--op-events", help="write the ATen ops of the step after --warmup to this file "
                    "(bench/op_count.py); implies --gpu-optimizer")
    ap.add_argument("--gpu-optimizer", action="store_true",
                    help="on the CPU too: AdamW fused and clipping foreach, as on a GPU")
    args = ap.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(1234)
    with dev:  # made on the device: a billion parameters drawn on the host take ~20 s
        model = Gpt(args.vocab, args.layers, args.heads, args.width, args.context)
    Linear.fp8 = args.mode == "fp8"
    on_gpu_path = dev.type == "cuda" or args.gpu_optimizer or args.op_events is not None
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=on_gpu_path)
    step_model = torch.compile(model) if args.mode == "bf16-compile" else model
    amp = {"bf16": torch.bfloat16, "bf16-compile": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}
    dtype = amp.get(args.mode)
    scaler = torch.amp.GradScaler(dev.type, enabled=args.mode == "fp16")
    tokens = torch.randint(args.vocab, (args.batch, args.context + 1), device=dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    times = []
    profile = None
    for step in range(args.steps):
        if args.op_events and step == args.warmup:
            profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
            profile.__enter__()
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            logits = step_model(x)
        loss = F.cross_entropy(logits.float().view(-1, args.vocab), y.view(-1))
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True if on_gpu_path else None)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        loss_value = loss.item()  # one sync per step, as Mantissa reads its loss
        times.append((time.perf_counter() - t0) * 1000.0)
        if profile is not None:
            profile.__exit__(None, None, None)
            write_op_events(profile, args.op_events)
            profile = None
    if dev.type == "cuda":
        print(f"peak memory: {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
    print(f"final loss: {loss_value:.4f}")
    warm = min(args.warmup, len(times) // 2)  # a short run keeps its second half
    print(f"mean step time: {statistics.mean(times[warm:]):.3f} ms")


if __name__ == "__main__":
    main()
