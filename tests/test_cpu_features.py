"""x86 feature strings are closed under LLVM's implications, as LLVM itself applies them."""

from hloc.codegen.target import cpu_target, normalize_features


def _on(features: str) -> set[str]:
    return {f[1:] for f in features.split(",") if f.startswith("+")}


def test_turning_a_feature_off_turns_off_what_needs_it():
    got = normalize_features("+avx512f,+avx512bw,+avx512vl,+avx512fp16,+avx2,-avx512f", x86=True)
    assert _on(got) == {"avx2"} | {"avx", "sse4.2", "sse4.1", "ssse3", "sse3", "sse2", "sse"}
    assert "-avx512bw" in got.split(",") and "-avx512fp16" in got.split(",")


def test_turning_a_feature_on_turns_on_what_it_needs():
    assert _on(normalize_features("+avx2", x86=True)) >= {"avx", "sse4.2", "sse2", "sse"}
    assert "avx" not in _on(normalize_features("+avx2,-avx", x86=True))


def test_other_architectures_are_left_alone():
    assert normalize_features("+avx512bw,-avx512f") == "+avx512bw,-avx512f"


def test_v4_without_avx512f_requires_no_avx512_feature():
    target = cpu_target("x86-64-v4", "-avx512f")
    assert not [f for f in target.required_features if f.startswith("avx512")]
    assert "avx2" in target.required_features and target.vector_bits == 256
