"""Module analyses for scheduling and buffer assignment: call graph, dataflow (HloValues),
alias analysis (HloBuffers), sharing rules and liveness over the flattened schedule."""

from .alias import AliasAnalysis, HloBuffer
from .call_graph import CallGraph, flatten_call_graph, while_body, while_condition
from .dataflow import FORWARDING, Dataflow, HloValue, Use, leaves
from .liveness import Liveness, Timeline, sequences_from_schedule
from .sharing import can_share_operand, in_place_pairs

__all__ = [
    "FORWARDING", "AliasAnalysis", "CallGraph", "Dataflow", "HloBuffer", "HloValue", "Liveness",
    "Timeline", "Use", "can_share_operand", "flatten_call_graph", "in_place_pairs", "leaves",
    "sequences_from_schedule", "while_body", "while_condition",
]
