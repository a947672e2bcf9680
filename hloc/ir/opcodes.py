"""The HLO opcode set, keyed by the spelling used in protos and HLO text."""

from __future__ import annotations

import enum


class Opcode(enum.Enum):
    """Every HLO opcode hloc knows; the value is XLA's string spelling."""

    ABS = "abs"
    ADD = "add"
    ADD_DEPENDENCY = "add-dependency"
    AFTER_ALL = "after-all"
    ALL_GATHER = "all-gather"
    ALL_GATHER_DONE = "all-gather-done"
    ALL_GATHER_START = "all-gather-start"
    ALL_REDUCE = "all-reduce"
    ALL_REDUCE_DONE = "all-reduce-done"
    ALL_REDUCE_START = "all-reduce-start"
    ALL_TO_ALL = "all-to-all"
    AND = "and"
    ASYNC_DONE = "async-done"
    ASYNC_START = "async-start"
    ASYNC_UPDATE = "async-update"
    ATAN2 = "atan2"
    BATCH_NORM_GRAD = "batch-norm-grad"
    BATCH_NORM_INFERENCE = "batch-norm-inference"
    BATCH_NORM_TRAINING = "batch-norm-training"
    BITCAST = "bitcast"
    BITCAST_CONVERT = "bitcast-convert"
    BROADCAST = "broadcast"
    CALL = "call"
    CBRT = "cbrt"
    CEIL = "ceil"
    CHOLESKY = "cholesky"
    CLAMP = "clamp"
    CLZ = "count-leading-zeros"
    COLLECTIVE_BROADCAST = "collective-broadcast"
    COLLECTIVE_PERMUTE = "collective-permute"
    COLLECTIVE_PERMUTE_DONE = "collective-permute-done"
    COLLECTIVE_PERMUTE_START = "collective-permute-start"
    COMPARE = "compare"
    COMPLEX = "complex"
    CONCATENATE = "concatenate"
    CONDITIONAL = "conditional"
    CONSTANT = "constant"
    CONVERT = "convert"
    CONVOLUTION = "convolution"
    COPY = "copy"
    COPY_DONE = "copy-done"
    COPY_START = "copy-start"
    COS = "cosine"
    CUSTOM_CALL = "custom-call"
    DIVIDE = "divide"
    DOMAIN = "domain"
    DOT = "dot"
    DYNAMIC_RESHAPE = "dynamic-reshape"
    DYNAMIC_SLICE = "dynamic-slice"
    DYNAMIC_UPDATE_SLICE = "dynamic-update-slice"
    ERF = "erf"
    EXP = "exponential"
    EXPM1 = "exponential-minus-one"
    FFT = "fft"
    FLOOR = "floor"
    FUSION = "fusion"
    GATHER = "gather"
    GET_DIMENSION_SIZE = "get-dimension-size"
    GET_TUPLE_ELEMENT = "get-tuple-element"
    IMAG = "imag"
    INFEED = "infeed"
    IOTA = "iota"
    IS_FINITE = "is-finite"
    LOG = "log"
    LOG1P = "log-plus-one"
    LOGISTIC = "logistic"
    MAP = "map"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    MULTIPLY = "multiply"
    NEGATE = "negate"
    NOT = "not"
    OPT_BARRIER = "opt-barrier"
    OR = "or"
    OUTFEED = "outfeed"
    PAD = "pad"
    PARAMETER = "parameter"
    PARTITION_ID = "partition-id"
    POPCNT = "popcnt"
    POWER = "power"
    RAGGED_ALL_TO_ALL = "ragged-all-to-all"
    RAGGED_DOT = "ragged-dot"
    REAL = "real"
    RECV = "recv"
    RECV_DONE = "recv-done"
    REDUCE = "reduce"
    REDUCE_PRECISION = "reduce-precision"
    REDUCE_SCATTER = "reduce-scatter"
    REDUCE_WINDOW = "reduce-window"
    REMAINDER = "remainder"
    REPLICA_ID = "replica-id"
    RESHAPE = "reshape"
    REVERSE = "reverse"
    RNG = "rng"
    RNG_BIT_GENERATOR = "rng-bit-generator"
    RNG_GET_AND_UPDATE_STATE = "rng-get-and-update-state"
    ROUND_NEAREST_AFZ = "round-nearest-afz"
    ROUND_NEAREST_EVEN = "round-nearest-even"
    RSQRT = "rsqrt"
    SCATTER = "scatter"
    SELECT = "select"
    SELECT_AND_SCATTER = "select-and-scatter"
    SEND = "send"
    SEND_DONE = "send-done"
    SET_DIMENSION_SIZE = "set-dimension-size"
    SHIFT_LEFT = "shift-left"
    SHIFT_RIGHT_ARITHMETIC = "shift-right-arithmetic"
    SHIFT_RIGHT_LOGICAL = "shift-right-logical"
    SIGN = "sign"
    SIN = "sine"
    SLICE = "slice"
    SORT = "sort"
    SQRT = "sqrt"
    STOCHASTIC_CONVERT = "stochastic-convert"
    SUBTRACT = "subtract"
    TAN = "tan"
    TANH = "tanh"
    TOPK = "topk"
    TRANSPOSE = "transpose"
    TRIANGULAR_SOLVE = "triangular-solve"
    TUPLE = "tuple"
    WHILE = "while"
    XOR = "xor"

    @staticmethod
    def parse(text: str) -> Opcode:
        """The opcode spelled `text`; ValueError naming it if unknown."""
        try:
            return _BY_TEXT[text]
        except KeyError:
            raise ValueError(f"unknown opcode '{text}'") from None

    @property
    def text(self) -> str:
        return self.value


