"""Debugging tools that work on modules and pipelines (issue 15, part 1).

- `trace`: run a pass pipeline once, recording the module after every pass application;
- `bisect`: the first pass application after which a predicate fails (`hloc bisect`);
- `reduce`: delta-debug a module to a small one a script still finds interesting (`hloc reduce`);
- `diff`: compare two modules, bundles or dump directories stage by stage (`hloc diff`);
- `determinism`: compile N times with different hash seeds and compare (`--check-determinism`);
- `stats`: benchmark statistics and the baseline verdict (`hlo-run --baseline`).
"""
