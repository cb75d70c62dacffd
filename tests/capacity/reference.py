"""Reference values for src/capacity/interval.rs, computed independently of it: the binomial
distribution function summed as exact fractions, order statistics found by that, and the
Clopper-Pearson ends found by bisecting the exact sum (Python 3 standard library only).

Run: python3 tests/capacity/reference.py
"""
from fractions import Fraction
from math import comb


def cdf(k, n, p):
    p = Fraction(p)
    return sum(comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(0, min(k, n) + 1))


def order_bounds(n, q, conf):
    half = (1 - Fraction(conf)) / 2
    lower = upper = None
    for i in range(n):
        f = cdf(i, n, q)
        if f <= half:
            lower = i + 1
        if f >= 1 - half:
            upper = i + 1
            break
    return lower, upper


def bisect(reached):
    a, b = Fraction(0), Fraction(1)
    for _ in range(60):
        m = (a + b) / 2
        if reached(m):
            b = m
        else:
            a = m
    return float((a + b) / 2)


def clopper_pearson(k, n, conf):
    half = (1 - Fraction(conf)) / 2
    lo = 0.0 if k == 0 else bisect(lambda p: 1 - cdf(k - 1, n, p) >= half)
    hi = 1.0 if k == n else bisect(lambda p: cdf(k, n, p) <= half)
    return lo, hi


if __name__ == "__main__":
    q = Fraction(1, 2)
    for k, n, p in [(39, 100, q), (40, 100, q), (59, 100, q), (60, 100, q),
                    (0, 10, Fraction(3, 10)), (3, 10, Fraction(3, 10)),
                    (0, 367, Fraction(1, 100)), (366, 367, Fraction(99, 100))]:
        print(f"F({k}; {n}, {float(p)}) = {float(cdf(k, n, p))!r}")
    print("order bounds n=100 q=0.5:", order_bounds(100, q, Fraction(95, 100)))
    print("order bounds n=1000 q=0.99:", order_bounds(1000, Fraction(99, 100), Fraction(95, 100)))
    for k, n in [(1, 100), (5, 20)]:
        print(f"clopper_pearson({k}, {n}) =", clopper_pearson(k, n, Fraction(95, 100)))
