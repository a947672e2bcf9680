"""Complex numbers (c64/c128) in the elemental emitter, as {re, im} pairs: values.py (the pair
type), ir.py (pair construction in LLVM IR), arith.py (XLA's multiply/divide/abs/sign) and
math.py (transcendentals)."""
