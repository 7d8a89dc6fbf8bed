#!/usr/bin/env python3
"""Desk check of tasks/flash_attention_fwd/experts/L3.cu's index maps and algorithm, in numpy (no GPU).

Emulates, per CTA: the TMA 3-D loads with 128-byte swizzle into a byte-addressed shared-memory
model (zero fill past seq), the wgmma operand fetch through the kernel's descriptors (K-major SW128
for Q and K with the +32 B k-step advance, MN-major SW128 for V with LBO = 16 KiB / SBO = 1 KiB),
the m64nNk16 accumulator fragment map, the register-A fragment map built by make_p, the masking,
the reordered online softmax (alpha applied before the next P V), and the epilogue row map.
Compares with a float64 softmax(QK^T/sqrt(d))V. The hardware semantics of descriptors are the ones
the kernel assumes (CUTLASS's canonical layouts), so this checks self-consistency and the
algorithm, not the silicon.
"""
import sys
import numpy as np

BQ = BK = 128
BLOCK = 128 * 128  # bytes of one [128 rows][128 B] box


def bf16(x):
    """Round float32 to bfloat16 (nearest even), returned as float32."""
    x = np.asarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def swz(addr):
    """128-byte swizzle on byte addresses: bits [4:6] ^= bits [7:9]."""
    return addr ^ (((addr >> 7) & 7) << 4)