_BY_TEXT = {op.value: op for op in Opcode}
# Older dumps spell the barrier in full.
_BY_TEXT["optimization-barrier"] = Opcode.OPT_BARRIER

O = Opcode  # noqa: E741 - short alias for the opcode tables below
UNARY_ELEMENTWISE = frozenset({
    O.ABS, O.CBRT, O.CEIL, O.CLZ, O.COPY, O.COS, O.ERF, O.EXP, O.EXPM1, O.FLOOR, O.IMAG,
    O.IS_FINITE, O.LOG, O.LOG1P, O.LOGISTIC, O.NEGATE, O.NOT, O.POPCNT, O.REAL,
    O.ROUND_NEAREST_AFZ, O.ROUND_NEAREST_EVEN, O.RSQRT, O.SIGN, O.SIN, O.SQRT, O.TAN, O.TANH,
    O.CONVERT, O.BITCAST_CONVERT, O.REDUCE_PRECISION,
})
BINARY_ELEMENTWISE = frozenset({
    O.ADD, O.AND, O.ATAN2, O.COMPARE, O.COMPLEX, O.DIVIDE, O.MAXIMUM, O.MINIMUM, O.MULTIPLY,
    O.OR, O.POWER, O.REMAINDER, O.SHIFT_LEFT, O.SHIFT_RIGHT_ARITHMETIC, O.SHIFT_RIGHT_LOGICAL,
    O.SUBTRACT, O.XOR, O.STOCHASTIC_CONVERT,
})
TERNARY_ELEMENTWISE = frozenset({O.SELECT, O.CLAMP})
# Float ops computed by a libm call or a long instruction sequence (a polynomial and its
# range reduction).
TRANSCENDENTAL = frozenset({
    O.ATAN2, O.CBRT, O.COS, O.ERF, O.EXP, O.EXPM1, O.LOG, O.LOG1P, O.LOGISTIC, O.POWER, O.SIN,
    O.TAN, O.TANH,
})
ELEMENTWISE = UNARY_ELEMENTWISE | BINARY_ELEMENTWISE | TERNARY_ELEMENTWISE | {O.MAP}
# Ops whose result reads each operand element at most by index remapping (no arithmetic).
INDEX_REMAPPING = frozenset({
    O.BROADCAST, O.RESHAPE, O.TRANSPOSE, O.SLICE, O.PAD, O.CONCATENATE, O.IOTA, O.REVERSE,
    O.DYNAMIC_SLICE, O.GATHER, O.BITCAST,
})
# Ops with observable side effects: never removed or merged by DCE/CSE.
SIDE_EFFECTING = frozenset({
    O.INFEED, O.OUTFEED, O.SEND, O.SEND_DONE, O.RECV, O.RECV_DONE, O.RNG,
    O.RNG_GET_AND_UPDATE_STATE, O.AFTER_ALL, O.ADD_DEPENDENCY, O.ALL_REDUCE, O.ALL_GATHER,
    O.ALL_TO_ALL, O.COLLECTIVE_PERMUTE, O.REDUCE_SCATTER, O.DOMAIN, O.OPT_BARRIER,
})
