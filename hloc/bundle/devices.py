"""The manifest's `devices` section: how a multi-device bundle maps onto devices.

Present only for modules with more than one device (one-device bundles are unchanged):

    "devices": {"count": 4, "replica_count": 1, "num_partitions": 4,
                "device_assignment": [[0, 1, 2, 3]],
                "parameters": ["{devices=[4,1]<=[4]}", ...],
                "outputs": ["{devices=[4,1]<=[4]}", ...]}

`device_assignment[r][p]` is the global device id of replica r, partition p (JAX's ids need
not be contiguous). `parameters[i]` is entry parameter i's sharding and `outputs[j]` the
sharding of flattened result j, in HLO text form, or null where the module records none (the
runtimes then treat the value as replicated).
"""

from __future__ import annotations


def _parameter_texts(module) -> list[str | None]:
    params = module.entry.parameters
    texts = module.config.spmd_parameter_shardings
    if texts is None or len(texts) != len(params):
        texts = [p.attrs.sharding for p in params]
    return [t or None for t in texts]


def _output_texts(module) -> list[str | None]:
    from ..collectives.sharding import leaf_texts

    root = module.entry.result_shape
    count = sum(1 for _ in root.leaves())
    text = module.config.spmd_output_sharding or module.entry.root.attrs.sharding
    leaves = leaf_texts(text) if text else []
    return leaves if len(leaves) == count else [None] * count


def devices_section(module) -> dict | None:
    """The `devices` section of `module`'s manifest, or None for a one-device module."""
    config = module.config
    if config.device_count <= 1:
        return None
    from ..collectives.groups import DeviceGrid  # multi-device modules only

    grid = DeviceGrid.of(config)
    return {"count": grid.count, "replica_count": grid.replica_count,
            "num_partitions": grid.num_partitions,
            "device_assignment": [[grid.device_id((r, p)) for p in range(grid.num_partitions)]
                                  for r in range(grid.replica_count)],
            "parameters": _parameter_texts(module), "outputs": _output_texts(module)}
