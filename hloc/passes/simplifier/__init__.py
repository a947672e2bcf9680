"""The algebraic simplifier: one pass (simplifier.py) over three rule tables (rules_arith.py,
rules_shape.py, rules_slicing.py) applied by the shared rewrite driver (passes/rewrite.py)."""
