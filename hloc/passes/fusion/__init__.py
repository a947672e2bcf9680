"""Fusion: the `fusion` pass (fusion.py) grows clusters of producers into their consumers
(cluster.py decides, cost.py prices, build.py rewrites), and `multi-output-fusion`
(multi_output.py) merges sibling fusions that read the same operands, and `update-fusion`
(update.py) merges an in-place dynamic-update-slice with the producer of its update."""
