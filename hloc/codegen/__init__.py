"""Code generation: target facts, the elemental emitter, per-target kernel emitters, LLVM."""