def tma_load(smem, dst, mat, col0, row0, D, S):
    """One box of 64 columns x 128 rows of mat[S][D] (bf16 values as float32) into smem at dst."""
    for r in range(128):
        for c in range(64):
            gr, gc = row0 + r, col0 + c
            val = mat[gr, gc] if gr < S else 0.0
            smem[swz(dst + r * 128 + c * 2) // 2] = val  # element-addressed model (2-byte units)


def read_kmajor(smem, start, rows):
    """Operand of `rows` x 16 (k) through a K-major SW128 descriptor at byte address start."""
    out = np.zeros((rows, 16), np.float32)
    for mn in range(rows):
        for k in range(16):
            a = start + (mn % 8) * 128 + (mn // 8) * 1024 + k * 2
            out[mn, k] = smem[swz(a) // 2]
    return out


def read_mnmajor(smem, start, n_total, lbo=BLOCK, sbo=1024):
    """B operand of 16 (k) x n_total through an MN-major SW128 descriptor."""
    out = np.zeros((16, n_total), np.float32)
    for k in range(16):
        for n in range(n_total):
            a = start + (n % 64) * 2 + (n // 64) * lbo + (k % 8) * 128 + (k // 8) * sbo
            out[k, n] = smem[swz(a) // 2]
    return out


# Fragment maps, thread t of the warpgroup (0..127): warp = t // 32, g = (t % 32) // 4, t4 = t % 4.
def acc_map(N):
    """acc[t][4j + 2h + e] -> (row, col) of the 64 x N accumulator."""
    rows = np.zeros((128, N // 2), int)
    cols = np.zeros((128, N // 2), int)
    for t in range(128):
        w, g, t4 = t // 32, (t % 32) // 4, t % 4
        for j in range(N // 8):
            for h in range(2):
                for e in range(2):
                    rows[t, 4 * j + 2 * h + e] = 16 * w + g + 8 * h
                    cols[t, 4 * j + 2 * h + e] = 8 * j + 2 * t4 + e
    return rows, cols


def a_map():
    """A fragment (4 regs x 2 halves) of a 64 x 16 tile: reg r, half e -> (row, k)."""
    rows = np.zeros((128, 4, 2), int)
    ks = np.zeros((128, 4, 2), int)
    for t in range(128):
        w, g, t4 = t // 32, (t % 32) // 4, t % 4
        for r in range(4):
            for e in range(2):
                rows[t, r, e] = 16 * w + g + 8 * (r % 2)
                ks[t, r, e] = 2 * t4 + e + 8 * (r // 2)
    return rows, ks


def check_maps():
    rows, cols = acc_map(128)
    assert len(set(zip(rows.ravel(), cols.ravel()))) == 64 * 128
    ar, ak = a_map()
    assert len(set(zip(ar.ravel(), ak.ravel()))) == 64 * 16
    # make_p: p[kk][0] = (s[8kk], s[8kk+1]), [1] = (s[8kk+2], s[8kk+3]), [2] = (s[8kk+4], +5), [3] = (+6, +7)
    for t in range(128):
        for kk in range(8):
            for r in range(4):
                for e in range(2):
                    idx = 8 * kk + 2 * r + e
                    assert rows[t, idx] == ar[t, r, e], (t, kk, r, e)
                    assert cols[t, idx] == 16 * kk + ak[t, r, e], (t, kk, r, e)
    print("fragment maps: accumulator -> register-A conversion consistent")


def run_cta(Q, K, V, O, S, D, bh, qt, causal, c):
    """One CTA as tasks/flash_attention_fwd/experts/L3.cu computes it; writes rows < S of O[bh]."""
    smem = np.zeros(((1 + 2 * 3) * (D // 64) * BLOCK) // 2 + 16, np.float32)
    tile = (D // 64) * BLOCK
    sq, sk, sv = 0, tile, 2 * tile  # one K and one V stage suffice for the emulation
    q0 = qt * BQ
    for cb in range(D // 64):
        tma_load(smem, sq + cb * BLOCK, Q[bh], cb * 64, q0, D, S)
    n_tiles = qt + 1 if causal else (S + BK - 1) // BK
    rows, cols = acc_map(128)
    orows, ocols = acc_map(D)
    ar, ak = a_map()
    for cw in range(2):
        sq_wg = sq + cw * 64 * 128
        wg_first = q0 + cw * 64
        grow = q0 + cw * 64 + rows  # global row of each S fragment element
        o = np.zeros((128, D // 2), np.float32)
        m = np.full((128, 2), -np.inf, np.float32)  # per thread, rows g and g+8 (quad-replicated)
        l = np.zeros((128, 2), np.float32)
        a_prev = np.zeros((128, 2), np.float32)
        p_prev = None
        vt_prev = None
        for t in range(n_tiles):
            kv0 = t * BK
            for cb in range(D // 64):
                tma_load(smem, sk + cb * BLOCK, K[bh], cb * 64, kv0, D, S)
            # S = Q K^T via descriptors, k-step kk at block kk // 4, +32 B * (kk % 4)
            s_full = np.zeros((64, 128), np.float32)
            for kk in range(D // 16):
                off = (kk // 4) * BLOCK + (kk % 4) * 32
                A = read_kmajor(smem, sq_wg + off, 64)
                B = read_kmajor(smem, sk + off, 128)
                s_full += A @ B.T
            s = s_full[rows, cols]
            if t > 0:  # O *= alpha_{t-1}; O += P_{t-1} V_{t-1} (V still in its stage)
                o *= np.where((orows % 16) >= 8, a_prev[:, 1:2], a_prev[:, 0:1])
                o += pv(p_prev, vt_prev, D, orows, ocols, ar, ak)
            need_mask = kv0 + BK > S or (causal and kv0 + BK - 1 > wg_first)
            if need_mask:
                key = kv0 + cols
                bad = (key >= S) | ((key > grow) if causal else False)
                s = np.where(bad, -np.inf, s).astype(np.float32)
            # online softmax per row half h (elements 4j + 2h + e)
            h_of = (np.arange(64) // 2) % 2
            new_m = m.copy()
            for h in range(2):
                sel = s[:, h_of == h]
                mx = np.maximum(m[:, h], sel.max(axis=1))
                # quad all-reduce (threads 4g .. 4g+3 of a warp share a row)
                mx = mx.reshape(32, 4).max(axis=1).repeat(4)
                new_m[:, h] = mx
            ms = np.where(new_m == -np.inf, 0, new_m) * c
            alpha = np.exp2(m * c - ms)
            m = new_m
            p = np.exp2(s * c - ms[:, h_of]).astype(np.float32)
            l = l * alpha + np.stack([p[:, h_of == 0].sum(1), p[:, h_of == 1].sum(1)], 1)
            a_prev = alpha
            p_prev = bf16(p)
            # V tile of this step (loaded into its own stage)
            for cb in range(D // 64):
                tma_load(smem, sv + cb * BLOCK, V[bh], cb * 64, kv0, D, S)
            vt_prev = [read_mnmajor(smem, sv + kk * 2048, D) for kk in range(8)]
        o *= np.where((orows % 16) >= 8, a_prev[:, 1:2], a_prev[:, 0:1])
        o += pv(p_prev, vt_prev, D, orows, ocols, ar, ak)
        lq = l.reshape(32, 4, 2).sum(axis=1).repeat(4, axis=0)  # quad reduction of l
        inv = 1.0 / lq
        res = o * np.where((orows % 16) >= 8, inv[:, 1:2], inv[:, 0:1])
        grow_o = q0 + cw * 64 + orows
        ok = grow_o < S
        O[bh][grow_o[ok], ocols[ok]] = bf16(res[ok])


def pv(p, vt, D, orows, ocols, ar, ak):
    """O fragment increment from P (as S fragments, bf16) and V operands through make_p / A map."""
    out = np.zeros((64, D), np.float32)
    for kk in range(8):
        A = np.zeros((64, 16), np.float32)
        for r in range(4):
            for e in range(2):
                A[ar[:, r, e], ak[:, r, e]] = p[:, 8 * kk + 2 * r + e]
        out += A @ vt[kk]
    return out[orows, ocols]


def main():
    check_maps()
    rng = np.random.default_rng(1)
    cases = [(1, 64, 0), (1, 64, 1), (77, 64, 1), (129, 128, 0), (129, 64, 1), (200, 128, 1), (257, 64, 0),
             (256, 128, 1)]
    if len(sys.argv) > 1 and sys.argv[1] == "--quick":
        cases = cases[:3]
    worst = 0.0
    for S, D, causal in cases:
        BH = 2
        Q = bf16(rng.standard_normal((BH, S, D)).astype(np.float32))
        K = bf16(rng.standard_normal((BH, S, D)).astype(np.float32))
        V = bf16(rng.standard_normal((BH, S, D)).astype(np.float32))
        O = np.full((BH, S, D), np.nan, np.float32)
        c = np.float32(1.4426950408889634 / np.sqrt(D))
        q_tiles = (S + BQ - 1) // BQ
        for blk in range(q_tiles * BH):  # head-major block order
            bh, qt = blk // q_tiles, q_tiles - 1 - blk % q_tiles
            run_cta(Q, K, V, O, S, D, bh, qt, causal, c)
        s = np.einsum("bid,bjd->bij", Q.astype(np.float64), K.astype(np.float64)) / np.sqrt(D)
        if causal:
            s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        ref = np.einsum("bij,bjd->bid", p / p.sum(-1, keepdims=True), V.astype(np.float64))
        err = np.abs(O - ref)
        ok = np.all(err <= 0.02 + 0.02 * np.abs(ref))  # NaN (unwritten) fails
        worst = max(worst, float(np.nanmax(err)))
        print("%s S=%-4d D=%-3d causal=%d maxerr=%.3g" % ("ok  " if ok else "FAIL", S, D, causal, np.nanmax(err)))
        if not ok:
            sys.exit(1)
    print("emulation: all cases within tolerance (max err %.3g)" % worst)


if __name__ == "__main__":
    main()
