# Precision study of the chunked gated delta rule (numpy, no GPU): which f16 roundings matter.
# Emulates operand rounding of each product of the chunked algorithm (f16 = the MMA operand
# precision; "I" = exact f32 / hi+lo split) and compares with a float64 sequential reference,
# norm-wise and per single output row (the R = 1 checks). Finding that shaped delta.cu: the Gram
# products q.k, k.k of near-orthogonal unit vectors must not use single f16 operands (single-row
# errors up to 6e-2), and P needs hi+lo; the f16 k of the state update sets the state error (2e-4).
#   python3 lab/delta/precision.py
import numpy as np

def f16(x): return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)
I = lambda x: np.asarray(x, np.float32)
def l2n(x): return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)

def ref(q, k, v, g, beta, S0):
    S = S0.astype(np.float64).copy(); T = k.shape[0]; o = np.zeros((T, v.shape[1]))
    for t in range(T):
        S *= np.exp(g[t]); kv = S.T @ k[t]; d = beta[t] * (v[t] - kv); S += np.outer(k[t], d); o[t] = S.T @ q[t]
    return o, S

def mm(a, b): return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)

def chunked(q, k, v, g, beta, S0, cfg):
    r = lambda name: cfg.get(name, f16)
    C = 64; T = k.shape[0]; S = S0.astype(np.float32).copy(); o = np.zeros((T, v.shape[1]), np.float32)
    for c0 in range(0, T, C):
        n = min(C, T - c0); K = k[c0:c0 + n].astype(np.float32); Q = q[c0:c0 + n].astype(np.float32); V = v[c0:c0 + n].astype(np.float32)
        G = np.cumsum(g[c0:c0 + n].astype(np.float32)).astype(np.float32); b = beta[c0:c0 + n].astype(np.float32)
        KK = mm(r('gram')(K), r('gram')(K).T); QK = mm(r('gram')(Q), r('gram')(K).T)
        dec = np.exp(np.tril(G[:, None] - G[None, :])).astype(np.float32)
        A = np.tril(b[:, None] * KK * dec, -1)
        Tm = np.eye(n, dtype=np.float32)
        for i in range(1, n): Tm[i, :] = np.eye(n, dtype=np.float32)[i] - A[i, :i] @ Tm[:i, :]
        W = mm(r('T')(Tm), r('Bk')((b * np.exp(G))[:, None] * K)); U = mm(r('T')(Tm), b[:, None] * V)
        P = np.tril(QK * dec)
        W = r('W')(W); Qs = r('Q')(Q); Ks = r('K')(K); P = r('P')(P)
        vnew = U - mm(W, S)
        o[c0:c0 + n] = np.exp(G)[:, None] * mm(Qs, S) + mm(P, vnew)
        S = S * np.exp(G[-1]) + mm(Ks.T, np.exp(G[-1] - G)[:, None] * vnew)
    return o, S

if __name__ == "__main__":
    T = 256
    for name, cfg in [('all f16 operands', {}), ('delta.cu (gram, P exact)', {'gram': I, 'P': I}),
                      ('+ q exact', {'gram': I, 'P': I, 'Q': I}), ('+ k exact', {'gram': I, 'P': I, 'K': I})]:
        for (dk, gmin) in [(128, -2), (64, -20), (128, -0.02)]:
            eo, es, e1 = [], [], []
            for seed in range(4):
                rng = np.random.default_rng(100 + seed)
                q = l2n(rng.standard_normal((T, dk))) / np.sqrt(dk); k = l2n(rng.standard_normal((T, dk))); v = rng.standard_normal((T, dk))
                g = rng.uniform(gmin, 0, T); beta = rng.uniform(0, 1, T); S0 = rng.standard_normal((dk, dk)) * 0.5
                ro, rS = ref(q, k, v, g, beta, S0); co, cS = chunked(q, k, v, g, beta, S0, cfg)
                e = lambda a, b: np.linalg.norm(a - b) / np.linalg.norm(b)
                eo.append(e(co, ro)); es.append(e(cS, rS)); e1 += [e(co[t], ro[t]) for t in range(T)]
            print(f"{name:26s} dk={dk:3d} g>={gmin:6}: o {np.mean(eo):.1e} S {np.mean(es):.1e}  single row p99 {np.percentile(e1, 99):.1e} max {np.max(e1):.1e}")
