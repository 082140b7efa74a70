#!/usr/bin/env python3
"""Write a tiny, loadable llama-architecture GGUF with random weights.

Needs only PyPI `gguf` (and numpy, its dependency).

    python make_tiny_gguf.py OUT.gguf [--size-mib 200] [--dtype f16|f32]
                             [--n-embd 512] [--n-ctx 512] [--seed 0]

The file size is approximately --size-mib (it picks the number of layers to
hit the target; at least 1 layer, so very small targets come out a bit
bigger). Tokenizer: SentencePiece-style ("llama") vocab with <unk>, <s>, </s>,
256 byte tokens <0x00>..<0xFF> (byte fallback) and the printable ASCII
characters (space spelled U+2581), so any text tokenizes and random output
is mostly readable garbage.

Tensors are streamed to disk one by one, so peak Python memory is about one
tensor, not the whole model.
"""
import argparse
import os
import sys
import time

import numpy as np
import gguf

SPM_SPACE = "\u2581"
MAX_LAYERS = 256  # llama.cpp's LLAMA_MAX_LAYERS is 512; a large --size-mib widens the layers instead


def build_vocab():
    tokens, scores, types = [], [], []
    T = gguf.TokenType

    def add(tok, score, typ):
        tokens.append(tok)
        scores.append(score)
        types.append(typ)

    add("<unk>", 0.0, T.UNKNOWN)
    add("<s>", 0.0, T.CONTROL)
    add("</s>", 0.0, T.CONTROL)
    for b in range(256):
        add(f"<0x{b:02X}>", 0.0, T.BYTE)
    # printable ASCII as normal tokens (space -> U+2581, the SPM space marker)
    for i, c in enumerate([SPM_SPACE] + [chr(x) for x in range(0x21, 0x7F)]):
        add(c, -1.0 - i * 1e-3, T.NORMAL)
    return tokens, scores, types


def plan(size_mib, dtype, n_embd, n_vocab):
    """Return (n_layer, n_ff, n_head, n_head_kv, tensor list)."""
    bpe = 2 if dtype == "f16" else 4
    head_dim = 64 if n_embd >= 64 else n_embd
    n_head = max(1, n_embd // head_dim)
    n_head_kv = max(1, n_head // 4)          # GQA keeps the KV cache small
    while n_head % n_head_kv:
        n_head_kv -= 1
    n_embd_kv = head_dim * n_head_kv
    n_ff = 2 * n_embd

    def layer_tensors(i):
        p = f"blk.{i}."
        return [
            (p + "attn_norm.weight", (n_embd,), "f32"),
            (p + "attn_q.weight", (n_embd, n_embd), dtype),
            (p + "attn_k.weight", (n_embd_kv, n_embd), dtype),
            (p + "attn_v.weight", (n_embd_kv, n_embd), dtype),
            (p + "attn_output.weight", (n_embd, n_embd), dtype),
            (p + "ffn_norm.weight", (n_embd,), "f32"),
            (p + "ffn_gate.weight", (n_ff, n_embd), dtype),
            (p + "ffn_up.weight", (n_ff, n_embd), dtype),
            (p + "ffn_down.weight", (n_embd, n_ff), dtype),
        ]

    def nbytes(ts):
        return sum(int(np.prod(s)) * (4 if d == "f32" else bpe) for _, s, d in ts)

    glob = [
        ("token_embd.weight", (n_vocab, n_embd), dtype),
        ("output_norm.weight", (n_embd,), "f32"),
        ("output.weight", (n_vocab, n_embd), dtype),
    ]
    per_layer = nbytes(layer_tensors(0))
    target = int(size_mib * 1024 * 1024)
    n_layer = max(1, round((target - nbytes(glob)) / per_layer))
    tensors = glob[:1]
    for i in range(n_layer):
        tensors += layer_tensors(i)
    tensors += glob[1:]
    return n_layer, n_ff, n_head, n_head_kv, tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--size-mib", type=float, default=32.0, help="approximate file size (default 32)")
    ap.add_argument("--dtype", choices=["f16", "f32"], default="f16")
    ap.add_argument("--n-embd", type=int, default=512, help="embedding width (default 512; doubled until the "
                    f"model needs at most {MAX_LAYERS} layers)")
    ap.add_argument("--n-ctx", type=int, default=512, help="llama.context_length (server default n_ctx)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="tiny-random-llama")
    a = ap.parse_args()

    t0 = time.time()
    tokens, scores, types = build_vocab()
    n_layer, n_ff, n_head, n_head_kv, tensors = plan(a.size_mib, a.dtype, a.n_embd, len(tokens))
    while n_layer > MAX_LAYERS:  # llama.cpp refuses more than 512 layers: wider layers, fewer of them
        a.n_embd *= 2
        n_layer, n_ff, n_head, n_head_kv, tensors = plan(a.size_mib, a.dtype, a.n_embd, len(tokens))

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name(a.name)
    w.add_context_length(a.n_ctx)
    w.add_embedding_length(a.n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(a.n_embd // n_head)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if a.dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    npdt = {"f16": np.float16, "f32": np.float32}
    for name, shape, dt in tensors:
        nb = int(np.prod(shape)) * np.dtype(npdt[dt]).itemsize
        w.add_tensor_info(name, shape, np.dtype(npdt[dt]), nb)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    rng = np.random.default_rng(a.seed)
    for name, shape, dt in tensors:
        if name.endswith("norm.weight"):
            arr = np.ones(shape, dtype=np.float32)
        else:
            arr = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(npdt[dt])
        w.write_tensor_data(arr)
    w.close()

    size = os.path.getsize(a.out)
    print(f"wrote {a.out}: {size / 2**20:.1f} MiB, n_layer={n_layer} n_embd={a.n_embd} "
          f"n_ff={n_ff} n_head={n_head} n_head_kv={n_head_kv} n_vocab={len(tokens)} "
          f"n_ctx={a.n_ctx} dtype={a.dtype} in {time.time() - t0:.1f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
